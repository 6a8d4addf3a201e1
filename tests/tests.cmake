# One line per test file: caflm_add_test(<file stem> <libraries>).
caflm_add_test(test_block_pool caflm_kv)
caflm_add_test(test_block_table caflm_kv)
caflm_add_test(test_sampler caflm_sampling)
caflm_add_test(test_prefix_cache caflm_kv)
caflm_add_test(test_kv_storage caflm_kv)
caflm_add_test(test_gguf caflm_model caflm_text)
caflm_add_test(test_quantize caflm_gguf)
caflm_add_test(test_cpu_matmul caflm_cpu)
caflm_add_test(test_cpu_kernels caflm_cpu)
caflm_add_test(test_paged_attention caflm_cpu)
caflm_add_test(test_request_table caflm_scheduler)
caflm_add_test(test_no_allocation caflm_scheduler)
caflm_add_test(test_scheduler_random caflm_scheduler)
caflm_add_test(test_tokenizer caflm_text nlohmann_json::nlohmann_json)
caflm_add_test(test_caf_smoke CAF::core)
caflm_add_test(test_reference_outputs caflm_engine nlohmann_json::nlohmann_json)
caflm_add_test(test_cpu_model_runner caflm_engine)
caflm_add_test(test_messages caflm_messages)
caflm_add_test(test_engine_core caflm_actors)
caflm_add_test(test_stop_matcher caflm_text)
caflm_add_test(test_inference_engine caflm_engine)
caflm_add_test(test_parallel_sampling caflm_engine)
caflm_add_test(test_device_sampling caflm_engine)
caflm_add_test(test_caflm_cli caflm_engine nlohmann_json::nlohmann_json)
target_compile_definitions(test_caflm_cli PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>"
  CAFLM_HAVE_JEMALLOC=$<BOOL:${CAFLM_HAVE_JEMALLOC}>)
add_dependencies(test_caflm_cli caflm)
caflm_add_test(test_multiprocess caflm_actors)
target_compile_definitions(test_multiprocess PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>")
add_dependencies(test_multiprocess caflm)
caflm_add_test(test_coordinator caflm_actors)
caflm_add_test(test_cluster caflm_actors)
caflm_add_test(test_scheduler_threads caflm_actors)

# Scripts: the layer rules of DESIGN.md, and the installed package as a
# consumer project sees it.
add_test(NAME check_layers COMMAND ${PROJECT_SOURCE_DIR}/scripts/check-layers.sh)
add_test(NAME install_and_embed
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_and_embed.sh ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR}
          ${CMAKE_CURRENT_BINARY_DIR}/install_and_embed)
caflm_add_test(test_request_actor caflm_actors)
caflm_add_test(test_worker caflm_actors)
caflm_add_test(test_remote_engine caflm_actors)
caflm_add_test(test_tls_refusal_log caflm_actors OpenSSL::SSL)
caflm_add_test(test_cli_input nlohmann_json::nlohmann_json)
target_compile_definitions(test_cli_input PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>")
add_dependencies(test_cli_input caflm)
caflm_add_test(test_cpu_engine caflm_engine)
caflm_add_test(test_shared_worker caflm_actors nlohmann_json::nlohmann_json)
target_compile_definitions(test_shared_worker PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>")
add_dependencies(test_shared_worker caflm)
# It measures a worker's memory: other tests' load beside it would be noise.
set_tests_properties(test_shared_worker PROPERTIES RUN_SERIAL TRUE)
caflm_add_test(test_cli_inspect caflm_gguf nlohmann_json::nlohmann_json)
target_compile_definitions(test_cli_inspect PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>")
add_dependencies(test_cli_inspect caflm)
caflm_add_test(test_cli_chat)
target_compile_definitions(test_cli_chat PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>")
add_dependencies(test_cli_chat caflm)
caflm_add_test(test_architectures caflm_engine)
caflm_add_test(test_quant_mix caflm_model)
caflm_add_test(test_quantized_matmul caflm_cpu)
caflm_add_test(test_float_matmul_tiles caflm_cpu)
caflm_add_test(test_pre_tokenizer caflm_text)
caflm_add_test(test_jinja caflm_text)
caflm_add_test(test_chat_template caflm_text)
caflm_add_test(test_cli_quantized caflm_model nlohmann_json::nlohmann_json)
target_compile_definitions(test_cli_quantized PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>")
add_dependencies(test_cli_quantized caflm)
caflm_add_test(test_openai_protocol caflm_server)
caflm_add_test(test_bench_serve nlohmann_json::nlohmann_json)
target_compile_definitions(test_bench_serve PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>"
  FAKE_OPENAI_SERVER="${CMAKE_CURRENT_SOURCE_DIR}/support/fake_openai_server.py")
add_dependencies(test_bench_serve caflm)
caflm_add_test(test_http_server caflm_server)
caflm_add_test(test_metrics caflm_server)
caflm_add_test(test_openai_server caflm_server)
# caflm serve under the official openai npm client (installed by run.sh).
add_test(NAME test_openai_client
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/openai_client/run.sh $<TARGET_FILE:caflm>
          ${CMAKE_CURRENT_BINARY_DIR}/openai_client)
caflm_add_test(test_sampler_equivalence caflm_sampling)
# 1,000 concurrent streams through `caflm serve`, with bench-serve as the client.
add_test(NAME test_serve_streams
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/serve_streams.sh $<TARGET_FILE:caflm>
          ${CMAKE_CURRENT_BINARY_DIR}/serve_streams)
caflm_add_test(test_request_limits caflm_server nlohmann_json::nlohmann_json)
# The request file reader of `caflm generate`, checked against the same limits.
target_sources(test_request_limits PRIVATE ${PROJECT_SOURCE_DIR}/apps/request_file.cpp)
# caflm certs: the cluster PKI, checked with the openssl tool (verify, keys,
# extensions, refusal to overwrite, a mutual TLS 1.2 handshake).
add_test(NAME test_certs
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/certs.sh $<TARGET_FILE:caflm>
          ${CMAKE_CURRENT_BINARY_DIR}/certs)
add_test(NAME test_tls_cluster
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tls_cluster.sh $<TARGET_FILE:caflm>
          ${CMAKE_CURRENT_BINARY_DIR}/tls_cluster)
# --max-prompt-bytes and the other request limits of generate, worker and serve.
add_test(NAME test_request_limit_options
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/request_limit_options.sh $<TARGET_FILE:caflm>
          ${CMAKE_CURRENT_BINARY_DIR}/request_limit_options)
# Two minutes of scripts/soak.sh: load on a TLS cluster while workers are
# killed and stopped; every answer must match a fault-free run's.
add_test(NAME test_soak_short
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/soak_short.sh $<TARGET_FILE:caflm>
          ${CMAKE_CURRENT_BINARY_DIR}/soak_short)
set_tests_properties(test_soak_short PROPERTIES TIMEOUT 900)
# The web console's model of the cluster, its figures, and its endpoints.
caflm_add_test(test_cluster_view caflm_server)
caflm_add_test(test_recent_activity caflm_server)
caflm_add_test(test_web_console caflm_server)
# Progress of `generate --requests` and `bench` on a terminal, never in their output.
add_test(NAME test_cli_progress
  COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/cli_progress.py $<TARGET_FILE:caflm>
          ${CMAKE_CURRENT_BINARY_DIR}/cli_progress)
# The web console in headless chromium (playwright-core, installed by run.sh):
# chat, stop, a worker killed while the dashboard watches, the API key.
add_test(NAME test_web_console_browser
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/console/run.sh $<TARGET_FILE:caflm>
          ${CMAKE_CURRENT_BINARY_DIR}/console)
set_tests_properties(test_web_console_browser PROPERTIES TIMEOUT 600)
# The README's browser failover demo, without the pauses for a person.
add_test(NAME test_failover_in_browser_example
  COMMAND bash ${PROJECT_SOURCE_DIR}/examples/failover_in_browser.sh --wait 0 --port 0
          --caflm $<TARGET_FILE:caflm>)
set_tests_properties(test_failover_in_browser_example PROPERTIES TIMEOUT 300)

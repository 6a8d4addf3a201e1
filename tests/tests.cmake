# One line per test file: caflm_add_test(<file stem> <libraries>).
caflm_add_test(test_block_pool caflm_kv)
caflm_add_test(test_block_table caflm_kv)
caflm_add_test(test_sampler caflm_sampling)
caflm_add_test(test_prefix_cache caflm_kv)
caflm_add_test(test_gguf caflm_model caflm_text)
caflm_add_test(test_cpu_matmul caflm_cpu)
caflm_add_test(test_cpu_kernels caflm_cpu)
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
caflm_add_test(test_caflm_cli caflm_engine nlohmann_json::nlohmann_json)
target_compile_definitions(test_caflm_cli PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>")
add_dependencies(test_caflm_cli caflm)
caflm_add_test(test_multiprocess caflm_actors)
target_compile_definitions(test_multiprocess PRIVATE CAFLM_BINARY="$<TARGET_FILE:caflm>")
add_dependencies(test_multiprocess caflm)
caflm_add_test(test_coordinator caflm_actors)
caflm_add_test(test_cluster caflm_actors)

# Scripts: the layer rules of DESIGN.md, and the installed package as a
# consumer project sees it.
add_test(NAME check_layers COMMAND ${PROJECT_SOURCE_DIR}/scripts/check-layers.sh)
add_test(NAME install_and_embed
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/install_and_embed.sh ${CMAKE_BINARY_DIR} ${PROJECT_SOURCE_DIR}
          ${CMAKE_CURRENT_BINARY_DIR}/install_and_embed)

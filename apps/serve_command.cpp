#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <caf/all.hpp>

#include "apps/actor_runtime.hpp"
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "caflm/actors/cluster.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"
#include "caflm/server/openai_server.hpp"

namespace caflm::apps {

namespace {

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";
  std::uint16_t port = 8080;
  std::uint32_t replicas = 1;
  std::vector<std::string> workers;
  TlsOptions tls;
  std::string served_model_name;
  std::string api_key;
  std::uint32_t max_queue = 64;
  std::uint32_t max_concurrent = 32;
  std::chrono::microseconds token_flush = kDefaultTokenFlushInterval;
  RequestLimits requests;
  std::string chat_template;
  std::uint64_t kv_cache_mb = 1024;
  std::uint32_t max_context = 0;
  Device device = Device::Auto;
  GpuMemory gpu_memory;
  std::optional<KvCacheType> kv_cache_type; // unset: the model's
  std::string routing = "prefix";
  std::size_t threads = 2;
  double connect_timeout_s = 10;
};

void run_serve(const ServeOptions& options, caf::actor_system& system,
               const sigset_t& stop_signals) {
  // An operator runs a server: refusals, preemptions and lost engines are
  // worth a line each.
  default_log_level(LogLevel::Info);
  if (options.replicas == 0 && options.workers.empty())
    throw std::invalid_argument("--replicas 0 needs at least one --worker");
  if (options.routing != "prefix" && options.routing != "load")
    throw std::invalid_argument("--routing must be prefix or load, not " + options.routing);
  check_port_free(options.host, options.port);
  raise_open_file_limit();

  // The model is loaded even without local replicas: its tokenizer and
  // chat template turn requests into the token ids engines and routing use.
  std::shared_ptr<const Model> model = Model::load(options.model);
  ClusterOptions cluster_options;
  cluster_options.model_path = options.model;
  cluster_options.replicas = options.replicas;
  cluster_options.workers = options.workers;
  cluster_options.tls = options.tls;
  cluster_options.limits.queue_capacity = options.max_queue;
  cluster_options.limits.max_concurrent = options.max_concurrent;
  cluster_options.limits.token_flush_interval = options.token_flush;
  cluster_options.requests = options.requests;
  cluster_options.kv_cache_bytes = mebibytes(options.kv_cache_mb, "--kv-cache-mb");
  cluster_options.kv_cache_type = options.kv_cache_type;
  cluster_options.max_context = options.max_context;
  cluster_options.device = options.device;
  cluster_options.gpu_memory = options.gpu_memory;
  cluster_options.coordinator.prefix_routing = options.routing == "prefix";
  // Honest backpressure: once every engine refused a request for a full
  // queue, the client hears 429 rather than waiting in an unbounded queue.
  cluster_options.request.max_backpressure_refusals =
      options.replicas + static_cast<std::uint32_t>(options.workers.size());
  Cluster cluster{system, model, cluster_options};
  for (const std::string& problem : cluster.await_workers(
           std::chrono::milliseconds(static_cast<std::int64_t>(options.connect_timeout_s * 1000))))
    log(LogLevel::Warning, "worker not reachable yet: {}", problem);

  std::shared_ptr<const Tokenizer> tokenizer =
      cluster.tokenizer() ? cluster.tokenizer() : load_tokenizer(*model);
  std::optional<ChatTemplate> chat_template;
  if (!options.chat_template.empty()) {
    chat_template = ChatTemplate::builtin(options.chat_template, model->file());
  } else {
    try {
      chat_template = ChatTemplate::from_gguf(model->file());
    } catch (const std::exception& e) {
      // Completions still serve; chat requests are told why not.
      log(LogLevel::Warning, "no chat completions: {}", e.what());
    }
  }
  server::OpenAiServerOptions server_options;
  server_options.served_model_name = options.served_model_name.empty()
                                         ? std::filesystem::path(options.model).stem().string()
                                         : options.served_model_name;
  server_options.api_key = options.api_key;
  server_options.max_context = options.max_context == 0
                                   ? model->config().context_length
                                   : std::min(options.max_context, model->config().context_length);
  server_options.http.host = options.host;
  server_options.http.port = options.port;
  server_options.http.threads = options.threads;
  server::OpenAiServer server(system, cluster, tokenizer, std::move(chat_template), server_options);
  server.start();
  // Tests and scripts read this line to learn the port.
  std::printf("caflm serve listening on http://%s:%u (model \"%s\")\n", options.host.c_str(),
              unsigned{server.port()}, server_options.served_model_name.c_str());
  std::printf("web console: http://%s:%u/ (chat) and http://%s:%u/cluster (dashboard)\n",
              options.host.c_str(), unsigned{server.port()}, options.host.c_str(),
              unsigned{server.port()});
  std::fflush(stdout);
  int signal = 0;
  sigwait(&stop_signals, &signal);
  log(LogLevel::Info, "stopping: closing every connection and cancelling their requests");
  server.stop();
  cluster.shutdown();
}

} // namespace

void add_serve_command(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "serve", "Serve the OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, "
               "/v1/models, /health, /metrics)");
  cmd->add_option("--model", options->model,
                  "GGUF model file (its tokenizer and chat template "
                  "serve every engine)")
      ->required();
  cmd->add_option("--host", options->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", options->port, "TCP port (0: any free port)")->capture_default_str();
  cmd->add_option("--replicas", options->replicas, "Engines in this process")
      ->capture_default_str();
  cmd->add_option("--worker", options->workers, "A caflm worker as HOST:PORT (repeatable)");
  cmd->add_option("--served-model-name", options->served_model_name,
                  "The model's name in the API (default: the file name without extension)");
  cmd->add_option("--api-key", options->api_key,
                  "Require \"Authorization: Bearer KEY\" on every /v1/ request");
  cmd->add_option("--max-queue", options->max_queue,
                  "Requests each local engine queues before refusing (429 once all refuse)")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--max-concurrent", options->max_concurrent,
                  "Requests each local engine runs at once")
      ->check(at_least_one())
      ->capture_default_str();
  add_token_flush_option(*cmd, options->token_flush);
  add_request_limit_options(*cmd, options->requests);
  add_chat_template_option(*cmd, options->chat_template);
  add_device_options(*cmd, options->device, options->gpu_memory);
  add_kv_cache_type_option(*cmd, options->kv_cache_type);
  cmd->add_option("--kv-cache-mb", options->kv_cache_mb, "KV cache of each local CPU engine, MiB")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--max-context", options->max_context,
                  "Longest sequence a request may ask for (0: the model's)");
  cmd->add_option("--routing", options->routing,
                  "prefix: to the engine holding the prompt's cached blocks, within a load "
                  "margin; load: by load alone")
      ->capture_default_str();
  cmd->add_option("--threads", options->threads, "HTTP io threads (connections add none)")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--connect-timeout", options->connect_timeout_s,
                  "Seconds to wait for the workers before serving")
      ->capture_default_str();
  add_tls_options(*cmd, options->tls);
  cmd->callback([options] {
    // Before the actor system starts its threads, so that they inherit it.
    const sigset_t stop_signals = block_stop_signals();
    run_in_actor_system(
        [options, stop_signals](caf::actor_system& system) {
          run_serve(*options, system, stop_signals);
        },
        options->tls);
  });
}

} // namespace caflm::apps

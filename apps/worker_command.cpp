#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include <caf/all.hpp>

#include "apps/actor_runtime.hpp"
#include "apps/commands.hpp"
#include "apps/options.hpp"
#include "caflm/actors/connection_guard.hpp"
#include "caflm/actors/engine_core_actor.hpp"
#include "caflm/actors/node_janitor.hpp"
#include "caflm/actors/node_tls.hpp"
#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/engine_factory.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"

namespace caflm::apps {

namespace {

struct WorkerOptions {
  std::string model;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  EngineLimits limits;
  RequestLimits requests;
  std::uint64_t kv_cache_mb = 1024;
  Device device = Device::Auto;
  GpuMemory gpu_memory;
  std::optional<KvCacheType> kv_cache_type; // unset: the model's
  std::uint32_t max_context = 0;
  TlsOptions tls;
  bool insecure = false;
};

/// The model file, for the SIGBUS handler's message.
char mapped_model[4096];

/// A read of a mapped page whose file was truncated under the process.
/// Said plainly, then the process ends: the mapping cannot be repaired.
extern "C" void on_sigbus(int) {
  const char head[] = "caflm worker: the model file ";
  const char tail[] = " shrank or was rewritten while the worker had it mapped (SIGBUS); "
                      "replace a served model by renaming a new file over it\n";
  (void)!::write(STDERR_FILENO, head, sizeof(head) - 1);
  (void)!::write(STDERR_FILENO, mapped_model, std::strlen(mapped_model));
  (void)!::write(STDERR_FILENO, tail, sizeof(tail) - 1);
  ::_exit(3);
}

void run_worker(const WorkerOptions& options) {
  // An operator runs workers: preemptions, refusals and clients that went
  // away are worth a line each.
  default_log_level(LogLevel::Info);
  if (auto problem = validate(options.limits))
    throw std::invalid_argument(*problem);
  if (auto problem = validate(options.requests))
    throw std::invalid_argument(*problem);
  EngineOptions sizing;
  sizing.requests = options.requests;
  sizing.kv_cache_bytes = mebibytes(options.kv_cache_mb, "--kv-cache-mb");
  sizing.kv_cache_type = options.kv_cache_type;
  sizing.max_context = options.max_context;
  sizing.device = resolve_device(options.device);
  sizing.gpu_memory = options.gpu_memory;
  // Before the model loads, which can take a while: a port in use, or
  // certificates that cannot work, are errors now, not after a minute of
  // loading.
  check_port_free(options.host, options.port);
  if (auto problem = validate(options.tls))
    throw std::invalid_argument(*problem);
  if (!options.tls.enabled() && !is_loopback_host(options.host)) {
    if (!options.insecure)
      throw std::invalid_argument(
          "refusing to listen on " + options.host +
          " without TLS: anyone who reaches the port could submit, read and cancel requests. "
          "Give --tls-cert, --tls-key and --tls-ca (caflm certs writes them), or --insecure");
    log(LogLevel::Warning,
        "listening on {} without TLS (--insecure): anyone who reaches port {} can submit, read "
        "and cancel requests, and read the traffic",
        options.host, options.port);
  }

  // Waited for below.
  sigset_t stop_signals = block_stop_signals();

  auto model = Model::load(options.model);
  std::snprintf(mapped_model, sizeof(mapped_model), "%s", options.model.c_str());
  std::signal(SIGBUS, on_sigbus);
  caf::actor_system_config config;
  configure(config);
  enable_tls(config, options.tls);
  caf::actor_system system{config};
  auto engine = spawn_engine(system, model, load_tokenizer(*model), options.limits, sizing);
  // Clients come and go for as long as the worker runs, and none may hold
  // more of it than its limits.
  start_node_janitor(system);
  start_connection_guard(system);
  auto port = publish_engine(system, engine, options.host, options.port);
  if (!port) {
    caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
    throw std::runtime_error("cannot listen on " + options.host + ":" +
                             std::to_string(options.port) + ": " + system.render(port.error()));
  }
  // Tests and scripts read this line to learn the port.
  std::printf("caflm worker listening on %s:%u\n", options.host.c_str(), unsigned{*port});
  std::fflush(stdout);
  log(LogLevel::Info, "worker serving {} on {}:{}{}", options.model, options.host, *port,
      options.tls.enabled() ? " with mutual TLS" : "");
  int signal = 0;
  sigwait(&stop_signals, &signal);
  {
    caf::scoped_actor self{system};
    self->monitor(engine);
    self->send_exit(engine, caf::exit_reason::user_shutdown);
    self->receive([](const caf::down_msg&) {}, caf::after(std::chrono::seconds(2)) >> [] {});
  }
  // The process ends here rather than in the actor system's destructor: in
  // CAF 0.17 that destructor can wait forever for the thread of a detached
  // actor (the engine's worker) once a remote node has exchanged messages
  // with it (actor-framework issues #1110 and #1196, fixed in 0.18). Clients
  // see the connection close, as with a crash, and fail over; nothing else
  // is left to flush.
  std::fflush(stdout);
  std::_Exit(0);
}

} // namespace

void add_worker_command(CLI::App& app) {
  auto options = std::make_shared<WorkerOptions>();
  CLI::App* cmd = app.add_subcommand("worker", "Serve one engine to other caflm processes");
  cmd->add_option("--model", options->model, "GGUF model file")->required();
  cmd->add_option("--port", options->port, "TCP port (0: any free port)")->required();
  cmd->add_option("--host", options->host,
                  "Address to listen on (other than loopback: with TLS, or --insecure)")
      ->capture_default_str();
  add_tls_options(*cmd, options->tls);
  cmd->add_flag("--insecure", options->insecure,
                "Listen on a non-loopback address without TLS (warned about)");
  cmd->add_option("--max-concurrent", options->limits.max_concurrent,
                  "Requests running at once (at least 1)")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--queue", options->limits.queue_capacity,
                  "Requests waiting at most; beyond it, backpressure (at least 1)")
      ->check(at_least_one())
      ->capture_default_str();
  add_token_flush_option(*cmd, options->limits.token_flush_interval);
  add_request_limit_options(*cmd, options->requests);
  add_device_options(*cmd, options->device, options->gpu_memory);
  add_kv_cache_type_option(*cmd, options->kv_cache_type);
  cmd->add_option("--kv-cache-mb", options->kv_cache_mb, "KV cache size in MiB (honoured)")
      ->check(at_least_one())
      ->capture_default_str();
  cmd->add_option("--max-context", options->max_context,
                  "Longest sequence, prompt and reply (0: the model's; at most what the KV "
                  "cache holds)")
      ->capture_default_str();
  cmd->callback([options] { run_worker(*options); });
}

} // namespace caflm::apps

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>

#include "apps/actor_runtime.hpp"
#include "apps/commands.hpp"
#include "caflm/actors/engine_core_actor.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"

namespace caflm::apps {

namespace {

struct WorkerOptions {
  std::string model;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  EngineLimits limits;
  std::size_t kv_cache_mb = 1024;
};

void run_worker(const WorkerOptions& options) {
  // Block the stop signals in every thread (CAF's inherit the mask) and
  // wait for them below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto model = Model::load(options.model);
  caf::actor_system_config config;
  caf::actor_system system{configure(config)};
  auto engine = spawn_cpu_engine(system, model, load_tokenizer(*model), options.limits,
                                 options.kv_cache_mb * std::size_t{1} << 20);
  auto port = system.middleman().publish(engine, options.port, options.host.c_str(), true);
  if (!port) {
    caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
    throw std::runtime_error("cannot listen on " + options.host + ":" +
                             std::to_string(options.port) + ": " + system.render(port.error()));
  }
  // Tests and scripts read this line to learn the port.
  std::printf("caflm worker listening on %s:%u\n", options.host.c_str(), unsigned{*port});
  std::fflush(stdout);
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
  cmd->add_option("--host", options->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--max-concurrent", options->limits.max_concurrent, "Requests running at once")
      ->capture_default_str();
  cmd->add_option("--queue", options->limits.queue_capacity, "Requests waiting at most")
      ->capture_default_str();
  cmd->add_option("--kv-cache-mb", options->kv_cache_mb, "KV cache size")->capture_default_str();
  cmd->callback([options] { run_worker(*options); });
}

} // namespace caflm::apps

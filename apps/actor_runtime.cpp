#include "apps/actor_runtime.hpp"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include <caf/atom.hpp>

#include "caflm/actors/node_tls.hpp"
#include "caflm/actors/scheduler_threads.hpp"
#include "caflm/messages/type_registry.hpp"

namespace caflm::apps {

caf::actor_system_config& configure(caf::actor_system_config& config) {
  add_message_types(config);
  config.set("logger.file-verbosity", caf::atom("quiet"));
  config.set("logger.console-verbosity", caf::atom("quiet"));
  use_scheduler_thread_per_core(config);
  return config;
}

void run_in_actor_system(const std::function<void(caf::actor_system&)>& command,
                         const TlsOptions& tls) {
  int status = 0;
  try {
    // Never destroyed, for the reason above.
    auto* config = new caf::actor_system_config;
    enable_tls(configure(*config), tls);
    auto* system = new caf::actor_system{*config};
    command(*system);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "caflm: %s\n", e.what());
    status = 1;
  }
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(status);
}

sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

} // namespace caflm::apps

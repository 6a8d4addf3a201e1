#pragma once

#include <csignal>
#include <functional>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

#include "caflm/actors/tls_options.hpp"

namespace caflm::apps {

/// The actor system config every caflm process uses: message types
/// registered, middleman loaded, no log files, one scheduler thread per core
/// (use_scheduler_thread_per_core).
caf::actor_system_config& configure(caf::actor_system_config& config);

/// Runs `command` in a new actor system, then ends the process, output
/// flushed: with status 0, or 1 after printing "caflm: WHAT" for an
/// exception. The system's destructor never runs: in CAF 0.17 it waits for a
/// connection attempt to a worker that never answers its handshake (a
/// stopped process, a filtered port) for as long as that lasts, and can wait
/// forever for actors a remote node talked to.
///
/// With `tls` given, the system links to other nodes through mutual TLS
/// (enable_tls); files that cannot work are the exception said.
[[noreturn]] void run_in_actor_system(const std::function<void(caf::actor_system&)>& command,
                                      const TlsOptions& tls = {});

/// Blocks SIGINT and SIGTERM in the calling thread, and so in every thread
/// it starts afterwards (CAF's inherit the mask), and returns them for
/// sigwait: a long-running command then stops in one place, in order. Call
/// it before the actor system exists.
sigset_t block_stop_signals();

} // namespace caflm::apps

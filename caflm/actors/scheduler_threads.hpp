#pragma once

#include <cstddef>

#include <caf/fwd.hpp>

namespace caflm {

/// Scheduler threads for an actor system of caflm on this machine: one per
/// core the process may run on, at least one.
std::size_t scheduler_threads_per_core();

/// Sets `config`'s `scheduler.max-threads` to scheduler_threads_per_core().
/// CAF 0.17 starts max(cores, 4) threads: on a machine of 2 or 3 cores the
/// extra ones take turns with the busy ones and with the middleman's
/// multiplexer, which carries every message between nodes. Measured on 2
/// cores (bench_actor_pipeline, alternated runs): across the middleman
/// 12-40% more tokens per second with one thread per core, in one process
/// within the noise.
void use_scheduler_thread_per_core(caf::actor_system_config& config);

} // namespace caflm

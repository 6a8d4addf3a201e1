#include "caflm/actors/scheduler_threads.hpp"

#include <sched.h>

#include <algorithm>
#include <thread>

#include <caf/actor_system_config.hpp>

namespace caflm {

std::size_t scheduler_threads_per_core() {
  // The cores this process may run on (a container or taskset may allow
  // fewer than the machine has), else the machine's.
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0 && CPU_COUNT(&allowed) > 0)
    return static_cast<std::size_t>(CPU_COUNT(&allowed));
  return std::max(1u, std::thread::hardware_concurrency());
}

void use_scheduler_thread_per_core(caf::actor_system_config& config) {
  config.set("scheduler.max-threads", scheduler_threads_per_core());
}

} // namespace caflm

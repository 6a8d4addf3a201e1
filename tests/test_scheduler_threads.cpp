// The actor systems of caflm's programs run one scheduler thread per core
// the process may use, where CAF 0.17 would start at least four.
#include <catch2/catch.hpp>

#include <sched.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>

#include "caflm/actors/scheduler_threads.hpp"

TEST_CASE("an actor system runs one scheduler thread per core it may use") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof(allowed), &allowed) == 0);
  const auto cores = static_cast<std::size_t>(CPU_COUNT(&allowed));
  CHECK(caflm::scheduler_threads_per_core() == cores);

  caf::actor_system_config config;
  caflm::use_scheduler_thread_per_core(config);
  caf::actor_system system{config};
  CHECK(system.scheduler().num_workers() == cores);
}

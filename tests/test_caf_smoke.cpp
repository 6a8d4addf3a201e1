// Proves the CAF wiring: a typed actor request/response round trip, on the
// threaded scheduler and on CAF's deterministic testing scheduler.
#include <catch2/catch.hpp>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

namespace {

using add_atom = caf::atom_constant<caf::atom("smoke_add")>;

using adder_actor =
    caf::typed_actor<caf::replies_to<add_atom, std::int32_t, std::int32_t>::with<std::int32_t>>;

adder_actor::behavior_type adder() {
  return {
      [](add_atom, std::int32_t a, std::int32_t b) { return a + b; },
  };
}

} // namespace

TEST_CASE("a typed actor answers a request on the threaded scheduler") {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  auto calc = sys.spawn(adder);
  caf::scoped_actor self{sys};
  std::int32_t sum = 0;
  std::string failure;
  self->request(calc, caf::infinite, add_atom::value, 40, 2)
      .receive([&](std::int32_t result) { sum = result; },
               [&](const caf::error& err) { failure = sys.render(err); });
  CHECK(failure.empty());
  CHECK(sum == 42);
  self->send_exit(calc, caf::exit_reason::user_shutdown);
}

TEST_CASE("a typed actor answers a request on the testing scheduler") {
  caf::actor_system_config cfg;
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  caf::actor_system sys{cfg};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto calc = sys.spawn(adder);
  std::int32_t sum = 0;
  auto client = sys.spawn([&](caf::event_based_actor* self) {
    self->request(calc, caf::infinite, add_atom::value, 1, 2).then([&](std::int32_t result) {
      sum = result;
    });
  });
  sched.run();
  CHECK(sum == 3);
  anon_send_exit(calc, caf::exit_reason::user_shutdown);
  sched.run();
}

// DpCoordinatorActor on CAF's deterministic scheduler, with stand-in engines
// whose reported load the test sets: least loaded by score, round robin on
// ties, optimistic counting between polls, prefix affinity within the
// margin, engines going down, deregistering and coming back; and the
// routing key request actors ask with.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <optional>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "caflm/actors/dp_coordinator_actor.hpp"
#include "caflm/actors/request_actor.hpp"
#include "caflm/messages/type_registry.hpp"
#include "support/actor_harness.hpp"

using namespace caflm;
using caflm::testing::deterministic;

namespace {

/// A stand-in engine: it answers `get_load` with whatever the test set.
struct EngineLog {
  LoadReport load;
  int polls = 0;
};

engine_core_actor::behavior_type stand_in_engine(engine_core_actor::pointer,
                                                 std::shared_ptr<EngineLog> log) {
  return {
      [](add_atom, const GenerateRequest& request, const token_sink&) {
        return Admission::accept(request.id, request.attempt);
      },
      [log](get_load_atom) {
        ++log->polls;
        return log->load;
      },
      [](cancel_atom, const token_sink&, std::uint64_t, std::uint32_t) {},
  };
}

LoadReport load_of(std::uint32_t running, std::uint32_t waiting) {
  LoadReport load;
  load.running = running;
  load.waiting = waiting;
  load.score = 4.0 * waiting + running;
  return load;
}

struct CoordinatorFixture {
  CoordinatorFixture()
    : sys(init(cfg))
    , sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())) {
    config.poll_interval = std::chrono::milliseconds(100);
    config.affinity_margin = 4.0;
    coordinator = spawn_coordinator(sys, config);
    sched.run();
  }

  ~CoordinatorFixture() {
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    for (auto& engine : engines)
      caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
    sched.run();
  }

  static caf::actor_system_config& init(caf::actor_system_config& c) {
    add_message_types(c);
    return deterministic(c);
  }

  /// Spawns `count` stand-in engines and registers them, in order.
  void add_engines(std::size_t count) {
    for (std::size_t i = 0; i < count; ++i) {
      logs.push_back(std::make_shared<EngineLog>());
      engines.push_back(sys.spawn(stand_in_engine, logs.back()));
      register_engine(engines.back());
    }
  }

  void register_engine(const engine_core_actor& engine) {
    caf::anon_send(coordinator, register_atom::value, engine);
    sched.run();
  }

  void deregister_engine(const engine_core_actor& engine) {
    caf::anon_send(coordinator, deregister_atom::value, engine);
    sched.run();
  }

  /// Lets the poll timer fire once and every engine answer.
  void poll() {
    sched.advance_time(config.poll_interval);
    sched.run();
  }

  /// Asks for an engine for `hash`, avoiding `avoid` (an index in
  /// `engines`, or -1 for none); returns its index in `engines`, or -1 for
  /// an invalid handle.
  int route(std::uint64_t hash, int avoid = -1) {
    auto answer = std::make_shared<std::optional<engine_core_actor>>();
    engine_core_actor avoided =
        avoid >= 0 ? engines[static_cast<std::size_t>(avoid)] : engine_core_actor{};
    sys.spawn([=, coordinator = coordinator](caf::event_based_actor* self) {
      self->request(coordinator, caf::infinite, route_atom::value, hash, avoided)
          .then([answer](const engine_core_actor& engine) { *answer = engine; });
    });
    sched.run();
    REQUIRE(answer->has_value());
    if (!**answer)
      return -1;
    for (std::size_t i = 0; i < engines.size(); ++i)
      if (engines[i] == **answer)
        return static_cast<int>(i);
    FAIL("route answered an engine the test does not know");
    return -2;
  }

  /// Routes `count` requests with prefixes never seen before; returns how
  /// many each engine got.
  std::map<int, int> burst(int count) {
    std::map<int, int> counts;
    for (int i = 0; i < count; ++i)
      ++counts[route(fresh_hash++)];
    return counts;
  }

  CoordinatorStats stats() {
    auto answer = std::make_shared<std::optional<CoordinatorStats>>();
    sys.spawn([=, coordinator = coordinator](caf::event_based_actor* self) {
      self->request(coordinator, caf::infinite, stats_atom::value)
          .then([answer](const CoordinatorStats& s) { *answer = s; });
    });
    sched.run();
    REQUIRE(answer->has_value());
    return **answer;
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  CoordinatorConfig config;
  dp_coordinator_actor coordinator;
  std::vector<engine_core_actor> engines;
  std::vector<std::shared_ptr<EngineLog>> logs;
  std::uint64_t fresh_hash = 1000;
};

} // namespace

TEST_CASE("route with no engine answers an invalid handle") {
  CoordinatorFixture f;
  CHECK(f.route(1) == -1);
  CHECK(f.stats().engines == 0);
  CHECK(f.stats().routed == 0);
}

TEST_CASE("the coordinator routes to the engine with the lowest score") {
  CoordinatorFixture f;
  f.add_engines(3);
  // Scores 4, 3 and 5: by running count alone the first would win.
  f.logs[0]->load = load_of(0, 1);
  f.logs[1]->load = load_of(3, 0);
  f.logs[2]->load = load_of(1, 1);
  f.poll();
  for (const auto& log : f.logs)
    REQUIRE(log->polls > 0);
  CHECK(f.route(1) == 1);

  CoordinatorStats stats = f.stats();
  CHECK(stats.engines == 3);
  CHECK(stats.routed == 1);
  REQUIRE(stats.loads.size() == 3);
  CHECK(stats.loads[0].waiting == 1);
  CHECK(stats.loads[1].running == 3);
  CHECK(stats.loads[2].score == 5.0);
}

TEST_CASE("ties between equally loaded engines go round robin") {
  CoordinatorFixture f;
  f.add_engines(3);
  for (const auto& log : f.logs)
    log->load = load_of(2, 0);
  // A poll before each route resets the optimistic counts, so only the
  // tie-break spreads these.
  std::vector<int> order;
  for (int i = 0; i < 6; ++i) {
    f.poll();
    order.push_back(f.route(static_cast<std::uint64_t>(i)));
  }
  CHECK(order == std::vector<int>{0, 1, 2, 0, 1, 2});
}

TEST_CASE("between polls the coordinator counts what it routed") {
  CoordinatorFixture f;
  f.add_engines(2);
  f.logs[0]->load = load_of(0, 0);
  f.logs[1]->load = load_of(2, 0);
  f.poll();
  // Without counting, all six would go to the idle engine; with it, that
  // engine takes two until both score 2, then they alternate.
  CHECK(f.burst(6) == std::map<int, int>{{0, 4}, {1, 2}});
  // A poll replaces the counts with what the engines report.
  f.poll();
  CHECK(f.route(1) == 0);
  CHECK(f.route(2) == 0);
}

TEST_CASE("routes made while a poll is answered stay counted until a report can cover them") {
  CoordinatorFixture f;
  f.add_engines(2);
  f.logs[0]->load = load_of(0, 0);
  f.logs[1]->load = load_of(4, 0);
  f.poll();
  // The next poll goes out; before the engines answer, four requests are
  // routed, all to the idle engine. Those answers were written before the
  // four arrived, so they cannot reflect them: the four must stay counted.
  f.sched.advance_time(f.config.poll_interval);
  f.sched.run_once(); // the coordinator sends its get_load requests
  for (int i = 0; i < 4; ++i) {
    auto answer = std::make_shared<std::optional<engine_core_actor>>();
    auto router = f.sys.spawn([=, coordinator = f.coordinator](caf::event_based_actor* self) {
      self->request(coordinator, caf::infinite, route_atom::value, std::uint64_t(500 + i),
                    engine_core_actor{})
          .then([answer](const engine_core_actor& engine) { *answer = engine; });
    });
    f.sched.prioritize(router);
    f.sched.run_once(); // the router asks
    f.sched.prioritize(f.coordinator);
    f.sched.run_once(); // the coordinator routes, ahead of the load answers
    f.sched.prioritize(router);
    f.sched.run_once(); // the router takes its answer
    REQUIRE(answer->has_value());
    CHECK(**answer == f.engines[0]);
  }
  f.sched.run(); // now the answers: 0 and 4 running, as before
  // Idle engine: 0 reported + 4 routed since; the other 4: a tie.
  CHECK(f.burst(2) == std::map<int, int>{{0, 1}, {1, 1}});
  // A poll sent after those routes covers them.
  f.poll();
  CHECK(f.burst(4) == std::map<int, int>{{0, 4}});
}

TEST_CASE("route avoids the engine a request just failed on, unless it is the only one") {
  CoordinatorFixture f;
  f.add_engines(2);
  f.poll();
  for (int i = 0; i < 4; ++i) {
    CHECK(f.route(static_cast<std::uint64_t>(i), 0) == 1);
    f.poll();
  }
  // Even where the prefix lives.
  const int home = f.route(77);
  f.poll();
  CHECK(f.route(77, home) == 1 - home);
  f.deregister_engine(f.engines[1]);
  CHECK(f.route(5, 0) == 0);
}

TEST_CASE("a request goes where its prefix went while loads are within the margin") {
  CoordinatorFixture f;
  f.add_engines(2);
  f.poll();
  const std::uint64_t prefix = 42;
  const int home = f.route(prefix);
  REQUIRE(home >= 0);
  const int other = 1 - home;
  EngineLog& home_log = *f.logs[static_cast<std::size_t>(home)];

  SECTION("counting its own routes") {
    // Each route adds one to home's score while the other stays at 0; home
    // wins while it is within the margin (4) of the best.
    for (int i = 1; i <= 4; ++i) {
      INFO("route " << i);
      CHECK(f.route(prefix) == home);
    }
    CHECK(f.route(prefix) == other);
    // Other prefixes go to the least loaded engine.
    CHECK(f.route(7) == other);
  }

  SECTION("by the engines' reported load") {
    home_log.load = load_of(0, 1); // score 4: within the margin of 0
    f.poll();
    CHECK(f.route(prefix) == home);
    home_log.load = load_of(1, 1); // score 5: beyond it
    f.poll();
    CHECK(f.route(prefix) == other);
  }
}

TEST_CASE("an engine that goes down is dropped, and one registered again is used again") {
  CoordinatorFixture f;
  f.add_engines(2);
  f.poll();
  REQUIRE(f.stats().engines == 2);
  // Registering twice changes nothing.
  f.register_engine(f.engines[0]);
  CHECK(f.stats().engines == 2);

  SECTION("an engine going down") {
    caf::anon_send_exit(f.engines[0], caf::exit_reason::kill);
    f.sched.run();
    CHECK(f.stats().engines == 1);
    CHECK(f.burst(5) == std::map<int, int>{{1, 5}});
    // A dead engine registered again is dropped at once.
    f.register_engine(f.engines[0]);
    CHECK(f.stats().engines == 1);
    CHECK(f.route(99) == 1);
  }

  SECTION("deregistering and registering again") {
    f.deregister_engine(f.engines[0]);
    CHECK(f.stats().engines == 1);
    CHECK(f.burst(5) == std::map<int, int>{{1, 5}});
    f.deregister_engine(f.engines[1]);
    CHECK(f.route(3) == -1);
    f.register_engine(f.engines[0]);
    CHECK(f.burst(3) == std::map<int, int>{{0, 3}});
    f.register_engine(f.engines[1]);
    f.poll();
    CHECK(f.burst(4) == std::map<int, int>{{0, 2}, {1, 2}});
  }
}

namespace {

/// A stand-in coordinator that records the prefix hash of each route and
/// has no engine to give.
dp_coordinator_actor::behavior_type
recording_coordinator(dp_coordinator_actor::pointer,
                      std::shared_ptr<std::vector<std::uint64_t>> hashes) {
  return {
      [hashes](route_atom, std::uint64_t hash, const engine_core_actor&) {
        hashes->push_back(hash);
        return engine_core_actor{};
      },
      [](register_atom, const engine_core_actor&) {},
      [](deregister_atom, const engine_core_actor&) {},
      [](stats_atom) { return CoordinatorStats{}; },
  };
}

token_sink::behavior_type silent_sink() {
  return {
      [](const TokenBatch&) {},
      [](const InferenceError&) {},
  };
}

} // namespace

TEST_CASE("a request actor routes by its prompt's tokens when it has no text") {
  caf::actor_system_config cfg;
  caf::actor_system sys{CoordinatorFixture::init(cfg)};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto hashes = std::make_shared<std::vector<std::uint64_t>>();
  auto coordinator = sys.spawn(recording_coordinator, hashes);
  auto sink = sys.spawn(silent_sink);

  GenerateRequest text;
  text.prompt = "You are a helpful assistant.";
  GenerateRequest tokens_a;
  tokens_a.prompt_tokens = {1, 2, 3, 4};
  GenerateRequest tokens_b;
  tokens_b.prompt_tokens = {1, 2, 3, 5};
  std::vector<request_actor> requests;
  for (const GenerateRequest& request : {text, tokens_a, tokens_a, tokens_b})
    requests.push_back(spawn_request(sys, coordinator, request, sink));
  sched.run();

  REQUIRE(hashes->size() == 4);
  CHECK((*hashes)[0] == prefix_hash(text.prompt));
  // The same tokens share a key (affinity), different tokens do not.
  CHECK((*hashes)[1] == (*hashes)[2]);
  CHECK((*hashes)[1] != (*hashes)[3]);
  CHECK((*hashes)[1] != prefix_hash(""));

  for (auto& request : requests)
    caf::anon_send_exit(request, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
  sched.run();
}

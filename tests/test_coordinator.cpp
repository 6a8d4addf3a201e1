// DpCoordinatorActor on CAF's deterministic scheduler, with stand-in engines
// whose reported load the test sets: least loaded by score, round robin on
// ties, optimistic counting between polls, affinity by the prompt's KV block
// key chain within the margin (longest match, hot prefixes spread, salt,
// short prompts, text prompts, bounded memory), engines going down,
// deregistering and coming back; and what request actors ask with.
#include <catch2/catch.hpp>

#include <map>
#include <memory>
#include <optional>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "caflm/actors/dp_coordinator_actor.hpp"
#include "caflm/actors/request_actor.hpp"
#include "caflm/kv/prefix_cache.hpp"
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

constexpr std::uint32_t kBlock = 16;
constexpr std::uint64_t kSalt = 0x5eed;

/// `blocks` full blocks of tokens, all derived from `seed`: equal seeds give
/// equal tokens, different seeds different ones in every block.
std::vector<TokenId> tokens_of(std::uint64_t seed, std::size_t blocks) {
  std::vector<TokenId> tokens(blocks * kBlock);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<TokenId>((seed * 7919 + i * 31) % 50000);
  return tokens;
}

/// `prefix` followed by `suffix`.
std::vector<TokenId> concat(std::vector<TokenId> prefix, const std::vector<TokenId>& suffix) {
  prefix.insert(prefix.end(), suffix.begin(), suffix.end());
  return prefix;
}

GenerateRequest request_with(std::vector<TokenId> tokens) {
  GenerateRequest request;
  request.prompt_tokens = std::move(tokens);
  return request;
}

CoordinatorConfig test_config() {
  CoordinatorConfig config;
  config.poll_interval = std::chrono::milliseconds(100);
  config.affinity_margin = 4.0;
  config.block_size = kBlock;
  config.cache_salt = kSalt;
  return config;
}

struct CoordinatorFixture {
  explicit CoordinatorFixture(CoordinatorConfig c = test_config())
    : sys(init(cfg))
    , sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler()))
    , config(c) {
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

  /// Asks for an engine for a prompt of one block derived from `prefix`
  /// (equal for equal numbers, sharing no block otherwise), avoiding
  /// `avoid` (an index in `engines`, or -1 for none); returns its index in
  /// `engines`, or -1 for an invalid handle.
  int route(std::uint64_t prefix, int avoid = -1) {
    return route(request_with(tokens_of(prefix, 1)), avoid);
  }

  int route(const GenerateRequest& request, int avoid = -1) {
    auto answer = std::make_shared<std::optional<engine_core_actor>>();
    engine_core_actor avoided =
        avoid >= 0 ? engines[static_cast<std::size_t>(avoid)] : engine_core_actor{};
    sys.spawn([=, coordinator = coordinator](caf::event_based_actor* self) {
      self->request(coordinator, caf::infinite, route_atom::value, request, avoided)
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
  // Each load comes with its engine, so a reader can name it.
  CHECK(stats.handles == f.engines);
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
      self->request(coordinator, caf::infinite, route_atom::value,
                    request_with(tokens_of(500 + i, 1)), engine_core_actor{})
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

TEST_CASE("prefix_block_keys are the prefix cache's own keys, chained and salted") {
  const std::vector<TokenId> tokens = concat(tokens_of(1, 3), {7, 8, 9});
  std::vector<std::uint64_t> keys;
  prefix_block_keys(tokens.data(), tokens.size(), kBlock, kSalt, keys);
  // Whole blocks only: the three trailing tokens make no key.
  REQUIRE(keys.size() == 3);

  SECTION("as the cache computes them when it publishes the prompt") {
    static std::vector<std::uint64_t> computed;
    computed.clear();
    auto recording_hash = [](std::uint64_t parent, const TokenId* block, std::uint32_t count,
                             std::uint64_t salt) {
      computed.push_back(PrefixCache::default_hash(parent, block, count, salt));
      return computed.back();
    };
    BlockPool pool(4);
    PrefixCache cache(4, kBlock, kSalt, recording_hash);
    std::vector<BlockId> blocks;
    for (int i = 0; i < 4; ++i)
      blocks.push_back(*pool.allocate());
    REQUIRE(cache.publish(tokens.data(), tokens.size(), blocks.data(), 4, pool) == 3);
    CHECK(computed == keys);
  }

  SECTION("a key names its whole prefix, not only its own block") {
    // The same second block after a different first one.
    std::vector<TokenId> other = tokens;
    other[0] += 1;
    std::vector<std::uint64_t> other_keys;
    prefix_block_keys(other.data(), other.size(), kBlock, kSalt, other_keys);
    REQUIRE(other_keys.size() == 3);
    for (std::size_t i = 0; i < 3; ++i)
      CHECK(other_keys[i] != keys[i]);
  }

  SECTION("chains differ by salt") {
    std::vector<std::uint64_t> same;
    prefix_block_keys(tokens.data(), tokens.size(), kBlock, kSalt, same);
    CHECK(same == keys);
    std::vector<std::uint64_t> salted;
    prefix_block_keys(tokens.data(), tokens.size(), kBlock, kSalt + 1, salted);
    REQUIRE(salted.size() == 3);
    for (std::size_t i = 0; i < 3; ++i)
      CHECK(salted[i] != keys[i]);
  }

  SECTION("a prompt shorter than one block has no key") {
    prefix_block_keys(tokens.data(), kBlock - 1, kBlock, kSalt, keys);
    CHECK(keys.empty());
  }
}

TEST_CASE("requests sharing a system prompt of whole blocks meet on one engine") {
  const std::vector<TokenId> system = tokens_of(10, 3);
  const GenerateRequest first = request_with(concat(system, {1, 2, 3, 4, 5}));
  const GenerateRequest second = request_with(concat(system, tokens_of(11, 2)));

  SECTION("with prefix routing") {
    CoordinatorFixture f;
    f.add_engines(2);
    f.poll();
    const int home = f.route(first);
    REQUIRE(home >= 0);
    f.poll(); // loads equal again: only the prefix tells the engines apart
    CHECK(f.route(second) == home);
    // Even a little busier than the other engine.
    f.logs[static_cast<std::size_t>(home)]->load = load_of(2, 0);
    f.poll();
    CHECK(f.route(first) == home);
    // Another prompt goes to the least loaded.
    CHECK(f.route(request_with(tokens_of(12, 3))) == 1 - home);
  }

  SECTION("without it, the baseline, by load and round robin alone") {
    CoordinatorConfig config = test_config();
    config.prefix_routing = false;
    CoordinatorFixture f(config);
    f.add_engines(2);
    f.poll();
    const int home = f.route(first);
    f.poll();
    CHECK(f.route(second) == 1 - home);
  }
}

TEST_CASE("a request goes with the engine holding the longest prefix of its chain") {
  CoordinatorFixture f;
  f.add_engines(2);
  const std::vector<TokenId> a = tokens_of(20, 1);
  const std::vector<TokenId> b = tokens_of(21, 1);
  const std::vector<TokenId> c = tokens_of(22, 1);
  // Engine 0 gets [a]; then, while it is beyond the margin, engine 1 gets
  // [a b c].
  f.poll();
  REQUIRE(f.route(request_with(a)) == 0);
  f.logs[0]->load = load_of(0, 2); // score 8
  f.poll();
  REQUIRE(f.route(request_with(concat(concat(a, b), c))) == 1);
  // Equal loads from here on.
  f.logs[0]->load = load_of(0, 0);

  SECTION("two blocks matched beat one") {
    for (int i = 0; i < 3; ++i) {
      f.poll();
      CHECK(f.route(request_with(concat(concat(a, b), tokens_of(30 + i, 1)))) == 1);
    }
  }

  SECTION("one block matched beats none") {
    // Engine 1 gets a prompt of its own; one sharing a block with it follows.
    f.logs[1]->load = load_of(0, 2);
    f.poll();
    REQUIRE(f.route(request_with(concat(tokens_of(40, 1), c))) == 0);
    f.logs[1]->load = load_of(0, 0);
    f.poll();
    CHECK(f.route(request_with(concat(tokens_of(40, 1), tokens_of(41, 2)))) == 0);
    f.poll();
    CHECK(f.route(request_with(concat(concat(a, b), c))) == 1);
  }

  SECTION("equal matches go to the less loaded engine") {
    f.logs[0]->load = load_of(1, 0);
    f.poll();
    // Both hold [a]; engine 0 scores 1, engine 1 scores 0. Round robin
    // alone would pick engine 0 first.
    CHECK(f.route(request_with(concat(a, tokens_of(50, 1)))) == 1);
  }
}

TEST_CASE("a hot prefix spreads to the other engine beyond the load margin") {
  CoordinatorFixture f;
  f.add_engines(2);
  f.poll();
  const std::vector<TokenId> system = tokens_of(60, 3);
  std::map<int, int> counts;
  std::vector<int> order;
  for (int i = 0; i < 20; ++i) {
    order.push_back(f.route(request_with(concat(system, tokens_of(100 + i, 1)))));
    ++counts[order.back()];
  }
  const int home = order.front();
  const int other = 1 - home;
  // Counted optimistically, home takes requests until it is the margin (4)
  // above the idle engine: five. Then the other engine takes them, holds
  // the prefix too, and the two share the rest by load.
  for (int i = 0; i < 5; ++i)
    CHECK(order[static_cast<std::size_t>(i)] == home);
  CHECK(order[5] == other);
  CHECK(counts == std::map<int, int>{{home, 10}, {other, 10}});

  SECTION("by the engines' reported load too") {
    f.logs[static_cast<std::size_t>(other)]->load = load_of(0, 0);
    f.logs[static_cast<std::size_t>(home)]->load = load_of(1, 1); // 5: beyond the margin
    f.poll();
    CHECK(f.route(request_with(concat(system, {1}))) == other);
    f.logs[static_cast<std::size_t>(other)]->load = load_of(0, 2); // 8
    f.poll();
    CHECK(f.route(request_with(concat(system, {2}))) == home);
  }
}

TEST_CASE("requests without a common prefix balance by load") {
  CoordinatorFixture f;
  f.add_engines(3);
  f.logs[0]->load = load_of(3, 0);
  f.logs[1]->load = load_of(0, 0);
  f.logs[2]->load = load_of(1, 0);
  f.poll();
  std::map<int, int> counts;
  for (std::uint64_t i = 0; i < 8; ++i)
    ++counts[f.route(request_with(tokens_of(200 + i, 4)))];
  // Scores 3, 0, 1 plus what was routed: everyone ends at 4.
  CHECK(counts == std::map<int, int>{{0, 1}, {1, 4}, {2, 3}});
}

TEST_CASE("a prompt shorter than one block gives no affinity") {
  CoordinatorFixture f;
  f.add_engines(2);
  const std::vector<TokenId> whole = tokens_of(70, 1);
  const std::vector<TokenId> short_prompt(whole.begin(), whole.end() - 1);
  f.poll();
  const int first = f.route(request_with(short_prompt));
  f.poll();
  CHECK(f.route(request_with(short_prompt)) == 1 - first);
  // One whole block is enough.
  f.poll();
  const int home = f.route(request_with(whole));
  f.poll();
  CHECK(f.route(request_with(whole)) == home);
}

TEST_CASE("a prompt given only as text routes by its first bytes") {
  CoordinatorFixture f;
  f.add_engines(2);
  const std::string system(300, 's');
  GenerateRequest first;
  first.prompt = system + " first question";
  GenerateRequest second;
  second.prompt = system + " second question";
  GenerateRequest other;
  other.prompt = "another system prompt";
  f.poll();
  const int home = f.route(first);
  // The other engine less loaded, but within the margin.
  f.logs[static_cast<std::size_t>(home)]->load = load_of(1, 0);
  f.poll();
  CHECK(f.route(second) == home);
  CHECK(f.route(other) == 1 - home);
}

TEST_CASE("each engine remembers a bounded number of block keys") {
  CoordinatorConfig config = test_config();
  config.prefix_block_memory = 4;
  CoordinatorFixture f(config);
  f.add_engines(2);
  // Engine 1 busy: engine 0 takes everything.
  f.logs[1]->load = load_of(0, 3);
  f.poll();
  const std::vector<TokenId> kept = tokens_of(80, 3);
  REQUIRE(f.route(request_with(kept)) == 0);
  // Three more blocks: the first of `kept` stays, its deeper blocks go.
  REQUIRE(f.route(request_with(tokens_of(81, 3))) == 0);
  // Engine 0 a little busier (within the margin): only a held prefix keeps
  // a request there.
  f.logs[0]->load = load_of(1, 0);
  f.logs[1]->load = load_of(0, 0);
  f.poll();
  CHECK(f.route(request_with(concat(tokens_of(80, 1), {5}))) == 0);
  f.poll();
  // Four blocks more: `kept` is gone.
  f.logs[1]->load = load_of(0, 3);
  f.poll();
  REQUIRE(f.route(request_with(tokens_of(82, 4))) == 0);
  f.logs[1]->load = load_of(0, 0);
  f.poll();
  CHECK(f.route(request_with(kept)) == 1);
}

namespace {

/// A stand-in coordinator that records the requests it is asked to route
/// and has no engine to give.
dp_coordinator_actor::behavior_type
recording_coordinator(dp_coordinator_actor::pointer,
                      std::shared_ptr<std::vector<GenerateRequest>> routed) {
  return {
      [routed](route_atom, const GenerateRequest& request, const engine_core_actor&) {
        routed->push_back(request);
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

TEST_CASE("the members of a prefill group meet on one engine, whatever the loads say") {
  for (bool prefix_routing : {true, false}) {
    CoordinatorConfig config = test_config();
    config.prefix_routing = prefix_routing;
    CoordinatorFixture f(config);
    f.add_engines(3);
    for (const auto& log : f.logs)
      log->load = load_of(1, 0);
    f.poll();
    GenerateRequest member = request_with(tokens_of(5, 2));
    member.prefill_group = 42;
    const int first = f.route(member);
    REQUIRE(first >= 0);
    // Its load now counts the routed members; a request outside the group
    // goes elsewhere, the group's members do not.
    for (int i = 0; i < 6; ++i)
      CHECK(f.route(member) == first);
    CHECK(f.route(request_with(tokens_of(6, 2))) != first);
    // Another group balances on its own.
    GenerateRequest stranger = member;
    stranger.prefill_group = 43;
    CHECK(f.route(stranger) != first);
    // A member resumed after a failure (it carries generated tokens) or
    // avoiding the group's engine is routed as any request.
    GenerateRequest resumed = member;
    resumed.generated = {1, 2};
    CHECK(f.route(resumed) != first);
    CHECK(f.route(member, first) != first);
    // The group's engine goes away: the group moves on, together.
    f.deregister_engine(f.engines[static_cast<std::size_t>(first)]);
    const int second = f.route(member);
    REQUIRE(second >= 0);
    CHECK(second != first);
    CHECK(f.route(member) == second);
  }
}

TEST_CASE("a request actor asks the coordinator with its prompt, text or tokens") {
  caf::actor_system_config cfg;
  caf::actor_system sys{CoordinatorFixture::init(cfg)};
  auto& sched = dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler());
  auto routed = std::make_shared<std::vector<GenerateRequest>>();
  auto coordinator = sys.spawn(recording_coordinator, routed);
  auto sink = sys.spawn(silent_sink);

  GenerateRequest text;
  text.prompt = "You are a helpful assistant.";
  GenerateRequest tokens;
  tokens.prompt_tokens = tokens_of(90, 2);
  std::vector<request_actor> requests;
  for (const GenerateRequest& request : {text, tokens})
    requests.push_back(spawn_request(sys, coordinator, request, sink));
  sched.run();

  REQUIRE(routed->size() == 2);
  CHECK((*routed)[0].prompt == text.prompt);
  CHECK((*routed)[0].prompt_tokens.empty());
  CHECK((*routed)[1].prompt_tokens == tokens.prompt_tokens);

  for (auto& request : requests)
    caf::anon_send_exit(request, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
  sched.run();
}

// RequestActor on CAF's deterministic scheduler, against scripted engines
// and a scripted coordinator: chunks of stale attempts and repeated chunks
// are dropped and every abandoned engine is told to cancel; a late
// admission after a timeout is cancelled; which error codes are retried and
// which are final; backpressure waits without a limit on a healthy cluster,
// a missing one fails after the unavailable deadline; the request's own
// deadline; the seed drawn once and kept across attempts.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>

#include "caflm/actors/request_actor.hpp"
#include "tests/support/scripted_actors.hpp"

using namespace caflm;
using namespace caflm::testing;
using namespace std::chrono_literals;

namespace {

struct RequestFixture : DeterministicSystem {
  RequestFixture() {
    coordinator = sys.spawn(scripted_coordinator, routes);
    user = sys.spawn(recording_sink, user_log);
    options.admission_timeout = 1000ms;
    options.first_backoff = 10ms;
    options.max_backoff = 100ms;
    options.unavailable_deadline = 2000ms;
  }

  ~RequestFixture() {
    caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(user, caf::exit_reason::user_shutdown);
    for (auto& engine : engines)
      caf::anon_send_exit(engine, caf::exit_reason::user_shutdown);
    if (request)
      caf::anon_send_exit(request, caf::exit_reason::user_shutdown);
    sched.run();
  }

  /// A scripted engine; the coordinator hands engines out in creation order.
  std::shared_ptr<EngineScript> add_engine() {
    scripts.push_back(std::make_shared<EngineScript>());
    engines.push_back(spawn_scripted_engine(sys, scripts.back()));
    routes->engines.push_back(engines.back());
    return scripts.back();
  }

  void start(GenerateRequest r) {
    request = spawn_request(sys, coordinator, std::move(r), user, options);
    sched.run();
  }

  static GenerateRequest make_request(std::uint64_t id = 7) {
    GenerateRequest r;
    r.id = id;
    r.prompt = "Once upon a time";
    r.params.max_tokens = 10;
    r.params.seed = 99;
    return r;
  }

  /// Sends `chunks` to the request actor, as a worker of `script`'s engine.
  void stream(const EngineScript& script, std::size_t added_index, std::vector<TokenChunk> chunks) {
    caf::anon_send(script.added.at(added_index).sink, TokenBatch{std::move(chunks)});
    sched.run();
  }

  void error(const EngineScript& script, std::size_t added_index, InferenceErrorCode code) {
    const GenerateRequest& r = script.added.at(added_index).request;
    caf::anon_send(script.added.at(added_index).sink,
                   InferenceError{r.id, r.attempt, code, "scripted error"});
    sched.run();
  }

  std::shared_ptr<CoordinatorScript> routes = std::make_shared<CoordinatorScript>();
  std::shared_ptr<SinkLog> user_log = std::make_shared<SinkLog>();
  dp_coordinator_actor coordinator;
  token_sink user;
  RequestOptions options;
  std::vector<std::shared_ptr<EngineScript>> scripts;
  std::vector<engine_core_actor> engines;
  request_actor request;
};

} // namespace

TEST_CASE("a request streams its engine's chunks to the user under its own id") {
  RequestFixture f;
  auto e = f.add_engine();
  f.start(RequestFixture::make_request(7));
  REQUIRE(e->added.size() == 1);
  CHECK(e->added[0].request.id == 7);
  CHECK(e->added[0].request.attempt == 0);
  f.stream(*e, 0, {chunk_of(7, 0, 0, {3}), chunk_of(7, 0, 1, {4})});
  f.stream(*e, 0, {chunk_of(7, 0, 2, {5}, FinishReason::Length)});
  CHECK(f.user_log->tokens() == std::vector<TokenId>{3, 4, 5});
  CHECK(f.user_log->chunks.back().request_id == 7);
  CHECK(f.user_log->errors.empty());
  CHECK(e->cancels.empty());
}

TEST_CASE("repeated chunks are dropped; a gap or a changed token fails the attempt over") {
  RequestFixture f;
  auto e1 = f.add_engine();
  auto e2 = f.add_engine();
  f.start(RequestFixture::make_request());
  f.stream(*e1, 0, {chunk_of(7, 0, 0, {3}), chunk_of(7, 0, 1, {4})});

  SECTION("a repeat of tokens the user has") {
    f.stream(*e1, 0, {chunk_of(7, 0, 1, {4}), chunk_of(7, 0, 0, {3})});
    f.stream(*e1, 0, {chunk_of(7, 0, 2, {5})});
    CHECK(f.user_log->tokens() == std::vector<TokenId>{3, 4, 5});
    CHECK(e1->cancels.empty());
    CHECK(e2->added.empty());
  }

  SECTION("a gap: tokens would be lost") {
    f.stream(*e1, 0, {chunk_of(7, 0, 3, {6})});
    CHECK(f.user_log->tokens() == std::vector<TokenId>{3, 4});
    CHECK(e1->cancelled(7, 0));
    REQUIRE(e2->added.size() == 1);
    CHECK(e2->added[0].request.attempt == 1);
    CHECK(e2->added[0].request.generated == std::vector<TokenId>{3, 4});
  }

  SECTION("a different token where the user has one") {
    f.stream(*e1, 0, {chunk_of(7, 0, 1, {9})});
    CHECK(f.user_log->tokens() == std::vector<TokenId>{3, 4});
    CHECK(e1->cancelled(7, 0));
    REQUIRE(e2->added.size() == 1);
  }
}

TEST_CASE("an engine slow to admit is given up on and cancelled; its late answer and chunks are "
          "dropped") {
  RequestFixture f;
  auto slow = f.add_engine();
  slow->answer = EngineScript::Answer::Hold;
  auto fast = f.add_engine();
  f.start(RequestFixture::make_request());
  REQUIRE(slow->added.size() == 1);
  REQUIRE(fast->added.empty());

  f.run_for(f.options.admission_timeout + 1ms);
  CHECK(slow->cancelled(7, 0));
  REQUIRE(fast->added.size() == 1);
  CHECK(fast->added[0].request.attempt == 1);
  // The coordinator was asked to avoid the slow engine.
  REQUIRE(f.routes->avoided.size() == 2);
  CHECK(f.routes->avoided[1] == f.engines[0]);

  // The slow engine admits after all and streams: nothing of it reaches the
  // user, and it is told again to stop.
  release(f.engines[0], 0);
  f.sched.run();
  const std::size_t cancels = slow->cancels.size();
  f.stream(*slow, 0, {chunk_of(7, 0, 0, {20}), chunk_of(7, 0, 1, {21})});
  CHECK(f.user_log->chunks.empty());
  CHECK(slow->cancels.size() > cancels);

  f.stream(*fast, 0, {chunk_of(7, 1, 0, {3}), chunk_of(7, 1, 1, {4}, FinishReason::Stop)});
  CHECK(f.user_log->tokens() == std::vector<TokenId>{3, 4});
  CHECK(f.user_log->errors.empty());
}

TEST_CASE("after a failover, the old engine's chunks are dropped and the new attempt continues "
          "where the user is") {
  RequestFixture f;
  auto e1 = f.add_engine();
  auto e2 = f.add_engine();
  GenerateRequest r = RequestFixture::make_request();
  r.params.seed.reset();
  f.start(r);
  REQUIRE(e1->added.size() == 1);
  // The request actor drew the seed: engines never see an unseeded request.
  const auto seed = e1->added[0].request.params.seed;
  REQUIRE(seed.has_value());
  f.stream(*e1, 0, {chunk_of(7, 0, 0, {3})});

  f.error(*e1, 0, InferenceErrorCode::engine_fault);
  REQUIRE(e2->added.size() == 1);
  const GenerateRequest& resumed = e2->added[0].request;
  CHECK(resumed.attempt == 1);
  CHECK(resumed.generated == std::vector<TokenId>{3});
  CHECK(resumed.params.seed == seed);
  // The engine ended that attempt itself: no cancel needed.
  CHECK_FALSE(e1->cancelled(7, 0));

  // A worker that finishes its step late: its tokens are stale.
  f.stream(*e1, 0, {chunk_of(7, 0, 1, {30})});
  f.stream(*e2, 0, {chunk_of(7, 1, 1, {4}), chunk_of(7, 1, 2, {5}, FinishReason::Length)});
  CHECK(f.user_log->tokens() == std::vector<TokenId>{3, 4, 5});
  CHECK(f.user_log->errors.empty());
}

namespace {

/// Starts a request on the first of two engines, which then ends it with
/// `code`; returns the second engine's script and what the user got.
std::pair<std::shared_ptr<EngineScript>, std::shared_ptr<SinkLog>>
first_engine_fails(InferenceErrorCode code) {
  RequestFixture f;
  auto a = f.add_engine();
  auto b = f.add_engine();
  f.start(RequestFixture::make_request());
  f.error(*a, 0, code);
  f.run_for(f.options.max_backoff);
  return {b, f.user_log};
}

} // namespace

TEST_CASE("engine faults and lost engines are retried elsewhere") {
  for (InferenceErrorCode code :
       {InferenceErrorCode::engine_fault, InferenceErrorCode::engine_unavailable}) {
    INFO(to_string(code));
    auto [other, user] = first_engine_fails(code);
    CHECK(user->errors.empty());
    REQUIRE(other->added.size() == 1);
    CHECK(other->added[0].request.attempt == 1);
  }
}

TEST_CASE("a request's own faults and cancellations are final") {
  for (InferenceErrorCode code :
       {InferenceErrorCode::bad_request, InferenceErrorCode::context_length_exceeded,
        InferenceErrorCode::internal, InferenceErrorCode::cancelled}) {
    INFO(to_string(code));
    auto [other, user] = first_engine_fails(code);
    REQUIRE(user->errors.size() == 1);
    CHECK(user->errors[0].code == code);
    CHECK(user->errors[0].request_id == 7);
    CHECK(other->added.empty());
  }
}

TEST_CASE("a refusal at admission is retried or final by the same rule") {
  RequestFixture f;
  auto a = f.add_engine();
  a->answer = EngineScript::Answer::Refuse;
  SECTION("final") {
    a->refusal = InferenceErrorCode::context_length_exceeded;
    f.start(RequestFixture::make_request());
    REQUIRE(f.user_log->errors.size() == 1);
    CHECK(f.user_log->errors[0].code == InferenceErrorCode::context_length_exceeded);
  }
  SECTION("retried") {
    a->refusal = InferenceErrorCode::engine_fault;
    auto b = f.add_engine();
    f.start(RequestFixture::make_request());
    f.run_for(f.options.max_backoff);
    CHECK(f.user_log->errors.empty());
    REQUIRE(b->added.size() == 1);
  }
}

TEST_CASE("backpressure from a healthy engine waits and retries for as long as it takes") {
  RequestFixture f;
  auto e = f.add_engine();
  e->answer = EngineScript::Answer::Refuse;
  e->refusal = InferenceErrorCode::backpressure;
  f.start(RequestFixture::make_request());
  // Ten times the unavailable deadline of refusals: the request waits.
  for (int i = 0; i < 200; ++i)
    f.run_for(f.options.max_backoff);
  CHECK(f.user_log->errors.empty());
  CHECK(e->added.size() > 100);
  // Every attempt is a new one: none collides with an earlier one.
  CHECK(e->added.back().request.attempt == e->added.size() - 1);
  e->answer = EngineScript::Answer::Accept;
  f.run_for(f.options.max_backoff);
  const GenerateRequest& admitted = e->added.back().request;
  f.stream(*e, e->added.size() - 1, {chunk_of(7, admitted.attempt, 0, {1}, FinishReason::Length)});
  CHECK(f.user_log->tokens() == std::vector<TokenId>{1});
  CHECK(f.user_log->errors.empty());
}

TEST_CASE("with max_backpressure_refusals, backpressure from every engine fails a request not "
          "yet admitted, but never one that streamed") {
  RequestFixture f;
  f.options.max_backpressure_refusals = 2;
  auto a = f.add_engine();
  auto b = f.add_engine();
  for (auto& e : {a, b}) {
    e->answer = EngineScript::Answer::Refuse;
    e->refusal = InferenceErrorCode::backpressure;
  }
  f.start(RequestFixture::make_request());
  f.run_for(f.options.max_backoff);
  // Both engines were asked once (the refused one is avoided next), then
  // the backpressure reaches the user, to become an HTTP 429.
  CHECK(a->added.size() == 1);
  CHECK(b->added.size() == 1);
  REQUIRE(f.user_log->errors.size() == 1);
  CHECK(f.user_log->errors[0].code == InferenceErrorCode::backpressure);

  // A request that streamed from an engine that then died waits for room
  // however long: nothing it produced is given up for a full queue.
  RequestFixture g;
  g.options.max_backpressure_refusals = 1;
  auto first = g.add_engine();
  auto full = g.add_engine();
  full->answer = EngineScript::Answer::Refuse;
  full->refusal = InferenceErrorCode::backpressure;
  g.start(RequestFixture::make_request());
  g.stream(*first, 0, {chunk_of(7, 0, 0, {1, 2})});
  first->answer = EngineScript::Answer::Refuse;
  first->refusal = InferenceErrorCode::backpressure;
  g.error(*first, 0, InferenceErrorCode::engine_fault);
  for (int i = 0; i < 20; ++i)
    g.run_for(g.options.max_backoff);
  CHECK(g.user_log->errors.empty());
  CHECK(full->added.size() + first->added.size() > 5);
  CHECK(g.user_log->tokens() == std::vector<TokenId>{1, 2});
}

TEST_CASE("with no engine to take it, a request fails after the unavailable deadline") {
  RequestFixture f;
  f.start(RequestFixture::make_request());
  f.run_for(f.options.unavailable_deadline / 2);
  CHECK(f.user_log->errors.empty());
  for (int i = 0; i < 40; ++i)
    f.run_for(f.options.max_backoff);
  REQUIRE(f.user_log->errors.size() == 1);
  CHECK(f.user_log->errors[0].code == InferenceErrorCode::engine_unavailable);
  CHECK(f.user_log->errors[0].message.find("no engine is registered") != std::string::npos);
}

TEST_CASE("the request's deadline ends it and cancels it where it runs") {
  RequestFixture f;
  f.options.deadline = 5000ms;
  auto e = f.add_engine();
  f.start(RequestFixture::make_request());
  f.stream(*e, 0, {chunk_of(7, 0, 0, {3})});
  f.run_for(4000ms);
  CHECK(f.user_log->errors.empty());
  f.run_for(1001ms);
  REQUIRE(f.user_log->errors.size() == 1);
  CHECK(f.user_log->errors[0].code == InferenceErrorCode::deadline_exceeded);
  CHECK(e->cancelled(7, 0));
}

TEST_CASE("a cancel from the user, or the user's sink going down, cancels the engine's attempt") {
  RequestFixture f;
  auto e = f.add_engine();
  f.start(RequestFixture::make_request());
  SECTION("cancel") {
    caf::anon_send(f.request, cancel_atom::value);
    f.sched.run();
    REQUIRE(f.user_log->errors.size() == 1);
    CHECK(f.user_log->errors[0].code == InferenceErrorCode::cancelled);
  }
  SECTION("the sink goes down") {
    caf::anon_send_exit(f.user, caf::exit_reason::kill);
    f.sched.run();
  }
  REQUIRE(e->cancels.size() == 1);
  CHECK(e->cancels[0].id == 7);
  CHECK(e->cancels[0].attempt == 0);
  CHECK(e->cancels[0].sink == e->added[0].sink);
}

TEST_CASE("a request that fails on engine after engine stops after max_failovers") {
  RequestFixture f;
  f.options.max_failovers = 3;
  auto e = f.add_engine();
  f.start(RequestFixture::make_request());
  for (std::size_t i = 0; i < 4; ++i) {
    REQUIRE(e->added.size() == i + 1);
    f.error(*e, i, InferenceErrorCode::engine_fault);
  }
  REQUIRE(f.user_log->errors.size() == 1);
  CHECK(f.user_log->errors[0].code == InferenceErrorCode::engine_fault);
  CHECK(e->added.size() == 4);
}

TEST_CASE("a request that ended leaves no monitor on its engine or its user") {
  // A monitor outlives the actor that set it: one left on a long-lived
  // engine or user sink holds a weak reference, and with it the ended
  // request actor's memory, for as long as that actor lives (a serving
  // process grew by about 1.8 KB a request).
  RequestFixture f;
  auto e = f.add_engine();
  f.start(RequestFixture::make_request(7));
  auto* block = caf::actor_cast<caf::actor_control_block*>(f.request);
  // While it runs: the reference its strong ones share, and one weak one
  // from each of its monitors, on the engine and on the user.
  const std::size_t running_weak_refs = block->weak_refs.load();
  CHECK(running_weak_refs >= 3);
  SECTION("it finished") {
    f.stream(*e, 0, {chunk_of(7, 0, 0, {3}, FinishReason::Length)});
    REQUIRE(f.user_log->tokens() == std::vector<TokenId>{3});
  }
  SECTION("it failed") {
    f.error(*e, 0, InferenceErrorCode::bad_request);
    REQUIRE(f.user_log->errors.size() == 1);
  }
  SECTION("it was cancelled") {
    caf::anon_send(f.request, cancel_atom::value);
    f.sched.run();
    REQUIRE(f.user_log->errors.size() == 1);
  }
  CHECK(block->weak_refs.load() == running_weak_refs - 2);
}

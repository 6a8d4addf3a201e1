// EngineCoreActor on CAF's deterministic scheduler, with a stand-in worker
// the test controls: admission (priority, then arrival), backpressure at
// exactly the queue's capacity and before any tokenizing, at most
// max_concurrent requests in the worker, cancellation, the LoadReport
// (answered while prompts are tokenized), refusals of bad requests,
// request identity (sink, id, attempt), and waiting requests whose sink
// dies. test_worker.cpp runs the real worker.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "caflm/actors/engine_core_actor.hpp"
#include "caflm/messages/type_registry.hpp"
#include "tests/support/scripted_actors.hpp"

using namespace caflm;
using caflm::testing::deterministic;
using caflm::testing::fake_config;
using caflm::testing::make_fake_engine;
using caflm::testing::make_request;
using caflm::testing::recording_sink;
using caflm::testing::SinkLog;

namespace {

/// What the stand-in worker was handed, by the requests' own ids (every
/// request of these tests has a distinct id).
struct WorkerLog {
  /// The core, so the test can report `done` as the real worker does.
  engine_core_internal_actor core;
  /// Request ids in the order the worker received them.
  std::vector<std::uint64_t> added;
  /// The engine's id for each request, and each added request's sink.
  std::map<std::uint64_t, std::uint64_t> engine_ids;
  std::map<std::uint64_t, token_sink> sinks;
  /// Added and not yet reported done.
  std::set<std::uint64_t> running;
  std::vector<std::uint64_t> cancelled;
  /// Everything received, by the engine's ids: for requests of one id from
  /// several sinks.
  struct Received {
    std::uint64_t engine_id;
    GenerateRequest request;
    token_sink sink;
  };
  std::vector<Received> received;
  std::vector<std::uint64_t> cancelled_engine_ids;
};

worker_actor::behavior_type stand_in_worker(worker_actor::pointer, std::shared_ptr<WorkerLog> log) {
  return {
      [log](add_atom, std::uint64_t engine_id, const GenerateRequest& request,
            const token_sink& sink, std::int64_t) {
        log->added.push_back(request.id);
        log->received.push_back({engine_id, request, sink});
        log->engine_ids[request.id] = engine_id;
        log->sinks[request.id] = sink;
        log->running.insert(request.id);
      },
      [log](cancel_atom, std::uint64_t engine_id) {
        log->cancelled_engine_ids.push_back(engine_id);
        for (const auto& [id, engine] : log->engine_ids)
          if (engine == engine_id)
            log->cancelled.push_back(id);
      },
      [](step_atom) {},
  };
}

/// The KV state of an idle engine, as the worker reports it.
LoadReport idle_kv() {
  LoadReport kv;
  kv.free_blocks = kv.total_blocks = fake_config().kv_blocks;
  return kv;
}

/// An engine core whose worker is a stand-in, on the testing scheduler.
struct CoreFixture {
  explicit CoreFixture(EngineLimits limits, EngineConfig config = fake_config())
    : sys(init(cfg))
    , sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler()))
    , worker(std::make_shared<WorkerLog>())
    , engine(make_fake_engine(config)) {
    auto log = worker;
    core = spawn_engine_core(sys, engine, limits,
                             [log](caf::actor_system& system, std::shared_ptr<InferenceEngine>,
                                   engine_core_internal_actor owner) {
                               log->core = std::move(owner);
                               return system.spawn(stand_in_worker, log);
                             });
    sched.run();
  }

  ~CoreFixture() {
    // The worker is linked to the core and goes down with it.
    caf::anon_send_exit(core, caf::exit_reason::user_shutdown);
    for (auto& sink : sinks)
      caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
    sched.run();
  }

  static caf::actor_system_config& init(caf::actor_system_config& c) {
    add_message_types(c);
    return deterministic(c);
  }

  /// Runs every job but the tokenizer's: prompts it was handed stay
  /// untokenized until the test runs everything.
  void run_without_tokenizer() {
    for (;;) {
      auto next = std::find_if(sched.jobs.begin(), sched.jobs.end(), [](caf::resumable* job) {
        auto* actor = dynamic_cast<caf::local_actor*>(job);
        return actor == nullptr || std::string(actor->name()) != "caflm.tokenizer";
      });
      if (next == sched.jobs.end())
        return;
      caf::resumable* job = *next;
      sched.jobs.erase(next);
      sched.jobs.push_front(job);
      sched.run_once();
    }
  }

  /// A fresh recording sink for request `id`.
  token_sink new_sink(std::uint64_t id) {
    auto log = std::make_shared<SinkLog>();
    auto sink = sys.spawn(recording_sink, log);
    sinks.push_back(sink);
    sink_logs[id] = log;
    sink_of[id] = sink;
    return sink;
  }

  /// Sends `request` to the core from a new actor, without running the
  /// scheduler; the admission appears once the test runs it.
  std::shared_ptr<std::optional<Admission>> send_add(GenerateRequest request, token_sink sink) {
    auto admission = std::make_shared<std::optional<Admission>>();
    sys.spawn([=, core = core](caf::event_based_actor* self) {
      self->request(core, caf::infinite, add_atom::value, request, sink)
          .then([admission](const Admission& answer) { *admission = answer; });
    });
    return admission;
  }

  /// Submits `request` with a fresh recording sink (or `sink`); returns the
  /// admission.
  Admission add(GenerateRequest request, token_sink sink = {}) {
    if (!sink)
      sink = new_sink(request.id);
    auto admission = send_add(std::move(request), std::move(sink));
    sched.run();
    REQUIRE(admission->has_value());
    return **admission;
  }

  LoadReport load(bool run_tokenizer = true) {
    auto report = std::make_shared<std::optional<LoadReport>>();
    sys.spawn([=, core = core](caf::event_based_actor* self) {
      self->request(core, caf::infinite, get_load_atom::value)
          .then([report](const LoadReport& answer) { *report = answer; });
    });
    if (run_tokenizer)
      sched.run();
    else
      run_without_tokenizer();
    REQUIRE(report->has_value());
    return **report;
  }

  /// Cancels request `id` (attempt 0) as its sink names it.
  void cancel(std::uint64_t id, std::uint32_t attempt = 0) {
    caf::anon_send(core, cancel_atom::value, sink_of[id], id, attempt);
    sched.run();
  }

  /// Reports `ids` finished, as the worker does after their last chunk.
  void finish(std::vector<std::uint64_t> ids, LoadReport kv = idle_kv()) {
    std::vector<std::uint64_t> engine_ids;
    for (std::uint64_t id : ids) {
      worker->running.erase(id);
      engine_ids.push_back(worker->engine_ids.at(id));
    }
    caf::anon_send(worker->core, done_atom::value, std::move(engine_ids), kv);
    sched.run();
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
  std::shared_ptr<WorkerLog> worker;
  std::shared_ptr<InferenceEngine> engine;
  engine_core_actor core;
  std::vector<token_sink> sinks;
  std::map<std::uint64_t, std::shared_ptr<SinkLog>> sink_logs;
  std::map<std::uint64_t, token_sink> sink_of;
};

} // namespace

TEST_CASE("the worker receives requests by priority, then in arrival order") {
  CoreFixture f{EngineLimits{1, 16}};
  REQUIRE(f.add(make_request(1, 0)).accepted); // straight to the idle worker
  const std::vector<std::pair<std::uint64_t, std::int32_t>> queued = {
      {2, 0}, {3, 5}, {4, 0}, {5, 5}, {6, -1}, {7, 1}, {8, 0}};
  for (auto [id, priority] : queued)
    REQUIRE(f.add(make_request(id, priority)).accepted);
  CHECK(f.worker->added == std::vector<std::uint64_t>{1});
  for (std::uint64_t id = 1; id <= 8; ++id) {
    REQUIRE(f.worker->running.size() == 1);
    f.finish({*f.worker->running.begin()});
  }
  CHECK(f.worker->added == std::vector<std::uint64_t>{1, 3, 5, 7, 2, 4, 8, 6});
}

TEST_CASE("backpressure starts at exactly the queue's capacity") {
  const EngineLimits limits{2, 3};
  CoreFixture f{limits};
  std::uint64_t id = 1;
  // max_concurrent go to the worker, queue_capacity wait.
  for (; id <= limits.max_concurrent + limits.queue_capacity; ++id) {
    Admission admission = f.add(make_request(id));
    INFO("request " << id);
    CHECK(admission.accepted);
    CHECK(admission.request_id == id);
  }
  CHECK(f.worker->added == std::vector<std::uint64_t>{1, 2});
  LoadReport load = f.load();
  CHECK(load.running == 2);
  CHECK(load.waiting == 3);

  Admission refused = f.add(make_request(id));
  CHECK_FALSE(refused.accepted);
  CHECK(refused.request_id == id);
  CHECK(refused.error.code == InferenceErrorCode::backpressure);
  CHECK(refused.error.request_id == id);
  CHECK_FALSE(refused.error.message.empty());
  CHECK(f.load().waiting == 3);

  // One finishes: the oldest waiting request moves up and one more fits.
  f.finish({1});
  CHECK(f.worker->added == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(f.add(make_request(++id)).accepted);
  CHECK(f.add(make_request(++id)).error.code == InferenceErrorCode::backpressure);

  // Refused requests never reach the worker.
  while (!f.worker->running.empty())
    f.finish({*f.worker->running.begin()});
  CHECK(f.worker->added == std::vector<std::uint64_t>{1, 2, 3, 4, 5, 7});
}

TEST_CASE("never more than max_concurrent requests are in the worker") {
  const EngineLimits limits{3, 1000};
  CoreFixture f{limits};
  std::mt19937 rng(11);
  std::uint64_t next_id = 1;
  std::size_t queued = 0;
  for (int op = 0; op < 400; ++op) {
    const bool add = f.worker->running.empty() || rng() % 5 < 3;
    if (add) {
      REQUIRE(f.add(make_request(next_id++, static_cast<std::int32_t>(rng() % 3))).accepted);
      ++queued;
    } else {
      auto it = f.worker->running.begin();
      std::advance(it, rng() % f.worker->running.size());
      f.finish({*it});
    }
    const std::size_t in_worker = f.worker->running.size();
    const std::size_t waiting = next_id - 1 - f.worker->added.size();
    INFO("operation " << op);
    REQUIRE(in_worker <= limits.max_concurrent);
    // The core keeps the worker busy whenever requests wait.
    REQUIRE((waiting == 0 || in_worker == limits.max_concurrent));
    LoadReport load = f.load();
    REQUIRE(load.running == in_worker);
    REQUIRE(load.waiting == waiting);
  }
  while (!f.worker->running.empty())
    f.finish({*f.worker->running.begin()});
  // Every request reached the worker exactly once.
  std::vector<std::uint64_t> added = f.worker->added;
  std::sort(added.begin(), added.end());
  CHECK(added.size() == queued);
  CHECK(std::adjacent_find(added.begin(), added.end()) == added.end());
  CHECK(f.load().running == 0);
}

TEST_CASE("cancel: a waiting request ends at once, a running one is cancelled by the worker") {
  CoreFixture f{EngineLimits{1, 4}};
  REQUIRE(f.add(make_request(1)).accepted);
  REQUIRE(f.add(make_request(2)).accepted);
  REQUIRE(f.add(make_request(3)).accepted);

  SECTION("a waiting request") {
    f.cancel(2);
    const auto& errors = f.sink_logs[2]->errors;
    REQUIRE(errors.size() == 1);
    CHECK(errors[0].request_id == 2);
    CHECK(errors[0].code == InferenceErrorCode::cancelled);
    CHECK(f.worker->cancelled.empty());
    CHECK(f.load().waiting == 1);
    // It never reaches the worker; the one behind it does.
    f.finish({1});
    CHECK(f.worker->added == std::vector<std::uint64_t>{1, 3});
  }

  SECTION("a running request") {
    f.cancel(1);
    CHECK(f.worker->cancelled == std::vector<std::uint64_t>{1});
    CHECK(f.sink_logs[1]->errors.empty()); // the worker ends its stream
    // It counts until the worker reports its end.
    CHECK(f.load().running == 1);
    CHECK(f.worker->added == std::vector<std::uint64_t>{1});
    f.finish({1});
    CHECK(f.worker->added == std::vector<std::uint64_t>{1, 2});
  }

  SECTION("an unknown request is ignored") {
    f.cancel(99);
    CHECK(f.worker->cancelled.empty());
    for (std::uint64_t id : {1, 2, 3})
      CHECK(f.sink_logs[id]->errors.empty());
    LoadReport load = f.load();
    CHECK(load.running == 1);
    CHECK(load.waiting == 2);
  }
}

TEST_CASE("the load report counts running and waiting requests and the worker's KV state") {
  CoreFixture f{EngineLimits{2, 10}};
  LoadReport idle = f.load();
  CHECK(idle.running == 0);
  CHECK(idle.waiting == 0);
  CHECK(idle.score == 0.0);
  CHECK(idle.total_blocks == fake_config().kv_blocks);
  CHECK(idle.free_blocks == idle.total_blocks);

  for (std::uint64_t id = 1; id <= 5; ++id)
    REQUIRE(f.add(make_request(id)).accepted);
  LoadReport busy = f.load();
  CHECK(busy.running == 2);
  CHECK(busy.waiting == 3);
  CHECK(busy.score == 4.0 * 3 + 2);

  LoadReport kv = idle_kv();
  kv.free_blocks = 37;
  kv.prefix_hit_rate = 0.25;
  f.finish({1}, kv);
  LoadReport after = f.load();
  CHECK(after.running == 2);
  CHECK(after.waiting == 2);
  CHECK(after.score == 4.0 * 2 + 2);
  CHECK(after.free_blocks == 37);
  CHECK(after.total_blocks == fake_config().kv_blocks);
  CHECK(after.prefix_hit_rate == 0.25);
}

TEST_CASE("bad requests are refused with a reason and the engine keeps serving") {
  CoreFixture f{EngineLimits{4, 8}};
  const std::uint32_t vocab = static_cast<std::uint32_t>(f.engine->tokenizer().vocabulary().size());

  auto request = make_request(10);
  auto code = InferenceErrorCode::bad_request;
  SECTION("empty prompt") {
    request.prompt.clear();
  }
  SECTION("zero max_tokens") {
    request.params.max_tokens = 0;
  }
  SECTION("negative temperature") {
    request.params.temperature = -1.0f;
  }
  SECTION("NaN temperature") {
    request.params.temperature = std::nanf("");
  }
  SECTION("top_p of 0") {
    request.params.top_p = 0.0f;
  }
  SECTION("top_logprobs of 100") {
    request.params.top_logprobs = 100;
  }
  SECTION("a token outside the vocabulary") {
    request.prompt_tokens = {1, vocab, 2};
  }
  SECTION("nothing left to generate") {
    request.params.max_tokens = 2;
    request.generated = {5, 6};
  }
  SECTION("prompt longer than the context") {
    request.prompt_tokens.assign(fake_config().scheduler.max_context + 1, 65);
    code = InferenceErrorCode::context_length_exceeded;
  }
  SECTION("prompt as long as the context, leaving no room for a reply") {
    request.prompt_tokens.assign(fake_config().scheduler.max_context, 65);
    code = InferenceErrorCode::context_length_exceeded;
  }
  token_sink sink = f.new_sink(10);
  SECTION("an id and attempt already in use by the same sink") {
    REQUIRE(f.add(make_request(10), sink).accepted);
    f.worker->added.clear();
  }

  Admission refused = f.add(request, sink);
  CHECK_FALSE(refused.accepted);
  CHECK(refused.request_id == 10);
  CHECK(refused.error.request_id == 10);
  CHECK(refused.error.code == code);
  INFO(refused.error.message);
  CHECK_FALSE(refused.error.message.empty());
  CHECK(f.worker->added.empty());

  // A cancel of an id the engine never took is harmless too.
  f.cancel(12345);
  CHECK(f.worker->cancelled.empty());

  Admission good = f.add(make_request(11));
  CHECK(good.accepted);
  CHECK(f.worker->added == std::vector<std::uint64_t>{11});
}

TEST_CASE("two clients may use the same request id: each is a request of its own") {
  CoreFixture f{EngineLimits{4, 8}};
  token_sink a = f.new_sink(100);
  token_sink b = f.new_sink(101);
  REQUIRE(f.add(make_request(1), a).accepted);
  REQUIRE(f.add(make_request(1), b).accepted);
  const auto& received = f.worker->received;
  REQUIRE(received.size() == 2);
  CHECK(received[0].sink == a);
  CHECK(received[1].sink == b);
  CHECK(received[0].engine_id != received[1].engine_id);
  CHECK(received[0].request.id == 1);
  CHECK(received[1].request.id == 1);

  // A cancel names the sink: b's request is untouched.
  caf::anon_send(f.core, cancel_atom::value, a, std::uint64_t{1}, std::uint32_t{0});
  f.sched.run();
  CHECK(f.worker->cancelled_engine_ids == std::vector<std::uint64_t>{received[0].engine_id});
  // A cancel from a careless or hostile client, with no sink, changes nothing.
  caf::anon_send(f.core, cancel_atom::value, token_sink{}, std::uint64_t{1}, std::uint32_t{0});
  f.sched.run();
  CHECK(f.worker->cancelled_engine_ids.size() == 1);
}

TEST_CASE("a resubmission is a new attempt: accepted while the old one is still in the engine") {
  // A stopped worker wakes up (SIGCONT) holding attempt 0 of a request whose
  // client already moved on and comes back with attempt 1.
  CoreFixture f{EngineLimits{4, 8}};
  token_sink sink = f.new_sink(5);
  GenerateRequest first = make_request(5);
  REQUIRE(f.add(first, sink).accepted);
  GenerateRequest again = first;
  again.attempt = 1;
  again.generated = {65, 66};
  CHECK(f.add(again, sink).accepted);
  REQUIRE(f.worker->received.size() == 2);
  CHECK(f.worker->received[1].request.attempt == 1);
  // The very same attempt twice is a client's bug, refused with a reason.
  Admission twice = f.add(first, sink);
  CHECK_FALSE(twice.accepted);
  CHECK(twice.error.code == InferenceErrorCode::bad_request);
  CHECK(twice.error.attempt == 0);
}

TEST_CASE("prompts wait for the tokenizer outside the core: the load is answered, a full queue "
          "refuses at once") {
  CoreFixture f{EngineLimits{1, 2}};
  GenerateRequest running = make_request(1);
  running.prompt_tokens = {65, 66, 67};
  REQUIRE(f.add(running).accepted);
  // Two text prompts fill the queue while they wait to be tokenized.
  auto second = f.send_add(make_request(2), f.new_sink(2));
  auto third = f.send_add(make_request(3), f.new_sink(3));
  f.run_without_tokenizer();
  CHECK_FALSE(second->has_value());
  CHECK_FALSE(third->has_value());

  LoadReport load = f.load(false);
  CHECK(load.running == 1);
  CHECK(load.waiting == 2);

  // A third is refused before anything is tokenized.
  auto fourth = f.send_add(make_request(4), f.new_sink(4));
  f.run_without_tokenizer();
  REQUIRE(fourth->has_value());
  CHECK((*fourth)->error.code == InferenceErrorCode::backpressure);

  // One is cancelled while it waits; the other is admitted once tokenized.
  f.cancel(2);
  f.sched.run();
  REQUIRE(second->has_value());
  CHECK_FALSE((*second)->accepted);
  CHECK((*second)->error.code == InferenceErrorCode::cancelled);
  REQUIRE(third->has_value());
  CHECK((*third)->accepted);
  f.finish({1});
  CHECK(f.worker->added == std::vector<std::uint64_t>{1, 3});
  CHECK_FALSE(f.worker->received.back().request.prompt_tokens.empty());
}

TEST_CASE("a waiting request whose sink dies leaves the queue at once") {
  CoreFixture f{EngineLimits{1, 2}};
  REQUIRE(f.add(make_request(1)).accepted);
  REQUIRE(f.add(make_request(2)).accepted);
  REQUIRE(f.add(make_request(3)).accepted);
  CHECK(f.load().waiting == 2);
  caf::anon_send_exit(f.sink_of[2], caf::exit_reason::kill);
  f.sched.run();
  // Its place in the queue is free at once, not when the worker reaches it.
  CHECK(f.load().waiting == 1);
  CHECK(f.add(make_request(4)).accepted);
  f.finish({1});
  f.finish({3});
  CHECK(f.worker->added == std::vector<std::uint64_t>{1, 3, 4});
}

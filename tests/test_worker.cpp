// The real worker behind an engine core, on the threaded scheduler over fake
// backends: a request streams as the engine makes it, a cancel frees its KV
// blocks at once, a failed step ends its requests with engine_fault (which
// the request actor retries elsewhere) and the engine serves on, and NaN
// logits end a request with a final error that says so.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include <caf/all.hpp>

#include "caflm/actors/engine_core_actor.hpp"
#include "caflm/messages/type_registry.hpp"
#include "tests/support/actor_harness.hpp"

using namespace caflm;
using caflm::testing::fake_config;
using caflm::testing::make_fake_engine;
using caflm::testing::make_request;
using caflm::testing::test_tokenizer;

namespace {

struct ThreadedFixture {
  ThreadedFixture()
    : sys(init(cfg))
    , self(sys) {}

  ~ThreadedFixture() {
    for (auto& core : cores)
      self->send_exit(core, caf::exit_reason::user_shutdown);
  }

  static caf::actor_system_config& init(caf::actor_system_config& c) {
    add_message_types(c);
    c.set("logger.file-verbosity", caf::atom("quiet"));
    return c;
  }

  engine_core_actor spawn(std::shared_ptr<InferenceEngine> engine, EngineLimits limits) {
    cores.push_back(spawn_engine_core(sys, std::move(engine), limits));
    return cores.back();
  }

  token_sink as_sink() { return caf::actor_cast<token_sink>(self); }

  Admission add(const engine_core_actor& core, GenerateRequest request) {
    Admission admission;
    std::string failure;
    self->request(core, caf::infinite, add_atom::value, std::move(request), as_sink())
        .receive([&](const Admission& answer) { admission = answer; },
                 [&](const caf::error& error) { failure = sys.render(error); });
    REQUIRE(failure.empty());
    return admission;
  }

  LoadReport load(const engine_core_actor& core) {
    LoadReport report;
    std::string failure;
    self->request(core, caf::infinite, get_load_atom::value)
        .receive([&](const LoadReport& answer) { report = answer; },
                 [&](const caf::error& error) { failure = sys.render(error); });
    REQUIRE(failure.empty());
    return report;
  }

  /// Asks for the load until `done` holds (the worker's reports reach the
  /// core on their own schedule); fails after a generous deadline.
  template <class Predicate>
  LoadReport await_load(const engine_core_actor& core, Predicate done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    LoadReport report = load(core);
    while (!done(report) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      report = load(core);
    }
    return report;
  }

  /// Receives chunks for this sink until one ends a request or an error
  /// arrives; nothing for 30 s fails the test.
  std::vector<TokenChunk> receive_until_end(std::optional<InferenceError>& error) {
    std::vector<TokenChunk> chunks;
    bool finished = false;
    bool silent = false;
    while (!finished && !error && !silent) {
      self->receive(
          [&](const TokenBatch& batch) {
            for (const TokenChunk& chunk : batch.chunks) {
              chunks.push_back(chunk);
              finished = finished || chunk.finish != FinishReason::None;
            }
          },
          [&](const InferenceError& e) { error = e; },
          caf::after(std::chrono::seconds(30)) >> [&] { silent = true; });
    }
    REQUIRE_FALSE(silent);
    return chunks;
  }

  /// Adds `request` to `core` and receives until its end.
  std::vector<TokenChunk> run_to_end(const engine_core_actor& core, const GenerateRequest& request,
                                     std::optional<InferenceError>& error) {
    REQUIRE(add(core, request).accepted);
    return receive_until_end(error);
  }

  /// As above, where an error fails the test.
  std::vector<TokenChunk> receive_until_finish() {
    std::optional<InferenceError> error;
    std::vector<TokenChunk> chunks = receive_until_end(error);
    INFO((error ? error->message : std::string()));
    REQUIRE_FALSE(error);
    return chunks;
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  std::vector<engine_core_actor> cores;
};

/// `request` on a fake engine driven directly, step by step: its events,
/// and in `prompt` its tokens.
std::vector<TokenEvent> run_directly(const EngineConfig& config, const GenerateRequest& request,
                                     std::vector<TokenId>& prompt) {
  auto direct = make_fake_engine(config);
  const Tokenizer& tokenizer = direct->tokenizer();
  GenerationRequest generation{request.id,
                               tokenizer.encode(request.prompt, tokenizer.vocabulary().add_bos()),
                               request.params,
                               {}};
  prompt = generation.prompt;
  REQUIRE_FALSE(direct->add(generation));
  std::vector<TokenEvent> events;
  while (direct->has_work())
    for (TokenEvent& event : direct->step())
      events.push_back(std::move(event));
  return events;
}

/// Limits under which the worker sends each step's tokens at once.
EngineLimits per_step_limits() {
  EngineLimits limits{4, 8};
  limits.token_flush_interval = std::chrono::microseconds(0);
  return limits;
}

} // namespace

TEST_CASE("a request streams through the core and the real worker as the engine makes it") {
  const EngineConfig config = fake_config();
  auto request = make_request(1);
  request.params.max_tokens = 12;
  request.params.ignore_eos = true;

  // The same request on an engine driven directly.
  std::vector<TokenId> prompt;
  const std::vector<TokenEvent> expected = run_directly(config, request, prompt);
  REQUIRE(expected.size() == 12);

  ThreadedFixture f;
  auto core = f.spawn(make_fake_engine(config), per_step_limits());
  REQUIRE(f.add(core, request).accepted);
  const std::vector<TokenChunk> chunks = f.receive_until_finish();

  REQUIRE(chunks.size() == expected.size());
  CHECK(chunks.front().prompt_tokens == prompt);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    INFO("token " << i);
    CHECK(chunks[i].request_id == 1);
    CHECK(chunks[i].tokens == std::vector<TokenId>{expected[i].token});
    CHECK(chunks[i].text == expected[i].text);
    CHECK(chunks[i].finish == expected[i].finish);
  }
  CHECK(chunks.back().finish == FinishReason::Length);
  CHECK(chunks.back().usage.prompt_tokens == prompt.size());
  CHECK(chunks.back().usage.completion_tokens == 12);

  LoadReport idle = f.await_load(core, [](const LoadReport& r) { return r.running == 0; });
  CHECK(idle.running == 0);
  CHECK(idle.waiting == 0);
}

TEST_CASE("cancelling a running request frees its KV blocks") {
  EngineConfig config = fake_config();
  // Room for a long request; no prefix cache, which would keep its blocks.
  config.scheduler.max_context = 8192;
  config.kv_blocks = 1100;
  config.prefix_caching = false;
  // Paced at >= 1 ms a step, the request cannot end on its own for 8 s.
  auto engine = make_fake_engine(config, std::chrono::milliseconds(1));
  ThreadedFixture f;
  auto core = f.spawn(engine, EngineLimits{2, 4});
  auto request = make_request(7);
  request.params.max_tokens = 8000;
  request.params.ignore_eos = true;
  REQUIRE(f.add(core, request).accepted);

  // The worker reports KV use as the request grows.
  LoadReport busy =
      f.await_load(core, [](const LoadReport& r) { return r.free_blocks < r.total_blocks; });
  CHECK(busy.running == 1);
  CHECK(busy.total_blocks == config.kv_blocks);
  REQUIRE(busy.free_blocks < busy.total_blocks);

  f.self->send(core, cancel_atom::value, f.as_sink(), std::uint64_t{7}, std::uint32_t{0});
  const std::vector<TokenChunk> chunks = f.receive_until_finish();
  CHECK(chunks.back().request_id == 7);
  CHECK(chunks.back().finish == FinishReason::Cancelled);
  CHECK(chunks.size() < request.params.max_tokens);

  LoadReport idle = f.await_load(
      core, [](const LoadReport& r) { return r.running == 0 && r.free_blocks == r.total_blocks; });
  CHECK(idle.running == 0);
  CHECK(idle.free_blocks == idle.total_blocks);
}

namespace {

/// A fake backend that fails chosen launches, or writes NaN into the logits
/// of chosen ones. The test arms it from its own thread.
class FaultyBackend : public caflm::testing::FakeBackend {
 public:
  explicit FaultyBackend(std::uint32_t vocab)
    : FakeBackend(vocab) {}

  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override {
    const std::uint32_t launch = ++launch_count;
    if (launch == fail_launch.load())
      return BackendError::DeviceFailure;
    auto receipt = FakeBackend::execute(batch, outputs, logits);
    if (launch >= nan_from_launch.load())
      for (std::uint32_t i = 0; i < batch.item_count; ++i)
        logits[std::size_t{i} * vocab_size() + 3] = std::numeric_limits<float>::quiet_NaN();
    return receipt;
  }

  std::atomic<std::uint32_t> launch_count{0};
  std::atomic<std::uint32_t> fail_launch{0};
  std::atomic<std::uint32_t> nan_from_launch{UINT32_MAX};
};

/// Greedy, 20 tokens, never stopped early by end-of-sequence.
GenerateRequest long_request(std::uint64_t id) {
  auto request = make_request(id);
  request.params.max_tokens = 20;
  request.params.ignore_eos = true;
  return request;
}

std::shared_ptr<InferenceEngine> faulty_engine(FaultyBackend*& backend) {
  auto tokenizer = test_tokenizer();
  auto owned =
      std::make_unique<FaultyBackend>(static_cast<std::uint32_t>(tokenizer->vocabulary().size()));
  backend = owned.get();
  EngineConfig config = fake_config();
  config.prefix_caching = false; // so that every block is free once idle
  return std::make_shared<InferenceEngine>(tokenizer, std::move(owned), config, 7);
}

} // namespace

TEST_CASE("a failed step ends its requests with engine_fault and the engine serves on") {
  FaultyBackend* backend = nullptr;
  ThreadedFixture f;
  auto core = f.spawn(faulty_engine(backend), per_step_limits());
  backend->fail_launch = 4; // prefill, two decodes, then the fault
  std::optional<InferenceError> error;
  auto request = long_request(3);
  const std::vector<TokenChunk> chunks = f.run_to_end(core, request, error);
  CHECK(chunks.size() == 3);
  REQUIRE(error);
  CHECK(error->request_id == 3);
  CHECK(error->attempt == 0);
  // The engine's fault, not the request's: a request actor retries it.
  CHECK(error->code == InferenceErrorCode::engine_fault);
  CHECK(retryable(error->code));
  CHECK(error->message.find("step failed") != std::string::npos);
  CHECK(error->message.find("KV cache") == std::string::npos);

  // The next request is served in full, and everything was freed.
  request.id = 4;
  REQUIRE(f.add(core, request).accepted);
  CHECK(f.receive_until_finish().size() == 20);
  LoadReport idle = f.await_load(
      core, [](const LoadReport& r) { return r.running == 0 && r.free_blocks == r.total_blocks; });
  CHECK(idle.free_blocks == idle.total_blocks);
}

TEST_CASE("NaN logits end a request with a final error that says so, not with token 0") {
  FaultyBackend* backend = nullptr;
  ThreadedFixture f;
  auto core = f.spawn(faulty_engine(backend), per_step_limits());
  backend->nan_from_launch = 3;
  std::optional<InferenceError> error;
  const std::vector<TokenChunk> chunks = f.run_to_end(core, long_request(5), error);
  CHECK(chunks.size() == 2);
  for (const TokenChunk& chunk : chunks)
    CHECK(chunk.tokens != std::vector<TokenId>{0});
  REQUIRE(error);
  CHECK(error->code == InferenceErrorCode::internal);
  CHECK_FALSE(retryable(error->code));
  CHECK(error->message.find("NaN") != std::string::npos);
}

// The worker's token flush interval (EngineLimits::token_flush_interval):
// tokens of several steps travel as one chunk of several tokens, identical
// in content to the step-by-step stream, sent at the latest when the engine
// runs out of work; a cancel sends the unsent tokens before the last chunk.

/// Long enough that only the engine's idleness or a cancel flushes.
constexpr std::chrono::microseconds kHour{std::chrono::hours(1)};

TEST_CASE("with a flush interval a request's first token goes at once and the rest as one chunk") {
  const EngineConfig config = fake_config();
  auto request = make_request(1);
  request.params.max_tokens = 12;
  request.params.ignore_eos = true;
  request.params.top_logprobs = 2;

  // The same request on an engine driven directly, one event per step.
  std::vector<TokenId> prompt;
  const std::vector<TokenEvent> expected = run_directly(config, request, prompt);
  REQUIRE(expected.size() == 12);

  ThreadedFixture f;
  EngineLimits limits{4, 8};
  limits.token_flush_interval = kHour;
  auto core = f.spawn(make_fake_engine(config), limits);
  REQUIRE(f.add(core, request).accepted);
  std::optional<InferenceError> error;
  const std::vector<TokenChunk> chunks = f.receive_until_end(error);
  REQUIRE_FALSE(error);

  // The first token at the end of its step (the interval never delays the
  // time to first token); the rest when the engine ran out of work.
  REQUIRE(chunks.size() == 2);
  CHECK(chunks[0].first_token == 0);
  CHECK(chunks[0].prompt_tokens == prompt);
  CHECK(chunks[0].tokens.size() == 1);
  CHECK(chunks[0].finish == FinishReason::None);
  // The first event's queue time; the later chunk has none.
  CHECK(chunks[0].queue_seconds >= 0.0f);
  CHECK(chunks[1].first_token == 1);
  CHECK(chunks[1].prompt_tokens.empty());
  CHECK(chunks[1].queue_seconds < 0.0f);
  CHECK(chunks[1].finish == FinishReason::Length);
  CHECK(chunks[1].usage.prompt_tokens == prompt.size());
  CHECK(chunks[1].usage.completion_tokens == 12);
  std::size_t i = 0;
  for (const TokenChunk& chunk : chunks) {
    CHECK(chunk.request_id == 1);
    REQUIRE(chunk.logprobs.size() == chunk.tokens.size());
    REQUIRE(chunk.top_logprobs.size() == chunk.tokens.size());
    std::string text;
    for (std::size_t t = 0; t < chunk.tokens.size(); ++t, ++i) {
      INFO("token " << i);
      REQUIRE(i < expected.size());
      CHECK(chunk.tokens[t] == expected[i].token);
      CHECK(chunk.logprobs[t] == expected[i].logprob);
      REQUIRE(chunk.top_logprobs[t].size() == expected[i].top_logprobs.size());
      for (std::size_t k = 0; k < expected[i].top_logprobs.size(); ++k) {
        CHECK(chunk.top_logprobs[t][k].token == expected[i].top_logprobs[k].token);
        CHECK(chunk.top_logprobs[t][k].logprob == expected[i].top_logprobs[k].logprob);
      }
      text += expected[i].text;
    }
    CHECK(chunk.text == text);
  }
  CHECK(i == expected.size());
}

TEST_CASE("chunks carry logprobs only for a request that asked for them") {
  const EngineConfig config = fake_config();
  for (const bool asked : {false, true}) {
    INFO("logprobs " << asked);
    auto request = make_request(1);
    request.params.max_tokens = 6;
    request.params.ignore_eos = true;
    request.params.logprobs = asked;
    std::vector<TokenId> prompt;
    const std::vector<TokenEvent> expected = run_directly(config, request, prompt);
    REQUIRE(expected.size() == 6);

    ThreadedFixture f;
    auto core = f.spawn(make_fake_engine(config), EngineLimits{4, 8});
    REQUIRE(f.add(core, request).accepted);
    std::optional<InferenceError> error;
    const std::vector<TokenChunk> chunks = f.receive_until_end(error);
    REQUIRE_FALSE(error);
    std::vector<TokenId> tokens;
    std::vector<float> logprobs;
    for (const TokenChunk& chunk : chunks) {
      tokens.insert(tokens.end(), chunk.tokens.begin(), chunk.tokens.end());
      logprobs.insert(logprobs.end(), chunk.logprobs.begin(), chunk.logprobs.end());
      CHECK(chunk.top_logprobs.empty());
    }
    REQUIRE(tokens.size() == expected.size());
    REQUIRE(logprobs.size() == (asked ? expected.size() : 0));
    for (std::size_t i = 0; i < expected.size(); ++i) {
      CHECK(tokens[i] == expected[i].token);
      if (asked)
        CHECK(logprobs[i] == expected[i].logprob);
    }
  }
}

TEST_CASE("a cancel sends a request's unsent tokens before its last chunk") {
  EngineConfig config = fake_config();
  config.scheduler.max_context = 8192;
  config.kv_blocks = 1100;
  config.prefix_caching = false;
  // Paced at >= 1 ms a step, the request cannot end on its own for 8 s.
  auto engine = make_fake_engine(config, std::chrono::milliseconds(1));
  ThreadedFixture f;
  EngineLimits limits{2, 4};
  limits.token_flush_interval = kHour;
  auto core = f.spawn(engine, limits);
  auto request = make_request(7);
  request.params.max_tokens = 8000;
  request.params.ignore_eos = true;
  request.params.logprobs = true;
  REQUIRE(f.add(core, request).accepted);

  // Tokens were made, and held in the worker.
  LoadReport busy = f.await_load(core, [](const LoadReport& r) { return r.generated_tokens > 20; });
  REQUIRE(busy.generated_tokens > 20);

  f.self->send(core, cancel_atom::value, f.as_sink(), std::uint64_t{7}, std::uint32_t{0});
  std::optional<InferenceError> error;
  const std::vector<TokenChunk> chunks = f.receive_until_end(error);
  REQUIRE_FALSE(error);
  // The first token alone, then the held ones in one chunk, then the cancel.
  REQUIRE(chunks.size() >= 3);
  CHECK(chunks[0].first_token == 0);
  CHECK(chunks[0].tokens.size() == 1);
  CHECK(chunks[1].tokens.size() > 1);
  // Contiguous, each chunk's logprobs matching its tokens, then the cancel.
  std::size_t next = 0;
  for (const TokenChunk& chunk : chunks) {
    CHECK(chunk.request_id == 7);
    CHECK(chunk.first_token == next);
    CHECK(chunk.logprobs.size() == chunk.tokens.size());
    next += chunk.tokens.size();
  }
  CHECK(next < request.params.max_tokens);
  CHECK(chunks.back().tokens.empty());
  CHECK(chunks.back().finish == FinishReason::Cancelled);
}

TEST_CASE("a negative flush interval is refused") {
  EngineLimits limits;
  limits.token_flush_interval = std::chrono::microseconds(-1);
  REQUIRE(validate(limits));
  CHECK(validate(limits)->find("flush") != std::string::npos);
}

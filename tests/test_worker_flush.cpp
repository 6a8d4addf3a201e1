// The worker's token flush interval (EngineLimits::token_flush_interval):
// tokens of several steps travel as one chunk of several tokens, identical
// in content to the step-by-step stream, sent at the latest when the engine
// runs out of work; a cancel sends the unsent tokens before the last chunk.
#include <catch2/catch.hpp>

#include <chrono>
#include <optional>
#include <thread>

#include <caf/all.hpp>

#include "caflm/actors/engine_core_actor.hpp"
#include "caflm/messages/type_registry.hpp"
#include "tests/support/actor_harness.hpp"

using namespace caflm;
using caflm::testing::fake_config;
using caflm::testing::make_fake_engine;
using caflm::testing::make_request;

namespace {

/// Long enough that only the engine's idleness or a cancel flushes.
constexpr std::chrono::microseconds kHour{std::chrono::hours(1)};

struct FlushFixture {
  FlushFixture()
    : sys(init(cfg))
    , self(sys) {}

  ~FlushFixture() {
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

  void add(const engine_core_actor& core, GenerateRequest request) {
    bool accepted = false;
    std::string failure;
    self->request(core, caf::infinite, add_atom::value, std::move(request), as_sink())
        .receive([&](const Admission& answer) { accepted = answer.accepted; },
                 [&](const caf::error& error) { failure = sys.render(error); });
    REQUIRE(failure.empty());
    REQUIRE(accepted);
  }

  /// Asks for the load until `done` holds; gives up after 30 s.
  template <class Predicate>
  LoadReport await_load(const engine_core_actor& core, Predicate done) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    LoadReport report;
    do {
      self->request(core, caf::infinite, get_load_atom::value)
          .receive([&](const LoadReport& answer) { report = answer; },
                   [&](const caf::error& error) { FAIL(sys.render(error)); });
      if (done(report))
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    } while (std::chrono::steady_clock::now() < deadline);
    return report;
  }

  /// Chunks for this sink until one ends its request; an error or 30 s of
  /// silence fails the test.
  std::vector<TokenChunk> receive_until_finish() {
    std::vector<TokenChunk> chunks;
    bool finished = false;
    while (!finished) {
      bool silent = false;
      std::optional<InferenceError> error;
      self->receive(
          [&](const TokenBatch& batch) {
            for (const TokenChunk& chunk : batch.chunks) {
              chunks.push_back(chunk);
              finished = finished || chunk.finish != FinishReason::None;
            }
          },
          [&](const InferenceError& e) { error = e; },
          caf::after(std::chrono::seconds(30)) >> [&] { silent = true; });
      INFO((error ? error->message : std::string()));
      REQUIRE_FALSE(error);
      REQUIRE_FALSE(silent);
    }
    return chunks;
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  std::vector<engine_core_actor> cores;
};

} // namespace

TEST_CASE("with a flush interval a request's tokens of many steps arrive as one chunk") {
  const EngineConfig config = fake_config();
  auto request = make_request(1);
  request.params.max_tokens = 12;
  request.params.ignore_eos = true;
  request.params.top_logprobs = 2;

  // The same request on an engine driven directly, one event per step.
  auto direct = make_fake_engine(config);
  const Tokenizer& tokenizer = direct->tokenizer();
  GenerationRequest generation{request.id,
                               tokenizer.encode(request.prompt, tokenizer.vocabulary().add_bos()),
                               request.params,
                               {}};
  const std::vector<TokenId> prompt = generation.prompt;
  REQUIRE_FALSE(direct->add(generation));
  std::vector<TokenEvent> expected;
  while (direct->has_work())
    for (TokenEvent& event : direct->step())
      expected.push_back(std::move(event));
  REQUIRE(expected.size() == 12);

  FlushFixture f;
  EngineLimits limits{4, 8};
  limits.token_flush_interval = kHour;
  auto core = f.spawn(make_fake_engine(config), limits);
  f.add(core, request);
  const std::vector<TokenChunk> chunks = f.receive_until_finish();

  // Nothing flushed before the engine ran out of work, when all was made.
  REQUIRE(chunks.size() == 1);
  const TokenChunk& chunk = chunks.front();
  CHECK(chunk.request_id == 1);
  CHECK(chunk.first_token == 0);
  CHECK(chunk.prompt_tokens == prompt);
  REQUIRE(chunk.tokens.size() == expected.size());
  REQUIRE(chunk.logprobs.size() == expected.size());
  REQUIRE(chunk.top_logprobs.size() == expected.size());
  std::string text;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    INFO("token " << i);
    CHECK(chunk.tokens[i] == expected[i].token);
    CHECK(chunk.logprobs[i] == expected[i].logprob);
    REQUIRE(chunk.top_logprobs[i].size() == expected[i].top_logprobs.size());
    for (std::size_t t = 0; t < expected[i].top_logprobs.size(); ++t) {
      CHECK(chunk.top_logprobs[i][t].token == expected[i].top_logprobs[t].token);
      CHECK(chunk.top_logprobs[i][t].logprob == expected[i].top_logprobs[t].logprob);
    }
    text += expected[i].text;
  }
  CHECK(chunk.text == text);
  CHECK(chunk.finish == FinishReason::Length);
  CHECK(chunk.usage.prompt_tokens == prompt.size());
  CHECK(chunk.usage.completion_tokens == 12);
  // The first event's queue time, not a later event's -1.
  CHECK(chunk.queue_seconds >= 0.0f);
}

TEST_CASE("a cancel sends a request's unsent tokens before its last chunk") {
  EngineConfig config = fake_config();
  config.scheduler.max_context = 8192;
  config.kv_blocks = 1100;
  config.prefix_caching = false;
  // Paced at >= 1 ms a step, the request cannot end on its own for 8 s.
  auto engine = make_fake_engine(config, std::chrono::milliseconds(1));
  FlushFixture f;
  EngineLimits limits{2, 4};
  limits.token_flush_interval = kHour;
  auto core = f.spawn(engine, limits);
  auto request = make_request(7);
  request.params.max_tokens = 8000;
  request.params.ignore_eos = true;
  f.add(core, request);

  // Tokens were made, and held in the worker.
  LoadReport busy = f.await_load(core, [](const LoadReport& r) { return r.generated_tokens > 20; });
  REQUIRE(busy.generated_tokens > 20);

  f.self->send(core, cancel_atom::value, f.as_sink(), std::uint64_t{7}, std::uint32_t{0});
  const std::vector<TokenChunk> chunks = f.receive_until_finish();
  REQUIRE(chunks.size() >= 2);
  CHECK(chunks.front().first_token == 0);
  CHECK(chunks.front().tokens.size() > 1);
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

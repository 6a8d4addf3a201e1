// RequestLimits: what one request may ask of an engine. Each limit refuses
// with a message that names it, in the engine and in the engine core that
// admits requests from clients and peers alike; a refused request leaves
// the others untouched, and a request that outlives its lifetime ends with
// an error.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>

#include <caf/all.hpp>
#include <nlohmann/json.hpp>

#include "apps/request_file.hpp"
#include "caflm/actors/engine_core_actor.hpp"
#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/request_limits.hpp"
#include "caflm/messages/type_registry.hpp"
#include "caflm/server/openai_protocol.hpp"
#include "support/actor_harness.hpp"
#include "support/engine_harness.hpp"
#include "support/model_harness.hpp"

using namespace caflm;
using namespace caflm::testing;

namespace {

std::shared_ptr<const Model> small_random_model() {
  return random_model(small_random_spec("llama", 31));
}

/// A clock that moves only when the test says, starting well after the
/// epoch (which GenerationRequest::arrival takes for "when added").
struct ManualClock {
  std::shared_ptr<std::chrono::steady_clock::time_point> now =
      std::make_shared<std::chrono::steady_clock::time_point>(std::chrono::hours(1));

  InferenceEngine::Clock clock() const {
    return [time = now] { return *time; };
  }
  void advance(std::chrono::steady_clock::duration by) { *now += by; }
};

/// What `engine` says of `request`, and that add refuses it with `expected`
/// and leaves the engine as it was.
std::string refusal(InferenceEngine& engine, const GenerationRequest& request, AddError expected) {
  const std::size_t active = engine.active();
  auto error = engine.add(request);
  REQUIRE(error);
  CHECK(*error == expected);
  CHECK(engine.active() == active);
  return engine.check_limits(request).value_or("");
}

std::vector<std::string> strings(std::size_t count, std::size_t bytes) {
  return std::vector<std::string>(count, std::string(bytes, 'x'));
}

/// An engine core with its real worker over a fake engine, on CAF's threaded
/// scheduler; the test's own actor is every request's sink.
struct CoreFixture {
  explicit CoreFixture(const EngineConfig& config,
                       std::chrono::microseconds pause = std::chrono::microseconds{0})
    : sys(init(cfg))
    , self(sys)
    , engine(caflm::testing::make_fake_engine(config, pause))
    , core(spawn_engine_core(sys, engine, EngineLimits{4, 8})) {}

  ~CoreFixture() { self->send_exit(core, caf::exit_reason::user_shutdown); }

  static caf::actor_system_config& init(caf::actor_system_config& c) {
    add_message_types(c);
    c.set("logger.file-verbosity", caf::atom("quiet"));
    return c;
  }

  Admission add(GenerateRequest request) {
    Admission admission;
    std::string failure;
    self->request(core, caf::infinite, add_atom::value, std::move(request),
                  caf::actor_cast<token_sink>(self))
        .receive([&](const Admission& answer) { admission = answer; },
                 [&](const caf::error& error) { failure = sys.render(error); });
    REQUIRE(failure.empty());
    return admission;
  }

  /// The message of `request`'s refusal, which must have `code`.
  std::string refusal(GenerateRequest request, InferenceErrorCode code) {
    const Admission admission = add(std::move(request));
    REQUIRE_FALSE(admission.accepted);
    CHECK(admission.error.code == code);
    return admission.error.message;
  }

  /// Chunks of request `id` until its last one, or the error that ended it;
  /// nothing for 30 s fails the test.
  std::vector<TokenChunk> receive_until_end(std::uint64_t id,
                                            std::optional<InferenceError>& error) {
    std::vector<TokenChunk> chunks;
    bool finished = false;
    bool silent = false;
    while (!finished && !error && !silent) {
      self->receive(
          [&](const TokenBatch& batch) {
            for (const TokenChunk& chunk : batch.chunks) {
              REQUIRE(chunk.request_id == id);
              chunks.push_back(chunk);
              finished = finished || chunk.finish != FinishReason::None;
            }
          },
          [&](const InferenceError& e) {
            REQUIRE(e.request_id == id);
            error = e;
          },
          caf::after(std::chrono::seconds(30)) >> [&] { silent = true; });
    }
    REQUIRE_FALSE(silent);
    return chunks;
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scoped_actor self;
  std::shared_ptr<InferenceEngine> engine;
  engine_core_actor core;
};

} // namespace

TEST_CASE("the limit functions refuse just past each bound and name it") {
  const RequestLimits limits;
  CHECK(limits.max_prompt_bytes == std::uint64_t{4} << 20);
  CHECK(limits.max_stop_strings == 16);
  CHECK(limits.max_stop_bytes == 256);
  CHECK(limits.max_lifetime == std::chrono::seconds(3600));

  CHECK_FALSE(check_prompt_bytes(limits, limits.max_prompt_bytes));
  CHECK(check_prompt_bytes(limits, limits.max_prompt_bytes + 1) ==
        std::string("the prompt holds 4194305 bytes; at most 4194304"));

  SamplingParams params;
  params.max_tokens = 128;
  params.stop = strings(16, 256);
  CHECK_FALSE(check_params(limits, params, 128));
  params.stop = strings(17, 1);
  CHECK(check_params(limits, params, 128) == std::string("stop holds 17 strings; at most 16"));
  params.stop = {"a", std::string(257, 'x')};
  CHECK(check_params(limits, params, 128) == std::string("stop[1] holds 257 bytes; at most 256"));
  params.stop.clear();
  params.max_tokens = 129;
  CHECK(check_params(limits, params, 128) ==
        std::string("max_tokens is 129; at most 128 (the engine's context)"));
  params.max_tokens = 1u << 31;
  CHECK(check_params(limits, params, 4096) ==
        std::string("max_tokens is 2147483648; at most 4096 (the engine's context)"));
  // "Until the context is full" is bounded by the context itself.
  params.max_tokens = kMaxTokensUntilContextFull;
  CHECK_FALSE(check_params(limits, params, 128));

  RequestLimits tight;
  tight.max_tokens = 50;
  tight.max_prompt_tokens = 20;
  params.max_tokens = 51;
  CHECK(check_params(tight, params, 128) == std::string("max_tokens is 51; at most 50"));
  params.max_tokens = 50;
  CHECK_FALSE(check_params(tight, params, 128));
  // A limit above the context is the context.
  tight.max_tokens = 1000;
  params.max_tokens = 129;
  CHECK(check_params(tight, params, 128) ==
        std::string("max_tokens is 129; at most 128 (the engine's context)"));

  CHECK_FALSE(check_prompt_tokens(tight, 20, 0));
  CHECK(check_prompt_tokens(tight, 21, 0) == std::string("the prompt holds 21 tokens; at most 20"));
  CHECK(check_prompt_tokens(tight, 18, 3) ==
        std::string("the prompt and the tokens already generated hold 21 tokens; at most 20"));
  // No limit of its own: only the context (checked apart) bounds it.
  CHECK_FALSE(check_prompt_tokens(limits, 1u << 30, 0));

  CHECK(lifetime_exceeded_message(limits) ==
        "the request outlived the engine's request lifetime of 3600 s");
}

TEST_CASE("limits that cannot work are refused, by the engine too") {
  CHECK_FALSE(validate(RequestLimits{}));
  RequestLimits no_bytes;
  no_bytes.max_prompt_bytes = 0;
  CHECK(validate(no_bytes) == std::string("the request limit on prompt bytes must be at least 1"));
  RequestLimits negative;
  negative.max_lifetime = std::chrono::seconds(-1);
  CHECK(validate(negative) ==
        std::string("the request lifetime cannot be negative (0: unbounded)"));

  EngineConfig config = small_config();
  config.requests = negative;
  CHECK_THROWS_AS(make_cpu_engine(small_random_model(), config), std::invalid_argument);
}

TEST_CASE("the engine refuses each limit with its message; a valid request beside them completes") {
  auto model = small_random_model();
  EngineConfig config = small_config();
  config.requests.max_prompt_tokens = 40;
  const std::uint32_t context = config.scheduler.max_context;
  const std::uint32_t vocab = model->config().vocab_size;
  std::mt19937 rng(7);
  const auto prompt = random_tokens(rng, 12, vocab);
  const Stream expected = run_alone(model, config, make_request(1, prompt, seeded(10)));
  REQUIRE(expected.last().finish == FinishReason::Length);

  auto engine = make_cpu_engine(model, config);
  // The valid request is already running when the others arrive.
  REQUIRE_FALSE(engine->add(make_request(1, prompt, seeded(10))));
  Stream valid;
  valid.events = engine->step();

  SamplingParams many_stops = seeded(4);
  many_stops.stop = strings(17, 2);
  CHECK(refusal(*engine, make_request(2, prompt, many_stops), AddError::LimitExceeded) ==
        "stop holds 17 strings; at most 16");

  SamplingParams long_stop = seeded(4);
  long_stop.stop = {"ok", std::string(300, 'y')};
  CHECK(refusal(*engine, make_request(3, prompt, long_stop), AddError::LimitExceeded) ==
        "stop[1] holds 300 bytes; at most 256");

  CHECK(refusal(*engine, make_request(4, prompt, seeded(1u << 31)), AddError::LimitExceeded) ==
        "max_tokens is 2147483648; at most 128 (the engine's context)");
  CHECK(refusal(*engine, make_request(5, prompt, seeded(context + 1)), AddError::LimitExceeded) ==
        "max_tokens is 129; at most 128 (the engine's context)");

  CHECK(refusal(*engine, make_request(6, random_tokens(rng, 41, vocab), seeded(4)),
                AddError::LimitExceeded) == "the prompt holds 41 tokens; at most 40");
  GenerationRequest long_resumed = make_request(7, random_tokens(rng, 38, vocab), seeded(9));
  long_resumed.generated = {1, 2, 3};
  CHECK(refusal(*engine, long_resumed, AddError::LimitExceeded) ==
        "the prompt and the tokens already generated hold 41 tokens; at most 40");

  // Bounds checked by the sampling parameters and the engine's vocabulary and
  // context, here for what a resumed request carries.
  SamplingParams many_logprobs = seeded(4);
  many_logprobs.top_logprobs = kMaxTopLogprobs + 1;
  CHECK(validate(many_logprobs) == std::string("top_logprobs must be at most 20"));
  (void)refusal(*engine, make_request(8, prompt, many_logprobs), AddError::BadParams);
  GenerationRequest done_already = make_request(9, prompt, seeded(3));
  done_already.generated = {1, 2, 3};
  (void)refusal(*engine, done_already, AddError::BadParams);
  GenerationRequest foreign_generated = make_request(10, prompt, seeded(9));
  foreign_generated.generated = {1, vocab};
  (void)refusal(*engine, foreign_generated, AddError::InvalidToken);
  // Without a prompt limit of its own, the context bounds what a resumed
  // request carries.
  auto plain = make_cpu_engine(model, small_config());
  GenerationRequest past_context = make_request(11, random_tokens(rng, 10, vocab), seeded(context));
  past_context.generated = random_tokens(rng, context - 10, vocab);
  (void)refusal(*plain, past_context, AddError::ContextLengthExceeded);

  // Right at each bound, accepted.
  SamplingParams at_bounds = seeded(context);
  at_bounds.stop = strings(16, 256);
  REQUIRE_FALSE(engine->add(make_request(12, random_tokens(rng, 40, vocab), at_bounds)));
  REQUIRE(engine->cancel(12));

  auto streams = run_until_idle(*engine);
  CHECK(streams.size() == 1);
  for (TokenEvent& event : streams[1].events)
    valid.events.push_back(std::move(event));
  CHECK(valid.last().finish == FinishReason::Length);
  CHECK(valid.last().completion_tokens == 10);
  CHECK(valid.tokens() == expected.tokens());
}

TEST_CASE("max_tokens 'until the context is full' runs to the context") {
  auto model = small_random_model();
  const EngineConfig config = small_config();
  const std::uint32_t context = config.scheduler.max_context;
  std::mt19937 rng(8);
  SamplingParams params = greedy(kMaxTokensUntilContextFull);
  const Stream s = run_alone(
      model, config,
      make_request(1, random_tokens(rng, context - 3, model->config().vocab_size), params));
  CHECK(s.events.size() == 3);
  CHECK(s.last().finish == FinishReason::Length);
}

TEST_CASE("a request that outlives its lifetime ends with its error; the others go on") {
  auto model = small_random_model();
  EngineConfig config = small_config();
  config.requests.max_lifetime = std::chrono::seconds(10);
  const std::uint32_t vocab = model->config().vocab_size;
  std::mt19937 rng(9);
  const auto long_prompt = random_tokens(rng, 9, vocab);
  const auto short_prompt = random_tokens(rng, 7, vocab);
  const Stream expected = run_alone(model, config, make_request(2, short_prompt, greedy(6)));

  auto engine = make_cpu_engine(model, config);
  ManualClock clock;
  engine->set_clock(clock.clock());
  REQUIRE_FALSE(engine->add(make_request(1, long_prompt, greedy(100))));
  std::map<std::uint64_t, Stream> streams;
  auto step = [&] {
    for (auto& event : engine->step())
      streams[event.request_id].events.push_back(std::move(event));
  };
  step();
  step();
  clock.advance(std::chrono::seconds(5));
  REQUIRE_FALSE(engine->add(make_request(2, short_prompt, greedy(6))));
  step();
  // Exactly its lifetime: not outlived yet.
  clock.advance(std::chrono::seconds(5));
  step();
  REQUIRE(streams[1].last().finish == FinishReason::None);

  clock.advance(std::chrono::milliseconds(1));
  step();
  const TokenEvent& ended = streams[1].last();
  CHECK(ended.finish == FinishReason::Error);
  CHECK(ended.fault == EngineFault::LifetimeExceeded);
  CHECK(ended.error == "the request outlived the engine's request lifetime of 10 s");
  CHECK(ended.completion_tokens < 100);
  CHECK(engine->active() == 1);

  // The younger request is 5 s old: it finishes as it would have alone.
  while (engine->has_work())
    step();
  CHECK(streams[2].last().finish == FinishReason::Length);
  CHECK(streams[2].tokens() == expected.tokens());
}

TEST_CASE("a leader that outlives its lifetime mid-prefill hands its prompt to a follower") {
  auto model = small_random_model();
  EngineConfig config = small_config(/*token_budget=*/24, /*prefix_caching=*/false);
  config.requests.max_lifetime = std::chrono::seconds(10);
  std::mt19937 rng(10);
  const auto prompt = random_tokens(rng, 30, model->config().vocab_size);
  const Stream expected = run_alone(model, config, make_request(2, prompt, greedy(5)));

  auto engine = make_cpu_engine(model, config);
  ManualClock clock;
  engine->set_clock(clock.clock());
  GenerationRequest leader = make_request(1, prompt, greedy(5));
  leader.prefill_group = 3;
  REQUIRE_FALSE(engine->add(leader));
  clock.advance(std::chrono::seconds(6));
  GenerationRequest follower = make_request(2, prompt, greedy(5));
  follower.prefill_group = 3;
  REQUIRE_FALSE(engine->add(follower));
  clock.advance(std::chrono::seconds(6));

  auto streams = run_until_idle(*engine);
  REQUIRE(streams[1].events.size() == 1);
  CHECK(streams[1].last().fault == EngineFault::LifetimeExceeded);
  CHECK(streams[2].last().finish == FinishReason::Length);
  CHECK(streams[2].tokens() == expected.tokens());
}

TEST_CASE("a lifetime of 0 is unbounded") {
  auto model = small_random_model();
  EngineConfig config = small_config();
  config.requests.max_lifetime = std::chrono::seconds(0);
  std::mt19937 rng(11);
  auto engine = make_cpu_engine(model, config);
  ManualClock clock;
  engine->set_clock(clock.clock());
  REQUIRE_FALSE(
      engine->add(make_request(1, random_tokens(rng, 9, model->config().vocab_size), greedy(4))));
  clock.advance(std::chrono::hours(24 * 365));
  auto streams = run_until_idle(*engine);
  CHECK(streams[1].events.size() == 4);
  CHECK(streams[1].last().finish == FinishReason::Length);
}

TEST_CASE("an engine core refuses each limit with its message and serves a valid request beside "
          "them") {
  EngineConfig config = caflm::testing::fake_config();
  config.requests.max_prompt_bytes = 64;
  config.requests.max_prompt_tokens = 20;
  CoreFixture f(config);
  const auto vocab = static_cast<TokenId>(f.engine->tokenizer().vocabulary().size());
  constexpr auto bad_request = InferenceErrorCode::bad_request;
  constexpr auto context_length_exceeded = InferenceErrorCode::context_length_exceeded;

  GenerateRequest big_text = make_request(1);
  big_text.prompt = std::string(65, 'a');
  CHECK(f.refusal(big_text, bad_request) == "the prompt holds 65 bytes; at most 64");

  GenerateRequest many_stops = make_request(2);
  many_stops.params.stop = strings(17, 1);
  CHECK(f.refusal(many_stops, bad_request) == "stop holds 17 strings; at most 16");

  GenerateRequest long_stop = make_request(3);
  long_stop.params.stop = {std::string(257, 's')};
  CHECK(f.refusal(long_stop, bad_request) == "stop[0] holds 257 bytes; at most 256");

  GenerateRequest absurd_max_tokens = make_request(4);
  absurd_max_tokens.params.max_tokens = 1u << 31;
  CHECK(f.refusal(absurd_max_tokens, bad_request) ==
        "max_tokens is 2147483648; at most 64 (the engine's context)");

  GenerateRequest many_tokens = make_request(5);
  many_tokens.prompt_tokens.assign(21, 65);
  CHECK(f.refusal(many_tokens, context_length_exceeded) ==
        "the prompt holds 21 tokens; at most 20");

  // Within the bytes, beyond the tokens once tokenized.
  GenerateRequest long_text = make_request(6);
  long_text.prompt = std::string(60, '~');
  const std::string long_text_refusal = f.refusal(long_text, context_length_exceeded);
  CHECK(long_text_refusal.rfind("the prompt holds ", 0) == 0);
  CHECK(long_text_refusal.find(" tokens; at most 20") != std::string::npos);

  GenerateRequest resumed = make_request(7);
  resumed.prompt_tokens.assign(15, 65);
  resumed.generated.assign(6, 66);
  CHECK(f.refusal(resumed, context_length_exceeded) ==
        "the prompt and the tokens already generated hold 21 tokens; at most 20");

  GenerateRequest foreign = make_request(8);
  foreign.prompt_tokens = {65, 66};
  foreign.generated = {vocab};
  CHECK(f.refusal(foreign, bad_request).find("outside the vocabulary") != std::string::npos);

  GenerateRequest done_already = make_request(9);
  done_already.prompt_tokens = {65, 66};
  done_already.params.max_tokens = 2;
  done_already.generated = {67, 68};
  CHECK(f.refusal(done_already, bad_request) == "no tokens left to generate");

  // At every bound at once, served to its end.
  GenerateRequest valid = make_request(10);
  valid.prompt = std::string(10, 'a');
  valid.params.stop = strings(16, 256);
  valid.params.max_tokens = 8;
  valid.params.ignore_eos = true;
  REQUIRE(f.add(valid).accepted);
  std::optional<InferenceError> error;
  std::vector<TokenChunk> chunks = f.receive_until_end(10, error);
  INFO((error ? error->message : std::string()));
  REQUIRE_FALSE(error);
  CHECK(chunks.back().finish == FinishReason::Length);
  CHECK(chunks.back().usage.completion_tokens == 8);
}

TEST_CASE("an engine core ends a request that outlives its lifetime with deadline_exceeded") {
  EngineConfig config = caflm::testing::fake_config();
  config.scheduler.max_context = 8192;
  config.kv_blocks = 1100;
  config.prefix_caching = false;
  config.requests.max_lifetime = std::chrono::seconds(1);
  // Paced at >= 1 ms a step, the request cannot end on its own for 8 s.
  CoreFixture f(config, std::chrono::milliseconds(1));
  GenerateRequest request = caflm::testing::make_request(1);
  request.params.max_tokens = 8000;
  request.params.ignore_eos = true;
  REQUIRE(f.add(request).accepted);
  std::optional<InferenceError> error;
  std::vector<TokenChunk> chunks = f.receive_until_end(1, error);
  REQUIRE(error);
  CHECK(error->code == InferenceErrorCode::deadline_exceeded);
  CHECK(error->message == "the request outlived the engine's request lifetime of 1 s");
  std::uint32_t generated = 0;
  for (const TokenChunk& chunk : chunks)
    generated += static_cast<std::uint32_t>(chunk.tokens.size());
  CHECK(generated < 8000);
}

TEST_CASE("the HTTP API holds requests to the engine's limits, in its own error format") {
  using server::ApiError;
  static_assert(server::kMaxStopStrings <= kDefaultMaxStopStrings);
  static_assert(server::kMaxStopBytes == kDefaultMaxStopBytes);
  static_assert(server::kMaxPromptBytes == kDefaultMaxPromptBytes);
  static_assert(server::kUnboundedMaxTokens == kMaxTokensUntilContextFull);
  auto failure = [](auto parse, const nlohmann::json& body) {
    try {
      parse(body.dump());
    } catch (const ApiError& error) {
      CHECK(error.status == 400);
      return error.param + ": " + error.message;
    }
    FAIL("accepted " << body.dump().substr(0, 200));
    return std::string();
  };
  auto completion = [](const std::string& body) { server::parse_completion_request(body); };
  auto chat = [](const std::string& body) { server::parse_chat_request(body); };

  const std::string at_bound(kDefaultMaxPromptBytes, 'p');
  CHECK(server::parse_completion_request(nlohmann::json{{"prompt", at_bound}}.dump())
            .prompts.front()
            .text.size() == kDefaultMaxPromptBytes);
  CHECK(failure(completion, {{"prompt", at_bound + "p"}}) ==
        "prompt: prompt may hold at most 4194304 bytes, got 4194305");
  CHECK(failure(completion, {{"prompt", {"short", at_bound + "p"}}}) ==
        "prompt[1]: prompt[1] may hold at most 4194304 bytes, got 4194305");
  const std::string half(kDefaultMaxPromptBytes / 2, 'c');
  const nlohmann::json messages = {{{"role", "system"}, {"content", half}},
                                   {{"role", "user"}, {"content", half + "c"}}};
  CHECK(failure(chat, {{"messages", messages}}) ==
        "messages: messages may hold at most 4194304 bytes of content, got 4194305 by "
        "messages[1]");

  CHECK(failure(completion, {{"prompt", "hi"}, {"stop", std::string(257, 's')}}) ==
        "stop: stop may hold at most 256 bytes, got 257");
  CHECK(failure(completion, {{"prompt", "hi"}, {"stop", {"a", std::string(257, 's')}}}) ==
        "stop[1]: stop[1] may hold at most 256 bytes, got 257");
  CHECK(server::parse_completion_request(
            nlohmann::json{{"prompt", "hi"}, {"stop", strings(4, 256)}}.dump())
            .sampling.stop.size() == 4);
}

TEST_CASE("a request file holds requests to the engine's limits, naming the line") {
  auto failure = [](const nlohmann::json& line) {
    try {
      apps::parse_request_line(line.dump(), 3, SamplingParams{});
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    FAIL("accepted " << line.dump().substr(0, 200));
    return std::string();
  };
  CHECK(failure({{"prompt", std::string(kDefaultMaxPromptBytes + 1, 'p')}}) ==
        "line 3: \"prompt\" holds 4194305 bytes; at most 4194304");
  CHECK(failure({{"prompt", "hi"}, {"stop", strings(17, 1)}}) ==
        "line 3: \"stop\" holds 17 strings; at most 16");
  CHECK(failure({{"prompt", "hi"}, {"stop", {"a", std::string(257, 's')}}}) ==
        "line 3: \"stop\" string 1 holds 257 bytes; at most 256");
  CHECK(failure({{"prompt", "hi"}, {"stop", std::string(257, 's')}}) ==
        "line 3: \"stop\" string 0 holds 257 bytes; at most 256");
  const apps::RequestLine at_bounds =
      apps::parse_request_line(nlohmann::json{{"prompt", std::string(kDefaultMaxPromptBytes, 'p')},
                                              {"stop", strings(16, 256)}}
                                   .dump(),
                               3, SamplingParams{});
  CHECK(at_bounds.request.prompt.size() == kDefaultMaxPromptBytes);
  CHECK(at_bounds.request.params.stop.size() == 16);
}

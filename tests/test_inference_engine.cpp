// InferenceEngine: continuous batching that does not change tokens,
// resumption from already generated tokens (what failover relies on), stop
// strings, finish reasons, usage, refused requests and cancellation.
#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <random>

#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"
#include "caflm/text/vocabulary.hpp"
#include "support/engine_harness.hpp"
#include "support/model_harness.hpp"

using namespace caflm;
using namespace caflm::testing;

namespace {

const std::string kTinyModel = CAFLM_TESTDATA_DIR "/models/tiny-llama-f32.gguf";

std::shared_ptr<const Model> small_random_model() {
  return caflm::testing::random_model(caflm::testing::small_random_spec("qwen2", 21));
}

std::shared_ptr<const Model> tiny_model() {
  return Model::load(kTinyModel);
}

/// The first `max_chars` whole UTF-8 characters of `text` (from the end when
/// `from_end`).
std::string utf8_chars(const std::string& text, std::size_t max_chars, bool from_end) {
  std::vector<std::size_t> starts; // byte offset of each character
  for (std::size_t i = 0; i < text.size(); ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80)
      starts.push_back(i);
  std::size_t n = std::min(max_chars, starts.size());
  if (n == 0)
    return {};
  if (from_end)
    return text.substr(starts[starts.size() - n]);
  return n == starts.size() ? text : text.substr(0, starts[n]);
}

} // namespace

TEST_CASE("batching with other requests does not change a request's tokens") {
  auto [model_name, params] = GENERATE(table<std::string, SamplingParams>({
      {"random qwen2", greedy(20)},
      {"random qwen2", seeded(20)},
      {"tiny llama", greedy(20)},
      {"tiny llama", seeded(20)},
  }));
  INFO(model_name << ", temperature " << params.temperature);
  auto model = model_name == "tiny llama" ? tiny_model() : small_random_model();
  const std::uint32_t vocab = model->config().vocab_size;
  const EngineConfig config = small_config();
  std::mt19937 rng(17);
  const auto subject = make_request(1, random_tokens(rng, 29, vocab), params);

  const Stream alone = run_alone(model, config, subject);
  REQUIRE(alone.events.size() == params.max_tokens);

  // 15 others of different lengths and sampling, some already running when
  // the subject arrives and some arriving while it decodes.
  auto engine = make_cpu_engine(model, config);
  auto companion = [&](std::uint64_t id) {
    SamplingParams p = id % 2 ? greedy(5 + id % 13) : seeded(3 + id % 17);
    p.seed = id;
    p.top_logprobs = static_cast<std::uint32_t>(id % 4);
    return make_request(id, random_tokens(rng, 1 + (id * 7) % 40, vocab), p);
  };
  for (std::uint64_t id = 100; id < 105; ++id)
    REQUIRE_FALSE(engine->add(companion(id)));
  auto streams = run_until_idle(*engine, [&](int step) {
    if (step == 2)
      REQUIRE_FALSE(engine->add(subject));
    if (step >= 4 && step < 14)
      REQUIRE_FALSE(engine->add(companion(101 + static_cast<std::uint64_t>(step))));
  });
  REQUIRE(streams.size() == 16);
  CHECK(streams[1].tokens() == alone.tokens());
  CHECK(streams[1].text() == alone.text());
  CHECK(streams[1].last().finish == FinishReason::Length);
}

TEST_CASE("a request resumed from its first k tokens continues exactly as it would have") {
  auto model_name = GENERATE(as<std::string>{}, "tiny llama", "random qwen2");
  // Penalties read the generated tokens too: resumption must hand them over.
  const bool penalties = GENERATE(false, true);
  INFO(model_name << (penalties ? ", with penalties" : ""));
  auto model = model_name == "tiny llama" ? tiny_model() : small_random_model();
  const EngineConfig config = small_config();
  const auto prompt = load_tokenizer(*model)->encode("Once upon a time, in a land far away", true);
  SamplingParams params = seeded(24);
  if (penalties) {
    params.repetition_penalty = 1.3f;
    params.presence_penalty = 0.5f;
    params.frequency_penalty = 0.7f;
    params.penalty_last_n = 16;
  }
  const GenerationRequest request = make_request(3, prompt, params);

  const Stream full = run_alone(model, config, request);
  const std::size_t n = full.events.size();
  REQUIRE(n == 24);
  REQUIRE(full.last().finish == FinishReason::Length);
  // Streamed text is the continuation's text, whole characters at a time.
  CHECK(full.text() == load_tokenizer(*model)->decode(full.tokens(), false));

  for (std::size_t k : {std::size_t{1}, n / 2, n - 1}) {
    INFO("resumed after " << k << " tokens");
    GenerationRequest resumed = request;
    resumed.generated = full.tokens(0, k);
    const Stream rest = run_alone(model, config, resumed);
    REQUIRE(rest.events.size() == n - k);
    CHECK(rest.tokens() == full.tokens(k));
    CHECK(full.text(k) + rest.text() == full.text());
    CHECK(rest.last().finish == FinishReason::Length);
    CHECK(rest.last().completion_tokens == n);
    CHECK(rest.last().prompt_tokens == prompt.size());
  }
}

TEST_CASE("stop strings end generation and are never streamed") {
  auto model = tiny_model();
  const EngineConfig config = small_config();
  const auto prompt = load_tokenizer(*model)->encode("Hello world, once upon a time", true);
  const Stream full = run_alone(model, config, make_request(1, prompt, greedy(24)));
  const std::string full_text = full.text();
  REQUIRE(full_text == load_tokenizer(*model)->decode(full.tokens(), false));

  // A stop string across two tokens' texts in the middle of the output.
  std::size_t boundary = 8;
  while (boundary + 1 < full.events.size() &&
         (full.events[boundary].text.empty() || full.events[boundary + 1].text.empty()))
    ++boundary;
  REQUIRE(boundary + 1 < full.events.size());
  const std::string stop = utf8_chars(full.events[boundary].text, 2, true) +
                           utf8_chars(full.events[boundary + 1].text, 2, false);
  INFO("stop string: '" << stop << "'");
  const std::size_t stop_at = full_text.find(stop);
  REQUIRE(stop_at != std::string::npos);
  // The token whose text completes the stop string's first occurrence.
  std::size_t last_token = 0;
  for (std::size_t length = 0; last_token < full.events.size(); ++last_token) {
    length += full.events[last_token].text.size();
    if (length >= stop_at + stop.size())
      break;
  }

  SECTION("a stop string from the greedy text") {
    SamplingParams params = greedy(24);
    params.stop = {"never occurs \x01", stop};
    const Stream stopped = run_alone(model, config, make_request(1, prompt, params));
    CHECK(stopped.last().finish == FinishReason::Stop);
    CHECK(stopped.text() == full_text.substr(0, stop_at));
    CHECK(stopped.text().find(stop) == std::string::npos);
    CHECK(stopped.tokens() == full.tokens(0, last_token + 1));
    CHECK(stopped.last().completion_tokens == last_token + 1);
  }

  SECTION("a stop string that only starts at the end: its start is streamed at the finish") {
    SamplingParams params = greedy(24);
    params.stop = {utf8_chars(full_text, 1, true) + "\x01"};
    const Stream unstopped = run_alone(model, config, make_request(1, prompt, params));
    CHECK(unstopped.last().finish == FinishReason::Length);
    CHECK(unstopped.tokens() == full.tokens());
    CHECK(unstopped.text() == full_text);
  }

  SECTION("resumed inside a stop string, the stop is still found") {
    SamplingParams params = greedy(24);
    params.stop = {stop};
    const Stream stopped = run_alone(model, config, make_request(1, prompt, params));
    REQUIRE(stopped.events.size() == last_token + 1);
    // After the first `last_token` tokens the stop string has begun (its
    // start is held back) but is not complete.
    const std::size_t k = last_token;
    REQUIRE(full.text(k).size() > stop_at);
    GenerationRequest resumed = make_request(1, prompt, params);
    resumed.generated = stopped.tokens(0, k);
    const Stream rest = run_alone(model, config, resumed);
    CHECK(rest.events.size() == 1);
    CHECK(rest.last().finish == FinishReason::Stop);
    CHECK(stopped.text(k) + rest.text() == stopped.text());
    CHECK(rest.last().completion_tokens == stopped.last().completion_tokens);
  }
}

TEST_CASE("max_tokens and a full context end with finish Length") {
  auto model = small_random_model();
  const EngineConfig config = small_config();
  std::mt19937 rng(2);
  const std::uint32_t vocab = model->config().vocab_size;

  for (std::uint32_t max_tokens : {1u, 2u, 13u}) {
    INFO("max_tokens " << max_tokens);
    Stream s = run_alone(model, config,
                         make_request(1, random_tokens(rng, 10, vocab), seeded(max_tokens)));
    CHECK(s.events.size() == max_tokens);
    CHECK(s.last().finish == FinishReason::Length);
    CHECK(s.last().completion_tokens == max_tokens);
  }
  // A prompt one short of the context leaves room for exactly one token.
  const std::uint32_t context = config.scheduler.max_context;
  Stream s =
      run_alone(model, config, make_request(1, random_tokens(rng, context - 1, vocab), greedy(50)));
  CHECK(s.events.size() == 1);
  CHECK(s.last().finish == FinishReason::Length);
  // Two short: two tokens.
  s = run_alone(model, config, make_request(1, random_tokens(rng, context - 2, vocab), greedy(50)));
  CHECK(s.events.size() == 2);
  CHECK(s.last().finish == FinishReason::Length);
}

TEST_CASE("end of sequence stops a request unless ignore_eos") {
  // Near-uniform sampling over the random model's small vocabulary: some of
  // these seeded requests draw the end-of-sequence token.
  auto model = small_random_model();
  const auto tokenizer = load_tokenizer(*model);
  const Vocabulary& vocabulary = tokenizer->vocabulary();
  REQUIRE(vocabulary.eos());
  const TokenId eos = *vocabulary.eos();
  const EngineConfig config = small_config(512);
  auto params = [](std::uint64_t seed, bool ignore_eos) {
    SamplingParams p;
    p.temperature = 100.0f;
    p.seed = seed;
    p.max_tokens = 60;
    p.ignore_eos = ignore_eos;
    return p;
  };
  const std::vector<TokenId> prompt{10, 20, 30};

  auto engine = make_cpu_engine(model, config);
  for (std::uint64_t seed = 0; seed < 24; ++seed)
    REQUIRE_FALSE(engine->add(make_request(seed, prompt, params(seed, false))));
  auto streams = run_until_idle(*engine);
  std::vector<std::uint64_t> ended_by_eos;
  for (const auto& [id, stream] : streams) {
    for (std::size_t i = 0; i + 1 < stream.events.size(); ++i)
      CHECK(stream.events[i].token != eos);
    if (stream.last().token == eos) {
      ended_by_eos.push_back(id);
      CHECK(stream.last().finish == FinishReason::Stop);
      // The end-of-sequence token adds no text; the last event may still
      // carry text held back before it.
      CHECK(stream.text() ==
            load_tokenizer(*model)->decode(stream.tokens(0, stream.events.size() - 1), false));
      CHECK(stream.last().completion_tokens == stream.events.size());
    } else {
      CHECK(stream.last().finish == FinishReason::Length);
    }
  }
  REQUIRE(!ended_by_eos.empty());

  auto ignoring = make_cpu_engine(model, config);
  for (std::uint64_t seed : ended_by_eos)
    REQUIRE_FALSE(ignoring->add(make_request(seed, prompt, params(seed, true))));
  for (const auto& [id, stream] : run_until_idle(*ignoring)) {
    INFO("seed " << id);
    CHECK(stream.events.size() == 60);
    CHECK(stream.last().finish == FinishReason::Length);
    for (const auto& event : stream.events)
      CHECK(event.token != eos);
  }
}

TEST_CASE("top_logprobs: the requested count, most likely first, the chosen one among them") {
  auto model = tiny_model();
  const auto prompt = load_tokenizer(*model)->encode("The quick brown fox", true);
  for (std::uint32_t count : {0u, 1u, 5u, 20u}) {
    INFO("top_logprobs " << count);
    SamplingParams params = greedy(6);
    params.top_logprobs = count;
    const Stream s = run_alone(model, small_config(), make_request(1, prompt, params));
    REQUIRE(s.events.size() == 6);
    for (const auto& event : s.events) {
      REQUIRE(event.top_logprobs.size() == count);
      CHECK(event.logprob <= 0.0f);
      for (std::size_t i = 1; i < count; ++i)
        CHECK(event.top_logprobs[i - 1].logprob >= event.top_logprobs[i].logprob);
      if (count >= 5) {
        // Greedy picks the most likely allowed token; only end-of-sequence
        // tokens are banned, so it is near the top.
        auto chosen = std::find_if(event.top_logprobs.begin(), event.top_logprobs.end(),
                                   [&](const TokenLogprob& t) { return t.token == event.token; });
        REQUIRE(chosen != event.top_logprobs.end());
        CHECK(chosen->logprob == event.logprob);
      }
    }
  }
}

TEST_CASE("a token's logprob is reported only when the request asks for it") {
  auto model = tiny_model();
  const auto prompt = load_tokenizer(*model)->encode("The quick brown fox", true);
  SamplingParams params = seeded(8);
  const Stream unasked = run_alone(model, small_config(), make_request(1, prompt, params));
  params.logprobs = true;
  const Stream asked = run_alone(model, small_config(), make_request(1, prompt, params));
  params.top_logprobs = 1; // implies logprobs
  params.logprobs = false;
  const Stream with_top = run_alone(model, small_config(), make_request(1, prompt, params));
  REQUIRE(unasked.events.size() == 8);
  REQUIRE(asked.events.size() == 8);
  REQUIRE(with_top.events.size() == 8);
  bool any_negative = false;
  for (std::size_t i = 0; i < 8; ++i) {
    INFO("token " << i);
    CHECK(unasked.events[i].token == asked.events[i].token);
    CHECK(unasked.events[i].logprob == 0.0f);
    CHECK(asked.events[i].logprob <= 0.0f);
    CHECK(with_top.events[i].logprob == asked.events[i].logprob);
    any_negative = any_negative || asked.events[i].logprob < 0.0f;
  }
  CHECK(any_negative);
}

TEST_CASE("usage on the last event counts prompt, completion and cached prompt tokens") {
  auto model = small_random_model();
  const EngineConfig config = small_config();
  const std::uint32_t block = config.scheduler.block_size;
  std::mt19937 rng(8);
  const auto prompt = random_tokens(rng, 37, model->config().vocab_size);
  auto engine = make_cpu_engine(model, config);

  auto run = [&](std::uint64_t id, const std::vector<TokenId>& tokens) {
    REQUIRE_FALSE(engine->add(make_request(id, tokens, seeded(7))));
    auto streams = run_until_idle(*engine);
    REQUIRE(streams[id].events.size() == 7);
    for (std::size_t i = 0; i + 1 < streams[id].events.size(); ++i)
      CHECK(streams[id].events[i].finish == FinishReason::None);
    return streams[id].last();
  };
  const TokenEvent first = run(1, prompt);
  CHECK(first.prompt_tokens == 37);
  CHECK(first.completion_tokens == 7);
  CHECK(first.cached_prompt_tokens == 0);

  // The same prompt again: its full blocks come from the cache, all but the
  // block holding the last prompt token, whose logits must be computed.
  const TokenEvent second = run(2, prompt);
  CHECK(second.prompt_tokens == 37);
  CHECK(second.completion_tokens == 7);
  CHECK(second.cached_prompt_tokens == (37 - 1) / block * block);
  CHECK(second.cached_prompt_tokens > 0);

  // Sharing only the first two blocks.
  auto partial = prompt;
  partial[2 * block] ^= 1;
  const TokenEvent third = run(3, partial);
  CHECK(third.cached_prompt_tokens == 2 * block);
  CHECK(engine->load().prefix_hit_rate > 0.0);

  // The totals a metrics endpoint exports: prompt and generated tokens, and
  // the prefix cache's lookups and hits in tokens.
  const LoadReport totals = engine->load();
  CHECK(totals.prompt_tokens == 3 * 37);
  CHECK(totals.generated_tokens == 3 * 7);
  CHECK(totals.prefix_hit_tokens == second.cached_prompt_tokens + third.cached_prompt_tokens);
  CHECK(totals.prefix_queried_tokens >= totals.prefix_hit_tokens + 36 / block * block);
  CHECK(totals.prefix_queried_tokens % block == 0);
  CHECK(totals.preemptions == 0);
  // Idle, every block in use is one only the prefix cache holds.
  CHECK(totals.cached_blocks > 0);
  CHECK(totals.cached_blocks == totals.total_blocks - totals.free_blocks);
}

TEST_CASE("KV occupancy counts a request's blocks as allocated, the prefix cache's apart") {
  auto model = small_random_model();
  const EngineConfig config = small_config();
  REQUIRE(config.prefix_caching);
  const std::uint64_t block = config.scheduler.block_size;
  std::mt19937 rng(9);
  auto engine = make_cpu_engine(model, config);
  REQUIRE_FALSE(
      engine->add(make_request(1, random_tokens(rng, 37, model->config().vocab_size), greedy(6))));
  KvOccupancy running;
  while (running.used_slots < 37) { // the prompt, in chunks
    REQUIRE(engine->has_work());
    engine->step();
    running = engine->kv_occupancy();
    CHECK(running.allocated_slots == (running.used_slots + block - 1) / block * block);
  }
  CHECK(running.cached_slots == 0); // its full blocks are the request's too
  run_until_idle(*engine);
  // Finished: the cache keeps its full blocks, which the next request that
  // needs room takes back, so none of them is allocated or wasted.
  const KvOccupancy idle = engine->kv_occupancy();
  CHECK(idle.allocated_slots == 0);
  CHECK(idle.used_slots == 0);
  CHECK(idle.cached_slots == std::uint64_t{engine->load().cached_blocks} * block);
  CHECK(idle.cached_slots > 0);
}

TEST_CASE("add refuses bad requests and keeps serving") {
  auto model = small_random_model();
  const EngineConfig config = small_config();
  const std::uint32_t vocab = model->config().vocab_size;
  const std::uint32_t context = config.scheduler.max_context;
  std::mt19937 rng(4);
  auto engine = make_cpu_engine(model, config);
  const auto good_prompt = random_tokens(rng, 12, vocab);
  const Stream expected = run_alone(model, config, make_request(1, good_prompt, seeded(9)));

  SamplingParams negative_temperature = seeded(9);
  negative_temperature.temperature = -1.0f;
  SamplingParams zero_top_p = seeded(9);
  zero_top_p.top_p = 0.0f;
  SamplingParams many_logprobs = seeded(9);
  many_logprobs.top_logprobs = 50;
  SamplingParams empty_stop = seeded(9);
  empty_stop.stop = {""};
  GenerationRequest done_already = make_request(7, good_prompt, seeded(3));
  done_already.generated = {1, 2, 3};
  GenerationRequest bad_generated = make_request(7, good_prompt, seeded(9));
  bad_generated.generated = {vocab};
  GenerationRequest long_resumed =
      make_request(7, random_tokens(rng, context - 2, vocab), seeded(9));
  long_resumed.generated = {1, 2};

  const std::vector<std::pair<GenerationRequest, AddError>> refused{
      {make_request(7, {}, seeded(9)), AddError::EmptyPrompt},
      {make_request(7, {1, vocab, 2}, seeded(9)), AddError::InvalidToken},
      {make_request(7, {1, 0xFFFFFFFFu}, seeded(9)), AddError::InvalidToken},
      {bad_generated, AddError::InvalidToken},
      {make_request(7, random_tokens(rng, context, vocab), seeded(9)),
       AddError::ContextLengthExceeded},
      {make_request(7, random_tokens(rng, context + 50, vocab), seeded(9)),
       AddError::ContextLengthExceeded},
      {long_resumed, AddError::ContextLengthExceeded},
      {make_request(7, good_prompt, negative_temperature), AddError::BadParams},
      {make_request(7, good_prompt, zero_top_p), AddError::BadParams},
      {make_request(7, good_prompt, many_logprobs), AddError::BadParams},
      {make_request(7, good_prompt, empty_stop), AddError::BadParams},
      {make_request(7, good_prompt, seeded(0)), AddError::BadParams},
      {done_already, AddError::BadParams},
  };
  for (std::size_t i = 0; i < refused.size(); ++i) {
    INFO("case " << i << ": expected " << to_string(refused[i].second));
    auto error = engine->add(refused[i].first);
    REQUIRE(error);
    CHECK(*error == refused[i].second);
    CHECK_FALSE(engine->has_work());
  }
  const std::uint32_t free_blocks = engine->load().free_blocks;

  // A duplicate id while the first is active; the first is unaffected.
  REQUIRE_FALSE(engine->add(make_request(1, good_prompt, seeded(9))));
  auto duplicate = engine->add(make_request(1, random_tokens(rng, 5, vocab), greedy(3)));
  REQUIRE(duplicate);
  CHECK(*duplicate == AddError::DuplicateRequest);
  auto streams = run_until_idle(*engine);
  REQUIRE(streams.size() == 1);
  CHECK(streams[1].tokens() == expected.tokens());
  CHECK(streams[1].last().finish == FinishReason::Length);

  // A finished id may be used again.
  REQUIRE_FALSE(engine->add(make_request(1, good_prompt, seeded(9))));
  CHECK(run_until_idle(*engine)[1].tokens() == expected.tokens());
  CHECK(engine->load().free_blocks <= free_blocks); // the prompt's blocks may stay cached
}

TEST_CASE("add refuses requests when every slot is taken, and admits again after") {
  auto model = small_random_model();
  EngineConfig config = small_config();
  config.scheduler.max_requests = 3;
  config.scheduler.max_running = 3;
  auto engine = make_cpu_engine(model, config);
  for (std::uint64_t id = 0; id < 3; ++id)
    REQUIRE_FALSE(engine->add(make_request(id, {1, 2, 3}, greedy(2))));
  auto full = engine->add(make_request(3, {1, 2, 3}, greedy(2)));
  REQUIRE(full);
  CHECK(*full == AddError::Full);
  CHECK(run_until_idle(*engine).size() == 3);
  REQUIRE_FALSE(engine->add(make_request(3, {1, 2, 3}, greedy(2))));
  CHECK(run_until_idle(*engine)[3].events.size() == 2);
}

TEST_CASE("cancel ends requests at once and returns all their blocks") {
  auto model = small_random_model();
  // Without prefix caching no block outlives its request.
  EngineConfig config = small_config(24, /*prefix_caching=*/false);
  config.scheduler.max_running = 2;
  const std::uint32_t vocab = model->config().vocab_size;
  std::mt19937 rng(6);
  auto engine = make_cpu_engine(model, config);
  const LoadReport start = engine->load();
  REQUIRE(start.free_blocks == start.total_blocks);

  for (std::uint64_t id = 1; id <= 3; ++id)
    REQUIRE_FALSE(engine->add(make_request(id, random_tokens(rng, 30, vocab), greedy(40))));
  CHECK(engine->load().waiting == 3);
  // Two run (at most two may), one waits; steps until both decode.
  for (int i = 0; i < 6; ++i)
    engine->step();
  LoadReport busy = engine->load();
  CHECK(busy.running == 2);
  CHECK(busy.waiting == 1);
  CHECK(busy.free_blocks < start.free_blocks);

  CHECK(engine->cancel(2));
  CHECK_FALSE(engine->cancel(2));
  CHECK_FALSE(engine->cancel(99));
  CHECK(engine->active() == 2);
  // The cancelled request sends nothing more; the others go on.
  for (const auto& event : engine->step())
    CHECK(event.request_id != 2);
  CHECK(engine->cancel(1));
  CHECK(engine->cancel(3));
  CHECK_FALSE(engine->has_work());
  LoadReport after = engine->load();
  CHECK(after.free_blocks == start.free_blocks);
  CHECK(after.running == 0);
  CHECK(after.waiting == 0);
  CHECK(engine->step().empty());

  // The engine still serves, and a finished request also returns its blocks.
  REQUIRE_FALSE(engine->add(make_request(4, random_tokens(rng, 30, vocab), greedy(5))));
  CHECK(run_until_idle(*engine)[4].events.size() == 5);
  CHECK(engine->load().free_blocks == start.free_blocks);
}

TEST_CASE("running out of KV blocks preempts without changing tokens; a request that cannot fit "
          "the pool is refused") {
  auto model = small_random_model();
  const std::uint32_t vocab = model->config().vocab_size;
  std::mt19937 rng(9);
  std::vector<GenerationRequest> requests;
  for (std::uint64_t id = 0; id < 6; ++id)
    requests.push_back(make_request(id, random_tokens(rng, 20 + 3 * id, vocab), seeded(30)));

  // Each sequence grows to 50-65 tokens, 7-9 blocks of 8; 12 blocks hold
  // no two of them at full length, so requests are preempted and recomputed.
  EngineConfig tight = small_config(24, /*prefix_caching=*/false);
  tight.kv_blocks = 12;
  auto engine = make_cpu_engine(model, tight);
  for (const auto& request : requests)
    REQUIRE_FALSE(engine->add(request));
  std::uint64_t preempted = 0;
  // Before each step: what the previous one preempted; then the last's.
  auto streams =
      run_until_idle(*engine, [&](int) { preempted += engine->last_preempted().size(); });
  preempted += engine->last_preempted().size();
  CHECK(preempted > 0);
  CHECK(engine->load().preemptions == preempted);
  REQUIRE(streams.size() == requests.size());
  for (const auto& request : requests) {
    INFO("request " << request.id);
    const Stream alone = run_alone(model, small_config(), request);
    CHECK(streams[request.id].tokens() == alone.tokens());
    CHECK(streams[request.id].text() == alone.text());
    CHECK(streams[request.id].last().finish == FinishReason::Length);
  }
  CHECK(engine->load().free_blocks == tight.kv_blocks);

  // The pool holds 96 tokens, less than the configured context of 128: the
  // engine's context is what the pool holds, so a sequence it accepts always
  // fits alone. 100 prompt tokens are refused at once, with a reason, and a
  // request beside it is unaffected.
  CHECK(engine->max_context() == 96);
  auto refused = engine->add(make_request(10, random_tokens(rng, 100, vocab), greedy(4)));
  REQUIRE(refused);
  CHECK(*refused == AddError::ContextLengthExceeded);
  REQUIRE_FALSE(engine->add(requests[0]));
  streams = run_until_idle(*engine);
  CHECK(streams.count(10) == 0);
  CHECK(streams[0].tokens() == run_alone(model, small_config(), requests[0]).tokens());
  CHECK(engine->load().free_blocks == tight.kv_blocks);
}

TEST_CASE("long prompts over shared prefixes, arriving while others run, in a pool that holds "
          "three of them: every one finishes, none is called unfittable") {
  // The shape of the failure seen with `caflm worker --kv-cache-mb 1`:
  // 700-token prompts, prefix caching on, a pool of 128 blocks of 16. Blocks
  // only the cache holds (a finished or preempted request's prompt) must be
  // evicted whenever a request that fits alone needs them.
  RandomModelSpec spec = caflm::testing::small_random_spec("llama", 41);
  spec.context_length = 1024;
  auto model = caflm::testing::random_model(spec);
  const std::uint32_t vocab = model->config().vocab_size;
  std::mt19937 rng(41);
  std::vector<std::vector<TokenId>> stems;
  for (int i = 0; i < 3; ++i)
    stems.push_back(random_tokens(rng, 300, vocab));
  EngineConfig config;
  config.scheduler.max_requests = 48;
  config.scheduler.max_running = 16;
  config.scheduler.max_context = 1024;
  config.scheduler.block_size = 16;
  config.scheduler.token_budget = 512;
  config.kv_blocks = 128;
  config.prefix_caching = true;
  auto engine = make_cpu_engine(model, config);
  std::uint64_t next_id = 0;
  auto streams = run_until_idle(*engine, [&](int step) {
    // Two arrivals every third step, for the first 60 steps.
    if (step % 3 != 0 || step >= 60)
      return;
    for (int i = 0; i < 2; ++i) {
      auto prompt = stems[next_id % stems.size()];
      auto own =
          random_tokens(rng, std::uniform_int_distribution<std::size_t>(200, 500)(rng), vocab);
      prompt.insert(prompt.end(), own.begin(), own.end());
      REQUIRE_FALSE(engine->add(make_request(next_id++, std::move(prompt), greedy(24))));
    }
  });
  REQUIRE(streams.size() == next_id);
  for (const auto& [id, stream] : streams) {
    INFO("request " << id);
    CHECK(stream.last().finish == FinishReason::Length);
    CHECK(stream.events.size() == 24);
  }
}

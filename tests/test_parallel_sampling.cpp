// Parallel samples of one prompt (an API request's `n` choices): members of a
// prefill group share one prefill and fork its KV pages copy-on-write, and
// each produces exactly the tokens it would have produced alone.
#include <catch2/catch.hpp>

#include <random>
#include <set>

#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "support/engine_harness.hpp"
#include "support/model_harness.hpp"

using namespace caflm;
using namespace caflm::testing;

namespace {

constexpr std::uint64_t kGroup = 77;

std::shared_ptr<const Model> small_random_model() {
  return random_model(small_random_spec("llama", 31));
}

/// Choice `i` of a group: its own seed, as the server gives each choice.
GenerationRequest choice(std::uint64_t id, const std::vector<TokenId>& prompt, std::uint32_t i,
                         std::uint32_t max_tokens, std::uint64_t group = kGroup) {
  SamplingParams params = seeded(max_tokens);
  params.seed = 1000 + i;
  GenerationRequest request = make_request(id, prompt, params);
  request.prefill_group = group;
  return request;
}

/// The tokens choice `i` produces alone, in a fresh engine.
std::vector<TokenId> alone(const std::shared_ptr<const Model>& model, const EngineConfig& config,
                           const std::vector<TokenId>& prompt, std::uint32_t i,
                           std::uint32_t max_tokens) {
  return run_alone(model, config, choice(1, prompt, i, max_tokens, 0)).tokens();
}

} // namespace

TEST_CASE("n choices of one prompt prefill it once and each keeps its own tokens") {
  auto model = small_random_model();
  // No prefix cache: only the fork can spare the repeated prefill.
  const EngineConfig config = small_config(/*token_budget=*/24, /*prefix_caching=*/false);
  std::mt19937 rng(3);
  const std::uint32_t prompt_length = 61; // three prefill chunks, last page partly full
  const std::uint32_t max_tokens = 9;
  const std::uint32_t n = 4;
  const auto prompt = random_tokens(rng, prompt_length, model->config().vocab_size);

  auto engine = make_cpu_engine(model, config);
  for (std::uint32_t i = 0; i < n; ++i)
    REQUIRE_FALSE(engine->add(choice(10 + i, prompt, i, max_tokens)));
  // Followers wait for the leader's prefill; they count as waiting.
  CHECK(engine->load().waiting == n);
  auto streams = run_until_idle(*engine);

  REQUIRE(streams.size() == n);
  std::set<std::vector<TokenId>> distinct;
  for (std::uint32_t i = 0; i < n; ++i) {
    const Stream& stream = streams[10 + i];
    INFO("choice " << i);
    REQUIRE(stream.events.size() == max_tokens);
    CHECK(stream.tokens() == alone(model, config, prompt, i, max_tokens));
    CHECK(stream.last().finish == FinishReason::Length);
    CHECK(stream.last().prompt_tokens == prompt_length);
    distinct.insert(stream.tokens());
  }
  // Different seeds drew different answers: the choices are not copies.
  CHECK(distinct.size() > 1);
  // The prompt once, then one token per choice per later step.
  const LoadReport load = engine->load();
  CHECK(load.computed_tokens == prompt_length + n * (max_tokens - 1));
  CHECK(load.prompt_tokens == n * prompt_length);
  CHECK(load.generated_tokens == n * max_tokens);
  // Every shared and copied page is back in the pool.
  CHECK(load.free_blocks == load.total_blocks);
}

TEST_CASE("greedy choices of one prompt are identical and still prefill once") {
  auto model = small_random_model();
  const EngineConfig config = small_config(24, false);
  std::mt19937 rng(4);
  const auto prompt = random_tokens(rng, 40, model->config().vocab_size);
  auto engine = make_cpu_engine(model, config);
  for (std::uint64_t id = 1; id <= 3; ++id) {
    GenerationRequest request = make_request(id, prompt, greedy(6));
    request.prefill_group = kGroup;
    REQUIRE_FALSE(engine->add(std::move(request)));
  }
  auto streams = run_until_idle(*engine);
  const auto expected = run_alone(model, config, make_request(9, prompt, greedy(6))).tokens();
  for (std::uint64_t id = 1; id <= 3; ++id)
    CHECK(streams[id].tokens() == expected);
  CHECK(engine->load().computed_tokens == 40 + 3 * 5);
}

TEST_CASE("a request that shares only the group, not the prompt, runs on its own") {
  auto model = small_random_model();
  const EngineConfig config = small_config(24, false);
  std::mt19937 rng(5);
  const auto prompt = random_tokens(rng, 30, model->config().vocab_size);
  auto other = prompt;
  other.back() ^= 1;
  auto engine = make_cpu_engine(model, config);
  REQUIRE_FALSE(engine->add(choice(1, prompt, 0, 5)));
  REQUIRE_FALSE(engine->add(choice(2, other, 1, 5)));
  auto streams = run_until_idle(*engine);
  CHECK(streams[1].tokens() == alone(model, config, prompt, 0, 5));
  CHECK(streams[2].tokens() == alone(model, config, other, 1, 5));
  CHECK(engine->load().computed_tokens == 2 * 30 + 2 * 4);
}

TEST_CASE("a member that arrives after the prompt was computed runs on its own") {
  auto model = small_random_model();
  const EngineConfig config = small_config(64, false);
  std::mt19937 rng(6);
  const auto prompt = random_tokens(rng, 20, model->config().vocab_size);
  auto engine = make_cpu_engine(model, config);
  REQUIRE_FALSE(engine->add(choice(1, prompt, 0, 6)));
  auto streams = run_until_idle(*engine, [&](int step) {
    if (step == 2)
      REQUIRE_FALSE(engine->add(choice(2, prompt, 1, 6)));
  });
  CHECK(streams[1].tokens() == alone(model, config, prompt, 0, 6));
  CHECK(streams[2].tokens() == alone(model, config, prompt, 1, 6));
  CHECK(engine->load().computed_tokens == 2 * 20 + 2 * 5);
}

TEST_CASE("cancelling the leader mid-prefill hands the prefill to a follower") {
  auto model = small_random_model();
  const EngineConfig config = small_config(24, false);
  std::mt19937 rng(7);
  const auto prompt = random_tokens(rng, 61, model->config().vocab_size);
  auto engine = make_cpu_engine(model, config);
  for (std::uint32_t i = 0; i < 3; ++i)
    REQUIRE_FALSE(engine->add(choice(1 + i, prompt, i, 5)));
  engine->step(); // the leader's first chunk
  REQUIRE(engine->cancel(1));
  // A cancelled follower simply leaves.
  REQUIRE(engine->cancel(3));
  auto streams = run_until_idle(*engine);
  CHECK(streams.count(1) == 0);
  CHECK(streams.count(3) == 0);
  CHECK(streams[2].tokens() == alone(model, config, prompt, 1, 5));
  const LoadReport load = engine->load();
  CHECK(load.free_blocks == load.total_blocks);
  CHECK(load.running == 0);
  CHECK(load.waiting == 0);
}

TEST_CASE("followers that cannot run yet wait their turn and read the prompt from the prefix "
          "cache") {
  auto model = small_random_model();
  EngineConfig config = small_config(24, true);
  config.scheduler.max_running = 1;
  std::mt19937 rng(8);
  const auto prompt = random_tokens(rng, 45, model->config().vocab_size);
  auto engine = make_cpu_engine(model, config);
  for (std::uint32_t i = 0; i < 3; ++i)
    REQUIRE_FALSE(engine->add(choice(1 + i, prompt, i, 4)));
  auto streams = run_until_idle(*engine);
  for (std::uint32_t i = 0; i < 3; ++i)
    CHECK(streams[1 + i].tokens() == alone(model, config, prompt, i, 4));
  // The later choices found the prompt's full blocks in the cache.
  CHECK(streams[2].last().cached_prompt_tokens == 40);
  CHECK(streams[3].last().cached_prompt_tokens == 40);
}

TEST_CASE("followers hold their slots: a full engine refuses more") {
  auto model = small_random_model();
  EngineConfig config = small_config(24, false);
  config.scheduler.max_requests = 3;
  config.scheduler.max_running = 3;
  std::mt19937 rng(9);
  const auto prompt = random_tokens(rng, 30, model->config().vocab_size);
  auto engine = make_cpu_engine(model, config);
  for (std::uint32_t i = 0; i < 3; ++i)
    REQUIRE_FALSE(engine->add(choice(1 + i, prompt, i, 3)));
  CHECK(engine->add(make_request(9, prompt, greedy(3))) == AddError::Full);
  CHECK(engine->add(choice(10, prompt, 5, 3)) == AddError::Full);
  auto streams = run_until_idle(*engine);
  CHECK(streams.size() == 3);
  for (std::uint32_t i = 0; i < 3; ++i)
    CHECK(streams[1 + i].tokens() == alone(model, config, prompt, i, 3));
}

TEST_CASE("a request's first event reports its queue time, later ones do not") {
  auto model = small_random_model();
  const EngineConfig config = small_config(24, false);
  std::mt19937 rng(10);
  const auto prompt = random_tokens(rng, 30, model->config().vocab_size);
  auto engine = make_cpu_engine(model, config);
  for (std::uint32_t i = 0; i < 2; ++i)
    REQUIRE_FALSE(engine->add(choice(1 + i, prompt, i, 4)));
  auto streams = run_until_idle(*engine);
  for (std::uint64_t id : {1, 2}) {
    const auto& events = streams[id].events;
    REQUIRE(events.size() == 4);
    CHECK(events[0].queue_seconds >= 0.0f);
    for (std::size_t i = 1; i < events.size(); ++i)
      CHECK(events[i].queue_seconds < 0.0f);
  }
}

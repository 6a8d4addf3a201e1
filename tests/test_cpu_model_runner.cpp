// The batched, paged CPU runner against a plain reference forward pass, and
// bitwise batch invariance.
#include <catch2/catch.hpp>

#include <cstring>
#include <omp.h>
#include <random>

#include "support/model_harness.hpp"
#include "support/reference_model.hpp"

using namespace caflm;
using caflm::testing::ModelHarness;
using caflm::testing::random_tokens;
using caflm::testing::ReferenceModel;

namespace {

/// The harness's small shape in `type`, with the default context.
RandomModelSpec small_spec(const std::string& arch, TensorType type, bool tied = false) {
  RandomModelSpec spec = caflm::testing::small_random_spec(arch, 7);
  spec.context_length = RandomModelSpec{}.context_length;
  spec.type = type;
  spec.tied_embeddings = tied;
  return spec;
}

SchedulerConfig config(std::uint32_t budget, std::uint32_t block_size = 4) {
  SchedulerConfig c;
  c.max_requests = 24;
  c.max_context = 160;
  c.block_size = block_size;
  c.token_budget = budget;
  c.max_running = 16;
  return c;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float diff = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i)
    diff = std::max(diff, std::fabs(a[i] - b[i]));
  return diff;
}

/// Checks every recorded row against the reference pass of its script.
void check_against_reference(ModelHarness& harness, const Model& model, float tolerance = 1e-4f,
                             KvCacheType kv_type = KvCacheType::F32) {
  ReferenceModel reference(model, 0, kv_type);
  std::map<std::uint64_t, std::vector<std::vector<float>>> expected;
  float worst = 0.0f;
  for (const auto& [key, row] : harness.logits()) {
    auto& ref = expected[key.first];
    if (ref.empty())
      ref = reference.logits(harness.script(key.first));
    worst = std::max(worst, max_abs_diff(row, ref[key.second]));
  }
  INFO("rows compared: " << harness.logits().size());
  CHECK(harness.logits().size() > 20);
  CHECK(worst < tolerance);
}

} // namespace

TEST_CASE("many sequences of different lengths match the reference pass") {
  // Q8_0 layers quantize their input rows to 8 bits as llama.cpp does: an
  // input that differs from the reference's in the last bit can land on the
  // other side of a rounding step, so only F32/F16/BF16 weights can match a
  // separately computed pass to 1e-4. An F16 KV cache rounds K and V the same
  // way (the reference rounds them too), and a last-bit difference that
  // flips one such rounding moves a logit by up to about 1e-3 (rounding
  // without the reference doing the same moves them by about 5e-3).
  // Blocks of 4 positions run attention's one-lane code, of 16 its vectors.
  auto [arch, type, tied, tolerance, kv_type, block_size] =
      GENERATE(table<std::string, TensorType, bool, float, KvCacheType, std::uint32_t>({
          {"llama", TensorType::F32, false, 1e-4f, KvCacheType::F32, 4},
          {"llama", TensorType::F32, false, 1e-4f, KvCacheType::F32, 16},
          {"qwen2", TensorType::F32, false, 1e-4f, KvCacheType::F32, 4},
          {"llama", TensorType::F16, true, 1e-4f, KvCacheType::F32, 16},
          {"qwen2", TensorType::BF16, false, 1e-4f, KvCacheType::F32, 4},
          {"llama", TensorType::Q8_0, false, 0.15f, KvCacheType::F32, 4},
          {"llama", TensorType::F32, false, 1.5e-3f, KvCacheType::F16, 16},
          {"qwen2", TensorType::F16, true, 1.5e-3f, KvCacheType::F16, 4},
      }));
  INFO(arch << " " << to_string(type) << (tied ? " tied" : "") << ", KV cache "
            << to_string(kv_type) << " in blocks of " << block_size);
  auto model = caflm::testing::random_model(small_spec(arch, type, tied));
  const std::uint32_t vocab = model->config().vocab_size;
  ModelHarness harness(model, config(24, block_size), 200, true, kv_type);
  std::mt19937 rng(11);
  for (std::uint64_t id = 0; id < 8; ++id) {
    auto prompt_length = static_cast<std::uint32_t>(1 + (id * 7) % 23);
    harness.admit(id, random_tokens(rng, prompt_length + 6, vocab), prompt_length);
  }
  harness.run_until_idle();
  check_against_reference(harness, *model, tolerance, kv_type);
}

TEST_CASE("prefix-cache hits, forks with copy-on-write and preemption match the reference") {
  auto model = caflm::testing::random_model(small_spec("llama", TensorType::F32));
  const std::uint32_t vocab = model->config().vocab_size;
  std::mt19937 rng(5);
  auto system_prompt = random_tokens(rng, 13, vocab);
  auto with_system = [&](std::size_t extra) {
    auto tokens = system_prompt;
    auto more = random_tokens(rng, extra, vocab);
    tokens.insert(tokens.end(), more.begin(), more.end());
    return tokens;
  };

  SECTION("prefix hits and forks") {
    ModelHarness harness(model, config(32), 200);
    REQUIRE(harness.admit(0, with_system(8), 15));
    harness.step(); // prefill publishes the system prompt's full blocks
    for (std::uint64_t id = 1; id < 4; ++id)
      REQUIRE(harness.admit(id, with_system(10), 17));
    harness.step();
    CHECK(harness.table().view(harness.table().find(1)).cached_prompt_tokens == 12);
    harness.step();
    // Fork request 1 mid-block; both sides continue differently.
    auto child = harness.script(1);
    child.resize(harness.table().view(harness.table().find(1)).token_count);
    auto tail = random_tokens(rng, 6, vocab);
    child.insert(child.end(), tail.begin(), tail.end());
    REQUIRE(harness.fork(1, 9, child));
    harness.run_until_idle();
    CHECK(harness.cache().hits() >= 9);
    check_against_reference(harness, *model);
  }

  SECTION("preemption and recompute") {
    ModelHarness harness(model, config(32), 14, /*prefix_cache=*/false);
    for (std::uint64_t id = 0; id < 5; ++id)
      REQUIRE(harness.admit(id, with_system(20), 9));
    harness.run_until_idle();
    CHECK(harness.preemptions() > 0);
    check_against_reference(harness, *model);
  }
}

TEST_CASE("a sequence's logits are bitwise the same whatever shares its step") {
  // Every architecture's own steps (qwen3's head norms, phi3's fused
  // matrices and LongRoPE) and every kind of weight kernel: float, Q8_0,
  // the legacy quants (Q5_0/Q8_0 are Q4_K_M's fallbacks at width 64) and a
  // K-quant mixture at width 256.
  // Both KV cache types, and blocks of 4 (attention's one-lane code) and 16
  // (its vectors).
  auto [arch, type, mix, kv_type, block_size] =
      GENERATE(table<std::string, TensorType, QuantMix, KvCacheType, std::uint32_t>({
          {"qwen2", TensorType::F32, QuantMix::Uniform, KvCacheType::F32, 4},
          {"qwen2", TensorType::F32, QuantMix::Uniform, KvCacheType::F16, 16},
          {"qwen2", TensorType::F16, QuantMix::Uniform, KvCacheType::F32, 16},
          {"qwen2", TensorType::BF16, QuantMix::Uniform, KvCacheType::F16, 4},
          {"qwen2", TensorType::Q8_0, QuantMix::Uniform, KvCacheType::F32, 16},
          {"qwen3", TensorType::Q4_1, QuantMix::Uniform, KvCacheType::F32, 4},
          {"phi3", TensorType::Q4_K, QuantMix::Q4_K_M, KvCacheType::F32, 4},
          {"llama", TensorType::Q4_K, QuantMix::Q4_K_M, KvCacheType::F32, 16},
      }));
  INFO(arch << " " << to_string(type) << " " << to_string(mix) << ", KV cache "
            << to_string(kv_type) << " in blocks of " << block_size);
  const KvCacheType cache_type = kv_type; // lambdas capture no structured binding in C++17
  const std::uint32_t cache_block_size = block_size;
  RandomModelSpec spec = small_spec(arch, type);
  spec.mix = mix;
  if (arch == "llama") {
    spec.dim = 256;
    spec.ffn_dim = 512;
  }
  if (arch == "phi3") {
    spec.rope_scaling = RandomRopeScaling::LongRope;
    spec.original_context_length = 64;
  }
  auto model = caflm::testing::random_model(spec);
  const std::uint32_t vocab = model->config().vocab_size;
  std::mt19937 rng(3);
  const auto subject = random_tokens(rng, 40, vocab);

  // Subject alone, its prompt prefilled in one chunk.
  auto run = [&](std::uint32_t budget, std::uint32_t companions, int threads, bool subject_last) {
    omp_set_num_threads(threads);
    ModelHarness harness(model, config(budget, cache_block_size), 400, true, cache_type);
    std::mt19937 other_rng(companions);
    auto add_companions = [&] {
      for (std::uint32_t c = 0; c < companions; ++c) {
        auto length = 1 + c % 19;
        harness.admit(100 + c, random_tokens(other_rng, length + 12, vocab), length);
      }
    };
    if (subject_last)
      add_companions();
    harness.admit(1, subject, 25);
    if (!subject_last)
      add_companions();
    harness.run_until_idle();
    omp_set_num_threads(2);
    std::vector<std::vector<float>> rows;
    for (const auto& [key, row] : harness.logits())
      if (key.first == 1)
        rows.push_back(row);
    return rows;
  };

  const auto alone = run(64, 0, 2, false);
  REQUIRE(alone.size() == 16);
  auto same = [&](const std::vector<std::vector<float>>& other) {
    if (other.size() != alone.size())
      return false;
    for (std::size_t i = 0; i < alone.size(); ++i)
      if (std::memcmp(alone[i].data(), other[i].data(), alone[i].size() * sizeof(float)) != 0)
        return false;
    return true;
  };
  CHECK(same(run(1, 0, 2, false)));   // every token entered by its own one-token step
  CHECK(same(run(7, 0, 2, false)));   // chunked prefill
  CHECK(same(run(64, 15, 2, false))); // with 15 other sequences, first in the batch
  CHECK(same(run(64, 15, 2, true)));  // ... and later in the batch
  CHECK(same(run(13, 9, 2, true)));   // mixed chunks and decodes
  CHECK(same(run(64, 15, 1, false))); // one thread
}

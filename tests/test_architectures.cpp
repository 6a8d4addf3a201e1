// Every architecture and RoPE scaling caflm runs, through the batched, paged
// CPU runner against the plain reference pass (which reads the GGUF file on
// its own); and the loader's refusals of what it does not run.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <set>

#include "caflm/gguf/gguf_writer.hpp"
#include "support/model_harness.hpp"
#include "support/reference_model.hpp"

using namespace caflm;
using caflm::testing::ModelHarness;
using caflm::testing::random_tokens;
using caflm::testing::ReferenceModel;
using Catch::Matchers::Contains;

namespace {

constexpr std::uint32_t kRunnerContext = 160;

SchedulerConfig scheduler_config(std::uint32_t budget) {
  SchedulerConfig c;
  c.max_requests = 24;
  c.max_context = kRunnerContext;
  c.block_size = 4;
  c.token_budget = budget;
  c.max_running = 16;
  return c;
}

/// The harness's small shape in `type`, with the default context (the
/// RoPE-scaling cases derive their original context from it).
RandomModelSpec spec_of(const std::string& arch, TensorType type, std::uint64_t seed = 7) {
  RandomModelSpec spec = caflm::testing::small_random_spec(arch, seed);
  spec.context_length = RandomModelSpec{}.context_length;
  spec.type = type;
  return spec;
}

std::size_t argmax(const std::vector<float>& row) {
  return static_cast<std::size_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

/// The largest logit minus the second largest.
float top_margin(const std::vector<float>& row) {
  std::vector<float> sorted = row;
  std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
  return sorted[0] - sorted[1];
}

struct Comparison {
  std::size_t rows = 0;
  float worst = 0.0f; // largest difference over the RMS of the reference's row
  std::size_t greedy_compared = 0;
  std::size_t greedy_mismatches = 0;
};

/// Runs several sequences of different lengths (chunked prefill, then one
/// decode per scripted token) and compares every row of logits with the
/// reference: the largest difference relative to the row's RMS (random
/// models' logits range from about 4 to 25 in RMS), and the greedy (argmax)
/// token wherever the reference's choice is clear by more than twice the
/// tolerance.
Comparison run_and_compare(const std::shared_ptr<const Model>& model, float tolerance) {
  const std::uint32_t vocab = model->config().vocab_size;
  ModelHarness harness(model, scheduler_config(24), 200);
  std::mt19937 rng(11);
  for (std::uint64_t id = 0; id < 6; ++id) {
    auto prompt_length = static_cast<std::uint32_t>(1 + (id * 7) % 23);
    harness.admit(id, random_tokens(rng, prompt_length + 6, vocab), prompt_length);
  }
  harness.run_until_idle();

  ReferenceModel reference(*model, kRunnerContext);
  std::map<std::uint64_t, std::vector<std::vector<float>>> expected;
  Comparison result;
  for (const auto& [key, row] : harness.logits()) {
    auto& ref = expected[key.first];
    if (ref.empty())
      ref = reference.logits(harness.script(key.first));
    const std::vector<float>& want = ref[key.second];
    double squares = 0.0;
    for (float v : want)
      squares += double(v) * v;
    const auto rms = static_cast<float>(std::sqrt(squares / want.size()));
    for (std::size_t i = 0; i < row.size(); ++i)
      result.worst = std::max(result.worst, std::fabs(row[i] - want[i]) / rms);
    ++result.rows;
    if (top_margin(want) > 2 * tolerance * rms) {
      ++result.greedy_compared;
      result.greedy_mismatches += argmax(row) != argmax(want);
    }
  }
  return result;
}

void check_matches_reference(const RandomModelSpec& spec, float tolerance) {
  auto model = caflm::testing::random_model(spec);
  const Comparison c = run_and_compare(model, tolerance);
  INFO("rows " << c.rows << ", worst difference " << c.worst << ", greedy compared "
               << c.greedy_compared);
  CHECK(c.rows > 20);
  CHECK(c.worst < tolerance);
  CHECK(c.greedy_compared > c.rows / 4);
  CHECK(c.greedy_mismatches == 0);
}

std::string temp_path(const std::string& stem) {
  return (std::filesystem::temp_directory_path() /
          ("caflm-arch-" + std::to_string(::getpid()) + "-" + stem + ".gguf"))
      .string();
}

/// Copies one metadata entry (the writer sets general.alignment itself).
void copy_key(GgufWriter& writer, const GgufFile& source, std::string_view key) {
  if (key == "general.alignment")
    writer.add_uint32(key, static_cast<std::uint32_t>(*source.get_uint(key)));
  else
    writer.add_raw(key, *source.raw_value(key));
}

/// A GGUF copy of `source` with metadata edits, tensors dropped and tensors
/// added; returns its path.
std::string rewrite(const GgufFile& source, const std::string& stem,
                    const std::map<std::string, std::string>& string_keys,
                    const std::set<std::string>& drop_tensors,
                    const std::function<void(GgufWriter&)>& add = {}) {
  GgufWriter writer;
  for (std::string_view key : source.keys()) {
    auto replaced = string_keys.find(std::string(key));
    if (replaced != string_keys.end())
      writer.add_string(key, replaced->second);
    else
      copy_key(writer, source, key);
  }
  for (const auto& [key, value] : string_keys)
    if (!source.has_key(key))
      writer.add_string(key, value);
  for (const GgufTensorInfo& t : source.tensors())
    if (drop_tensors.count(t.name) == 0)
      writer.add_tensor(t.name, t.type, t.dims,
                        std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
  if (add)
    add(writer);
  const std::string path = temp_path(stem);
  writer.write(path);
  return path;
}

std::string random_model_path(const RandomModelSpec& spec, const std::string& stem) {
  const std::string path = temp_path(stem);
  write_random_model(spec, caflm::testing::test_vocabulary_file(), path);
  return path;
}

/// Model::load's error for the file at `path`, which it then removes.
std::string load_error(const std::string& path) {
  std::string message;
  try {
    Model::load(path);
  } catch (const GgufError& e) {
    message = e.what();
  }
  std::filesystem::remove(path);
  return message;
}

} // namespace

TEST_CASE("every architecture matches the reference pass, logits and greedy tokens") {
  // Mistral-style: llama with heads wider than dim / n_heads (key_length).
  RandomModelSpec mistral = spec_of("llama", TensorType::F32);
  mistral.head_dim = 32;
  RandomModelSpec qwen3 = spec_of("qwen3", TensorType::F32);
  qwen3.head_dim = 32; // q is 128 wide over a 64-wide model, as Qwen3 is
  RandomModelSpec qwen3_tied = spec_of("qwen3", TensorType::F16);
  qwen3_tied.tied_embeddings = true;
  RandomModelSpec phi3_q8 = spec_of("phi3", TensorType::Q8_0);
  RandomModelSpec qwen3_q8 = spec_of("qwen3", TensorType::Q8_0);

  // Quantized layers round their input rows to 8 bits as llama.cpp does; an
  // input that differs from the reference's in the last bit can land on the
  // other side of a rounding step, hence a looser tolerance there (a few
  // percent of the logits' RMS is what such flips add up to).
  auto [name, spec, tolerance] = GENERATE_COPY(table<std::string, RandomModelSpec, float>({
      {"llama", spec_of("llama", TensorType::F32), 1e-4f},
      {"llama mistral-style heads", mistral, 1e-4f},
      {"qwen2", spec_of("qwen2", TensorType::F32), 1e-4f},
      {"qwen3", qwen3, 1e-4f},
      {"qwen3 f16 tied", qwen3_tied, 1e-4f},
      {"phi3", spec_of("phi3", TensorType::F32), 1e-4f},
      {"phi3 bf16", spec_of("phi3", TensorType::BF16), 1e-4f},
      {"phi3 q8_0", phi3_q8, 0.1f},
      {"qwen3 q8_0", qwen3_q8, 0.1f},
  }));
  INFO(name);
  check_matches_reference(spec, tolerance);
}

TEST_CASE("every weight type, and llama.cpp's Q4_K_M mixture on real models' shapes") {
  // K-quant blocks hold 256 values: a 256-wide model with 64-wide heads.
  auto wide = [](const std::string& arch, TensorType type) {
    RandomModelSpec spec = spec_of(arch, type, 5);
    spec.dim = 256;
    spec.ffn_dim = 512;
    return spec;
  };
  // SmolLM-135M's width (576 = 9 heads of 64 over 3 KV heads; FFN 1536):
  // token_embd/output in Q8_0, attn_q/k/output, ffn_gate/up in Q5_0
  // (fallbacks), attn_v in Q8_0 or Q5_0, ffn_down in Q6_K or Q4_K.
  RandomModelSpec smollm = spec_of("llama", TensorType::Q4_K, 5);
  smollm.mix = QuantMix::Q4_K_M;
  smollm.dim = 576;
  smollm.n_heads = 9;
  smollm.n_kv_heads = 3;
  smollm.ffn_dim = 1536;
  smollm.n_layers = 4;
  smollm.tied_embeddings = true;
  // Qwen2.5-0.5B's width (896 = 14 heads of 64 over 2 KV heads).
  RandomModelSpec qwen = spec_of("qwen2", TensorType::Q4_K, 5);
  qwen.mix = QuantMix::Q4_K_M;
  qwen.dim = 896;
  qwen.n_heads = 14;
  qwen.n_kv_heads = 2;
  qwen.ffn_dim = 1024;
  RandomModelSpec phi3 = wide("phi3", TensorType::Q4_K);
  phi3.mix = QuantMix::Q4_K_M;
  phi3.rope_scaling = RandomRopeScaling::LongRope;
  phi3.original_context_length = 64;
  RandomModelSpec qwen3 = wide("qwen3", TensorType::Q4_K);
  qwen3.mix = QuantMix::Q4_K_M;

  auto [name, spec, tolerance] = GENERATE_COPY(table<std::string, RandomModelSpec, float>({
      {"q4_0", wide("llama", TensorType::Q4_0), 0.1f},
      {"q4_1", wide("qwen2", TensorType::Q4_1), 0.1f},
      {"q5_0", wide("qwen3", TensorType::Q5_0), 0.1f},
      {"q5_1", wide("phi3", TensorType::Q5_1), 0.1f},
      {"q2_k", wide("llama", TensorType::Q2_K), 0.1f},
      {"q3_k", wide("qwen2", TensorType::Q3_K), 0.1f},
      {"q4_k", wide("qwen3", TensorType::Q4_K), 0.1f},
      {"q5_k", wide("phi3", TensorType::Q5_K), 0.1f},
      {"q6_k", wide("llama", TensorType::Q6_K), 0.1f},
      {"llama q4_k_m 576", smollm, 0.1f},
      {"qwen2 q4_k_m 896", qwen, 0.1f},
      {"phi3 q4_k_m longrope", phi3, 0.1f},
      {"qwen3 q4_k_m", qwen3, 0.1f},
  }));
  INFO(name);
  check_matches_reference(spec, tolerance);
}

TEST_CASE("RoPE scaling: llama3 rope_freqs, linear factor, phi3 LongRoPE") {
  RandomModelSpec llama3 = spec_of("llama", TensorType::F32);
  llama3.rope_scaling = RandomRopeScaling::Llama3;
  llama3.original_context_length = 64; // low frequencies well inside the test's context
  RandomModelSpec linear = spec_of("llama", TensorType::F32);
  linear.rope_scaling = RandomRopeScaling::Linear;
  linear.rope_scaling_factor = 4.0f;
  // The runner's context (160) exceeds an original context of 64: long
  // factors; within one of 1024: short factors.
  RandomModelSpec long_factors = spec_of("phi3", TensorType::F32);
  long_factors.rope_scaling = RandomRopeScaling::LongRope;
  long_factors.rope_scaling_factor = 40.0f;
  long_factors.original_context_length = 64;
  RandomModelSpec short_factors = long_factors;
  short_factors.original_context_length = 1024;

  auto [name, spec] = GENERATE_COPY(table<std::string, RandomModelSpec>({
      {"llama3", llama3},
      {"linear", linear},
      {"longrope long", long_factors},
      {"longrope short", short_factors},
  }));
  INFO(name);
  check_matches_reference(spec, 1e-4f);
}

TEST_CASE("llama files may carry biases on every projection, as llama.cpp allows") {
  const std::string plain = random_model_path(spec_of("llama", TensorType::F32), "plain");
  const GgufFile source = GgufFile::open(plain);
  std::filesystem::remove(plain);
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 0.2f);
  const std::string path = rewrite(source, "biased", {}, {}, [&](GgufWriter& w) {
    for (int layer = 0; layer < 2; ++layer) {
      const std::string p = "blk." + std::to_string(layer) + ".";
      for (auto [name, n] : {std::pair<std::string, std::size_t>{"attn_q.bias", 64},
                             {"attn_k.bias", 32},
                             {"attn_v.bias", 32},
                             {"attn_output.bias", 64},
                             {"ffn_gate.bias", 96},
                             {"ffn_up.bias", 96},
                             {"ffn_down.bias", 64}}) {
        std::vector<float> values(n);
        for (float& v : values)
          v = normal(rng);
        w.add_tensor(p + name, TensorType::F32, {n},
                     quantize_row(TensorType::F32, values.data(), values.size()));
      }
    }
  });
  auto model = Model::load(path);
  std::filesystem::remove(path);
  REQUIRE(model->weights().layers[1].b_down.size() == 64);
  const Comparison c = run_and_compare(model, 1e-4f);
  INFO("worst difference " << c.worst);
  CHECK(c.worst < 1e-4f);
  CHECK(c.greedy_mismatches == 0);
}

TEST_CASE("the loader reads each architecture's scaling as llama.cpp does") {
  SECTION("llama3 rope_freqs: 1 for high frequencies, the factor for low ones") {
    RandomModelSpec spec = spec_of("llama", TensorType::F32);
    spec.rope_scaling = RandomRopeScaling::Llama3;
    spec.original_context_length = 64;
    auto model = caflm::testing::random_model(spec);
    const auto& factors = model->weights().rope_freq_factors;
    REQUIRE(factors.size() == 8);
    CHECK(factors.front() == 1.0f);
    CHECK(factors.back() == 8.0f);
    CHECK(model->config().rope_base == 500000.0f);
    CHECK(model->weights().rope_factors(model->config(), 4096) == factors.data());
  }
  SECTION("phi3 longrope: long factors only beyond the original context") {
    RandomModelSpec spec = spec_of("phi3", TensorType::F32);
    spec.rope_scaling = RandomRopeScaling::LongRope;
    spec.context_length = 4096;
    spec.original_context_length = 128;
    auto model = caflm::testing::random_model(spec);
    const ModelConfig& c = model->config();
    const ModelWeights& w = model->weights();
    CHECK(c.rope_original_context == 128);
    // sqrt(1 + ln(4096 / 128) / ln(128)), as convert_hf_to_gguf.py writes it.
    CHECK(c.rope_attn_factor == Approx(std::sqrt(1 + std::log(32.0) / std::log(128.0))));
    CHECK(w.rope_factors(c, 128) == w.rope_factors_short.data());
    CHECK(w.rope_factors(c, 129) == w.rope_factors_long.data());
    // The sliding window phi3 files carry is ignored, as llama.cpp does.
    CHECK(model->file().has_key("phi3.attention.sliding_window"));
  }
  SECTION("linear factor") {
    RandomModelSpec spec = spec_of("qwen2", TensorType::F32);
    spec.rope_scaling = RandomRopeScaling::Linear;
    spec.rope_scaling_factor = 4.0f;
    auto model = caflm::testing::random_model(spec);
    CHECK(model->config().rope_freq_scale == 0.25f);
    CHECK(model->config().rope_scaling == RopeScaling::Linear);
  }
}

TEST_CASE("what caflm does not run is refused at load, by name") {
  const std::string base_path = random_model_path(spec_of("llama", TensorType::F32), "base");
  const GgufFile base = GgufFile::open(base_path);
  std::filesystem::remove(base_path);

  SECTION("an unsupported architecture") {
    auto message = load_error(rewrite(base, "gemma", {{"general.architecture", "gemma2"}}, {}));
    CHECK_THAT(message, Contains("unsupported architecture 'gemma2'"));
  }
  SECTION("YaRN RoPE scaling") {
    auto message = load_error(rewrite(base, "yarn", {{"llama.rope.scaling.type", "yarn"}}, {}));
    CHECK_THAT(message, Contains("yarn") && Contains("llama.rope.scaling.type"));
  }
  SECTION("a missing tensor") {
    auto message = load_error(rewrite(base, "missing", {}, {"blk.1.ffn_gate.weight"}));
    CHECK_THAT(message, Contains("lacks tensor 'blk.1.ffn_gate.weight'"));
  }
  SECTION("a tensor the architecture does not use") {
    auto message = load_error(rewrite(base, "extra", {}, {}, [](GgufWriter& w) {
      std::vector<float> values(64, 1.0f);
      w.add_tensor("blk.0.attn_q_norm.weight", TensorType::F32, {64},
                   quantize_row(TensorType::F32, values.data(), values.size()));
    }));
    CHECK_THAT(message, Contains("'blk.0.attn_q_norm.weight'") && Contains("'llama'"));
  }
  SECTION("a tensor of a type caflm cannot compute with") {
    // Rewrite the type field of one tensor's info to ggml's iq2_xxs (16).
    GgufWriter writer;
    for (std::string_view key : base.keys())
      copy_key(writer, base, key);
    for (const GgufTensorInfo& t : base.tensors())
      writer.add_tensor(t.name, t.type, t.dims,
                        std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
    std::vector<std::uint8_t> image = writer.to_bytes();
    const std::string name = "blk.0.attn_k.weight";
    auto at = std::search(image.begin(), image.end(), name.begin(), name.end());
    REQUIRE(at != image.end());
    std::size_t offset = static_cast<std::size_t>(at - image.begin()) + name.size();
    std::uint32_t n_dims = 0;
    std::memcpy(&n_dims, &image[offset], 4);
    const std::uint32_t iq2_xxs = 16;
    std::memcpy(&image[offset + 4 + 8 * n_dims], &iq2_xxs, 4);
    const std::string path = temp_path("iq2");
    {
      std::FILE* f = std::fopen(path.c_str(), "wb");
      REQUIRE(f != nullptr);
      std::fwrite(image.data(), 1, image.size(), f);
      std::fclose(f);
    }
    auto message = load_error(path);
    CHECK_THAT(message, Contains("blk.0.attn_k.weight") && Contains("iq2_xxs"));
  }
  SECTION("a fused phi3 matrix of the wrong shape") {
    const std::string phi3_path = random_model_path(spec_of("phi3", TensorType::F32), "phi3");
    const GgufFile phi3 = GgufFile::open(phi3_path);
    std::filesystem::remove(phi3_path);
    auto message =
        load_error(rewrite(phi3, "phi3-bad", {}, {"blk.0.attn_qkv.weight"}, [](GgufWriter& w) {
          std::vector<float> values(64 * 64, 0.5f);
          w.add_tensor("blk.0.attn_qkv.weight", TensorType::F32, {64, 64},
                       quantize_row(TensorType::F32, values.data(), values.size()));
        }));
    CHECK_THAT(message, Contains("'blk.0.attn_qkv.weight'") && Contains("expected 64 x 128"));
  }
  SECTION("partial RoPE") {
    GgufWriter partial;
    for (std::string_view key : base.keys())
      if (key == "llama.rope.dimension_count")
        partial.add_uint32(key, 8);
      else
        copy_key(partial, base, key);
    for (const GgufTensorInfo& t : base.tensors())
      partial.add_tensor(t.name, t.type, t.dims,
                         std::vector<std::uint8_t>(t.data, t.data + t.n_bytes));
    const std::string partial_path = temp_path("partial2");
    partial.write(partial_path);
    CHECK_THAT(load_error(partial_path), Contains("partial RoPE"));
  }
}

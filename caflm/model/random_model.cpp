#include "caflm/model/random_model.hpp"

#include <cmath>
#include <fmt/format.h>
#include <random>
#include <stdexcept>
#include <vector>

#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/gguf_writer.hpp"
#include "caflm/gguf/quantize.hpp"

namespace caflm {

std::optional<RandomRopeScaling> random_rope_scaling_from_name(std::string_view name) {
  if (name == "none")
    return RandomRopeScaling::None;
  if (name == "linear")
    return RandomRopeScaling::Linear;
  if (name == "llama3")
    return RandomRopeScaling::Llama3;
  if (name == "longrope")
    return RandomRopeScaling::LongRope;
  return std::nullopt;
}

namespace {

/// Normal draws from a seeded 64-bit Mersenne Twister through Box-Muller,
/// so the file is the same with any standard library.
class NormalSource {
 public:
  explicit NormalSource(std::uint64_t seed)
    : engine_(seed) {}

  float next() {
    constexpr double two_pi = 6.283185307179586;
    double u1 = (double(engine_() >> 11) + 0.5) / 9007199254740992.0;
    double u2 = double(engine_() >> 11) / 9007199254740992.0;
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2));
  }

 private:
  std::mt19937_64 engine_;
};

bool is_architecture(const std::string& a) {
  return a == "llama" || a == "qwen2" || a == "qwen3" || a == "phi3";
}

/// Checks that `spec` describes a model caflm can build.
void check_shape(const RandomModelSpec& spec) {
  if (!is_architecture(spec.architecture))
    throw std::invalid_argument(
        fmt::format("unknown architecture '{}' (llama, qwen2, qwen3 or phi3)", spec.architecture));
  if (spec.dim == 0 || spec.n_layers == 0 || spec.n_heads == 0 || spec.n_kv_heads == 0 ||
      spec.ffn_dim == 0 || spec.context_length == 0)
    throw std::invalid_argument("every dimension must be positive");
  if (spec.head_dim == 0 && spec.dim % spec.n_heads != 0)
    throw std::invalid_argument("dim must split into heads (or give a head dimension)");
  if (spec.head_size() == 0 || spec.head_size() % 2 != 0)
    throw std::invalid_argument("heads must have an even, positive size");
  if (spec.n_heads % spec.n_kv_heads != 0)
    throw std::invalid_argument("heads must be a multiple of kv-heads");
  if (spec.rope_scaling == RandomRopeScaling::Llama3 && spec.architecture != "llama")
    throw std::invalid_argument("llama3 RoPE scaling is written for llama models only");
  if (spec.rope_scaling == RandomRopeScaling::LongRope && spec.architecture != "phi3")
    throw std::invalid_argument("longrope RoPE scaling is written for phi3 models only");
  if (spec.rope_scaling == RandomRopeScaling::LongRope && spec.original_context_length == 1)
    throw std::invalid_argument("the original context must be at least 2 tokens");
  if (spec.rope_scaling != RandomRopeScaling::None && !(spec.rope_scaling_factor >= 1.0f))
    throw std::invalid_argument("the RoPE scaling factor must be at least 1");
}

/// Visits every tensor of the model in file order. `Visitor` has
/// matrix(name, role, layer, rows, cols, stddev), vector(name, n, mean,
/// stddev) and values(name, std::vector<float>).
template <class Visitor>
void visit_tensors(const RandomModelSpec& spec, std::uint64_t vocab_size, Visitor& v) {
  const std::string& a = spec.architecture;
  const std::uint64_t head_dim = spec.head_size();
  const std::uint64_t q_dim = std::uint64_t{spec.n_heads} * head_dim;
  const std::uint64_t kv_dim = std::uint64_t{spec.n_kv_heads} * head_dim;
  const std::uint64_t dim = spec.dim;
  const std::uint64_t ffn = spec.ffn_dim;
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(dim));
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(q_dim));
  const float ffn_scale = 1.0f / std::sqrt(static_cast<float>(ffn));

  v.matrix("token_embd.weight", WeightRole::TokenEmbedding, 0, vocab_size, dim, 1.0f);
  v.vector("output_norm.weight", dim, 1.0f, 0.05f);
  if (!spec.tied_embeddings)
    v.matrix("output.weight", WeightRole::Output, 0, vocab_size, dim, 4 * in_scale);
  const std::uint64_t n_pairs = head_dim / 2;
  if (spec.rope_scaling == RandomRopeScaling::Llama3) {
    // convert_hf_to_gguf.py's LlamaModel: per-pair divisors of the angle.
    const double base = spec.rope_base != 0.0f ? spec.rope_base : 500000.0;
    const double old_context =
        spec.original_context_length != 0 ? spec.original_context_length : 8192.0;
    const double factor = spec.rope_scaling_factor, low = 1.0, high = 4.0;
    std::vector<float> factors(n_pairs);
    for (std::uint64_t i = 0; i < n_pairs; ++i) {
      const double freq = std::pow(base, -2.0 * double(i) / double(head_dim));
      const double wavelength = 2 * M_PI / freq;
      if (wavelength < old_context / high) {
        factors[i] = 1.0f;
      } else if (wavelength > old_context / low) {
        factors[i] = static_cast<float>(factor);
      } else {
        const double smooth = (old_context / wavelength - low) / (high - low);
        factors[i] = static_cast<float>(1.0 / ((1 - smooth) / factor + smooth));
      }
    }
    v.values("rope_freqs.weight", std::move(factors));
  } else if (spec.rope_scaling == RandomRopeScaling::LongRope) {
    // Shaped like Phi-3.5's: short factors a little above 1, long ones
    // rising to the scaling factor.
    std::vector<float> long_factors(n_pairs), short_factors(n_pairs);
    for (std::uint64_t i = 0; i < n_pairs; ++i) {
      const double t = n_pairs > 1 ? double(i) / double(n_pairs - 1) : 1.0;
      long_factors[i] = static_cast<float>(1.0 + (spec.rope_scaling_factor - 1.0) * t * t);
      short_factors[i] = static_cast<float>(1.0 + 0.5 * t);
    }
    v.values("rope_factors_long.weight", std::move(long_factors));
    v.values("rope_factors_short.weight", std::move(short_factors));
  }

  const bool phi3 = a == "phi3";
  for (std::uint32_t i = 0; i < spec.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    v.vector(p + "attn_norm.weight", dim, 1.0f, 0.05f);
    if (phi3) {
      v.matrix(p + "attn_qkv.weight", WeightRole::AttnQkv, i, q_dim + 2 * kv_dim, dim, in_scale);
    } else {
      v.matrix(p + "attn_q.weight", WeightRole::AttnQ, i, q_dim, dim, in_scale);
      v.matrix(p + "attn_k.weight", WeightRole::AttnK, i, kv_dim, dim, in_scale);
      v.matrix(p + "attn_v.weight", WeightRole::AttnV, i, kv_dim, dim, in_scale);
    }
    if (a == "qwen2") {
      v.vector(p + "attn_q.bias", q_dim, 0.0f, 0.1f);
      v.vector(p + "attn_k.bias", kv_dim, 0.0f, 0.1f);
      v.vector(p + "attn_v.bias", kv_dim, 0.0f, 0.1f);
    }
    if (a == "qwen3") {
      v.vector(p + "attn_q_norm.weight", head_dim, 1.0f, 0.05f);
      v.vector(p + "attn_k_norm.weight", head_dim, 1.0f, 0.05f);
    }
    v.matrix(p + "attn_output.weight", WeightRole::AttnOutput, i, dim, q_dim, q_scale);
    v.vector(p + "ffn_norm.weight", dim, 1.0f, 0.05f);
    if (phi3) {
      v.matrix(p + "ffn_up.weight", WeightRole::FfnUp, i, 2 * ffn, dim, in_scale);
    } else {
      v.matrix(p + "ffn_gate.weight", WeightRole::FfnGate, i, ffn, dim, in_scale);
      v.matrix(p + "ffn_up.weight", WeightRole::FfnUp, i, ffn, dim, in_scale);
    }
    v.matrix(p + "ffn_down.weight", WeightRole::FfnDown, i, dim, ffn, ffn_scale);
  }
}

/// The type llama-quantize would give a matrix of `spec`'s model.
TensorType matrix_type(const RandomModelSpec& spec, const std::string& name, WeightRole role,
                       std::uint32_t layer, std::uint64_t cols) {
  const TensorType base = spec.mix == QuantMix::Q4_K_M ? TensorType::Q4_K : spec.type;
  try {
    return quant_mix_type(spec.mix, base,
                          WeightPlace{role, layer, spec.n_layers, cols, spec.tied_embeddings});
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("tensor '{}': {}", name, e.what()));
  }
}

/// Sums the tensors' bytes, refusing a total that overflows.
struct ByteCounter {
  const RandomModelSpec& spec;
  std::uint64_t total = 0;

  void add(std::uint64_t rows, std::uint64_t row_bytes) {
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(rows, row_bytes, &bytes) ||
        __builtin_add_overflow(total, bytes, &total))
      throw std::invalid_argument("the model's size overflows");
  }
  void matrix(const std::string& name, WeightRole role, std::uint32_t layer, std::uint64_t rows,
              std::uint64_t cols, float) {
    add(rows, tensor_row_bytes(matrix_type(spec, name, role, layer, cols), cols));
  }
  void vector(const std::string&, std::uint64_t n, float, float) { add(n, sizeof(float)); }
  void values(const std::string&, const std::vector<float>& v) { add(v.size(), sizeof(float)); }
};

/// Draws each tensor's values and adds it to the writer.
struct TensorWriter {
  const RandomModelSpec& spec;
  GgufWriter& writer;
  NormalSource normal;

  void matrix(const std::string& name, WeightRole role, std::uint32_t layer, std::uint64_t rows,
              std::uint64_t cols, float stddev) {
    const TensorType type = matrix_type(spec, name, role, layer, cols);
    std::vector<float> row(cols);
    std::vector<std::uint8_t> bytes;
    bytes.reserve(tensor_row_bytes(type, cols) * rows);
    for (std::uint64_t r = 0; r < rows; ++r) {
      for (float& v : row)
        v = normal.next() * stddev;
      auto encoded = quantize_row(type, row.data(), cols);
      bytes.insert(bytes.end(), encoded.begin(), encoded.end());
    }
    writer.add_tensor(name, type, {cols, rows}, std::move(bytes));
  }
  void vector(const std::string& name, std::uint64_t n, float mean, float stddev) {
    std::vector<float> v(n);
    for (float& x : v)
      x = mean + normal.next() * stddev;
    values(name, v);
  }
  void values(const std::string& name, const std::vector<float>& v) {
    writer.add_tensor(name, TensorType::F32, {v.size()},
                      quantize_row(TensorType::F32, v.data(), v.size()));
  }
};

} // namespace

std::uint64_t random_model_bytes(const RandomModelSpec& spec, std::uint64_t vocab_size) {
  check_shape(spec);
  ByteCounter counter{spec};
  visit_tensors(spec, vocab_size, counter);
  return counter.total;
}

void write_random_model(const RandomModelSpec& spec, const GgufFile& tokenizer,
                        const std::string& path) {
  check_shape(spec);
  const auto tokens = tokenizer.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty())
    throw std::invalid_argument("the tokenizer file has no tokenizer.ggml.tokens");
  const std::string& a = spec.architecture;
  const std::uint32_t head_dim = spec.head_size();

  GgufWriter writer;
  writer.add_string("general.architecture", a);
  writer.add_string("general.name",
                    fmt::format("caflm random {} {}x{}", a, spec.n_layers, spec.dim));
  writer.add_uint32("general.alignment", 32);
  writer.add_uint32(a + ".context_length", spec.context_length);
  writer.add_uint32(a + ".embedding_length", spec.dim);
  writer.add_uint32(a + ".block_count", spec.n_layers);
  writer.add_uint32(a + ".feed_forward_length", spec.ffn_dim);
  writer.add_uint32(a + ".attention.head_count", spec.n_heads);
  writer.add_uint32(a + ".attention.head_count_kv", spec.n_kv_heads);
  if (spec.head_dim != 0) {
    writer.add_uint32(a + ".attention.key_length", head_dim);
    writer.add_uint32(a + ".attention.value_length", head_dim);
  }
  writer.add_float32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  float rope_base = spec.rope_base;
  if (rope_base == 0.0f)
    rope_base = spec.rope_scaling == RandomRopeScaling::Llama3 ? 500000.0f
                : (a == "qwen2" || a == "qwen3")               ? 1000000.0f
                                                               : 10000.0f;
  writer.add_float32(a + ".rope.freq_base", rope_base);
  writer.add_uint32(a + ".rope.dimension_count", head_dim);
  if (spec.rope_scaling == RandomRopeScaling::Linear) {
    writer.add_string(a + ".rope.scaling.type", "linear");
    writer.add_float32(a + ".rope.scaling.factor", spec.rope_scaling_factor);
  } else if (spec.rope_scaling == RandomRopeScaling::LongRope) {
    // As convert_hf_to_gguf.py's Phi3MiniModel writes it (no scaling type).
    const std::uint32_t original = spec.original_context_length != 0
                                       ? spec.original_context_length
                                       : std::max<std::uint32_t>(2, spec.context_length / 32);
    const double scale = double(spec.context_length) / original;
    const double attn_factor =
        scale > 1.0 ? std::sqrt(1.0 + std::log(scale) / std::log(double(original))) : 1.0;
    writer.add_uint32(a + ".rope.scaling.original_context_length", original);
    writer.add_float32(a + ".rope.scaling.attn_factor", static_cast<float>(attn_factor));
  }
  if (a == "phi3")
    writer.add_uint32(a + ".attention.sliding_window", spec.context_length);
  writer.copy_metadata(tokenizer, "tokenizer.");

  TensorWriter tensor_writer{spec, writer, NormalSource(spec.seed)};
  visit_tensors(spec, static_cast<std::uint64_t>(tokens->size()), tensor_writer);
  writer.write(path);
}

} // namespace caflm

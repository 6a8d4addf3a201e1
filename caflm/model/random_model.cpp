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

void add_matrix(GgufWriter& writer, NormalSource& normal, const std::string& name, TensorType type,
                std::uint64_t rows, std::uint64_t cols, float stddev) {
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

void add_vector(GgufWriter& writer, NormalSource& normal, const std::string& name, std::uint64_t n,
                float mean, float stddev) {
  std::vector<float> values(n);
  for (float& v : values)
    v = mean + normal.next() * stddev;
  writer.add_tensor(name, TensorType::F32, {n}, quantize_row(TensorType::F32, values.data(), n));
}

/// Checks that `spec` describes a model caflm can build.
void check_shape(const RandomModelSpec& spec) {
  if (spec.architecture != "qwen2" && spec.architecture != "llama")
    throw std::invalid_argument(fmt::format("unknown architecture '{}'", spec.architecture));
  if (spec.dim == 0 || spec.n_layers == 0 || spec.n_heads == 0 || spec.n_kv_heads == 0 ||
      spec.ffn_dim == 0)
    throw std::invalid_argument("every dimension must be positive");
  if (spec.dim % spec.n_heads != 0 || (spec.dim / spec.n_heads) % 2 != 0)
    throw std::invalid_argument("dim must split into heads of an even size");
  if (spec.n_heads % spec.n_kv_heads != 0)
    throw std::invalid_argument("heads must be a multiple of kv-heads");
  if (spec.type == TensorType::Q8_0 && (spec.dim % 32 != 0 || spec.ffn_dim % 32 != 0))
    throw std::invalid_argument("q8_0 needs dim and ffn to be multiples of 32");
}

} // namespace

std::uint64_t random_model_bytes(const RandomModelSpec& spec, std::uint64_t vocab_size) {
  check_shape(spec);
  std::uint64_t total = 0;
  auto add = [&](std::uint64_t rows, std::uint64_t cols) {
    std::uint64_t bytes = 0;
    if (__builtin_mul_overflow(rows, tensor_row_bytes(spec.type, cols), &bytes) ||
        __builtin_add_overflow(total, bytes, &total))
      throw std::invalid_argument("the model's size overflows");
  };
  const std::uint64_t kv_dim = std::uint64_t{spec.n_kv_heads} * (spec.dim / spec.n_heads);
  add(vocab_size, spec.dim);
  if (!spec.tied_embeddings)
    add(vocab_size, spec.dim);
  for (std::uint32_t i = 0; i < spec.n_layers; ++i) {
    add(spec.dim, spec.dim);
    add(kv_dim, spec.dim);
    add(kv_dim, spec.dim);
    add(spec.dim, spec.dim);
    add(spec.ffn_dim, spec.dim);
    add(spec.ffn_dim, spec.dim);
    add(spec.dim, spec.ffn_dim);
  }
  return total;
}

void write_random_model(const RandomModelSpec& spec, const GgufFile& tokenizer,
                        const std::string& path) {
  check_shape(spec);
  const bool qwen2 = spec.architecture == "qwen2";
  const auto tokens = tokenizer.get_string_array("tokenizer.ggml.tokens");
  if (!tokens || tokens->empty())
    throw std::invalid_argument("the tokenizer file has no tokenizer.ggml.tokens");
  const std::uint32_t head_dim = spec.dim / spec.n_heads;
  const std::uint32_t kv_dim = spec.n_kv_heads * head_dim;
  const std::string& a = spec.architecture;

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
  writer.add_float32(a + ".attention.layer_norm_rms_epsilon", 1e-5f);
  writer.add_float32(a + ".rope.freq_base", qwen2 ? 1000000.0f : 10000.0f);
  writer.copy_metadata(tokenizer, "tokenizer.");

  NormalSource normal(spec.seed);
  const auto vocab_size = static_cast<std::uint64_t>(tokens->size());
  const float in_scale = 1.0f / std::sqrt(static_cast<float>(spec.dim));
  const float ffn_scale = 1.0f / std::sqrt(static_cast<float>(spec.ffn_dim));
  add_matrix(writer, normal, "token_embd.weight", spec.type, vocab_size, spec.dim, 1.0f);
  add_vector(writer, normal, "output_norm.weight", spec.dim, 1.0f, 0.05f);
  if (!spec.tied_embeddings)
    add_matrix(writer, normal, "output.weight", spec.type, vocab_size, spec.dim, 4 * in_scale);
  for (std::uint32_t i = 0; i < spec.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    add_vector(writer, normal, p + "attn_norm.weight", spec.dim, 1.0f, 0.05f);
    add_matrix(writer, normal, p + "attn_q.weight", spec.type, spec.dim, spec.dim, in_scale);
    add_matrix(writer, normal, p + "attn_k.weight", spec.type, kv_dim, spec.dim, in_scale);
    add_matrix(writer, normal, p + "attn_v.weight", spec.type, kv_dim, spec.dim, in_scale);
    if (qwen2) {
      add_vector(writer, normal, p + "attn_q.bias", spec.dim, 0.0f, 0.1f);
      add_vector(writer, normal, p + "attn_k.bias", kv_dim, 0.0f, 0.1f);
      add_vector(writer, normal, p + "attn_v.bias", kv_dim, 0.0f, 0.1f);
    }
    add_matrix(writer, normal, p + "attn_output.weight", spec.type, spec.dim, spec.dim, in_scale);
    add_vector(writer, normal, p + "ffn_norm.weight", spec.dim, 1.0f, 0.05f);
    add_matrix(writer, normal, p + "ffn_gate.weight", spec.type, spec.ffn_dim, spec.dim, in_scale);
    add_matrix(writer, normal, p + "ffn_up.weight", spec.type, spec.ffn_dim, spec.dim, in_scale);
    add_matrix(writer, normal, p + "ffn_down.weight", spec.type, spec.dim, spec.ffn_dim, ffn_scale);
  }
  writer.write(path);
}

} // namespace caflm

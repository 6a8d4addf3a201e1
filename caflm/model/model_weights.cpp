#include "caflm/model/model_weights.hpp"

#include <fmt/format.h>

#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/quantize.hpp"

namespace caflm {

namespace {

std::string shape_of(const GgufTensorInfo& t) {
  std::string s;
  for (std::size_t i = 0; i < t.dims.size(); ++i)
    s += fmt::format("{}{}", i ? " x " : "", t.dims[i]);
  return s;
}

const GgufTensorInfo& tensor(const GgufFile& file, const std::string& name) {
  const GgufTensorInfo* info = file.find_tensor(name);
  if (info == nullptr)
    throw GgufError(fmt::format("model lacks tensor '{}'", name));
  return *info;
}

/// A [rows, cols] matrix: GGUF dims are (cols, rows).
WeightView matrix(const GgufTensorInfo& t, std::uint64_t rows, std::uint64_t cols) {
  if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows)
    throw GgufError(
        fmt::format("tensor '{}' has shape {}, expected {} x {}", t.name, shape_of(t), cols, rows));
  if (t.type == TensorType::Q8_0 && cols % 32 != 0)
    throw GgufError(
        fmt::format("q8_0 tensor '{}' has rows of {} values, not a multiple of 32", t.name, cols));
  return WeightView{t.type, t.data, rows, cols};
}

WeightView matrix(const GgufFile& file, const std::string& name, std::uint64_t rows,
                  std::uint64_t cols) {
  return matrix(tensor(file, name), rows, cols);
}

/// A vector of `n` values as F32, whatever its stored type.
std::vector<float> vector_f32(const GgufTensorInfo& t, std::uint64_t n) {
  if (t.n_elements != n || t.dims.size() != 1)
    throw GgufError(fmt::format("tensor '{}' has shape {}, expected {}", t.name, shape_of(t), n));
  if (t.type == TensorType::Q8_0 && n % 32 != 0)
    throw GgufError(fmt::format("q8_0 vector '{}' of {} values is not whole blocks", t.name, n));
  std::vector<float> values(n);
  dequantize_row(t.type, t.data, n, values.data());
  return values;
}

std::vector<float> vector_f32(const GgufFile& file, const std::string& name, std::uint64_t n) {
  return vector_f32(tensor(file, name), n);
}

} // namespace

ModelWeights ModelWeights::from_gguf(const GgufFile& file, const ModelConfig& c) {
  ModelWeights w;
  w.token_embedding = matrix(file, "token_embd.weight", c.vocab_size, c.dim);
  w.output_norm = vector_f32(file, "output_norm.weight", c.dim);
  w.output = file.find_tensor("output.weight") != nullptr
                 ? matrix(file, "output.weight", c.vocab_size, c.dim)
                 : w.token_embedding;
  if (const GgufTensorInfo* freqs = file.find_tensor("rope_freqs.weight"))
    w.rope_freq_factors = vector_f32(*freqs, c.head_dim / 2);
  w.layers.resize(c.n_layers);
  for (std::uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    LayerWeights& l = w.layers[i];
    l.attn_norm = vector_f32(file, p + "attn_norm.weight", c.dim);
    l.wq = matrix(file, p + "attn_q.weight", c.q_dim(), c.dim);
    l.wk = matrix(file, p + "attn_k.weight", c.kv_dim(), c.dim);
    l.wv = matrix(file, p + "attn_v.weight", c.kv_dim(), c.dim);
    l.wo = matrix(file, p + "attn_output.weight", c.dim, c.q_dim());
    if (c.qkv_bias) {
      l.bq = vector_f32(file, p + "attn_q.bias", c.q_dim());
      l.bk = vector_f32(file, p + "attn_k.bias", c.kv_dim());
      l.bv = vector_f32(file, p + "attn_v.bias", c.kv_dim());
    }
    l.ffn_norm = vector_f32(file, p + "ffn_norm.weight", c.dim);
    l.w_gate = matrix(file, p + "ffn_gate.weight", c.ffn_dim, c.dim);
    l.w_up = matrix(file, p + "ffn_up.weight", c.ffn_dim, c.dim);
    l.w_down = matrix(file, p + "ffn_down.weight", c.dim, c.ffn_dim);
  }
  return w;
}

} // namespace caflm

#include "caflm/model/model_weights.hpp"

#include <fmt/format.h>
#include <set>

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

void check_whole_blocks(const GgufTensorInfo& t, std::uint64_t row_length) {
  const std::uint64_t block = tensor_block_size(t.type);
  if (row_length % block != 0)
    throw GgufError(fmt::format("{} tensor '{}' has rows of {} values, not whole blocks of {}",
                                to_string(t.type), t.name, row_length, block));
}

/// Finds tensors by name and remembers which it handed out, so that a
/// tensor no one asked for can be reported.
class TensorBinder {
 public:
  explicit TensorBinder(const GgufFile& file)
    : file_(file) {}

  const GgufTensorInfo* find(const std::string& name) {
    const GgufTensorInfo* info = file_.find_tensor(name);
    if (info != nullptr)
      used_.insert(name);
    return info;
  }

  const GgufTensorInfo& require(const std::string& name) {
    const GgufTensorInfo* info = find(name);
    if (info == nullptr)
      throw GgufError(fmt::format("model lacks tensor '{}'", name));
    return *info;
  }

  /// A [rows, cols] matrix: GGUF dims are (cols, rows).
  static WeightView matrix(const GgufTensorInfo& t, std::uint64_t rows, std::uint64_t cols) {
    if (t.dims.size() != 2 || t.dims[0] != cols || t.dims[1] != rows)
      throw GgufError(fmt::format("tensor '{}' has shape {}, expected {} x {}", t.name, shape_of(t),
                                  cols, rows));
    check_whole_blocks(t, cols);
    return WeightView{t.type, t.data, rows, cols};
  }

  WeightView matrix(const std::string& name, std::uint64_t rows, std::uint64_t cols) {
    return matrix(require(name), rows, cols);
  }

  /// A vector of `n` values as F32, whatever its stored type.
  static std::vector<float> vector_f32(const GgufTensorInfo& t, std::uint64_t n) {
    if (t.n_elements != n || t.dims.size() != 1)
      throw GgufError(fmt::format("tensor '{}' has shape {}, expected {}", t.name, shape_of(t), n));
    check_whole_blocks(t, n);
    std::vector<float> values(n);
    dequantize_row(t.type, t.data, n, values.data());
    return values;
  }

  std::vector<float> vector_f32(const std::string& name, std::uint64_t n) {
    return vector_f32(require(name), n);
  }

  /// The vector if the file has it, else empty.
  std::vector<float> optional_vector_f32(const std::string& name, std::uint64_t n) {
    const GgufTensorInfo* info = find(name);
    return info != nullptr ? vector_f32(*info, n) : std::vector<float>{};
  }

  /// Throws for the first tensor of the file that no find() asked for.
  void check_all_used(const std::string& architecture) const {
    for (const GgufTensorInfo& t : file_.tensors())
      if (used_.count(t.name) == 0)
        throw GgufError(fmt::format("model has tensor '{}', which caflm's '{}' forward pass does "
                                    "not use",
                                    t.name, architecture));
  }

 private:
  const GgufFile& file_;
  std::set<std::string> used_;
};

/// Rows [first, first + count) of `w`, as their own matrix.
WeightView row_range(const WeightView& w, std::uint64_t first, std::uint64_t count) {
  const auto* base = static_cast<const std::uint8_t*>(w.data);
  return WeightView{w.type, base + first * tensor_row_bytes(w.type, w.cols), count, w.cols};
}

void bind_attention(TensorBinder& b, const ModelConfig& c, const std::string& p, LayerWeights& l) {
  if (c.arch == Architecture::Phi3) {
    // phi3 stores q, k and v as one matrix, rows in that order; llama.cpp
    // also accepts them apart.
    if (const GgufTensorInfo* qkv = b.find(p + "attn_qkv.weight")) {
      const WeightView fused = TensorBinder::matrix(*qkv, c.q_dim() + 2 * c.kv_dim(), c.dim);
      l.wq = row_range(fused, 0, c.q_dim());
      l.wk = row_range(fused, c.q_dim(), c.kv_dim());
      l.wv = row_range(fused, c.q_dim() + c.kv_dim(), c.kv_dim());
      return;
    }
  }
  l.wq = b.matrix(p + "attn_q.weight", c.q_dim(), c.dim);
  l.wk = b.matrix(p + "attn_k.weight", c.kv_dim(), c.dim);
  l.wv = b.matrix(p + "attn_v.weight", c.kv_dim(), c.dim);
  if (c.qkv_bias) {
    l.bq = b.vector_f32(p + "attn_q.bias", c.q_dim());
    l.bk = b.vector_f32(p + "attn_k.bias", c.kv_dim());
    l.bv = b.vector_f32(p + "attn_v.bias", c.kv_dim());
  } else if (c.arch == Architecture::Llama) {
    l.bq = b.optional_vector_f32(p + "attn_q.bias", c.q_dim());
    l.bk = b.optional_vector_f32(p + "attn_k.bias", c.kv_dim());
    l.bv = b.optional_vector_f32(p + "attn_v.bias", c.kv_dim());
  }
}

void bind_feed_forward(TensorBinder& b, const ModelConfig& c, const std::string& p,
                       LayerWeights& l) {
  l.w_down = b.matrix(p + "ffn_down.weight", c.dim, c.ffn_dim);
  if (c.arch == Architecture::Phi3) {
    // Gate rows first, then up rows: ggml_swiglu applies SiLU to the first
    // half (HF Phi-3: gate, up = gate_up_proj(x).chunk(2)).
    const WeightView fused = b.matrix(p + "ffn_up.weight", 2 * std::uint64_t{c.ffn_dim}, c.dim);
    l.w_gate = row_range(fused, 0, c.ffn_dim);
    l.w_up = row_range(fused, c.ffn_dim, c.ffn_dim);
    return;
  }
  l.w_gate = b.matrix(p + "ffn_gate.weight", c.ffn_dim, c.dim);
  l.w_up = b.matrix(p + "ffn_up.weight", c.ffn_dim, c.dim);
  if (c.arch == Architecture::Llama) {
    l.b_gate = b.optional_vector_f32(p + "ffn_gate.bias", c.ffn_dim);
    l.b_up = b.optional_vector_f32(p + "ffn_up.bias", c.ffn_dim);
    l.b_down = b.optional_vector_f32(p + "ffn_down.bias", c.dim);
  }
}

} // namespace

const float* ModelWeights::rope_factors(const ModelConfig& config, std::uint32_t context) const {
  if (!rope_freq_factors.empty())
    return rope_freq_factors.data();
  const std::vector<float>& chosen =
      context > config.rope_original_context ? rope_factors_long : rope_factors_short;
  return chosen.empty() ? nullptr : chosen.data();
}

ModelWeights ModelWeights::from_gguf(const GgufFile& file, const ModelConfig& c) {
  TensorBinder b(file);
  ModelWeights w;
  w.token_embedding = b.matrix("token_embd.weight", c.vocab_size, c.dim);
  w.output_norm = b.vector_f32("output_norm.weight", c.dim);
  const GgufTensorInfo* output = b.find("output.weight");
  w.output =
      output != nullptr ? TensorBinder::matrix(*output, c.vocab_size, c.dim) : w.token_embedding;
  const std::uint32_t n_pairs = c.head_dim / 2;
  if (c.arch == Architecture::Llama)
    w.rope_freq_factors = b.optional_vector_f32("rope_freqs.weight", n_pairs);
  if (c.arch == Architecture::Phi3) {
    w.rope_factors_long = b.optional_vector_f32("rope_factors_long.weight", n_pairs);
    w.rope_factors_short = b.optional_vector_f32("rope_factors_short.weight", n_pairs);
    if (w.rope_factors_long.empty() != w.rope_factors_short.empty())
      throw GgufError(fmt::format("model has only one of 'rope_factors_long.weight' and "
                                  "'rope_factors_short.weight'"));
  }

  w.layers.resize(c.n_layers);
  for (std::uint32_t i = 0; i < c.n_layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    LayerWeights& l = w.layers[i];
    l.attn_norm = b.vector_f32(p + "attn_norm.weight", c.dim);
    bind_attention(b, c, p, l);
    if (c.qk_norm) {
      l.q_norm = b.vector_f32(p + "attn_q_norm.weight", c.head_dim);
      l.k_norm = b.vector_f32(p + "attn_k_norm.weight", c.head_dim);
    }
    l.wo = b.matrix(p + "attn_output.weight", c.dim, c.q_dim());
    if (c.arch == Architecture::Llama)
      l.bo = b.optional_vector_f32(p + "attn_output.bias", c.dim);
    l.ffn_norm = b.vector_f32(p + "ffn_norm.weight", c.dim);
    bind_feed_forward(b, c, p, l);
  }
  b.check_all_used(c.architecture);
  return w;
}

} // namespace caflm

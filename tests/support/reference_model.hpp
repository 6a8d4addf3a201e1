#pragma once

// A plain forward pass of a llama, qwen2, qwen3 or phi3 model for tests: one
// sequence, contiguous KV, no batching, straightforward loops in double
// where it is cheap. It reads the GGUF file itself (tensors by name,
// metadata by key) rather than the model's bound weights, splits phi3's
// fused matrices on its own, and shares nothing with the runner's kernels
// but dequantize_row. Activations entering a quantized matrix are rounded
// as ggml rounds them (Q8_0 for Q4_0/Q5_0/Q8_0, Q8_1 for Q4_1/Q5_1, Q8_K for
// the K-quants), and, for a runner with an F16 KV cache, keys and values are
// rounded to F16 as that cache stores them, so that a runner doing the same
// matches closely.

#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "caflm/gguf/gguf.hpp"
#include "caflm/gguf/quantize.hpp"
#include "caflm/kv/kv_storage.hpp"
#include "caflm/kv/token_id.hpp"
#include "caflm/model/model.hpp"

namespace caflm::testing {

class ReferenceModel {
 public:
  /// `runner_context` is the longest sequence the runner under test was
  /// built for: with LongRoPE it decides between the long and short factors
  /// (long beyond the original context), as llama.cpp decides per context.
  /// `kv_type` is the runner's KV cache type (F16 rounds keys and values).
  explicit ReferenceModel(const Model& model, std::uint32_t runner_context = 0,
                          KvCacheType kv_type = KvCacheType::F32)
    : file_(model.file())
    , kv_f16_(kv_type == KvCacheType::F16) {
    arch_ = std::string(*file_.get_string("general.architecture"));
    const std::string a = arch_ + ".";
    dim_ = *file_.get_uint(a + "embedding_length");
    n_heads_ = *file_.get_uint(a + "attention.head_count");
    n_kv_heads_ = file_.get_uint(a + "attention.head_count_kv").value_or(n_heads_);
    head_dim_ = file_.get_uint(a + "attention.key_length").value_or(dim_ / n_heads_);
    eps_ =
        static_cast<float>(file_.get_float(a + "attention.layer_norm_rms_epsilon").value_or(1e-5));
    rope_base_ = file_.get_float(a + "rope.freq_base").value_or(10000.0);
    neox_ = arch_ != "llama";
    if (auto factor = file_.get_float(a + "rope.scaling.factor"))
      if (file_.get_string(a + "rope.scaling.type").value_or("linear") != "none")
        freq_scale_ = 1.0 / *factor;
    attn_factor_ = file_.get_float(a + "rope.scaling.attn_factor").value_or(1.0);
    const std::uint64_t context = *file_.get_uint(a + "context_length");
    const std::uint64_t original =
        file_.get_uint(a + "rope.scaling.original_context_length").value_or(context);
    if (file_.find_tensor("rope_freqs.weight"))
      rope_factors_ = vector("rope_freqs.weight");
    else if (file_.find_tensor("rope_factors_long.weight"))
      rope_factors_ = vector(runner_context > original ? "rope_factors_long.weight"
                                                       : "rope_factors_short.weight");
    n_layers_ = *file_.get_uint(a + "block_count");
  }

  /// Logits after every position of `tokens`. // [n, vocab]
  std::vector<std::vector<float>> logits(const std::vector<TokenId>& tokens) const {
    const std::size_t n = tokens.size();
    const Matrix embedding = matrix("token_embd.weight");
    std::vector<std::vector<float>> x(n);
    for (std::size_t t = 0; t < n; ++t)
      x[t] = std::vector<float>(embedding.row(tokens[t]), embedding.row(tokens[t]) + dim_);
    const std::size_t hd = head_dim_;
    const std::size_t q_dim = n_heads_ * hd, kv_dim = n_kv_heads_ * hd;
    for (std::size_t layer = 0; layer < n_layers_; ++layer) {
      const std::string p = "blk." + std::to_string(layer) + ".";
      const bool phi3 = arch_ == "phi3", qwen2 = arch_ == "qwen2", qwen3 = arch_ == "qwen3";
      const Matrix wo = matrix(p + "attn_output.weight");
      const Matrix w_down = matrix(p + "ffn_down.weight");
      const Matrix wqkv = phi3 ? matrix(p + "attn_qkv.weight") : Matrix{};
      const Matrix wq = phi3 ? Matrix{} : matrix(p + "attn_q.weight");
      const Matrix wk = phi3 ? Matrix{} : matrix(p + "attn_k.weight");
      const Matrix wv = phi3 ? Matrix{} : matrix(p + "attn_v.weight");
      const Matrix w_gate = phi3 ? Matrix{} : matrix(p + "ffn_gate.weight");
      const Matrix w_up = matrix(p + "ffn_up.weight");
      // qwen2 always has q, k and v biases; llama files may have any bias.
      const auto bq = qwen2 ? vector(p + "attn_q.bias") : optional_vector(p + "attn_q.bias");
      const auto bk = qwen2 ? vector(p + "attn_k.bias") : optional_vector(p + "attn_k.bias");
      const auto bv = qwen2 ? vector(p + "attn_v.bias") : optional_vector(p + "attn_v.bias");
      const auto bo = optional_vector(p + "attn_output.bias");
      const auto b_gate = optional_vector(p + "ffn_gate.bias");
      const auto b_up = optional_vector(p + "ffn_up.bias");
      const auto b_down = optional_vector(p + "ffn_down.bias");
      const auto q_norm = qwen3 ? vector(p + "attn_q_norm.weight") : none();
      const auto k_norm = qwen3 ? vector(p + "attn_k_norm.weight") : none();
      const auto attn_norm = vector(p + "attn_norm.weight");
      const auto ffn_norm = vector(p + "ffn_norm.weight");
      std::vector<std::vector<float>> q(n), k(n), v(n), attn(n, std::vector<float>(q_dim));
      for (std::size_t t = 0; t < n; ++t) {
        auto h = rms_norm(x[t], attn_norm);
        if (phi3) {
          // One product, then q, k and v are consecutive slices of it.
          auto qkv = matvec(wqkv, h, {});
          q[t].assign(qkv.begin(), qkv.begin() + q_dim);
          k[t].assign(qkv.begin() + q_dim, qkv.begin() + q_dim + kv_dim);
          v[t].assign(qkv.begin() + q_dim + kv_dim, qkv.end());
        } else {
          q[t] = matvec(wq, h, bq);
          k[t] = matvec(wk, h, bk);
          v[t] = matvec(wv, h, bv);
        }
        if (qwen3) {
          head_norm(q[t], q_norm);
          head_norm(k[t], k_norm);
        }
        rope(q[t], n_heads_, t);
        rope(k[t], n_kv_heads_, t);
        if (kv_f16_) {
          round_f16(k[t]);
          round_f16(v[t]);
        }
      }
      const std::size_t group = n_heads_ / n_kv_heads_;
      for (std::size_t t = 0; t < n; ++t) {
        for (std::size_t head = 0; head < n_heads_; ++head) {
          const std::size_t kvh = head / group;
          std::vector<double> scores(t + 1);
          double max_score = -INFINITY;
          for (std::size_t j = 0; j <= t; ++j) {
            double s = 0.0;
            for (std::size_t d = 0; d < hd; ++d)
              s += double(q[t][head * hd + d]) * k[j][kvh * hd + d];
            scores[j] = s / std::sqrt(double(hd));
            max_score = std::max(max_score, scores[j]);
          }
          double sum = 0.0;
          for (double& s : scores)
            sum += (s = std::exp(s - max_score));
          for (std::size_t d = 0; d < hd; ++d) {
            double out = 0.0;
            for (std::size_t j = 0; j <= t; ++j)
              out += scores[j] / sum * v[j][kvh * hd + d];
            attn[t][head * hd + d] = static_cast<float>(out);
          }
        }
      }
      for (std::size_t t = 0; t < n; ++t) {
        add(x[t], matvec(wo, attn[t], bo));
        auto h = rms_norm(x[t], ffn_norm);
        std::vector<float> gate, up;
        if (phi3) {
          // ffn_up holds gate rows, then up rows.
          auto both = matvec(w_up, h, {});
          gate.assign(both.begin(), both.begin() + both.size() / 2);
          up.assign(both.begin() + both.size() / 2, both.end());
        } else {
          gate = matvec(w_gate, h, b_gate);
          up = matvec(w_up, h, b_up);
        }
        for (std::size_t f = 0; f < gate.size(); ++f)
          gate[f] = static_cast<float>(gate[f] / (1.0 + std::exp(-double(gate[f]))) * up[f]);
        add(x[t], matvec(w_down, gate, b_down));
      }
    }
    const Matrix output = file_.find_tensor("output.weight") ? matrix("output.weight") : embedding;
    const auto output_norm = vector("output_norm.weight");
    std::vector<std::vector<float>> out(n);
    for (std::size_t t = 0; t < n; ++t)
      out[t] = matvec(output, rms_norm(x[t], output_norm), {});
    return out;
  }

 private:
  /// A dequantized matrix and the type its rows were stored in.
  struct Matrix {
    TensorType type = TensorType::F32;
    std::size_t rows = 0, cols = 0;
    std::vector<float> values; // [rows, cols]
    const float* row(std::size_t r) const { return values.data() + r * cols; }
  };

  const GgufTensorInfo& tensor(const std::string& name) const {
    const GgufTensorInfo* info = file_.find_tensor(name);
    if (info == nullptr)
      throw std::runtime_error("reference: no tensor " + name);
    return *info;
  }

  Matrix matrix(const std::string& name) const {
    const GgufTensorInfo& t = tensor(name);
    Matrix m{t.type, t.dims[1], t.dims[0], std::vector<float>(t.dims[0] * t.dims[1])};
    const std::uint64_t row_bytes = tensor_row_bytes(t.type, m.cols);
    for (std::size_t r = 0; r < m.rows; ++r)
      dequantize_row(t.type, t.data + r * row_bytes, m.cols, m.values.data() + r * m.cols);
    return m;
  }

  std::vector<float> vector(const std::string& name) const {
    const GgufTensorInfo& t = tensor(name);
    std::vector<float> v(t.n_elements);
    dequantize_row(t.type, t.data, v.size(), v.data());
    return v;
  }

  static std::vector<float> none() { return {}; }

  std::vector<float> optional_vector(const std::string& name) const {
    return file_.find_tensor(name) ? vector(name) : none();
  }

  /// The F16 KV cache's rounding.
  static void round_f16(std::vector<float>& x) {
    for (float& e : x)
      e = f16_to_f32(f32_to_f16(e));
  }

  /// ggml's rounding of activations to 8 bits in blocks of `block` values
  /// with scale max|x| / 127 (Q8_0, Q8_1: the scale kept as F16).
  static void round_q8(std::vector<float>& x, std::size_t block) {
    for (std::size_t b = 0; b < x.size(); b += block) {
      float amax = 0.0f;
      for (std::size_t i = b; i < b + block; ++i)
        amax = std::max(amax, std::fabs(x[i]));
      const float d = amax / 127.0f;
      const float inverse = d != 0.0f ? 1.0f / d : 0.0f;
      const float stored = f16_to_f32(f32_to_f16(d));
      for (std::size_t i = b; i < b + block; ++i)
        x[i] = std::nearbyint(x[i] * inverse) * stored;
    }
  }

  /// ggml's Q8_K: blocks of 256, scale -max/127 from the value of largest
  /// magnitude (kept as F32), codes clamped to 127.
  static void round_q8_k(std::vector<float>& x) {
    for (std::size_t b = 0; b < x.size(); b += 256) {
      float amax = 0.0f, max = 0.0f;
      for (std::size_t i = b; i < b + 256; ++i)
        if (std::fabs(x[i]) > amax) {
          amax = std::fabs(x[i]);
          max = x[i];
        }
      if (amax == 0.0f)
        continue;
      const float iscale = -127.0f / max;
      for (std::size_t i = b; i < b + 256; ++i)
        x[i] = std::min(127.0f, std::nearbyint(iscale * x[i])) * (1.0f / iscale);
    }
  }

  /// The activations as the vector dot product for `type` sees them.
  static std::vector<float> quantized_like_weights(TensorType type, std::vector<float> x) {
    switch (type) {
    case TensorType::Q4_0:
    case TensorType::Q5_0:
    case TensorType::Q8_0:
    case TensorType::Q4_1:
    case TensorType::Q5_1:
      round_q8(x, 32);
      break;
    case TensorType::Q2_K:
    case TensorType::Q3_K:
    case TensorType::Q4_K:
    case TensorType::Q5_K:
    case TensorType::Q6_K:
      round_q8_k(x);
      break;
    default:
      break;
    }
    return x;
  }

  static std::vector<float> matvec(const Matrix& m, const std::vector<float>& x_in,
                                   const std::vector<float>& bias) {
    if (x_in.size() != m.cols)
      throw std::runtime_error("reference: input of the wrong length");
    const std::vector<float> x = quantized_like_weights(m.type, x_in);
    std::vector<float> y(m.rows);
    for (std::size_t r = 0; r < m.rows; ++r) {
      const float* w = m.row(r);
      double sum = 0.0;
      for (std::size_t k = 0; k < m.cols; ++k)
        sum += double(w[k]) * x[k];
      y[r] = static_cast<float>(sum) + (bias.empty() ? 0.0f : bias[r]);
    }
    return y;
  }

  std::vector<float> rms_norm(const std::vector<float>& x, const std::vector<float>& weight) const {
    double sum = 0.0;
    for (float v : x)
      sum += double(v) * v;
    const double scale = 1.0 / std::sqrt(sum / x.size() + eps_);
    std::vector<float> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      out[i] = static_cast<float>(x[i] * scale * weight[i]);
    return out;
  }

  /// qwen3: RMSNorm of each head on its own.
  void head_norm(std::vector<float>& x, const std::vector<float>& weight) const {
    for (std::size_t h = 0; h < x.size() / head_dim_; ++h) {
      std::vector<float> head(x.begin() + h * head_dim_, x.begin() + (h + 1) * head_dim_);
      head = rms_norm(head, weight);
      std::copy(head.begin(), head.end(), x.begin() + h * head_dim_);
    }
  }

  /// theta_i = pos * base^(-2i/d) / factor_i * freq_scale; cos and sin times
  /// the attention factor (ggml rope without YaRN).
  void rope(std::vector<float>& x, std::size_t heads, std::size_t pos) const {
    const std::size_t hd = head_dim_;
    for (std::size_t h = 0; h < heads; ++h) {
      float* head = x.data() + h * hd;
      for (std::size_t i = 0; i < hd / 2; ++i) {
        double theta = double(pos) * std::pow(rope_base_, -2.0 * double(i) / double(hd));
        if (!rope_factors_.empty())
          theta /= rope_factors_[i];
        theta *= freq_scale_;
        const double c = std::cos(theta) * attn_factor_, s = std::sin(theta) * attn_factor_;
        const std::size_t a = neox_ ? i : 2 * i;
        const std::size_t b = neox_ ? i + hd / 2 : 2 * i + 1;
        const double x0 = head[a], x1 = head[b];
        head[a] = static_cast<float>(x0 * c - x1 * s);
        head[b] = static_cast<float>(x0 * s + x1 * c);
      }
    }
  }

  static void add(std::vector<float>& x, const std::vector<float>& y) {
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += y[i];
  }

  const GgufFile& file_;
  bool kv_f16_ = false;
  std::string arch_;
  std::size_t dim_ = 0, n_heads_ = 0, n_kv_heads_ = 0, head_dim_ = 0, n_layers_ = 0;
  float eps_ = 1e-5f;
  double rope_base_ = 10000.0, freq_scale_ = 1.0, attn_factor_ = 1.0;
  bool neox_ = false;
  std::vector<float> rope_factors_;
};

} // namespace caflm::testing

#pragma once

// A plain forward pass of a Llama/Qwen2 model for tests: one sequence,
// contiguous KV, no batching, straightforward loops. Independent of the
// runner's kernels except for reading weights (dequantize_row).

#include <cmath>
#include <vector>

#include "caflm/gguf/quantize.hpp"
#include "caflm/model/model.hpp"

namespace caflm::testing {

class ReferenceModel {
 public:
  explicit ReferenceModel(const Model& model)
    : model_(model)
    , c_(model.config()) {}

  /// Logits after every position of `tokens`. // [n, vocab]
  std::vector<std::vector<float>> logits(const std::vector<TokenId>& tokens) const {
    const std::size_t n = tokens.size();
    const ModelWeights& w = model_.weights();
    std::vector<std::vector<float>> x(n);
    for (std::size_t t = 0; t < n; ++t)
      x[t] = row(w.token_embedding, tokens[t]);
    for (const LayerWeights& l : w.layers) {
      std::vector<std::vector<float>> q(n), k(n), v(n), attn(n, std::vector<float>(c_.q_dim()));
      for (std::size_t t = 0; t < n; ++t) {
        auto h = rms_norm(x[t], l.attn_norm);
        q[t] = matvec(l.wq, h, l.bq);
        k[t] = matvec(l.wk, h, l.bk);
        v[t] = matvec(l.wv, h, l.bv);
        rope(q[t], c_.n_heads, t);
        rope(k[t], c_.n_kv_heads, t);
      }
      const std::size_t hd = c_.head_dim;
      const std::size_t group = c_.n_heads / c_.n_kv_heads;
      for (std::size_t t = 0; t < n; ++t) {
        for (std::size_t head = 0; head < c_.n_heads; ++head) {
          const std::size_t kvh = head / group;
          std::vector<float> scores(t + 1);
          float max_score = -INFINITY;
          for (std::size_t j = 0; j <= t; ++j) {
            float s = 0.0f;
            for (std::size_t d = 0; d < hd; ++d)
              s += q[t][head * hd + d] * k[j][kvh * hd + d];
            scores[j] = s / std::sqrt(static_cast<float>(hd));
            max_score = std::max(max_score, scores[j]);
          }
          float sum = 0.0f;
          for (float& s : scores)
            sum += (s = std::exp(s - max_score));
          for (std::size_t j = 0; j <= t; ++j)
            for (std::size_t d = 0; d < hd; ++d)
              attn[t][head * hd + d] += scores[j] / sum * v[j][kvh * hd + d];
        }
      }
      for (std::size_t t = 0; t < n; ++t) {
        add(x[t], matvec(l.wo, attn[t], {}));
        auto h = rms_norm(x[t], l.ffn_norm);
        auto gate = matvec(l.w_gate, h, {});
        auto up = matvec(l.w_up, h, {});
        for (std::size_t f = 0; f < gate.size(); ++f)
          gate[f] = gate[f] / (1.0f + std::exp(-gate[f])) * up[f];
        add(x[t], matvec(l.w_down, gate, {}));
      }
    }
    std::vector<std::vector<float>> out(n);
    for (std::size_t t = 0; t < n; ++t)
      out[t] = matvec(w.output, rms_norm(x[t], w.output_norm), {});
    return out;
  }

 private:
  static std::vector<float> row(const WeightView& m, std::size_t r) {
    std::vector<float> out(m.cols);
    const auto* base = static_cast<const std::uint8_t*>(m.data);
    dequantize_row(m.type, base + r * tensor_row_bytes(m.type, m.cols), m.cols, out.data());
    return out;
  }

  /// Q8_0 weights multiply Q8_0-quantized activations, as llama.cpp does.
  static std::vector<float> quantized_like_weights(const WeightView& m, std::vector<float> x) {
    if (m.type != TensorType::Q8_0)
      return x;
    for (std::size_t b = 0; b < x.size(); b += 32) {
      float amax = 0.0f;
      for (std::size_t i = b; i < b + 32; ++i)
        amax = std::max(amax, std::fabs(x[i]));
      const float d = f16_to_f32(f32_to_f16(amax / 127.0f));
      const float inverse = amax != 0.0f ? 127.0f / amax : 0.0f;
      for (std::size_t i = b; i < b + 32; ++i)
        x[i] = std::nearbyint(x[i] * inverse) * d;
    }
    return x;
  }

  static std::vector<float> matvec(const WeightView& m, const std::vector<float>& x_in,
                                   const std::vector<float>& bias) {
    const std::vector<float> x = quantized_like_weights(m, x_in);
    std::vector<float> y(m.rows);
    for (std::size_t r = 0; r < m.rows; ++r) {
      auto w = row(m, r);
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
    const float scale = 1.0f / std::sqrt(static_cast<float>(sum / x.size()) + c_.rms_eps);
    std::vector<float> out(x.size());
    for (std::size_t i = 0; i < x.size(); ++i)
      out[i] = x[i] * scale * weight[i];
    return out;
  }

  void rope(std::vector<float>& x, std::size_t heads, std::size_t pos) const {
    const std::size_t hd = c_.head_dim;
    for (std::size_t h = 0; h < heads; ++h) {
      float* head = x.data() + h * hd;
      for (std::size_t i = 0; i < hd / 2; ++i) {
        const double theta = double(pos) * std::pow(double(c_.rope_base), -2.0 * i / hd);
        const std::size_t a = c_.rope_mode == RopeMode::Interleaved ? 2 * i : i;
        const std::size_t b = c_.rope_mode == RopeMode::Interleaved ? 2 * i + 1 : i + hd / 2;
        const float x0 = head[a], x1 = head[b];
        head[a] = static_cast<float>(x0 * std::cos(theta) - x1 * std::sin(theta));
        head[b] = static_cast<float>(x0 * std::sin(theta) + x1 * std::cos(theta));
      }
    }
  }

  static void add(std::vector<float>& x, const std::vector<float>& y) {
    for (std::size_t i = 0; i < x.size(); ++i)
      x[i] += y[i];
  }

  const Model& model_;
  const ModelConfig& c_;
};

} // namespace caflm::testing

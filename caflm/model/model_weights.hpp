#pragma once

#include <cstdint>
#include <vector>

#include "caflm/model/model_config.hpp"
#include "caflm/model/weight_view.hpp"

namespace caflm {

class GgufFile;

/// One transformer block's parameters. Matrices point into the mapped GGUF
/// file in their stored type; the small vectors (norms, biases) are F32
/// copies. A fused matrix (phi3's attn_qkv, its ffn_up holding gate and up)
/// is bound as views of its row ranges, so every block looks the same.
struct LayerWeights {
  std::vector<float> attn_norm; // [dim]
  WeightView wq;                // [q_dim, dim]
  WeightView wk;                // [kv_dim, dim]
  WeightView wv;                // [kv_dim, dim]
  WeightView wo;                // [dim, q_dim]
  std::vector<float> bq;        // [q_dim] (qwen2, optional in llama) or empty
  std::vector<float> bk;        // [kv_dim] or empty
  std::vector<float> bv;        // [kv_dim] or empty
  std::vector<float> bo;        // [dim] (optional in llama) or empty
  std::vector<float> q_norm;    // [head_dim] (qwen3) or empty
  std::vector<float> k_norm;    // [head_dim] (qwen3) or empty
  std::vector<float> ffn_norm;  // [dim]
  WeightView w_gate;            // [ffn_dim, dim]
  WeightView w_up;              // [ffn_dim, dim]
  WeightView w_down;            // [dim, ffn_dim]
  std::vector<float> b_gate;    // [ffn_dim] (optional in llama) or empty
  std::vector<float> b_up;      // [ffn_dim] or empty
  std::vector<float> b_down;    // [dim] or empty
};

/// All parameters of a Llama-family model, bound to a GGUF file that must
/// outlive them.
struct ModelWeights {
  WeightView token_embedding;     // [vocab, dim]
  std::vector<float> output_norm; // [dim]
  /// The output projection; the token embedding when the model ties them.
  WeightView output; // [vocab, dim]
  /// Llama 3.1-style RoPE frequency divisors (rope_freqs), or empty.
  std::vector<float> rope_freq_factors; // [head_dim / 2]
  /// phi3 LongRoPE divisors for contexts beyond / within the original one,
  /// or empty.
  std::vector<float> rope_factors_long;  // [head_dim / 2]
  std::vector<float> rope_factors_short; // [head_dim / 2]
  std::vector<LayerWeights> layers;

  /// The RoPE divisors of each pair for a runner whose longest sequence is
  /// `context` tokens, chosen as llama.cpp's get_rope_factors does:
  /// rope_freqs when present, else the long factors when `context` exceeds
  /// `config.rope_original_context`, else the short ones; null when the
  /// model has none. Points into this object.
  const float* rope_factors(const ModelConfig& config, std::uint32_t context) const;

  /// Binds every tensor, checking names, shapes and types against `config`;
  /// throws GgufError naming the tensor at fault: a missing one, a wrong
  /// shape, a row that is not whole blocks of its type, or a tensor this
  /// architecture does not use (which could mean the file computes
  /// something caflm would not).
  static ModelWeights from_gguf(const GgufFile& file, const ModelConfig& config);
};

} // namespace caflm

#pragma once

#include <cstdint>
#include <vector>

#include "caflm/model/model_config.hpp"
#include "caflm/model/weight_view.hpp"

namespace caflm {

class GgufFile;

/// One transformer block's parameters. Matrices point into the mapped GGUF
/// file in their stored type; the small vectors (norms, biases) are F32
/// copies.
struct LayerWeights {
  std::vector<float> attn_norm; // [dim]
  WeightView wq;                // [q_dim, dim]
  WeightView wk;                // [kv_dim, dim]
  WeightView wv;                // [kv_dim, dim]
  WeightView wo;                // [dim, q_dim]
  std::vector<float> bq;        // [q_dim] (qwen2) or empty
  std::vector<float> bk;        // [kv_dim] (qwen2) or empty
  std::vector<float> bv;        // [kv_dim] (qwen2) or empty
  std::vector<float> ffn_norm;  // [dim]
  WeightView w_gate;            // [ffn_dim, dim]
  WeightView w_up;              // [ffn_dim, dim]
  WeightView w_down;            // [dim, ffn_dim]
};

/// All parameters of a Llama-family model, bound to a GGUF file that must
/// outlive them.
struct ModelWeights {
  WeightView token_embedding;     // [vocab, dim]
  std::vector<float> output_norm; // [dim]
  /// The output projection; the token embedding when the model ties them.
  WeightView output; // [vocab, dim]
  /// llama 3.1-style RoPE frequency divisors, or empty.
  std::vector<float> rope_freq_factors; // [head_dim / 2]
  std::vector<LayerWeights> layers;

  /// Binds every tensor, checking names, shapes and types against `config`;
  /// throws GgufError naming the tensor at fault.
  static ModelWeights from_gguf(const GgufFile& file, const ModelConfig& config);
};

} // namespace caflm

#pragma once

#include <cstdint>
#include <string>

namespace caflm {

class GgufFile;

/// Which dimensions RoPE rotates together.
enum class RopeMode {
  Interleaved, ///< pairs (2i, 2i+1): llama (ggml rope mode 0)
  NeoX,        ///< pairs (i, i + d/2): qwen2, qwen3, phi3 (ggml rope mode 2)
};

/// `<arch>.rope.scaling.type` as llama.cpp reads it ("linear" when absent).
/// YaRN is refused at load.
enum class RopeScaling {
  None,     ///< "none": positions are never scaled, whatever the factor says
  Linear,   ///< "linear": angles times 1 / rope.scaling.factor (1 without one)
  LongRope, ///< "longrope" (phi3): per-pair divisors from rope_factors_long/short
};

/// The model families caflm runs, by `general.architecture`.
enum class Architecture {
  Llama, ///< "llama": Llama 1/2/3.x, Mistral-style files, TinyLlama, SmolLM
  Qwen2, ///< "qwen2": biases on q, k and v; NeoX RoPE
  Qwen3, ///< "qwen3": per-head RMSNorm on q and k before RoPE; NeoX RoPE
  Phi3,  ///< "phi3": fused QKV and gate/up matrices; NeoX RoPE, LongRoPE
};

/// Hyperparameters of a Llama-family model, read from GGUF metadata.
struct ModelConfig {
  /// `general.architecture`: "llama", "qwen2", "qwen3" or "phi3".
  std::string architecture;
  Architecture arch = Architecture::Llama;
  std::uint32_t vocab_size = 0;
  std::uint32_t dim = 0; // embedding length
  std::uint32_t n_layers = 0;
  std::uint32_t n_heads = 0;
  std::uint32_t n_kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t ffn_dim = 0;
  std::uint32_t context_length = 0;
  float rms_eps = 1e-5f;
  float rope_base = 10000.0f;
  RopeMode rope_mode = RopeMode::Interleaved;
  RopeScaling rope_scaling = RopeScaling::Linear;
  /// ggml's freq_scale: 1 / `rope.scaling.factor` (1 without one, or for
  /// scaling type "none"). Multiplies every angle.
  float rope_freq_scale = 1.0f;
  /// `rope.scaling.attn_factor` (phi3 LongRoPE): ggml multiplies RoPE's cos
  /// and sin by it, so q and k both grow by it. 1 without one.
  float rope_attn_factor = 1.0f;
  /// `rope.scaling.original_context_length` (the context before LongRoPE
  /// stretched it); `context_length` without one. A runner whose longest
  /// sequence exceeds it uses rope_factors_long, otherwise
  /// rope_factors_short, as llama.cpp chooses per context.
  std::uint32_t rope_original_context = 0;
  /// qwen2 has biases on the q, k and v projections.
  bool qkv_bias = false;
  /// qwen3 RMS-normalizes each head of q and k (attn_q_norm, attn_k_norm).
  bool qk_norm = false;

  /// Reads and checks the metadata; throws GgufError naming the key at fault
  /// for an unsupported architecture, RoPE scaling or partial RoPE, or a
  /// missing or inconsistent value.
  static ModelConfig from_gguf(const GgufFile& file);

  std::uint32_t q_dim() const { return n_heads * head_dim; }
  std::uint32_t kv_dim() const { return n_kv_heads * head_dim; }
  /// Query heads that share one KV head (grouped-query attention).
  std::uint32_t query_group() const { return n_heads / n_kv_heads; }
};

} // namespace caflm

#pragma once

#include <cstdint>
#include <string>

namespace caflm {

class GgufFile;

/// Which dimensions RoPE rotates together.
enum class RopeMode {
  Interleaved, ///< pairs (2i, 2i+1): llama (ggml rope mode 0)
  NeoX,        ///< pairs (i, i + d/2): qwen2 (ggml rope mode 2)
};

/// Hyperparameters of a Llama-family model, read from GGUF metadata.
struct ModelConfig {
  /// `general.architecture`: "llama" or "qwen2".
  std::string architecture;
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
  /// qwen2 has biases on the q, k and v projections.
  bool qkv_bias = false;

  /// Reads and checks the metadata; throws GgufError naming the key at fault
  /// for an unsupported architecture or a missing or inconsistent value.
  static ModelConfig from_gguf(const GgufFile& file);

  std::uint32_t q_dim() const { return n_heads * head_dim; }
  std::uint32_t kv_dim() const { return n_kv_heads * head_dim; }
};

} // namespace caflm

#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "caflm/gguf/tensor_type.hpp"
#include "caflm/model/quant_mix.hpp"

namespace caflm {

/// RoPE scaling a random model can be written with, as converters write it.
enum class RandomRopeScaling {
  None,
  /// `<arch>.rope.scaling.type` "linear" and `.rope.scaling.factor`.
  Linear,
  /// Llama 3.1: a `rope_freqs.weight` tensor of per-pair divisors computed
  /// from factor, low/high frequency factors 1 and 4 and the original
  /// context, as convert_hf_to_gguf.py does (llama only).
  Llama3,
  /// Phi-3.5: `rope_factors_long/short.weight`, `rope.scaling.attn_factor`
  /// and `rope.scaling.original_context_length` (phi3 only).
  LongRope,
};

/// "none", "linear", "llama3" or "longrope"; nullopt for anything else.
std::optional<RandomRopeScaling> random_rope_scaling_from_name(std::string_view name);

/// The shape of a random-weight model for tests, demos and benchmarks.
struct RandomModelSpec {
  /// "llama", "qwen2", "qwen3" or "phi3".
  std::string architecture = "llama";
  std::uint32_t dim = 64;
  std::uint32_t n_layers = 2;
  std::uint32_t n_heads = 4;
  std::uint32_t n_kv_heads = 2;
  /// Dimensions per head; 0 for dim / n_heads. Another value is written as
  /// attention.key_length/value_length (qwen3 has 128-wide heads whatever
  /// its width).
  std::uint32_t head_dim = 0;
  std::uint32_t ffn_dim = 192;
  std::uint32_t context_length = 2048;
  /// The type of every matrix (Uniform), or the default type of the
  /// mixture. Norms, biases and RoPE factors stay F32 as converters write
  /// them.
  TensorType type = TensorType::F32;
  /// Q4_K_M picks each matrix's type as llama-quantize does, from Q4_K.
  QuantMix mix = QuantMix::Uniform;
  /// No `output.weight`: the output projection reuses the token embedding.
  bool tied_embeddings = false;
  /// RoPE base; 0 for the architecture's usual one (10000 for llama and
  /// phi3, 500000 for llama with Llama3 scaling, 1000000 for qwen2/qwen3).
  float rope_base = 0.0f;
  RandomRopeScaling rope_scaling = RandomRopeScaling::None;
  /// Linear: positions are divided by it. Llama3: the low-frequency
  /// divisor. LongRope: the largest long factor.
  float rope_scaling_factor = 8.0f;
  /// Llama3 and LongRope: the context the model was first trained for
  /// (0: 8192 for Llama3, context_length / 32 for LongRope).
  std::uint32_t original_context_length = 0;
  std::uint64_t seed = 1;

  std::uint32_t head_size() const { return head_dim != 0 ? head_dim : dim / n_heads; }
};

class GgufFile;

/// Bytes of the tensors of a random model of `spec`'s shape over a
/// vocabulary of `vocab_size` tokens (the file is a little more). Throws
/// std::invalid_argument when the shape is impossible or the size
/// overflows.
std::uint64_t random_model_bytes(const RandomModelSpec& spec, std::uint64_t vocab_size);

/// Writes a GGUF v3 model of `spec`'s shape with seeded random weights: the
/// same spec and tokenizer always give the same file. The tokenizer is the
/// `tokenizer.*` metadata of `tokenizer` (a model, or a vocabulary-only file
/// such as llama.cpp's ggml-vocab-*.gguf), copied unchanged; its token count
/// is the vocabulary size. Tensors are named, shaped and typed as llama.cpp's
/// converter and quantizer write them for the architecture (phi3: fused
/// attn_qkv and gate/up in ffn_up; qwen3: attn_q_norm/attn_k_norm); a row
/// that is not whole blocks of its type falls back as llama-quantize does.
/// Written as GgufWriter::write does: complete or not at all, never over a
/// mapped file's bytes. Throws std::invalid_argument for an impossible
/// shape or a tokenizer without tokens.
void write_random_model(const RandomModelSpec& spec, const GgufFile& tokenizer,
                        const std::string& path);

} // namespace caflm

#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "caflm/gguf/tensor_type.hpp"

namespace caflm {

/// What a weight matrix does, which is what llama.cpp's quantizer looks at
/// (through the tensor's name) to pick its type in a mixture.
enum class WeightRole {
  TokenEmbedding, ///< token_embd.weight
  Output,         ///< output.weight
  AttnQ,          ///< blk.N.attn_q.weight
  AttnK,          ///< blk.N.attn_k.weight
  AttnV,          ///< blk.N.attn_v.weight
  AttnQkv,        ///< blk.N.attn_qkv.weight (fused, phi3)
  AttnOutput,     ///< blk.N.attn_output.weight
  FfnGate,        ///< blk.N.ffn_gate.weight
  FfnUp,          ///< blk.N.ffn_up.weight (gate and up fused in phi3)
  FfnDown,        ///< blk.N.ffn_down.weight
};

/// A quantization mixture, as llama-quantize's file types name them.
enum class QuantMix {
  Uniform, ///< every matrix in one type (llama-quantize --pure)
  Q4_K_M,  ///< LLAMA_FTYPE_MOSTLY_Q4_K_M
};

/// "q4_k_m" (any case) or "uniform"; nullopt for anything else.
std::optional<QuantMix> quant_mix_from_name(std::string_view name);

/// "uniform" or "q4_k_m".
const char* to_string(QuantMix mix);

/// Where a matrix sits in the model, as far as the choice of its type goes.
struct WeightPlace {
  WeightRole role;
  std::uint32_t layer = 0;    ///< block index (ignored for the embedding and output)
  std::uint32_t n_layers = 1; ///< blocks in the model
  std::uint64_t cols = 0;     ///< values per row (GGUF dims[0])
  /// The model has no output.weight: the token embedding doubles as the
  /// output projection and llama.cpp quantizes it as the output.
  bool tied_embeddings = false;
};

/// The type llama.cpp's quantizer (llama_tensor_get_type in
/// src/llama-quant.cpp) gives the matrix at `place` when asked for `mix`,
/// with `uniform_type` the mixture's default (Q4_K for Q4_K_M; the one type
/// of a uniform mix), including the fallback for rows that are not whole
/// blocks (tensor_type_fallback). Throws std::invalid_argument when no type
/// fits the row (e.g. Q8_0 rows of 40 values).
TensorType quant_mix_type(QuantMix mix, TensorType uniform_type, const WeightPlace& place);

/// llama.cpp's fallback for a row of `cols` values that is not a whole
/// number of `type`'s blocks: Q2_K/Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
/// Q6_K -> Q8_0, then F16 when the fallback still does not fit. `type`
/// itself when the row fits. Throws std::invalid_argument for a type
/// llama.cpp defines no fallback for (the legacy 32-value quants).
TensorType fallback_type(TensorType type, std::uint64_t cols);

/// llama.cpp's `use_more_bits`: the first and last eighth of the layers and
/// every third one between get more bits in Q4_K_M.
bool use_more_bits(std::uint32_t layer, std::uint32_t n_layers);

} // namespace caflm

#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace caflm {

/// The ggml tensor types caflm can compute with, numbered by ggml's type ids
/// so a GGUF tensor's type field converts directly. Block layouts are in
/// quant_blocks.hpp. Q8_1 and Q8_K only ever hold activations, never weights.
enum class TensorType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  BF16 = 30,
};

/// Every type a weight may have, in ggml id order.
inline constexpr TensorType kWeightTypes[] = {
    TensorType::F32,  TensorType::F16,  TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
    TensorType::Q5_1, TensorType::Q8_0, TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
    TensorType::Q5_K, TensorType::Q6_K, TensorType::BF16,
};

/// Lower-case name as llama.cpp prints it: "f32", "q4_0", "q4_k", "bf16".
const char* to_string(TensorType type);

/// The supported type with this ggml id, or nullopt for every other id.
std::optional<TensorType> tensor_type_from_id(uint32_t ggml_id);

/// Parses a name to_string() gives (any case: "Q4_K" too); nullopt for
/// anything else.
std::optional<TensorType> tensor_type_from_name(std::string_view name);

/// Values per block: 1 for F32/F16/BF16, 32 for the legacy quants, 256 for
/// the K-quants.
uint64_t tensor_block_size(TensorType type);

/// Bytes per block.
uint64_t tensor_block_bytes(TensorType type);

/// ggml's name for any ggml type id ("q4_0", "q4_K", "iq2_xs", ...), including
/// the ones caflm cannot compute with, so errors can say what a file holds.
/// "unknown" for ids ggml never assigned.
const char* ggml_type_name(uint32_t ggml_id);

/// Bytes one row of `n_elements_in_row` elements occupies. Throws
/// std::invalid_argument, naming the type and block size, when the row is not
/// a whole number of blocks.
uint64_t tensor_row_bytes(TensorType type, uint64_t n_elements_in_row);

/// IEEE half precision to single precision; exact for every input, NaN payloads kept.
float f16_to_f32(uint16_t half);

/// Single to half precision, rounding to nearest even; overflow gives infinity,
/// NaN stays a (quiet) NaN.
uint16_t f32_to_f16(float value);

/// bfloat16 (the top half of an IEEE single) to single precision; exact.
float bf16_to_f32(uint16_t bf16);

/// Single precision to bfloat16, rounding to nearest even; NaN stays a (quiet) NaN.
uint16_t f32_to_bf16(float value);

} // namespace caflm

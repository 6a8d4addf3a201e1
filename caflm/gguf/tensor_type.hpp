#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace caflm {

/// The ggml tensor types caflm can compute with, numbered by ggml's type ids
/// so a GGUF tensor's type field converts directly.
enum class TensorType : uint32_t { F32 = 0, F16 = 1, Q8_0 = 8, BF16 = 30 };

/// Q8_0 stores blocks of 32 values: one f16 scale followed by 32 int8 quants.
inline constexpr uint64_t kQ8_0BlockSize = 32;
inline constexpr uint64_t kQ8_0BlockBytes = 2 + kQ8_0BlockSize;

/// Lower-case name as llama.cpp prints it: "f32", "f16", "q8_0", "bf16".
const char* to_string(TensorType type);

/// The supported type with this ggml id, or nullopt for every other id.
std::optional<TensorType> tensor_type_from_id(uint32_t ggml_id);

/// Parses "f32", "f16", "bf16" or "q8_0"; nullopt for anything else.
std::optional<TensorType> tensor_type_from_name(std::string_view name);

/// ggml's name for any ggml type id ("q4_0", "q4_K", "iq2_xs", ...), including
/// the ones caflm cannot compute with, so errors can say what a file holds.
/// "unknown" for ids ggml never assigned.
const char* ggml_type_name(uint32_t ggml_id);

/// Bytes one row of `n_elements_in_row` elements occupies. Throws
/// std::invalid_argument for Q8_0 when the row is not a whole number of blocks.
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

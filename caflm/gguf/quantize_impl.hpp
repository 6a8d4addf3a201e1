#pragma once

// Private to caflm/gguf: the per-format encoders and decoders behind
// quantize_row() and dequantize_row(). Each works on whole blocks; the public
// functions check lengths and dispatch on the type.

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "caflm/gguf/quant_blocks.hpp"

namespace caflm::quant_detail {

/// Decodes an IEEE half stored in a block field.
float half_to_float(std::uint16_t half);

/// ggml's nearest_int: rounds to nearest, ties to even, by adding 1.5 * 2^23
/// and reading the mantissa. Only meaningful for |value| <= 4194303, like
/// ggml's; out of that range it returns the same garbage ggml's does.
inline int nearest_int(float value) {
  const float shifted = value + 12582912.0f;
  std::int32_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// Decoders: `n_blocks` blocks to n_blocks * block-size floats.
void dequantize_q4_0(const BlockQ4_0* blocks, std::size_t n_blocks, float* out);
void dequantize_q4_1(const BlockQ4_1* blocks, std::size_t n_blocks, float* out);
void dequantize_q5_0(const BlockQ5_0* blocks, std::size_t n_blocks, float* out);
void dequantize_q5_1(const BlockQ5_1* blocks, std::size_t n_blocks, float* out);
void dequantize_q8_0(const BlockQ8_0* blocks, std::size_t n_blocks, float* out);
void dequantize_q8_1(const BlockQ8_1* blocks, std::size_t n_blocks, float* out);
void dequantize_q2_k(const BlockQ2_K* blocks, std::size_t n_blocks, float* out);
void dequantize_q3_k(const BlockQ3_K* blocks, std::size_t n_blocks, float* out);
void dequantize_q4_k(const BlockQ4_K* blocks, std::size_t n_blocks, float* out);
void dequantize_q5_k(const BlockQ5_K* blocks, std::size_t n_blocks, float* out);
void dequantize_q6_k(const BlockQ6_K* blocks, std::size_t n_blocks, float* out);
void dequantize_q8_k(const BlockQ8_K* blocks, std::size_t n_blocks, float* out);

// Encoders: n_blocks * block-size finite floats to `n_blocks` blocks, as
// ggml's quantize_row_*_ref.
void quantize_q4_0(const float* values, std::size_t n_blocks, BlockQ4_0* out);
void quantize_q4_1(const float* values, std::size_t n_blocks, BlockQ4_1* out);
void quantize_q5_0(const float* values, std::size_t n_blocks, BlockQ5_0* out);
void quantize_q5_1(const float* values, std::size_t n_blocks, BlockQ5_1* out);
void quantize_q8_0(const float* values, std::size_t n_blocks, BlockQ8_0* out);
void quantize_q8_1(const float* values, std::size_t n_blocks, BlockQ8_1* out);
void quantize_q2_k(const float* values, std::size_t n_blocks, BlockQ2_K* out);
void quantize_q3_k(const float* values, std::size_t n_blocks, BlockQ3_K* out);
void quantize_q4_k(const float* values, std::size_t n_blocks, BlockQ4_K* out);
void quantize_q5_k(const float* values, std::size_t n_blocks, BlockQ5_K* out);
void quantize_q6_k(const float* values, std::size_t n_blocks, BlockQ6_K* out);
void quantize_q8_k(const float* values, std::size_t n_blocks, BlockQ8_K* out);

} // namespace caflm::quant_detail

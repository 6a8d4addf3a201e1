#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "caflm/gguf/tensor_type.hpp"

namespace caflm {

/// Encodes one row of `n` F32 values as `type`, byte for byte as ggml's
/// reference quantizers (`quantize_row_*_ref`, no importance matrix) write
/// it, so a file caflm writes matches llama.cpp's for the same floats.
/// F16/BF16 round to nearest even (NaN stays NaN); F32 is copied.
/// Throws std::invalid_argument, naming the type, when `n` is not a multiple
/// of the block size (`tensor_block_size`) or when a block-quantized type is
/// given a NaN or infinite value (ggml's encoders have no defined result for
/// those). Returns `tensor_row_bytes(type, n)` bytes.
std::vector<std::uint8_t> quantize_row(TensorType type, const float* values, std::size_t n);

/// As quantize_row, writing the `tensor_row_bytes(type, n)` bytes to `out`
/// (no alignment needed for F16/BF16/F32; block types need the alignment of
/// their block struct, 2 bytes, 4 for Q8_K).
void quantize_row_into(TensorType type, const float* values, std::size_t n, void* out);

/// Converts the `n` elements of one row stored as `type` to F32 exactly as
/// ggml's `dequantize_row_*` decode them (same float operations in the same
/// order, so bit-identical results). Q8_1, which ggml never decodes, gives
/// d * q. Throws std::invalid_argument, naming the type, when `n` is not a
/// multiple of the type's block size. `row` needs its block struct's
/// alignment (2 bytes, 4 for Q8_K), as GGUF tensor data has.
void dequantize_row(TensorType type, const void* row, std::size_t n, float* out);

} // namespace caflm

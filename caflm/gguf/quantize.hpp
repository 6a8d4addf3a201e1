#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "caflm/gguf/tensor_type.hpp"

namespace caflm {

/// Encodes one row of `n` F32 values as `type` (the inverse of
/// `dequantize_row`): F16/BF16 round to nearest even; Q8_0 takes blocks of
/// 32 with scale max|x| / 127 as llama.cpp does (`n` a multiple of 32).
/// Returns `tensor_row_bytes(type, n)` bytes.
std::vector<std::uint8_t> quantize_row(TensorType type, const float* values, std::size_t n);

/// Converts the `n` elements of one row stored as `type` to F32, exactly as
/// ggml decodes them. For Q8_0, `n` must be a multiple of 32
/// (std::invalid_argument otherwise).
void dequantize_row(TensorType type, const void* row, std::size_t n, float* out);

} // namespace caflm

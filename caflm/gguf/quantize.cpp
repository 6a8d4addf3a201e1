#include "caflm/gguf/quantize.hpp"

#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/quantize_impl.hpp"

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace caflm {

namespace {

/// Number of blocks in a row of `n` values; throws when `n` is not whole blocks.
std::size_t whole_blocks(const char* function, TensorType type, std::size_t n) {
  const auto block_size = static_cast<std::size_t>(tensor_block_size(type));
  if (n % block_size != 0) {
    throw std::invalid_argument(
        std::string(function) + ": " + to_string(type) + " row of " + std::to_string(n) +
        " elements is not a multiple of the block size " + std::to_string(block_size));
  }
  return n / block_size;
}

void require_finite(TensorType type, const float* values, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i])) {
      throw std::invalid_argument("quantize_row: " + std::string(to_string(type)) +
                                  " cannot encode the non-finite value at index " +
                                  std::to_string(i));
    }
  }
}

} // namespace

void quantize_row_into(TensorType type, const float* values, std::size_t n, void* out) {
  using namespace quant_detail;
  const std::size_t n_blocks = whole_blocks("quantize_row", type, n);
  auto* bytes = static_cast<std::uint8_t*>(out);
  switch (type) {
  case TensorType::F32:
    std::memcpy(out, values, n * sizeof(float));
    return;
  case TensorType::F16:
  case TensorType::BF16:
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint16_t half =
          type == TensorType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(bytes + 2 * i, &half, 2);
    }
    return;
  default:
    break;
  }
  require_finite(type, values, n);
  switch (type) {
  case TensorType::Q4_0:
    return quantize_q4_0(values, n_blocks, static_cast<BlockQ4_0*>(out));
  case TensorType::Q4_1:
    return quantize_q4_1(values, n_blocks, static_cast<BlockQ4_1*>(out));
  case TensorType::Q5_0:
    return quantize_q5_0(values, n_blocks, static_cast<BlockQ5_0*>(out));
  case TensorType::Q5_1:
    return quantize_q5_1(values, n_blocks, static_cast<BlockQ5_1*>(out));
  case TensorType::Q8_0:
    return quantize_q8_0(values, n_blocks, static_cast<BlockQ8_0*>(out));
  case TensorType::Q8_1:
    return quantize_q8_1(values, n_blocks, static_cast<BlockQ8_1*>(out));
  case TensorType::Q2_K:
    return quantize_q2_k(values, n_blocks, static_cast<BlockQ2_K*>(out));
  case TensorType::Q3_K:
    return quantize_q3_k(values, n_blocks, static_cast<BlockQ3_K*>(out));
  case TensorType::Q4_K:
    return quantize_q4_k(values, n_blocks, static_cast<BlockQ4_K*>(out));
  case TensorType::Q5_K:
    return quantize_q5_k(values, n_blocks, static_cast<BlockQ5_K*>(out));
  case TensorType::Q6_K:
    return quantize_q6_k(values, n_blocks, static_cast<BlockQ6_K*>(out));
  case TensorType::Q8_K:
    return quantize_q8_k(values, n_blocks, static_cast<BlockQ8_K*>(out));
  default:
    break;
  }
  throw std::invalid_argument("quantize_row: invalid tensor type");
}

std::vector<std::uint8_t> quantize_row(TensorType type, const float* values, std::size_t n) {
  whole_blocks("quantize_row", type, n);
  std::vector<std::uint8_t> bytes(tensor_row_bytes(type, n));
  // std::vector's allocation is aligned for any fundamental type, so the
  // block structs may be written through it.
  quantize_row_into(type, values, n, bytes.data());
  return bytes;
}

void dequantize_row(TensorType type, const void* row, std::size_t n, float* out) {
  using namespace quant_detail;
  const std::size_t n_blocks = whole_blocks("dequantize_row", type, n);
  const auto* bytes = static_cast<const std::uint8_t*>(row);
  switch (type) {
  case TensorType::F32:
    std::memcpy(out, row, n * sizeof(float));
    return;
  case TensorType::F16:
  case TensorType::BF16:
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t half;
      std::memcpy(&half, bytes + 2 * i, 2);
      out[i] = type == TensorType::F16 ? f16_to_f32(half) : bf16_to_f32(half);
    }
    return;
  case TensorType::Q4_0:
    return dequantize_q4_0(static_cast<const BlockQ4_0*>(row), n_blocks, out);
  case TensorType::Q4_1:
    return dequantize_q4_1(static_cast<const BlockQ4_1*>(row), n_blocks, out);
  case TensorType::Q5_0:
    return dequantize_q5_0(static_cast<const BlockQ5_0*>(row), n_blocks, out);
  case TensorType::Q5_1:
    return dequantize_q5_1(static_cast<const BlockQ5_1*>(row), n_blocks, out);
  case TensorType::Q8_0:
    return dequantize_q8_0(static_cast<const BlockQ8_0*>(row), n_blocks, out);
  case TensorType::Q8_1:
    return dequantize_q8_1(static_cast<const BlockQ8_1*>(row), n_blocks, out);
  case TensorType::Q2_K:
    return dequantize_q2_k(static_cast<const BlockQ2_K*>(row), n_blocks, out);
  case TensorType::Q3_K:
    return dequantize_q3_k(static_cast<const BlockQ3_K*>(row), n_blocks, out);
  case TensorType::Q4_K:
    return dequantize_q4_k(static_cast<const BlockQ4_K*>(row), n_blocks, out);
  case TensorType::Q5_K:
    return dequantize_q5_k(static_cast<const BlockQ5_K*>(row), n_blocks, out);
  case TensorType::Q6_K:
    return dequantize_q6_k(static_cast<const BlockQ6_K*>(row), n_blocks, out);
  case TensorType::Q8_K:
    return dequantize_q8_k(static_cast<const BlockQ8_K*>(row), n_blocks, out);
  }
  throw std::invalid_argument("dequantize_row: invalid tensor type");
}

} // namespace caflm

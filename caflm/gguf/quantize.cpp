#include "caflm/gguf/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace caflm {

std::vector<std::uint8_t> quantize_row(TensorType type, const float* values, std::size_t n) {
  std::vector<std::uint8_t> bytes(tensor_row_bytes(type, n));
  switch (type) {
  case TensorType::F32:
    std::memcpy(bytes.data(), values, n * sizeof(float));
    break;
  case TensorType::F16:
  case TensorType::BF16:
    for (std::size_t i = 0; i < n; ++i) {
      std::uint16_t half = type == TensorType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(&bytes[2 * i], &half, 2);
    }
    break;
  case TensorType::Q8_0: {
    if (n % 32 != 0)
      throw std::invalid_argument("q8_0 rows hold whole blocks of 32 values");
    for (std::size_t block = 0; block < n / 32; ++block) {
      const float* x = values + block * 32;
      float amax = 0.0f;
      for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(x[i]));
      const float scale = amax / 127.0f;
      const float inverse = scale != 0.0f ? 1.0f / scale : 0.0f;
      std::uint8_t* out = &bytes[block * 34];
      std::uint16_t half = f32_to_f16(scale);
      std::memcpy(out, &half, 2);
      for (int i = 0; i < 32; ++i)
        out[2 + i] =
            static_cast<std::uint8_t>(static_cast<std::int8_t>(std::lround(x[i] * inverse)));
    }
    break;
  }
  }
  return bytes;
}

void dequantize_row(TensorType type, const void* row, std::size_t n, float* out) {
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
  case TensorType::Q8_0:
    if (n % kQ8_0BlockSize != 0)
      throw std::invalid_argument("dequantize_row: q8_0 row length " + std::to_string(n) +
                                  " is not a multiple of 32");
    for (std::size_t block = 0; block < n / kQ8_0BlockSize; ++block) {
      const std::uint8_t* b = bytes + block * kQ8_0BlockBytes;
      std::uint16_t scale;
      std::memcpy(&scale, b, 2);
      const float d = f16_to_f32(scale);
      for (std::size_t j = 0; j < kQ8_0BlockSize; ++j)
        out[block * kQ8_0BlockSize + j] =
            d * static_cast<float>(static_cast<std::int8_t>(b[2 + j]));
    }
    return;
  }
  throw std::invalid_argument("dequantize_row: invalid tensor type");
}

} // namespace caflm

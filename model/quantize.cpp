#include "model/quantize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

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

} // namespace caflm

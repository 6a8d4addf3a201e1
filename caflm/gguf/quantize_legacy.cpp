// The legacy ggml block formats (32 values per block): Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0 and Q8_1, encoded as ggml's quantize_row_*_ref and decoded as
// its dequantize_row_* (ggml-quants.c), operation for operation, so that
// encoded bytes and decoded floats are bit-identical to ggml's.

#include "caflm/gguf/quantize_impl.hpp"

#include "caflm/gguf/tensor_type.hpp"

#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstring>

namespace caflm::quant_detail {

namespace {

constexpr int kQK = 32; // values per legacy block
constexpr int kHalf = kQK / 2;

// ggml's C casts `(int8_t)f` and `(uint8_t)f` convert a float straight to a
// small integer, which C leaves undefined outside the target's range. The
// encoders reach such values only for pathological blocks (a scale so small
// that its inverse overflows, making x * id infinite or NaN). llama.cpp's x86
// builds vectorize these casts: truncate to int32 (NaN and out-of-range give
// INT32_MIN), then narrow with saturation. These helpers do the same, so the
// bytes match llama.cpp's there too; for in-range values they are plain casts.
std::int32_t truncate_like_cvttps(float value) {
  return (value >= -2147483648.0f && value < 2147483648.0f) ? static_cast<std::int32_t>(value)
                                                            : INT32_MIN;
}

// `(int8_t)f` as a signed value, for `MIN(15, (int8_t)(...))`.
int int8_of_truncation(float value) {
  return std::max(-128, std::min(127, truncate_like_cvttps(value)));
}

// `(uint8_t)f`.
std::uint8_t uint8_of_truncation(float value) {
  return static_cast<std::uint8_t>(std::max(0, std::min(255, truncate_like_cvttps(value))));
}

// The value of largest magnitude, signed (the first one wins a tie), as the
// symmetric legacy encoders pick it.
float signed_absolute_max(const float* __restrict__ x) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void min_and_max(const float* __restrict__ x, float& min, float& max) {
  min = FLT_MAX;
  max = -FLT_MAX;
  for (int j = 0; j < kQK; ++j) {
    if (x[j] < min)
      min = x[j];
    if (x[j] > max)
      max = x[j];
  }
}

// Q8_0 and Q8_1 store `roundf(x * id)` (halves away from zero) in an int8.
std::int8_t round_to_int8(float value) {
  return static_cast<std::int8_t>(int8_of_truncation(std::round(value)));
}

} // namespace

float half_to_float(std::uint16_t half) {
  return f16_to_f32(half);
}

// ---- decoders ----

void dequantize_q4_0(const BlockQ4_0* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i, out += kQK) {
    const BlockQ4_0& b = blocks[i];
    const float d = half_to_float(b.d);
    for (int j = 0; j < kHalf; ++j) {
      const int low = (b.qs[j] & 0x0F) - 8;
      const int high = (b.qs[j] >> 4) - 8;
      out[j] = static_cast<float>(low) * d;
      out[j + kHalf] = static_cast<float>(high) * d;
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i, out += kQK) {
    const BlockQ4_1& b = blocks[i];
    const float d = half_to_float(b.d);
    const float m = half_to_float(b.m);
    for (int j = 0; j < kHalf; ++j) {
      const int low = b.qs[j] & 0x0F;
      const int high = b.qs[j] >> 4;
      out[j] = static_cast<float>(low) * d + m;
      out[j + kHalf] = static_cast<float>(high) * d + m;
    }
  }
}

void dequantize_q5_0(const BlockQ5_0* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i, out += kQK) {
    const BlockQ5_0& b = blocks[i];
    const float d = half_to_float(b.d);
    std::uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof qh);
    for (int j = 0; j < kHalf; ++j) {
      // Bit j of qh is the fifth bit of value j, bit j + 16 that of value j + 16.
      const int high_bit_low = static_cast<int>((qh >> j) << 4) & 0x10;
      const int high_bit_high = static_cast<int>(qh >> (j + 12)) & 0x10;
      const int low = ((b.qs[j] & 0x0F) | high_bit_low) - 16;
      const int high = ((b.qs[j] >> 4) | high_bit_high) - 16;
      out[j] = static_cast<float>(low) * d;
      out[j + kHalf] = static_cast<float>(high) * d;
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i, out += kQK) {
    const BlockQ5_1& b = blocks[i];
    const float d = half_to_float(b.d);
    const float m = half_to_float(b.m);
    std::uint32_t qh;
    std::memcpy(&qh, b.qh, sizeof qh);
    for (int j = 0; j < kHalf; ++j) {
      const int high_bit_low = static_cast<int>((qh >> j) << 4) & 0x10;
      const int high_bit_high = static_cast<int>(qh >> (j + 12)) & 0x10;
      const int low = (b.qs[j] & 0x0F) | high_bit_low;
      const int high = (b.qs[j] >> 4) | high_bit_high;
      out[j] = static_cast<float>(low) * d + m;
      out[j + kHalf] = static_cast<float>(high) * d + m;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i, out += kQK) {
    const BlockQ8_0& b = blocks[i];
    const float d = half_to_float(b.d);
    for (int j = 0; j < kQK; ++j)
      out[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// ggml has no Q8_1 decoder (it only ever holds activations); the values are
// d * qs as in Q8_0, and the stored sum s is not needed for them.
void dequantize_q8_1(const BlockQ8_1* blocks, std::size_t n_blocks, float* __restrict__ out) {
  for (std::size_t i = 0; i < n_blocks; ++i, out += kQK) {
    const BlockQ8_1& b = blocks[i];
    const float d = half_to_float(b.d);
    for (int j = 0; j < kQK; ++j)
      out[j] = static_cast<float>(b.qs[j]) * d;
  }
}

// ---- encoders ----

void quantize_q4_0(const float* __restrict__ values, std::size_t n_blocks, BlockQ4_0* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, values += kQK) {
    // The largest magnitude maps to -8 exactly, using the one extra negative level.
    const float max = signed_absolute_max(values);
    const float d = max / -8;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0& b = out[i];
    b.d = f32_to_f16(d);
    for (int j = 0; j < kHalf; ++j) {
      const float x0 = values[j] * id;
      const float x1 = values[kHalf + j] * id;
      const auto q0 = static_cast<std::uint8_t>(std::min(15, int8_of_truncation(x0 + 8.5f)));
      const auto q1 = static_cast<std::uint8_t>(std::min(15, int8_of_truncation(x1 + 8.5f)));
      b.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_q4_1(const float* __restrict__ values, std::size_t n_blocks, BlockQ4_1* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, values += kQK) {
    float min, max;
    min_and_max(values, min, max);
    const float d = (max - min) / ((1 << 4) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_1& b = out[i];
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(min);
    for (int j = 0; j < kHalf; ++j) {
      const float x0 = (values[j] - min) * id;
      const float x1 = (values[kHalf + j] - min) * id;
      const auto q0 = static_cast<std::uint8_t>(std::min(15, int8_of_truncation(x0 + 0.5f)));
      const auto q1 = static_cast<std::uint8_t>(std::min(15, int8_of_truncation(x1 + 0.5f)));
      b.qs[j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
    }
  }
}

void quantize_q5_0(const float* __restrict__ values, std::size_t n_blocks, BlockQ5_0* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, values += kQK) {
    const float max = signed_absolute_max(values);
    const float d = max / -16;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_0& b = out[i];
    b.d = f32_to_f16(d);
    std::uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const float x0 = values[j] * id;
      const float x1 = values[kHalf + j] * id;
      const auto q0 = static_cast<std::uint8_t>(std::min(31, int8_of_truncation(x0 + 16.5f)));
      const auto q1 = static_cast<std::uint8_t>(std::min(31, int8_of_truncation(x1 + 16.5f)));
      b.qs[j] = static_cast<std::uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= ((q0 & 0x10u) >> 4) << j;
      qh |= ((q1 & 0x10u) >> 4) << (j + kHalf);
    }
    std::memcpy(b.qh, &qh, sizeof qh);
  }
}

void quantize_q5_1(const float* __restrict__ values, std::size_t n_blocks, BlockQ5_1* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, values += kQK) {
    float min, max;
    min_and_max(values, min, max);
    const float d = (max - min) / ((1 << 5) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ5_1& b = out[i];
    b.d = f32_to_f16(d);
    b.m = f32_to_f16(min);
    std::uint32_t qh = 0;
    for (int j = 0; j < kHalf; ++j) {
      const float x0 = (values[j] - min) * id;
      const float x1 = (values[kHalf + j] - min) * id;
      // ggml clamps nothing here: x0 + 0.5 stays below 32 for finite input.
      const std::uint8_t q0 = uint8_of_truncation(x0 + 0.5f);
      const std::uint8_t q1 = uint8_of_truncation(x1 + 0.5f);
      b.qs[j] = static_cast<std::uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
      qh |= ((q0 & 0x10u) >> 4) << j;
      qh |= ((q1 & 0x10u) >> 4) << (j + kHalf);
    }
    std::memcpy(b.qh, &qh, sizeof qh);
  }
}

void quantize_q8_0(const float* __restrict__ values, std::size_t n_blocks, BlockQ8_0* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, values += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j)
      amax = std::max(amax, std::fabs(values[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_0& b = out[i];
    b.d = f32_to_f16(d);
    for (int j = 0; j < kQK; ++j)
      b.qs[j] = round_to_int8(values[j] * id);
  }
}

void quantize_q8_1(const float* __restrict__ values, std::size_t n_blocks, BlockQ8_1* out) {
  for (std::size_t i = 0; i < n_blocks; ++i, values += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j)
      amax = std::max(amax, std::fabs(values[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ8_1& b = out[i];
    b.d = f32_to_f16(d);
    int sum = 0;
    for (int j = 0; j < kQK; ++j) {
      b.qs[j] = round_to_int8(values[j] * id);
      sum += b.qs[j];
    }
    // s uses the unrounded f32 d, as ggml's does.
    b.s = f32_to_f16(static_cast<float>(sum) * d);
  }
}

} // namespace caflm::quant_detail

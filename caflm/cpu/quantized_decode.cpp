// Weight rows unpacked into a column group's scratch (DecodedColumns): one
// byte per quant, the K-quants' scales and mins widened, for the column
// kernels and for interleaving.
#include "caflm/cpu/quantized_matmul.hpp"

#include "caflm/cpu/block_readers.hpp"
#include "caflm/cpu/super_block_readers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace caflm::detail {

namespace {

// One legacy weight row (blocks of 32): quants, d and m.
template <TensorType kType>
void decode_legacy(const uint8_t* __restrict__ row, size_t nb, uint8_t* __restrict__ q,
                   float* __restrict__ d, float* __restrict__ m) {
  const __m256i sixteen = _mm256_set1_epi8(16);
  for (size_t b = 0; b < nb; ++b) {
    uint8_t* qb = q + 32 * b;
    if constexpr (kType == TensorType::Q4_0) {
      const uint8_t* block = block_at<BlockQ4_0>(row, b);
      d[b] = half(u16_at(block + offsetof(BlockQ4_0, d)));
      store(qb, nibbles(block + offsetof(BlockQ4_0, qs))); // q + 8
    } else if constexpr (kType == TensorType::Q4_1) {
      const uint8_t* block = block_at<BlockQ4_1>(row, b);
      d[b] = half(u16_at(block + offsetof(BlockQ4_1, d)));
      m[b] = half(u16_at(block + offsetof(BlockQ4_1, m)));
      store(qb, nibbles(block + offsetof(BlockQ4_1, qs)));
    } else if constexpr (kType == TensorType::Q5_0) {
      const uint8_t* block = block_at<BlockQ5_0>(row, b);
      d[b] = half(u16_at(block + offsetof(BlockQ5_0, d)));
      const __m256i high =
          _mm256_and_si256(expand_bits(u32_at(block + offsetof(BlockQ5_0, qh))), sixteen);
      store(qb, _mm256_or_si256(nibbles(block + offsetof(BlockQ5_0, qs)), high)); // q + 16
    } else if constexpr (kType == TensorType::Q5_1) {
      const uint8_t* block = block_at<BlockQ5_1>(row, b);
      d[b] = half(u16_at(block + offsetof(BlockQ5_1, d)));
      m[b] = half(u16_at(block + offsetof(BlockQ5_1, m)));
      const __m256i high =
          _mm256_and_si256(expand_bits(u32_at(block + offsetof(BlockQ5_1, qh))), sixteen);
      store(qb, _mm256_or_si256(nibbles(block + offsetof(BlockQ5_1, qs)), high));
    } else {
      const uint8_t* block = block_at<BlockQ8_0>(row, b);
      d[b] = half(u16_at(block + offsetof(BlockQ8_0, d)));
      store(qb, load32(block + offsetof(BlockQ8_0, qs)));
    }
  }
  (void)m;
}

// One K-quant weight row (super-blocks of 256): unsigned quants, expanded
// sub-block scales, mins, d and dmin (those of super-block b at
// d[b * scale_stride] and dmin[b * scale_stride]).
template <TensorType kType>
void decode_super(const uint8_t* __restrict__ row, size_t nb, uint8_t* __restrict__ q,
                  int8_t* __restrict__ scales, int16_t* __restrict__ mins, float* __restrict__ d,
                  float* __restrict__ dmin, size_t scale_stride) {
  using Blocks = SuperBlocks<kType>;
  for (size_t b = 0; b < nb; ++b) {
    const uint8_t* block = block_at<typename Blocks::Block>(row, b);
    Blocks::scales(block, scales + 16 * b, mins + 16 * b, d + b * scale_stride,
                   dmin + b * scale_stride);
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c)
      store(q + 256 * b + 32 * c, Blocks::quants(block, c));
  }
}

template <TensorType kType>
void decode_legacy_any(const uint8_t* row, size_t k, size_t col, uint8_t* q, float* d, float* m) {
  const size_t nb = k / 32;
  decode_legacy<kType>(row, nb, q + col * k, d + col * nb, m + col * nb);
}

} // namespace

void decode_super_row(TensorType type, const uint8_t* row, size_t k, size_t col, uint8_t* q,
                      int8_t* scales, int16_t* mins, float* d, float* dmin, size_t scale_stride) {
  const size_t nb = k / 256;
  q += col * k;
  scales += col * (k / 16);
  mins += col * (k / 16);
  visit_super_type(type, "linear: weight type", [&](auto kType) {
    decode_super<decltype(kType)::value>(row, nb, q, scales, mins, d, dmin, scale_stride);
  });
}

void decode_weight_row(TensorType type, const uint8_t* __restrict__ row, size_t k, size_t col,
                       uint8_t* q, float* d, float* m, int8_t* scales, int16_t* mins) {
  switch (type) {
  case TensorType::Q4_0:
    return decode_legacy_any<TensorType::Q4_0>(row, k, col, q, d, m);
  case TensorType::Q4_1:
    return decode_legacy_any<TensorType::Q4_1>(row, k, col, q, d, m);
  case TensorType::Q5_0:
    return decode_legacy_any<TensorType::Q5_0>(row, k, col, q, d, m);
  case TensorType::Q5_1:
    return decode_legacy_any<TensorType::Q5_1>(row, k, col, q, d, m);
  case TensorType::Q8_0:
    return decode_legacy_any<TensorType::Q8_0>(row, k, col, q, d, m);
  case TensorType::Q2_K:
  case TensorType::Q3_K:
  case TensorType::Q4_K:
  case TensorType::Q5_K:
  case TensorType::Q6_K: {
    const size_t nb = k / 256;
    return decode_super_row(type, row, k, col, q, scales, mins, d + col * nb, m + col * nb, 1);
  }
  default:
    break;
  }
  throw std::invalid_argument(std::string("linear: weight type ") + to_string(type) +
                              " is not supported");
}

} // namespace caflm::detail

// Weight rows unpacked into a column group's scratch (DecodedColumns): one
// byte per quant, the K-quants' scales and mins widened, for the column
// kernels and for interleaving.
#include "caflm/cpu/quantized_matmul.hpp"

#include "caflm/cpu/block_readers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>

namespace caflm::detail {

namespace {

// The 12 packed bytes of Q3_K's 6-bit scales as 16 int8 scales (minus the
// bias of 32): scale s has low bits 4(s / 8) of byte s % 8 and high bits
// 2(s / 4) of byte 8 + s % 4.
inline __m128i unpack_scales_q3_k(const uint8_t* packed) {
  uint32_t u[4];
  std::memcpy(u, packed, 12);
  constexpr uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const uint32_t high = u[2];
  u[2] = ((u[0] >> 4) & kLow4) | (((high >> 4) & kLow2) << 4);
  u[3] = ((u[1] >> 4) & kLow4) | (((high >> 6) & kLow2) << 4);
  u[0] = (u[0] & kLow4) | (((high >> 0) & kLow2) << 4);
  u[1] = (u[1] & kLow4) | (((high >> 2) & kLow2) << 4);
  return _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]),
                                     static_cast<int>(u[2]), static_cast<int>(u[3])),
                      _mm_set1_epi8(32));
}

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
                  int8_t* __restrict__ scales_row, int16_t* __restrict__ mins_row,
                  float* __restrict__ d, float* __restrict__ dmin, size_t scale_stride) {
  const __m256i sixteen = _mm256_set1_epi8(16);
  const __m256i three = _mm256_set1_epi8(3);
  (void)sixteen;
  (void)dmin;
  for (size_t b = 0; b < nb; ++b) {
    uint8_t* qb = q + 256 * b;
    int8_t* scales = scales_row + 16 * b;
    int16_t* mins = mins_row + 16 * b;
    if constexpr (kType == TensorType::Q2_K) {
      const uint8_t* block = block_at<BlockQ2_K>(row, b);
      d[b * scale_stride] = half(u16_at(block + offsetof(BlockQ2_K, d)));
      dmin[b * scale_stride] = half(u16_at(block + offsetof(BlockQ2_K, dmin)));
      // Byte s: scale in the low nibble, min in the high one.
      const __m128i packed =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + offsetof(BlockQ2_K, scales)));
      const __m128i low4 = _mm_set1_epi8(0x0F);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), _mm_and_si128(packed, low4));
      store(mins, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low4)));
      // Value 128n + 32j + l is bits 2j, 2j+1 of qs[32n + l].
      for (int n = 0; n < 2; ++n) {
        const __m256i bits = load32(block + offsetof(BlockQ2_K, qs) + 32 * n);
        for (int j = 0; j < 4; ++j) {
          store(qb + 128 * n + 32 * j, _mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), three));
        }
      }
    } else if constexpr (kType == TensorType::Q3_K) {
      const uint8_t* block = block_at<BlockQ3_K>(row, b);
      d[b * scale_stride] = half(u16_at(block + offsetof(BlockQ3_K, d)));
      const __m128i scales8 = unpack_scales_q3_k(block + offsetof(BlockQ3_K, scales));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), scales8);
      store(mins, _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales8), 2)); // 4 * scale
      // Value 128n + 32j + l: bits 2j, 2j+1 of qs[32n + l], + 4 where bit
      // 4n + j of hmask[l] is set (q + 4 of ggml's q in -4..3).
      const __m256i hmask = load32(block + offsetof(BlockQ3_K, hmask));
      for (int n = 0; n < 2; ++n) {
        const __m256i bits = load32(block + offsetof(BlockQ3_K, qs) + 32 * n);
        for (int j = 0; j < 4; ++j) {
          const __m256i bit = _mm256_set1_epi8(static_cast<char>(1 << (4 * n + j)));
          const __m256i four = _mm256_and_si256(
              _mm256_cmpeq_epi8(_mm256_and_si256(hmask, bit), bit), _mm256_set1_epi8(4));
          store(qb + 128 * n + 32 * j,
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2 * j), three), four));
        }
      }
    } else if constexpr (kType == TensorType::Q4_K || kType == TensorType::Q5_K) {
      constexpr bool five = kType == TensorType::Q5_K;
      const uint8_t* block = five ? block_at<BlockQ5_K>(row, b) : block_at<BlockQ4_K>(row, b);
      // d, dmin and scales sit at the same offsets in both.
      static_assert(offsetof(BlockQ4_K, scales) == offsetof(BlockQ5_K, scales));
      d[b * scale_stride] = half(u16_at(block + offsetof(BlockQ4_K, d)));
      dmin[b * scale_stride] = half(u16_at(block + offsetof(BlockQ4_K, dmin)));
      const uint8_t* packed = block + offsetof(BlockQ4_K, scales);
      const uint8_t* qs = block + (five ? offsetof(BlockQ5_K, qs) : offsetof(BlockQ4_K, qs));
      // Both 16-value halves of a 32-value sub-block share its scale and min.
      const __m128i both = unpack_scales_k4(packed);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), _mm_unpacklo_epi8(both, both));
      store(mins, _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(both, both)));
      // Value 64t + l is the low nibble of qs[32t + l], 64t + 32 + l the high
      // one; Q5_K adds 16 where bit 2t (2t + 1) of qh[l] is set.
      const __m256i qh = five ? load32(block + offsetof(BlockQ5_K, qh)) : _mm256_setzero_si256();
      const __m256i low_mask = _mm256_set1_epi8(0x0F);
      for (int t = 0; t < 4; ++t) {
        const __m256i bytes = load32(qs + 32 * t);
        __m256i lo = _mm256_and_si256(bytes, low_mask);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low_mask);
        if constexpr (five) {
          const __m256i bit_lo = _mm256_set1_epi8(static_cast<char>(1 << (2 * t)));
          const __m256i bit_hi = _mm256_set1_epi8(static_cast<char>(2 << (2 * t)));
          lo = _mm256_or_si256(
              lo,
              _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_lo), bit_lo), sixteen));
          hi = _mm256_or_si256(
              hi,
              _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, bit_hi), bit_hi), sixteen));
        }
        store(qb + 64 * t, lo);
        store(qb + 64 * t + 32, hi);
      }
    } else {
      static_assert(kType == TensorType::Q6_K);
      const uint8_t* block = block_at<BlockQ6_K>(row, b);
      d[b * scale_stride] = half(u16_at(block + offsetof(BlockQ6_K, d)));
      const __m128i scales8 =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + offsetof(BlockQ6_K, scales)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), scales8);
      store(mins, _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales8), 5)); // 32 * scale
      // Half n, l < 32: values 128n + 32i + l take the low (i = 0, 1) or high
      // (i = 2, 3) nibble of ql[64n + 32(i % 2) + l] and bits 2i, 2i+1 of qh[32n + l].
      const __m256i low_mask = _mm256_set1_epi8(0x0F);
      for (int n = 0; n < 2; ++n) {
        const __m256i ql0 = load32(block + offsetof(BlockQ6_K, ql) + 64 * n);
        const __m256i ql1 = load32(block + offsetof(BlockQ6_K, ql) + 64 * n + 32);
        const __m256i qh = load32(block + offsetof(BlockQ6_K, qh) + 32 * n);
        const __m256i low[4] = {_mm256_and_si256(ql0, low_mask), _mm256_and_si256(ql1, low_mask),
                                _mm256_and_si256(_mm256_srli_epi16(ql0, 4), low_mask),
                                _mm256_and_si256(_mm256_srli_epi16(ql1, 4), low_mask)};
        for (int i = 0; i < 4; ++i) {
          const __m256i high =
              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), three), 4);
          store(qb + 128 * n + 32 * i, _mm256_or_si256(low[i], high));
        }
      }
    }
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
  switch (type) {
  case TensorType::Q2_K:
    return decode_super<TensorType::Q2_K>(row, nb, q, scales, mins, d, dmin, scale_stride);
  case TensorType::Q3_K:
    return decode_super<TensorType::Q3_K>(row, nb, q, scales, mins, d, dmin, scale_stride);
  case TensorType::Q4_K:
    return decode_super<TensorType::Q4_K>(row, nb, q, scales, mins, d, dmin, scale_stride);
  case TensorType::Q5_K:
    return decode_super<TensorType::Q5_K>(row, nb, q, scales, mins, d, dmin, scale_stride);
  case TensorType::Q6_K:
    return decode_super<TensorType::Q6_K>(row, nb, q, scales, mins, d, dmin, scale_stride);
  default:
    break;
  }
  throw std::invalid_argument(std::string("linear: weight type ") + to_string(type) +
                              " is not a K-quant type");
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

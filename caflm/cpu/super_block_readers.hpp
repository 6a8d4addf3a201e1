#pragma once

// AVX2 readers of K-quant super-blocks (256 values) where they lie: a
// chunk's 32 quants as stored, and the super-block's sub-block scales, mins,
// d and dmin in DecodedColumns' form. quantized_decode.cpp writes them out
// for the column kernels; quantized_interleave_avx512.cpp interleaves them
// straight from the weight rows. Internal linkage, as in block_readers.hpp.
// Internals of caflm/cpu; include nowhere else.

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "caflm/cpu/block_readers.hpp"
#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/tensor_type.hpp"

namespace caflm::detail {
namespace {

// The 12 packed bytes of Q3_K's 6-bit scales as 16 int8 scales (minus the
// bias of 32): scale s has low bits 4(s / 8) of byte s % 8 and high bits
// 2(s / 4) of byte 8 + s % 4.
inline __m128i unpack_scales_q3_k(const std::uint8_t* packed) {
  std::uint32_t u[4];
  std::memcpy(u, packed, 12);
  constexpr std::uint32_t kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  const std::uint32_t high = u[2];
  u[2] = ((u[0] >> 4) & kLow4) | (((high >> 4) & kLow2) << 4);
  u[3] = ((u[1] >> 4) & kLow4) | (((high >> 6) & kLow2) << 4);
  u[0] = (u[0] & kLow4) | (((high >> 0) & kLow2) << 4);
  u[1] = (u[1] & kLow4) | (((high >> 2) & kLow2) << 4);
  return _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]),
                                     static_cast<int>(u[2]), static_cast<int>(u[3])),
                      _mm_set1_epi8(32));
}

/// 0x00 or `value` in each byte: `value` where the bit `bit` of that byte of
/// `bits` is set.
inline __m256i where_bit(__m256i bits, int bit, char value) {
  const __m256i mask = _mm256_set1_epi8(static_cast<char>(1 << bit));
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(bits, mask), mask),
                          _mm256_set1_epi8(value));
}

/// A K-quant super-block of kType. `quants(block, c)`: values 32c .. 32c +
/// 31 (c < 8) as unsigned stored quants (Q3_K's and Q6_K's with their
/// offset, 4 and 32). `scales(block, scales, mins, d, dmin)`: the 16
/// sub-block scales as int8 (one per 16 values), their 16 mins as int16
/// (kinds with a min; for the offset kinds, offset * scale), d, and dmin
/// (kinds with a min only; left alone otherwise).
template <TensorType kType>
struct SuperBlocks;

template <>
struct SuperBlocks<TensorType::Q2_K> {
  using Block = BlockQ2_K;
  // Value 128n + 32j + l is bits 2j, 2j + 1 of qs[32n + l].
  static __m256i quants(const std::uint8_t* block, int c) {
    const __m256i bits = load32(block + offsetof(Block, qs) + 32 * (c / 4));
    return _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (c % 4)), _mm256_set1_epi8(3));
  }
  static void scales(const std::uint8_t* block, std::int8_t* scales, std::int16_t* mins, float* d,
                     float* dmin) {
    *d = half(u16_at(block + offsetof(Block, d)));
    *dmin = half(u16_at(block + offsetof(Block, dmin)));
    // Byte s: scale in the low nibble, min in the high one.
    const __m128i packed =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + offsetof(Block, scales)));
    const __m128i low4 = _mm_set1_epi8(0x0F);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), _mm_and_si128(packed, low4));
    store(mins, _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(packed, 4), low4)));
  }
};

template <>
struct SuperBlocks<TensorType::Q3_K> {
  using Block = BlockQ3_K;
  // Value 128n + 32j + l: bits 2j, 2j + 1 of qs[32n + l], + 4 where bit
  // 4n + j of hmask[l] is set (q + 4 of ggml's q in -4..3).
  static __m256i quants(const std::uint8_t* block, int c) {
    const __m256i bits = load32(block + offsetof(Block, qs) + 32 * (c / 4));
    const __m256i low = _mm256_and_si256(_mm256_srli_epi16(bits, 2 * (c % 4)), _mm256_set1_epi8(3));
    return _mm256_or_si256(low, where_bit(load32(block + offsetof(Block, hmask)), c, 4));
  }
  static void scales(const std::uint8_t* block, std::int8_t* scales, std::int16_t* mins, float* d,
                     float*) {
    *d = half(u16_at(block + offsetof(Block, d)));
    const __m128i scales8 = unpack_scales_q3_k(block + offsetof(Block, scales));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), scales8);
    store(mins, _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales8), 2)); // 4 * scale
  }
};

/// Q4_K and Q5_K: d, dmin and the packed scales sit at the same offsets.
template <typename BlockType, bool kFifthBit>
struct SuperBlocksK4 {
  using Block = BlockType;
  // Value 64t + l is the low nibble of qs[32t + l], 64t + 32 + l the high
  // one; Q5_K adds 16 where bit 2t (2t + 1) of qh[l] is set.
  static __m256i quants(const std::uint8_t* block, int c) {
    const __m256i bytes = load32(block + offsetof(Block, qs) + 32 * (c / 2));
    const __m256i nibble =
        _mm256_and_si256(c % 2 == 0 ? bytes : _mm256_srli_epi16(bytes, 4), _mm256_set1_epi8(0x0F));
    if constexpr (kFifthBit)
      return _mm256_or_si256(nibble, where_bit(load32(block + offsetof(Block, qh)), c, 16));
    else
      return nibble;
  }
  static void scales(const std::uint8_t* block, std::int8_t* scales, std::int16_t* mins, float* d,
                     float* dmin) {
    *d = half(u16_at(block + offsetof(Block, d)));
    *dmin = half(u16_at(block + offsetof(Block, dmin)));
    // Both 16-value halves of a 32-value sub-block share its scale and min.
    const __m128i both = unpack_scales_k4(block + offsetof(Block, scales));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), _mm_unpacklo_epi8(both, both));
    store(mins, _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(both, both)));
  }
};

template <>
struct SuperBlocks<TensorType::Q4_K> : SuperBlocksK4<BlockQ4_K, false> {};

template <>
struct SuperBlocks<TensorType::Q5_K> : SuperBlocksK4<BlockQ5_K, true> {};

template <>
struct SuperBlocks<TensorType::Q6_K> {
  using Block = BlockQ6_K;
  // Half n, l < 32: value 128n + 32i + l takes the low (i = 0, 1) or high
  // (i = 2, 3) nibble of ql[64n + 32(i % 2) + l] and bits 2i, 2i + 1 of
  // qh[32n + l].
  static __m256i quants(const std::uint8_t* block, int c) {
    const int n = c / 4, i = c % 4;
    const __m256i ql = load32(block + offsetof(Block, ql) + 64 * n + 32 * (i % 2));
    const __m256i qh = load32(block + offsetof(Block, qh) + 32 * n);
    const __m256i low =
        _mm256_and_si256(i < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
    const __m256i high =
        _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * i), _mm256_set1_epi8(3)), 4);
    return _mm256_or_si256(low, high);
  }
  static void scales(const std::uint8_t* block, std::int8_t* scales, std::int16_t* mins, float* d,
                     float*) {
    *d = half(u16_at(block + offsetof(Block, d)));
    const __m128i scales8 =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + offsetof(Block, scales)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(scales), scales8);
    store(mins, _mm256_slli_epi16(_mm256_cvtepi8_epi16(scales8), 5)); // 32 * scale
  }
};

/// Calls f(std::integral_constant<TensorType, type>{}) for a K-quant
/// `type`, where SuperBlocks<type> reads its blocks; throws
/// std::invalid_argument ("<who> <type> is not a K-quant type") for any
/// other.
template <typename F>
decltype(auto) visit_super_type(TensorType type, const char* who, F&& f) {
  switch (type) {
  case TensorType::Q2_K:
    return f(std::integral_constant<TensorType, TensorType::Q2_K>{});
  case TensorType::Q3_K:
    return f(std::integral_constant<TensorType, TensorType::Q3_K>{});
  case TensorType::Q4_K:
    return f(std::integral_constant<TensorType, TensorType::Q4_K>{});
  case TensorType::Q5_K:
    return f(std::integral_constant<TensorType, TensorType::Q5_K>{});
  case TensorType::Q6_K:
    return f(std::integral_constant<TensorType, TensorType::Q6_K>{});
  default:
    break;
  }
  throw std::invalid_argument(std::string(who) + " " + to_string(type) + " is not a K-quant type");
}

} // namespace
} // namespace caflm::detail

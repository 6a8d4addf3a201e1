#pragma once

// AVX2 readers of quantized blocks where they lie. SignedBlocks: the legacy
// blocks whose values are d * (signed quant), Q8_0, and Q4_0 and Q5_0, which
// store the quant plus an offset; the lane kernels read all three through
// them, in place or while interleaving, so that these types share one lane
// layout and Q8_0's float steps. unpack_scales_k4: Q4_K's and Q5_K's packed
// scales and mins, for the decoder and Q4_K's in-place kernel. Ahead of
// them, the byte-level reads and stores the decoders, interleavers and
// kernels share. Internal
// linkage, as in simd_helpers.hpp. Internals of caflm/cpu; include nowhere
// else.

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/tensor_type.hpp"

namespace caflm::detail {
namespace {

/// An IEEE half, as stored in a block's scale fields.
inline float half(std::uint16_t bits) {
  return _cvtsh_ss(bits);
}

// Block b of a row, read in place: fields are reached through offsetof and
// unaligned loads (copying a block out first costs a store-forwarding stall
// per block).
template <typename Block>
inline const std::uint8_t* block_at(const std::uint8_t* row, std::size_t b) {
  return row + b * sizeof(Block);
}

/// Unaligned little-endian fields of a block.
inline std::uint16_t u16_at(const std::uint8_t* p) {
  std::uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline std::uint32_t u32_at(const std::uint8_t* p) {
  std::uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// 32 bytes from anywhere.
inline __m256i load32(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

/// 32 bytes to anywhere.
inline void store(void* p, __m256i v) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), v);
}

/// The 32 bits of `bits` as bytes: 0xFF where set, 0 where clear (byte j for
/// bit j).
inline __m256i expand_bits(std::uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

/// Low and high nibbles of 16 bytes: bytes 0-15 the low, 16-31 the high ones.
inline __m256i nibbles(const std::uint8_t* qs) {
  const __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

/// Blocks of kType (Q8_0, Q4_0 or Q5_0): 32 values d * q with q a signed
/// int8, the f16 d first in every one. Q4_0 and Q5_0 store q + kOffset
/// unsigned (`stored`).
template <TensorType kType>
struct SignedBlocks;

template <>
struct SignedBlocks<TensorType::Q8_0> {
  using Block = BlockQ8_0;
  static constexpr int kOffset = 0;
  static __m256i quants(const std::uint8_t* block) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + offsetof(Block, qs)));
  }
};

template <>
struct SignedBlocks<TensorType::Q4_0> {
  using Block = BlockQ4_0;
  static constexpr int kOffset = 8;
  static __m256i stored(const std::uint8_t* block) { return nibbles(block + offsetof(Block, qs)); }
  static __m256i quants(const std::uint8_t* block) { // q in [-8, 7]
    return _mm256_sub_epi8(stored(block), _mm256_set1_epi8(kOffset));
  }
};

template <>
struct SignedBlocks<TensorType::Q5_0> {
  using Block = BlockQ5_0;
  static constexpr int kOffset = 16;
  static __m256i stored(const std::uint8_t* block) {
    std::uint32_t qh;
    std::memcpy(&qh, block + offsetof(Block, qh), sizeof qh);
    const __m256i high = _mm256_and_si256(expand_bits(qh), _mm256_set1_epi8(16));
    return _mm256_or_si256(nibbles(block + offsetof(Block, qs)), high);
  }
  static __m256i quants(const std::uint8_t* block) { // q in [-16, 15]
    return _mm256_sub_epi8(stored(block), _mm256_set1_epi8(kOffset));
  }
};

/// Calls f(std::integral_constant<TensorType, type>{}) for Q8_0, Q4_0 and
/// Q5_0, whose blocks SignedBlocks<type> reads; throws
/// std::invalid_argument ("<who> <type> blocks are not Q8_0, Q4_0 or Q5_0")
/// for any other type.
template <typename F>
decltype(auto) visit_signed_type(TensorType type, const char* who, F&& f) {
  switch (type) {
  case TensorType::Q8_0:
    return f(std::integral_constant<TensorType, TensorType::Q8_0>{});
  case TensorType::Q4_0:
    return f(std::integral_constant<TensorType, TensorType::Q4_0>{});
  case TensorType::Q5_0:
    return f(std::integral_constant<TensorType, TensorType::Q5_0>{});
  default:
    break;
  }
  throw std::invalid_argument(std::string(who) + " " + to_string(type) +
                              " blocks are not Q8_0, Q4_0 or Q5_0");
}

/// The offset of unsigned_quants(): each dot product with them exceeds the
/// signed quants' by it times sum(x).
template <typename Blocks>
inline constexpr int kUnsignedOffset = Blocks::kOffset != 0 ? Blocks::kOffset : 128;

/// The 32 quants of a block as vpdpbusd's unsigned operand takes them:
/// Q8_0's plus 128, Q4_0's and Q5_0's as stored.
template <typename Blocks>
inline __m256i unsigned_quants(const std::uint8_t* block) {
  if constexpr (Blocks::kOffset != 0)
    return Blocks::stored(block);
  else
    return _mm256_xor_si256(Blocks::quants(block), _mm256_set1_epi8(static_cast<char>(0x80)));
}

// The 12 packed bytes of Q4_K/Q5_K scales and mins (6 bits each) as 8 scales
// (bytes 0-7) and 8 mins (bytes 8-15), as ggml's get_scale_min_k4 reads them:
// j < 4: scale = b[j] & 63, min = b[j + 4] & 63; j >= 4: scale = (b[j + 4] &
// 15) | (b[j - 4] >> 6) << 4, min = (b[j + 4] >> 4) | (b[j] >> 6) << 4.
inline __m128i unpack_scales_k4(const std::uint8_t* packed) {
  std::uint32_t u[4];
  std::memcpy(u, packed, 12);
  constexpr std::uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kLow2 = 0x03030303;
  u[3] = ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kLow2) << 4);
  const std::uint32_t mins_low = u[1] & kLow6;
  u[1] = (u[2] & kLow4) | (((u[0] >> 6) & kLow2) << 4);
  u[2] = mins_low;
  u[0] &= kLow6;
  return _mm_setr_epi32(static_cast<int>(u[0]), static_cast<int>(u[1]), static_cast<int>(u[2]),
                        static_cast<int>(u[3]));
}

static_assert(offsetof(BlockQ8_0, d) == 0 && offsetof(BlockQ4_0, d) == 0 &&
                  offsetof(BlockQ5_0, d) == 0,
              "the lane kernels gather each block's scale from its first bytes");

} // namespace
} // namespace caflm::detail

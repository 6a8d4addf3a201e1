#include "caflm/cpu/quantized_matmul.hpp"

#include "caflm/cpu/block_readers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace caflm::detail {

namespace {

float half(uint16_t bits) {
  return _cvtsh_ss(bits);
}

// Block b of a row, read in place: fields are reached through offsetof and
// unaligned loads (copying a block out first costs a store-forwarding stall
// per block).
template <typename Block>
const uint8_t* block_at(const uint8_t* row, size_t b) {
  return row + b * sizeof(Block);
}

uint16_t u16_at(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

uint32_t u32_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

__m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// roundf() of each lane: to nearest, ties away from zero.
__m256 round_half_away(__m256 v) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign_bit, v);
  const __m256 whole = _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m256 up =
      _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(a, whole), _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                    _mm256_set1_ps(1.0f));
  return _mm256_or_ps(_mm256_add_ps(whole, up), _mm256_and_ps(sign_bit, v));
}

// Packs 4 x 8 int32 (each within int8) into 32 int8 in element order.
__m256i pack_int8(const __m256i (&q32)[4]) {
  const __m256i q16_lo = _mm256_packs_epi32(q32[0], q32[1]);
  const __m256i q16_hi = _mm256_packs_epi32(q32[2], q32[3]);
  // The packs interleave 128-bit lanes; the permute restores element order.
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16_lo, q16_hi),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// ggml's quantize_row_q8_0_ref / quantize_row_q8_1_ref on one block of 32:
// d = max|x| / 127, q = roundf(x * (1 / d)), s = d * sum(q).
void quantize_block_q8(const float* __restrict__ x, int8_t* __restrict__ q, float* d, float* s,
                       int16_t* sum_out) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 max_abs = _mm256_setzero_ps();
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_loadu_ps(x + 8 * c);
    max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, v[c]));
  }
  const float amax = hmax(max_abs);
  const float scale = amax / 127.0f;
  const __m256 inverse = _mm256_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
  __m256i q32[4];
  for (int c = 0; c < 4; ++c) {
    q32[c] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[c], inverse)));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), pack_int8(q32));
  *d = half(f32_to_f16(scale));
  if (s != nullptr || sum_out != nullptr) {
    const __m256i sum4 =
        _mm256_add_epi32(_mm256_add_epi32(q32[0], q32[1]), _mm256_add_epi32(q32[2], q32[3]));
    __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256(sum4, 1));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
    const int total = _mm_cvtsi128_si32(sum); // |total| <= 32 * 127
    if (s != nullptr)
      *s = half(f32_to_f16(static_cast<float>(total) * scale));
    if (sum_out != nullptr)
      *sum_out = static_cast<int16_t>(total);
  }
}

// ggml's quantize_row_q8_K_ref on one super-block of 256: max = the first
// value of largest magnitude, q = min(127, nearest-even(x * -127 / max)),
// d = 1 / (-127 / max), bsums = sums of each 16 quants.
void quantize_block_q8_k(const float* __restrict__ x, int8_t* __restrict__ q, float* d,
                         int16_t* __restrict__ bsums) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 max_abs = _mm256_setzero_ps();
  for (int c = 0; c < 32; ++c) {
    max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + 8 * c)));
  }
  const float amax = hmax(max_abs);
  if (amax == 0.0f) { // all zeros (or NaN-only maxima, which ggml leaves undefined)
    *d = 0.0f;
    std::memset(q, 0, 256);
    std::memset(bsums, 0, 16 * sizeof(int16_t));
    return;
  }
  float max = 0.0f;
  for (int c = 0; c < 32; ++c) {
    const __m256 v = _mm256_loadu_ps(x + 8 * c);
    const int hits = _mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_andnot_ps(sign_bit, v), _mm256_set1_ps(amax), _CMP_EQ_OQ));
    if (hits != 0) {
      max = x[8 * c + __builtin_ctz(static_cast<unsigned>(hits))];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m256 scale = _mm256_set1_ps(iscale);
  const __m256i limit = _mm256_set1_epi32(127);
  for (int g = 0; g < 8; ++g) {
    __m256i q32[4];
    for (int c = 0; c < 4; ++c) {
      q32[c] = _mm256_min_epi32(
          limit, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * c), scale)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * g), pack_int8(q32));
  }
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) {
      sum += q[16 * j + l];
    }
    bsums[j] = static_cast<int16_t>(sum);
  }
  *d = 1.0f / iscale;
}

void store(void* p, __m256i v) {
  _mm256_storeu_si256(static_cast<__m256i*>(p), v);
}

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

// The 8 x 8 transpose of 32-bit elements: out[t] lane j = in[j] lane t.
inline __attribute__((always_inline)) void transpose_8x8_epi32(const __m256i (&in)[8],
                                                               __m256i (&out)[8]) {
  __m256i t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    out[i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x20);
    out[4 + i] = _mm256_permute2x128_si256(u[i], u[4 + i], 0x31);
  }
}

template <TensorType kType>
void decode_legacy_any(const uint8_t* row, size_t k, size_t col, uint8_t* q, float* d, float* m) {
  const size_t nb = k / 32;
  decode_legacy<kType>(row, nb, q + col * k, d + col * nb, m + col * nb);
}

// One K-quant row of `type` into column `col` of a decoded group (q, scales
// and mins as DecodedColumns lays them out); d and dmin of super-block b at
// d[b * scale_stride] and dmin[b * scale_stride].
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

} // namespace

namespace {

// Output columns per parallel work item, at most (a multiple of both group
// widths).
constexpr size_t kMaxTileCols = 64;
static_assert(kMaxTileCols % kGroupCols == 0 && kMaxTileCols % kAmxGroupCols == 0);

} // namespace

ColumnTiles quantized_column_tiles(size_t n, size_t group_cols, size_t threads) {
  threads = std::max<size_t>(1, threads);
  ColumnTiles t;
  t.n = n;
  t.group_cols = group_cols;
  t.groups = (n + group_cols - 1) / group_cols;
  const size_t max_groups = std::max<size_t>(1, kMaxTileCols / group_cols);
  const size_t wanted = std::max(4 * threads, (t.groups + max_groups - 1) / max_groups);
  // Rounded up to whole rounds of the team; never a tile without a group.
  t.tiles = std::max<size_t>(1, std::min(t.groups, (wanted + threads - 1) / threads * threads));
  return t;
}

QuantKind quant_kind(TensorType weight_type) {
  switch (weight_type) {
  case TensorType::Q8_0:
    return QuantKind::kLegacySigned;
  case TensorType::Q4_0:
  case TensorType::Q5_0:
    return QuantKind::kLegacyOffset;
  case TensorType::Q4_1:
  case TensorType::Q5_1:
    return QuantKind::kLegacyWithMin;
  case TensorType::Q2_K:
  case TensorType::Q4_K:
  case TensorType::Q5_K:
    return QuantKind::kSuperWithMin;
  case TensorType::Q3_K:
  case TensorType::Q6_K:
    return QuantKind::kSuperOffset;
  default:
    break;
  }
  throw std::invalid_argument(std::string("linear: weight type ") + to_string(weight_type) +
                              " is not supported");
}

int stored_offset(TensorType weight_type) {
  switch (weight_type) {
  case TensorType::Q4_0:
    return 8;
  case TensorType::Q5_0:
    return 16;
  case TensorType::Q3_K:
    return 4;
  case TensorType::Q6_K:
    return 32;
  default:
    return 0;
  }
}

TensorType activation_type(TensorType weight_type) {
  switch (quant_kind(weight_type)) {
  case QuantKind::kLegacySigned:
  case QuantKind::kLegacyOffset:
    return TensorType::Q8_0;
  case QuantKind::kLegacyWithMin:
    return TensorType::Q8_1;
  case QuantKind::kSuperWithMin:
  case QuantKind::kSuperOffset:
    break;
  }
  return TensorType::Q8_K;
}

void quantize_activation_row(TensorType act_type, const float* __restrict__ x, size_t k,
                             const ActivationRow& out) {
  switch (act_type) {
  case TensorType::Q8_0:
  case TensorType::Q8_1:
    if (k % 32 != 0) {
      break;
    }
    for (size_t b = 0; b < k / 32; ++b) {
      quantize_block_q8(
          x + 32 * b, out.q + 32 * b, out.d + b, act_type == TensorType::Q8_1 ? out.s + b : nullptr,
          act_type == TensorType::Q8_0 && out.bsums != nullptr ? out.bsums + b : nullptr);
    }
    return;
  case TensorType::Q8_K:
    if (k % 256 != 0) {
      break;
    }
    for (size_t b = 0; b < k / 256; ++b) {
      quantize_block_q8_k(x + 256 * b, out.q + 256 * b, out.d + b, out.bsums + 16 * b);
    }
    return;
  default:
    throw std::invalid_argument(std::string("quantize_activation_row: ") + to_string(act_type) +
                                " is not an activation format");
  }
  throw std::invalid_argument(std::string("quantize_activation_row: ") + to_string(act_type) +
                              " row of " + std::to_string(k) + " values is not whole blocks");
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

namespace {

template <TensorType kType>
void interleave_signed(const uint8_t* __restrict__ rows, size_t row_bytes, size_t cols, size_t k,
                       uint8_t* __restrict__ q_abs, int8_t* __restrict__ q, float* __restrict__ d) {
  using Blocks = SignedBlocks<kType>;
  const size_t nb = k / 32;
  for (size_t b = 0; b < nb; ++b) {
    __m256i in[kLaneGroupCols], out[kLaneGroupCols];
    for (size_t j = 0; j < kLaneGroupCols; ++j) {
      if (j < cols) {
        const uint8_t* block = block_at<typename Blocks::Block>(rows + j * row_bytes, b);
        if constexpr (Blocks::kOffset == 0)
          in[j] = Blocks::quants(block);
        else
          in[j] = Blocks::stored(block);
        d[kLaneGroupCols * b + j] = half(u16_at(block + offsetof(typename Blocks::Block, d)));
      } else {
        in[j] = _mm256_setzero_si256();
        d[kLaneGroupCols * b + j] = 0.0f;
      }
    }
    transpose_8x8_epi32(in, out);
    for (size_t t = 0; t < 8; ++t) {
      const size_t at = (8 * b + t) * 32;
      store(q + at, out[t]);
      if constexpr (Blocks::kOffset == 0)
        store(q_abs + at, _mm256_abs_epi8(out[t]));
    }
  }
}

} // namespace

void interleave_q8_0(TensorType type, const uint8_t* __restrict__ rows, size_t row_bytes,
                     size_t cols, size_t k, uint8_t* __restrict__ q_abs, int8_t* __restrict__ q,
                     float* __restrict__ d) {
  switch (type) {
  case TensorType::Q8_0:
    return interleave_signed<TensorType::Q8_0>(rows, row_bytes, cols, k, q_abs, q, d);
  case TensorType::Q4_0:
    return interleave_signed<TensorType::Q4_0>(rows, row_bytes, cols, k, q_abs, q, d);
  case TensorType::Q5_0:
    return interleave_signed<TensorType::Q5_0>(rows, row_bytes, cols, k, q_abs, q, d);
  default:
    break;
  }
  throw std::invalid_argument(std::string("interleave_q8_0: ") + to_string(type) +
                              " blocks are not Q8_0, Q4_0 or Q5_0");
}

int unsigned_offset(TensorType type) {
  return type == TensorType::Q8_0 ? 128 : stored_offset(type);
}

namespace {

template <TensorType kType>
void interleave_unsigned_blocks(const uint8_t* __restrict__ rows, size_t row_bytes, size_t cols,
                                size_t k, uint8_t* __restrict__ q, float* __restrict__ d) {
  using Blocks = SignedBlocks<kType>;
  const size_t nb = k / 32;
  const __m256i flip = _mm256_set1_epi8(static_cast<char>(0x80));
  for (size_t b = 0; b < nb; ++b) {
    // Columns 8h .. 8h + 7, transposed into the low (h = 0) or high (h = 1)
    // 32 bytes of each quad's 64.
    for (size_t h = 0; h < kWideLaneGroupCols / kLaneGroupCols; ++h) {
      __m256i in[kLaneGroupCols], out[kLaneGroupCols];
      for (size_t i = 0; i < kLaneGroupCols; ++i) {
        const size_t j = kLaneGroupCols * h + i;
        if (j < cols) {
          const uint8_t* block = block_at<typename Blocks::Block>(rows + j * row_bytes, b);
          if constexpr (Blocks::kOffset == 0)
            in[i] = _mm256_xor_si256(Blocks::quants(block), flip); // q + 128
          else
            in[i] = Blocks::stored(block);
          d[kWideLaneGroupCols * b + j] = half(u16_at(block + offsetof(typename Blocks::Block, d)));
        } else {
          in[i] = _mm256_setzero_si256();
          d[kWideLaneGroupCols * b + j] = 0.0f;
        }
      }
      transpose_8x8_epi32(in, out);
      for (size_t t = 0; t < 8; ++t)
        store(q + (8 * b + t) * 64 + 32 * h, out[t]);
    }
  }
}

} // namespace

void interleave_unsigned(TensorType type, const uint8_t* __restrict__ rows, size_t row_bytes,
                         size_t cols, size_t k, uint8_t* __restrict__ q, float* __restrict__ d) {
  switch (type) {
  case TensorType::Q8_0:
    return interleave_unsigned_blocks<TensorType::Q8_0>(rows, row_bytes, cols, k, q, d);
  case TensorType::Q4_0:
    return interleave_unsigned_blocks<TensorType::Q4_0>(rows, row_bytes, cols, k, q, d);
  case TensorType::Q5_0:
    return interleave_unsigned_blocks<TensorType::Q5_0>(rows, row_bytes, cols, k, q, d);
  default:
    break;
  }
  throw std::invalid_argument(std::string("interleave_unsigned: ") + to_string(type) +
                              " blocks are not Q8_0, Q4_0 or Q5_0");
}

void interleave_super(const DecodedColumns& w, size_t k, uint8_t* __restrict__ q,
                      int16_t* __restrict__ scales, int16_t* __restrict__ mins) {
  const size_t subs = k / 16;
  __m256i in[kLaneGroupCols], out[kLaneGroupCols];
  // Quants: 32 values (8 quads) of each column at a time.
  for (size_t chunk = 0; chunk < k / 32; ++chunk) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLaneGroupCols; ++j)
      in[j] = load32(w.q + j * k + 32 * chunk);
    transpose_8x8_epi32(in, out);
#pragma GCC unroll 8
    for (size_t t = 0; t < 8; ++t)
      store(q + (8 * chunk + t) * 32, out[t]);
  }
  // Scales: 8 sub-blocks of each column at a time, each widened to an int32
  // lane holding the int16 scale twice.
  const __m256i low16 = _mm256_set1_epi32(0xFFFF);
  for (size_t s0 = 0; s0 < subs; s0 += 8) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLaneGroupCols; ++j) {
      int64_t eight;
      std::memcpy(&eight, w.scales + j * subs + s0, 8);
      const __m256i wide = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(eight));
      in[j] = _mm256_or_si256(_mm256_and_si256(wide, low16), _mm256_slli_epi32(wide, 16));
    }
    transpose_8x8_epi32(in, out);
#pragma GCC unroll 8
    for (size_t t = 0; t < 8; ++t)
      store(scales + 16 * (s0 + t), out[t]);
  }
  // Mins: 8 pairs of sub-blocks (one int32 each) of each column at a time.
  for (size_t pair0 = 0; pair0 < subs / 2; pair0 += 8) {
#pragma GCC unroll 8
    for (size_t j = 0; j < kLaneGroupCols; ++j)
      in[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.mins + j * subs + 2 * pair0));
    transpose_8x8_epi32(in, out);
#pragma GCC unroll 8
    for (size_t t = 0; t < 8; ++t)
      store(mins + 16 * (pair0 + t), out[t]);
  }
}

void interleave_super_wide(const DecodedColumns& w, size_t k, uint8_t* __restrict__ q,
                           int32_t* __restrict__ scales, int16_t* __restrict__ mins) {
  const size_t subs = k / 16;
  __m256i in[kLaneGroupCols], out[kLaneGroupCols];
  // Columns 8h .. 8h + 7 go to the low (h = 0) or high (h = 1) half of each
  // 16-column row of the layout.
  for (size_t h = 0; h < kWideLaneGroupCols / kLaneGroupCols; ++h) {
    const uint8_t* w_q = w.q + kLaneGroupCols * h * k;
    const int8_t* w_scales = w.scales + kLaneGroupCols * h * subs;
    const int16_t* w_mins = w.mins + kLaneGroupCols * h * subs;
    // Quants: 32 values (8 quads) of each column at a time.
    for (size_t chunk = 0; chunk < k / 32; ++chunk) {
#pragma GCC unroll 8
      for (size_t j = 0; j < kLaneGroupCols; ++j)
        in[j] = load32(w_q + j * k + 32 * chunk);
      transpose_8x8_epi32(in, out);
#pragma GCC unroll 8
      for (size_t t = 0; t < 8; ++t)
        store(q + (8 * chunk + t) * 64 + 32 * h, out[t]);
    }
    // Scales: 8 of each column at a time, widened to int32.
    for (size_t s0 = 0; s0 < subs; s0 += 8) {
#pragma GCC unroll 8
      for (size_t j = 0; j < kLaneGroupCols; ++j) {
        int64_t eight;
        std::memcpy(&eight, w_scales + j * subs + s0, 8);
        in[j] = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(eight));
      }
      transpose_8x8_epi32(in, out);
#pragma GCC unroll 8
      for (size_t t = 0; t < 8; ++t)
        store(scales + kWideLaneGroupCols * (s0 + t) + kLaneGroupCols * h, out[t]);
    }
    // Mins: 8 pairs of 16s (one int32 each) of each column at a time.
    for (size_t pair0 = 0; pair0 < subs / 2; pair0 += 8) {
#pragma GCC unroll 8
      for (size_t j = 0; j < kLaneGroupCols; ++j)
        in[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w_mins + j * subs + 2 * pair0));
      transpose_8x8_epi32(in, out);
#pragma GCC unroll 8
      for (size_t t = 0; t < 8; ++t)
        store(mins + 2 * (kWideLaneGroupCols * (pair0 + t) + kLaneGroupCols * h), out[t]);
    }
  }
}

int super_quads_per_chain(TensorType weight_type) {
  return weight_type == TensorType::Q6_K ? 2 : 4;
}

void check_quantized_weight(const WeightView& w) {
  const size_t block = tensor_block_size(w.type);
  if (w.cols % block != 0) {
    throw std::invalid_argument(std::string("linear: a ") + to_string(w.type) +
                                " weight needs rows of a multiple of " + std::to_string(block) +
                                " values, not " + std::to_string(w.cols));
  }
}

void QuantizedActivations::quantize(TensorType act, const float* __restrict__ x, size_t m,
                                    size_t k) {
  act_ = act;
  m_ = m;
  k_ = k;
  const size_t x_blocks = k / tensor_block_size(act);
  q_.resize(m * k);
  d_.resize(m * x_blocks);
  s_.resize(act == TensorType::Q8_1 ? m * x_blocks : 0);
  bsums_.resize(act == TensorType::Q8_K ? m * k / 16 : act == TensorType::Q8_0 ? m * k / 32 : 0);
  int8_t* const xq = q_.data();
  float* const xd = d_.data();
  float* const xs = s_.empty() ? nullptr : s_.data();
  int16_t* const xb = bsums_.empty() ? nullptr : bsums_.data();
  const size_t row_sums = bsums_.size() / std::max<size_t>(m, 1);
  const auto rows = static_cast<ptrdiff_t>(m);
#pragma omp parallel for schedule(static) if (m * k >= kParallelMinMacs / 8)
  for (ptrdiff_t r = 0; r < rows; ++r) {
    const auto row = static_cast<size_t>(r);
    quantize_activation_row(act, x + row * k, k,
                            ActivationRow{xq + row * k, xd + row * x_blocks,
                                          xs != nullptr ? xs + row * x_blocks : nullptr,
                                          xb != nullptr ? xb + row * row_sums : nullptr});
  }
}

QuantizedRows QuantizedActivations::rows() const {
  return QuantizedRows{q_.data(), d_.data(), s_.empty() ? nullptr : s_.data(),
                       bsums_.empty() ? nullptr : bsums_.data()};
}

namespace {

// Calls group(col0, cols) for every group of `group_cols` output columns
// (cols of them, fewer at the end) of an n-column product, tile by tile
// across the OpenMP team (see quantized_column_tiles), on the calling thread
// alone below kParallelMinMacs multiply-adds.
template <typename GroupFn>
void for_each_column_group(size_t n, size_t group_cols, size_t macs, GroupFn&& group) {
  const ColumnTiles tiles =
      quantized_column_tiles(n, group_cols, static_cast<size_t>(omp_get_max_threads()));
  const auto n_tiles = static_cast<ptrdiff_t>(tiles.tiles);
#pragma omp parallel for schedule(dynamic) if (macs >= kParallelMinMacs)
  for (ptrdiff_t tile = 0; tile < n_tiles; ++tile) {
    const size_t col_begin = tiles.begin(static_cast<size_t>(tile));
    const size_t col_end = tiles.begin(static_cast<size_t>(tile) + 1);
    for (size_t col0 = col_begin; col0 < col_end; col0 += group_cols)
      group(col0, std::min(group_cols, col_end - col0));
  }
}

// The weight rows of the column group after [col0, col0 + cols) of an
// n-column weight: where they start, and their bytes (0 after the last).
std::pair<const uint8_t*, size_t> next_group_rows(const uint8_t* w_bytes, size_t w_row_bytes,
                                                  size_t n, size_t col0, size_t cols) {
  const size_t next = col0 + cols;
  return {w_bytes + next * w_row_bytes, next < n ? std::min(cols, n - next) * w_row_bytes : 0};
}

// Q8_0, Q4_0 and Q5_0 on AVX2: groups of kLaneGroupCols columns,
// interleaved as Q8_0 quants, against all rows of x.
void q8_0_linear_avx2(TensorType type, const uint8_t* w_bytes, size_t w_row_bytes, size_t n,
                      size_t k, const QuantizedRows& rows, size_t m, float* __restrict__ y,
                      const float* __restrict__ bias) {
  for_each_column_group(n, kLaneGroupCols, m * n * k, [&](size_t col0, size_t cols) {
    // This thread's interleaved column group, grown once.
    thread_local std::vector<uint8_t> q_abs;
    thread_local std::vector<int8_t> q;
    thread_local std::vector<float> d;
    q_abs.resize(kLaneGroupCols * k);
    q.resize(kLaneGroupCols * k);
    d.resize(kLaneGroupCols * (k / 32));
    const uint8_t* group_rows = w_bytes + col0 * w_row_bytes;
    if (m >= kInterleaveMinRows)
      interleave_q8_0(type, group_rows, w_row_bytes, cols, k, q_abs.data(), q.data(), d.data());
    LaneGroupProblem p{};
    p.type = type;
    p.rows = group_rows;
    p.row_bytes = w_row_bytes;
    p.k = k;
    p.m = m;
    p.x_q = rows.q;
    p.x_d = rows.d;
    p.x_sums = rows.bsums;
    p.w = InterleavedQ8_0{q_abs.data(), q.data(), d.data()};
    p.cols = cols;
    p.y = y + col0;
    p.y_stride = n;
    p.bias = bias != nullptr ? bias + col0 : nullptr;
    std::tie(p.next, p.next_bytes) = next_group_rows(w_bytes, w_row_bytes, n, col0, cols);
    dot_q8_0_lanes_avx2(p);
  });
}

// A K-quant lane group of kCols columns of k values, decoded as
// DecodedColumns lays them out, with d and dmin in lanes: those of
// super-block b at d[b * kCols + col].
template <size_t kCols>
struct DecodedSuperGroup {
  size_t k = 0;
  std::vector<uint8_t> q;     // [kCols, k]
  std::vector<int8_t> scales; // [kCols, k / 16]
  std::vector<int16_t> mins;  // [kCols, k / 16]
  std::vector<float> d;       // [k / 256, kCols]
  std::vector<float> dmin;    // [k / 256, kCols]

  void fit(size_t columns_k) {
    k = columns_k;
    q.resize(kCols * k);
    scales.resize(kCols * k / 16);
    mins.resize(kCols * k / 16);
    d.resize(kCols * k / 256);
    dmin.resize(kCols * k / 256);
  }

  /// Decodes the `cols` rows `rows + j * row_bytes` of a `type` weight into
  /// columns 0..cols - 1 and zeroes the rest (a ragged last group), which
  /// the kernels then read as they read the others.
  void decode(TensorType type, const uint8_t* rows, size_t row_bytes, size_t cols) {
    for (size_t j = 0; j < cols; ++j)
      decode_super_row(type, rows + j * row_bytes, k, j, q.data(), scales.data(), mins.data(),
                       d.data() + j, dmin.data() + j, kCols);
    if (cols == kCols)
      return;
    std::fill(q.begin() + cols * k, q.end(), uint8_t{0});
    std::fill(scales.begin() + cols * (k / 16), scales.end(), int8_t{0});
    std::fill(mins.begin() + cols * (k / 16), mins.end(), int16_t{0});
    for (size_t b = 0; b < k / 256; ++b)
      for (size_t j = cols; j < kCols; ++j) {
        d[kCols * b + j] = 0.0f;
        dmin[kCols * b + j] = 0.0f;
      }
  }

  DecodedColumns columns() const {
    return DecodedColumns{q.data(), nullptr, nullptr, scales.data(), mins.data()};
  }
};

// One thread's scratch for a K-quant lane group of k-value columns.
struct SuperLaneScratch {
  DecodedSuperGroup<kLaneGroupCols> decoded;
  std::vector<uint8_t> lane_q; // interleaved: InterleavedSuper's arrays
  std::vector<int16_t> lane_scales;
  std::vector<int16_t> lane_mins;

  void fit(size_t k) {
    if (decoded.k == k)
      return;
    decoded.fit(k);
    lane_q.resize(kLaneGroupCols * k);
    lane_scales.resize(2 * kLaneGroupCols * k / 16);
    lane_mins.resize(kLaneGroupCols * k / 16);
  }
};

// Q8_0, Q4_0 and Q5_0 on AVX-512 from kInterleaveMinRows rows: groups of
// kWideLaneGroupCols columns, interleaved unsigned, against all rows of x.
void q8_0_linear_avx512(TensorType type, const uint8_t* w_bytes, size_t w_row_bytes, size_t n,
                        size_t k, const QuantizedRows& rows, size_t m, float* __restrict__ y,
                        const float* __restrict__ bias) {
  for_each_column_group(n, kWideLaneGroupCols, m * n * k, [&](size_t col0, size_t cols) {
    // This thread's interleaved column group, grown once.
    thread_local std::vector<uint8_t> q;
    thread_local std::vector<float> d;
    q.resize(kWideLaneGroupCols * k);
    d.resize(kWideLaneGroupCols * (k / 32));
    interleave_unsigned(type, w_bytes + col0 * w_row_bytes, w_row_bytes, cols, k, q.data(),
                        d.data());
    WideLaneGroupProblem p{};
    p.offset = unsigned_offset(type);
    p.k = k;
    p.m = m;
    p.x_q = rows.q;
    p.x_d = rows.d;
    p.x_sums = rows.bsums;
    p.w = InterleavedUnsigned{q.data(), d.data()};
    p.cols = cols;
    p.y = y + col0;
    p.y_stride = n;
    p.bias = bias != nullptr ? bias + col0 : nullptr;
    std::tie(p.next, p.next_bytes) = next_group_rows(w_bytes, w_row_bytes, n, col0, cols);
    dot_q8_0_lanes_avx512(p);
  });
}

// One thread's scratch for an AVX-512 K-quant lane group of k-value columns.
struct WideSuperLaneScratch {
  DecodedSuperGroup<kWideLaneGroupCols> decoded;
  std::vector<uint8_t> lane_q; // interleaved: InterleavedSuperWide's arrays
  std::vector<int32_t> lane_scales;
  std::vector<int16_t> lane_mins;

  void fit(size_t k) {
    if (decoded.k == k)
      return;
    decoded.fit(k);
    lane_q.resize(kWideLaneGroupCols * k);
    lane_scales.resize(kWideLaneGroupCols * k / 16);
    lane_mins.resize(kWideLaneGroupCols * k / 16);
  }
};

// The K-quants on AVX-512 from kInterleaveMinRows rows: groups of
// kWideLaneGroupCols columns, decoded and interleaved, against all rows of x.
void super_linear_avx512(const WeightView& w, size_t w_row_bytes, QuantKind kind,
                         const QuantizedRows& rows, size_t m, float* __restrict__ y,
                         const float* __restrict__ bias) {
  const size_t k = w.cols;
  const size_t n = w.rows;
  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  for_each_column_group(n, kWideLaneGroupCols, m * n * k, [&](size_t col0, size_t cols) {
    thread_local WideSuperLaneScratch scratch; // grown once per width
    scratch.fit(k);
    scratch.decoded.decode(w.type, w_bytes + col0 * w_row_bytes, w_row_bytes, cols);
    interleave_super_wide(scratch.decoded.columns(), k, scratch.lane_q.data(),
                          scratch.lane_scales.data(), scratch.lane_mins.data());
    WideSuperLaneGroupProblem p{};
    p.kind = kind;
    p.k = k;
    p.m = m;
    p.x_q = rows.q;
    p.x_d = rows.d;
    p.x_bsums = rows.bsums;
    p.w = InterleavedSuperWide{scratch.lane_q.data(), scratch.lane_scales.data(),
                               scratch.lane_mins.data()};
    p.d = scratch.decoded.d.data();
    p.dmin = scratch.decoded.dmin.data();
    p.scale_quads = w.type == TensorType::Q4_K || w.type == TensorType::Q5_K ? 8 : 4;
    p.cols = cols;
    p.y = y + col0;
    p.y_stride = n;
    p.bias = bias != nullptr ? bias + col0 : nullptr;
    std::tie(p.next, p.next_bytes) = next_group_rows(w_bytes, w_row_bytes, n, col0, cols);
    dot_super_lanes_avx512(p);
  });
}

// The K-quants on AVX2: groups of kLaneGroupCols columns, decoded, then
// interleaved where enough rows of x share the cost, against all rows of x.
void super_linear_avx2(const WeightView& w, size_t w_row_bytes, QuantKind kind,
                       const QuantizedRows& rows, size_t m, float* __restrict__ y,
                       const float* __restrict__ bias) {
  const size_t k = w.cols;
  const size_t n = w.rows;
  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  // Q4_K's and Q6_K's kernels for 1-3 rows read the blocks in place.
  const bool in_place =
      (w.type == TensorType::Q4_K || w.type == TensorType::Q6_K) && m < kInterleaveMinRows;
  for_each_column_group(n, kLaneGroupCols, m * n * k, [&](size_t col0, size_t cols) {
    thread_local SuperLaneScratch scratch; // grown once per width
    scratch.fit(k);
    if (!in_place)
      scratch.decoded.decode(w.type, w_bytes + col0 * w_row_bytes, w_row_bytes, cols);
    const DecodedColumns decoded = scratch.decoded.columns();
    if (m >= kInterleaveMinRows)
      interleave_super(decoded, k, scratch.lane_q.data(), scratch.lane_scales.data(),
                       scratch.lane_mins.data());
    SuperLaneGroupProblem p{};
    p.kind = kind;
    p.type = w.type;
    p.rows = w_bytes + col0 * w_row_bytes;
    p.row_bytes = w_row_bytes;
    p.k = k;
    p.m = m;
    p.x_q = rows.q;
    p.x_d = rows.d;
    p.x_bsums = rows.bsums;
    p.decoded = decoded;
    p.w = InterleavedSuper{scratch.lane_q.data(), scratch.lane_scales.data(),
                           scratch.lane_mins.data()};
    p.d = scratch.decoded.d.data();
    p.dmin = scratch.decoded.dmin.data();
    p.quads_per_chain = super_quads_per_chain(w.type);
    p.cols = cols;
    p.y = y + col0;
    p.y_stride = n;
    p.bias = bias != nullptr ? bias + col0 : nullptr;
    std::tie(p.next, p.next_bytes) = next_group_rows(w_bytes, w_row_bytes, n, col0, cols);
    dot_super_lanes_avx2(p);
  });
}

} // namespace

void quantized_linear(MatmulIsa isa, const WeightView& w, const float* __restrict__ x, size_t m,
                      float* __restrict__ y, const float* __restrict__ bias) {
  check_quantized_weight(w);
  if (m == 0 || w.rows == 0) {
    return;
  }
  // The caller thread's activation scratch, grown once to the largest call.
  thread_local QuantizedActivations activations;
  activations.quantize(activation_type(w.type), x, m, w.cols);
  quantized_linear(isa, w, activations, y, bias);
}

void quantized_linear(MatmulIsa isa, const WeightView& w, const QuantizedActivations& x,
                      float* __restrict__ y, const float* __restrict__ bias) {
  check_quantized_weight(w);
  const QuantKind kind = quant_kind(w.type);
  const TensorType act = activation_type(w.type);
  if (x.act() != act || x.k() != w.cols) {
    throw std::invalid_argument(std::string("linear: a ") + to_string(w.type) + " weight of " +
                                std::to_string(w.cols) + " inputs cannot take rows of " +
                                std::to_string(x.k()) + " quantized to " + to_string(x.act()));
  }
  const size_t k = w.cols;
  const size_t n = w.rows;
  const size_t m = x.m();
  if (m == 0 || n == 0) {
    return;
  }
  const size_t w_row_bytes = tensor_row_bytes(w.type, k);
  const QuantizedRows rows = x.rows();
  const int8_t* const xq = rows.q;
  const float* const xd = rows.d;
  const float* const xs = rows.s;
  const int16_t* const xb = rows.bsums;

  // Fewer rows than a tile's 16 take the AVX-512 kernels, which give the
  // same bits.
  if (isa == MatmulIsa::Amx && m >= 16) {
    quantized_linear_amx(w, kind, act, rows, m, y, bias);
    return;
  }
  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  // AVX-512 (or AMX below a whole panel) takes the AVX2 lane kernels below
  // kInterleaveMinRows rows: their in-place reads, with the same bits.
  const bool avx2_lanes = isa == MatmulIsa::Avx2 || m < kInterleaveMinRows;
  if (kind == QuantKind::kLegacySigned || kind == QuantKind::kLegacyOffset) {
    if (avx2_lanes)
      q8_0_linear_avx2(w.type, w_bytes, w_row_bytes, n, k, rows, m, y, bias);
    else
      q8_0_linear_avx512(w.type, w_bytes, w_row_bytes, n, k, rows, m, y, bias);
    return;
  }
  if (is_super_kind(kind)) {
    if (avx2_lanes)
      super_linear_avx2(w, w_row_bytes, kind, rows, m, y, bias);
    else
      super_linear_avx512(w, w_row_bytes, kind, rows, m, y, bias);
    return;
  }
  // Q4_1 and Q5_1: decoded column groups.
  for_each_column_group(n, kGroupCols, m * n * k, [&](size_t col0, size_t cols) {
    // This thread's unpacked column group, grown once.
    thread_local std::vector<uint8_t> q;
    thread_local std::vector<float> d;
    thread_local std::vector<float> mm;
    q.resize(kGroupCols * k);
    d.resize(kGroupCols * (k / 32));
    mm.resize(kGroupCols * (k / 32));
    for (size_t j = 0; j < cols; ++j) {
      decode_weight_row(w.type, w_bytes + (col0 + j) * w_row_bytes, k, j, q.data(), d.data(),
                        mm.data(), nullptr, nullptr);
    }
    GroupProblem p{};
    p.kind = kind;
    p.k = k;
    p.m = m;
    p.x_q = xq;
    p.x_d = xd;
    p.x_s = xs;
    p.x_bsums = xb;
    p.w = DecodedColumns{q.data(), d.data(), mm.data(), nullptr, nullptr};
    p.offset = stored_offset(w.type);
    p.cols = cols;
    p.y = y + col0;
    p.y_stride = n;
    p.bias = bias != nullptr ? bias + col0 : nullptr;
    if (isa != MatmulIsa::Avx2) {
      dot_group_avx512(p);
    } else {
      dot_group_avx2(p);
    }
  });
}

} // namespace caflm::detail

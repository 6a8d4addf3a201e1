// Weight rows of one column group interleaved for the lane kernels: the
// same quant of 8 (AVX2) or 16 (AVX-512) columns side by side in one vector.
// The AVX-512 interleaves are in quantized_interleave_avx512.cpp.
#include "caflm/cpu/quantized_matmul.hpp"

#include "caflm/cpu/block_readers.hpp"
#include "caflm/cpu/super_block_readers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstring>

namespace caflm::detail {

namespace {

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

/// Block b of the group's 8 columns (zeros past `cols`), transposed: out[t]
/// holds quants 4t .. 4t + 3 of every column, and d[j] the scale of column
/// j. The quants as stored: Q8_0's signed, Q4_0's and Q5_0's unsigned.
template <typename Blocks>
inline void transposed_column_blocks(const uint8_t* __restrict__ rows, size_t row_bytes,
                                     size_t cols, size_t b, __m256i (&out)[kLaneGroupCols],
                                     float* __restrict__ d) {
  __m256i in[kLaneGroupCols];
  for (size_t j = 0; j < kLaneGroupCols; ++j) {
    if (j < cols) {
      const uint8_t* block = block_at<typename Blocks::Block>(rows + j * row_bytes, b);
      if constexpr (Blocks::kOffset != 0)
        in[j] = Blocks::stored(block);
      else
        in[j] = Blocks::quants(block);
      d[j] = half(u16_at(block + offsetof(typename Blocks::Block, d)));
    } else {
      in[j] = _mm256_setzero_si256();
      d[j] = 0.0f;
    }
  }
  transpose_8x8_epi32(in, out);
}

template <TensorType kType>
void interleave_signed(const uint8_t* __restrict__ rows, size_t row_bytes, size_t cols, size_t k,
                       uint8_t* __restrict__ q_abs, int8_t* __restrict__ q, float* __restrict__ d) {
  using Blocks = SignedBlocks<kType>;
  const size_t nb = k / 32;
  for (size_t b = 0; b < nb; ++b) {
    __m256i out[kLaneGroupCols];
    transposed_column_blocks<Blocks>(rows, row_bytes, cols, b, out, d + kLaneGroupCols * b);
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
  visit_signed_type(type, "interleave_q8_0:", [&](auto kType) {
    interleave_signed<decltype(kType)::value>(rows, row_bytes, cols, k, q_abs, q, d);
  });
}

int unsigned_offset(TensorType type) {
  return visit_signed_type(type, "unsigned_offset:", [](auto kType) {
    return kUnsignedOffset<SignedBlocks<decltype(kType)::value>>;
  });
}

namespace {

template <TensorType kType>
void interleave_super_blocks(const uint8_t* __restrict__ rows, size_t row_bytes, size_t cols,
                             size_t k, const InterleavedSuperOut& out) {
  using Blocks = SuperBlocks<kType>;
  using Block = typename Blocks::Block;
  for (size_t b = 0; b < k / 256; ++b) {
    const uint8_t* block[kLaneGroupCols];
    for (size_t j = 0; j < kLaneGroupCols; ++j)
      block[j] = block_at<Block>(rows + (j < cols ? j : 0) * row_bytes, b);
    __m256i in[kLaneGroupCols], out_rows[kLaneGroupCols];
    // Quants: chunk c (32 values, 8 quads) of every column at a time.
    for (int c = 0; c < 8; ++c) {
#pragma GCC unroll 8
      for (size_t j = 0; j < kLaneGroupCols; ++j)
        in[j] = j < cols ? Blocks::quants(block[j], c) : _mm256_setzero_si256();
      transpose_8x8_epi32(in, out_rows);
#pragma GCC unroll 8
      for (size_t t = 0; t < 8; ++t)
        store(out.q + (64 * b + 8 * c + t) * 32, out_rows[t]);
    }
    alignas(16) int8_t scales[kLaneGroupCols][16] = {};
    alignas(32) int16_t mins[kLaneGroupCols][16] = {};
    float* d = out.d + kLaneGroupCols * b;
    float* dmin = out.dmin + kLaneGroupCols * b;
    for (size_t j = 0; j < kLaneGroupCols; ++j) {
      d[j] = 0.0f;
      dmin[j] = 0.0f;
      if (j < cols)
        Blocks::scales(block[j], scales[j], mins[j], &d[j], &dmin[j]);
    }
    // Scales: 16s 8h .. 8h + 7 of every column, each widened to an int32
    // lane holding the int16 scale twice.
    const __m256i low16 = _mm256_set1_epi32(0xFFFF);
    for (size_t h = 0; h < 2; ++h) {
#pragma GCC unroll 8
      for (size_t j = 0; j < kLaneGroupCols; ++j) {
        int64_t eight;
        std::memcpy(&eight, scales[j] + 8 * h, 8);
        const __m256i wide = _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(eight));
        in[j] = _mm256_or_si256(_mm256_and_si256(wide, low16), _mm256_slli_epi32(wide, 16));
      }
      transpose_8x8_epi32(in, out_rows);
#pragma GCC unroll 8
      for (size_t t = 0; t < 8; ++t)
        store(out.scales + 16 * (16 * b + 8 * h + t), out_rows[t]);
    }
    // Mins: the 8 pairs of 16s of every column, a pair per int32.
#pragma GCC unroll 8
    for (size_t j = 0; j < kLaneGroupCols; ++j)
      in[j] = load32(mins[j]);
    transpose_8x8_epi32(in, out_rows);
#pragma GCC unroll 8
    for (size_t t = 0; t < 8; ++t)
      store(out.mins + 16 * (8 * b + t), out_rows[t]);
  }
}

} // namespace

void interleave_super(TensorType type, const uint8_t* __restrict__ rows, size_t row_bytes,
                      size_t cols, size_t k, const InterleavedSuperOut& out) {
  visit_super_type(type, "interleave_super:", [&](auto kType) {
    interleave_super_blocks<decltype(kType)::value>(rows, row_bytes, cols, k, out);
  });
}

} // namespace caflm::detail

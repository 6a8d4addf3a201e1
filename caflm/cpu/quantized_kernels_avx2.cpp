// The AVX2 dot kernels of quantized linear layers (see quantized_matmul.hpp).
//
// Per output element the float operations are, for Q8_0, Q4_0 and Q5_0 (the
// latter two read as Q8_0 quants of the same values: SignedBlocks), one
// scalar chain acc = fma(cvt(s_b) * d_x, d_w, acc) over the exact block sums
// s_b (eight outputs side by side in the lanes of one vector; see
// LaneGroupProblem), then + bias: the AVX-512 and AMX kernels' steps, so
// that all three give the same bits. For Q4_1 and Q5_1, one 8-lane accumulator
// taking fma(cvt(block sums) * d_x, d_w) block by block (block sums: 8 int32
// lanes, lane l the 4 products 4l..4l+3 of the block), plus a scalar
// fma(m_w, s_x) chain; then a fixed horizontal sum of the lanes, + the scalar
// chain, + bias. For the K kinds, also one output per lane: per super-block
// the exact integer sums s_b of scale * quant * x and n_b of min * bsum, then
// acc = fma(cvt(s_b) * d_x, d_w, acc) and, with mins, acc = fnmadd(cvt(n_b)
// * d_x, dmin_w, acc) (with an offset, acc = fma(cvt(s_b - n_b) * d_x, d_w,
// acc)), then + bias. The blocking over rows and columns below only shares
// loads.
#include "caflm/cpu/quantized_matmul.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "caflm/cpu/block_readers.hpp"
#include "caflm/cpu/simd_helpers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

namespace caflm::detail {

namespace {

// Every block kernel below is flatten (its helpers inlined, so that its
// accumulators stay in registers) and noinline: inlined into a dispatcher
// with its siblings, GCC allocated registers over all of them together and
// spilled the Q8_0 lane kernel's sums (a third slower at 128 rows).

// MR rows x NR columns of a Q4_1 or Q5_1 group (unsigned quants with a
// min); the signed legacy types take the lane kernels below.
template <int MR, int NR>
__attribute__((flatten, noinline)) void legacy_block(const GroupProblem& p, size_t row0,
                                                     size_t col0) {
  const size_t k = p.k;
  const size_t nb = k / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR][NR];
  float summ[MR][NR];
  unrolled<MR>([&](int i) {
    unrolled<NR>([&](int j) {
      acc[i][j] = _mm256_setzero_ps();
      summ[i][j] = 0.0f;
    });
  });
  for (size_t b = 0; b < nb; ++b) {
    unrolled<MR>([&](int i) {
      const size_t row = row0 + i;
      const __m256i x = load32(p.x_q + row * k + 32 * b);
      const __m256 x_d = _mm256_set1_ps(p.x_d[row * nb + b]);
      unrolled<NR>([&](int j) {
        const size_t col = col0 + j;
        const uint8_t* w = p.w.q + col * k + 32 * b;
        const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(load32(w), x), ones);
        const __m256 sums = _mm256_cvtepi32_ps(lanes);
        acc[i][j] = _mm256_fmadd_ps(_mm256_mul_ps(sums, x_d), _mm256_set1_ps(p.w.d[col * nb + b]),
                                    acc[i][j]);
        summ[i][j] = __builtin_fmaf(p.w.m[col * nb + b], p.x_s[row * nb + b], summ[i][j]);
      });
    });
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const float sum = hsum8(acc[i][j]) + summ[i][j];
      p.y[(row0 + i) * p.y_stride + col0 + j] = p.bias ? sum + p.bias[col0 + j] : sum;
    }
  }
}

// All rows of x against the group's columns: MR rows x 2 columns at a time
// (1 x 4 for a row left over), single columns in a ragged last group.
template <typename Kernel, int MR>
void sweep(const GroupProblem& p) {
  size_t row = 0;
  for (; row + MR <= p.m; row += MR) {
    if (p.cols == 4) {
      Kernel::template block<MR, 2>(p, row, 0);
      Kernel::template block<MR, 2>(p, row, 2);
    } else {
      for (size_t col = 0; col < p.cols; ++col) {
        Kernel::template block<MR, 1>(p, row, col);
      }
    }
  }
  for (; row < p.m; ++row) {
    if (p.cols == 4) {
      Kernel::template block<1, 4>(p, row, 0);
    } else {
      for (size_t col = 0; col < p.cols; ++col) {
        Kernel::template block<1, 1>(p, row, col);
      }
    }
  }
}

struct LegacyKernel {
  template <int MR, int NR>
  static void block(const GroupProblem& p, size_t row0, size_t col0) {
    legacy_block<MR, NR>(p, row0, col0);
  }
};

// totals[i] lane j: the sum of the 8 int32 lanes that column j's products
// with row i leave, for the kLaneGroupCols columns j and MR rows i.
// pair_lanes(j, lanes, next) fills lanes[i] for column j and next[i] for
// column j + 1 (j even: a pair shares its loads of x). The lanes are hadd-ed
// in pairs of columns, then pairs of pairs, then the two halves (exact
// integers, so the order is free).
template <int MR, typename PairLanes>
inline void column_totals(PairLanes&& pair_lanes, __m256i (&totals)[MR]) {
  // quads[i][h]: columns 4h..4h+3, each split over the two 128-bit halves.
  __m256i quads[MR][2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i pairs[MR][2];
#pragma GCC unroll 2
    for (int pair = 0; pair < 2; ++pair) {
      __m256i lanes[2][MR];
      pair_lanes(static_cast<size_t>(4 * h + 2 * pair), lanes[0], lanes[1]);
      unrolled<MR>([&](int i) { pairs[i][pair] = _mm256_hadd_epi32(lanes[0][i], lanes[1][i]); });
    }
    unrolled<MR>([&](int i) { quads[i][h] = _mm256_hadd_epi32(pairs[i][0], pairs[i][1]); });
  }
  unrolled<MR>([&](int i) {
    totals[i] = _mm256_add_epi32(_mm256_permute2x128_si256(quads[i][0], quads[i][1], 0x20),
                                 _mm256_permute2x128_si256(quads[i][0], quads[i][1], 0x31));
  });
}

// column_totals where each column's lanes come alone: column(j, lanes)
// fills lanes[i] for column j.
template <int MR, typename ColumnLanes>
inline void column_totals_each(ColumnLanes&& column, __m256i (&totals)[MR]) {
  column_totals<MR>(
      [&](size_t j0, __m256i(&lanes0)[MR], __m256i(&lanes1)[MR]) {
        column(j0, lanes0);
        column(j0 + 1, lanes1);
      },
      totals);
}

// The float steps of a Q8_0 lane kernel at the end of block b, for MR rows
// from row0 and the group's 8 columns at once: acc = fma(cvt(s_b) * d_x, d_w,
// acc). Both lane kernels take them from here, so that their outputs agree
// bit for bit.
// w_d: the 8 columns' scales of block b.
template <int MR>
inline void add_lane_block(const LaneGroupProblem& p, size_t row0, size_t b, __m256 w_d,
                           const __m256i (&sums)[MR], __m256 (&acc)[MR]) {
  const size_t nb = p.k / 32;
  unrolled<MR>([&](int i) {
    const __m256 x_d = _mm256_set1_ps(p.x_d[(row0 + i) * nb + b]);
    acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums[i]), x_d), w_d, acc[i]);
  });
}

// y = acc + bias for MR rows from row0, the group's columns only.
template <int MR, typename Problem>
inline void store_lane_rows(const Problem& p, size_t row0, const __m256 (&acc)[MR]) {
  const __m256i valid = tail_mask(p.cols);
  const __m256 bias = p.bias != nullptr ? _mm256_maskload_ps(p.bias, valid) : _mm256_setzero_ps();
  unrolled<MR>([&](int i) {
    const __m256 out = p.bias != nullptr ? _mm256_add_ps(acc[i], bias) : acc[i];
    _mm256_maskstore_ps(p.y + (row0 + i) * p.y_stride, valid, out);
  });
}

// MR rows of x against a Q8_0 lane group (see LaneGroupProblem).
template <int MR>
__attribute__((flatten, noinline)) void q8_0_lanes_block(const LaneGroupProblem& p, size_t row0) {
  const size_t k = p.k;
  const size_t nb = k / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR];
  unrolled<MR>([&](int i) { acc[i] = _mm256_setzero_ps(); });
  for (size_t b = 0; b < nb; ++b) {
    if (row0 == 0)
      prefetch_next_slice(p.next, p.next_bytes, b, nb);
    __m256i sums[MR];
    unrolled<MR>([&](int i) { sums[i] = _mm256_setzero_si256(); });
#pragma GCC unroll 8
    for (size_t t = 0; t < 8; ++t) {
      const size_t quad = 8 * b + t;
      // Quants 4 quad .. 4 quad + 3 of all 8 columns, and their magnitudes,
      // each in one register for every row.
      __m256i w = load32(p.w.q + 32 * quad);
      __m256i w_abs = load32(p.w.q_abs + 32 * quad);
      __asm__("" : "+v"(w), "+v"(w_abs));
      unrolled<MR>([&](int i) {
        int32_t four;
        std::memcpy(&four, p.x_q + (row0 + i) * k + 4 * quad, 4);
        const __m256i x = _mm256_set1_epi32(four);
        // |w| times x with w's sign: int16 pairs of at most 2 * 128 * 127.
        sums[i] = _mm256_add_epi32(
            sums[i], _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x, w)), ones));
        // An opaque chain: GCC would otherwise reassociate the integer adds
        // into a tree over all of the block's products, spilling them.
        __asm__("" : "+v"(sums[i]));
      });
    }
    add_lane_block<MR>(p, row0, b, _mm256_loadu_ps(p.w.d + kLaneGroupCols * b), sums, acc);
  }
  store_lane_rows(p, row0, acc);
}

// MR rows of x against a Q4_0 or Q5_0 lane group, whose interleaved quants
// are the stored, unsigned ones (at most 31): their products with x add up in
// int16 chains of 4 quads (at most 4 * 2 * 31 * 128 < 2^15) widened once per
// chain, and each block's total less kOffset * sum(x) is the exact sum of the
// signed quants' products, taken through Q8_0's float steps. Three integer
// operations per 4 quads of a row where Q8_0 needs eight.
template <int MR, int kOffset>
__attribute__((flatten, noinline)) void offset_lanes_block(const LaneGroupProblem& p, size_t row0) {
  const size_t k = p.k;
  const size_t nb = k / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR];
  unrolled<MR>([&](int i) { acc[i] = _mm256_setzero_ps(); });
  for (size_t b = 0; b < nb; ++b) {
    if (row0 == 0)
      prefetch_next_slice(p.next, p.next_bytes, b, nb);
    __m256i sums[MR];
    unrolled<MR>([&](int i) {
      sums[i] = _mm256_set1_epi32(-kOffset * int32_t{p.x_sums[(row0 + i) * nb + b]});
    });
    for (size_t chain = 0; chain < 2; ++chain) {
      __m256i chains[MR];
      unrolled<MR>([&](int i) { chains[i] = _mm256_setzero_si256(); });
#pragma GCC unroll 4
      for (size_t t = 0; t < 4; ++t) {
        const size_t quad = 8 * b + 4 * chain + t;
        __m256i w = load32(p.w.q + 32 * quad);
        __asm__("" : "+v"(w));
        unrolled<MR>([&](int i) {
          int32_t four;
          std::memcpy(&four, p.x_q + (row0 + i) * k + 4 * quad, 4);
          chains[i] = _mm256_add_epi16(chains[i], _mm256_maddubs_epi16(w, _mm256_set1_epi32(four)));
          __asm__("" : "+v"(chains[i])); // an opaque chain, as in q8_0_lanes_block
        });
      }
      unrolled<MR>(
          [&](int i) { sums[i] = _mm256_add_epi32(sums[i], _mm256_madd_epi16(chains[i], ones)); });
    }
    add_lane_block<MR>(p, row0, b, _mm256_loadu_ps(p.w.d + kLaneGroupCols * b), sums, acc);
  }
  store_lane_rows(p, row0, acc);
}

// The scales of block b of the group's columns read in place: one masked
// gather of each row's 4 bytes at the block (its f16 scale, then 2 more),
// zeros past p.cols.
template <TensorType kType>
inline __m256 signed_block_scales(const LaneGroupProblem& p, size_t b) {
  using Block = typename SignedBlocks<kType>::Block;
  const __m256i offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int>(p.row_bytes)));
  const __m256i words = _mm256_mask_i32gather_epi32(
      _mm256_setzero_si256(), reinterpret_cast<const int*>(p.rows + b * sizeof(Block)), offsets,
      tail_mask(p.cols), 1);
  const __m256i halves = _mm256_and_si256(words, _mm256_set1_epi32(0xFFFF));
  return _mm256_cvtph_ps(
      _mm_packus_epi32(_mm256_castsi256_si128(halves), _mm256_extracti128_si256(halves, 1)));
}

// MR < kInterleaveMinRows rows of x against a group of kType blocks read in
// place: each column's 8 lanes of 4 products, summed across lanes into one
// lane per column (exact), then the same float steps (add_lane_block). Q4_0
// and Q5_0 multiply their stored, unsigned quants and take kOffset * sum(x)
// back from each column's total (the same integers as offset_lanes_block).
template <int MR, TensorType kType>
__attribute__((flatten, noinline)) void signed_rows_block(const LaneGroupProblem& p, size_t row0) {
  using Blocks = SignedBlocks<kType>;
  constexpr bool kStoredOffset = Blocks::kOffset != 0;
  const size_t k = p.k;
  const size_t nb = k / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[MR];
  unrolled<MR>([&](int i) { acc[i] = _mm256_setzero_ps(); });
  for (size_t b = 0; b < nb; ++b) {
    prefetch_next_slice(p.next, p.next_bytes, b, nb);
    __m256i x[MR];
    unrolled<MR>([&](int i) { x[i] = load32(p.x_q + (row0 + i) * k + 32 * b); });
    // Column j's 8 lanes of products with each row.
    const auto column = [&](size_t j, __m256i(&lanes)[MR]) {
      const uint8_t* block = p.rows + j * p.row_bytes + b * sizeof(typename Blocks::Block);
      if constexpr (kStoredOffset) {
        // (A missing column's lane, -kOffset * sum(x) below, is scaled by 0
        // and never stored.)
        const __m256i w = j < p.cols ? Blocks::stored(block) : _mm256_setzero_si256();
        unrolled<MR>(
            [&](int i) { lanes[i] = _mm256_madd_epi16(_mm256_maddubs_epi16(w, x[i]), ones); });
      } else {
        const __m256i w = j < p.cols ? Blocks::quants(block) : _mm256_setzero_si256();
        const __m256i w_abs = _mm256_abs_epi8(w);
        unrolled<MR>([&](int i) {
          lanes[i] =
              _mm256_madd_epi16(_mm256_maddubs_epi16(w_abs, _mm256_sign_epi8(x[i], w)), ones);
        });
      }
    };
    __m256i sums[MR];
    column_totals_each<MR>(column, sums);
    if constexpr (kStoredOffset) {
      unrolled<MR>([&](int i) {
        sums[i] = _mm256_sub_epi32(
            sums[i], _mm256_set1_epi32(Blocks::kOffset * int32_t{p.x_sums[(row0 + i) * nb + b]}));
      });
    }
    add_lane_block<MR>(p, row0, b, signed_block_scales<kType>(p, b), sums, acc);
  }
  store_lane_rows(p, row0, acc);
}

template <TensorType kType>
void signed_rows(const LaneGroupProblem& p) {
  static_assert(kInterleaveMinRows == 4, "the in-place path takes 1 to 3 rows");
  switch (p.m) {
  case 1:
    return signed_rows_block<1, kType>(p, 0);
  case 2:
    return signed_rows_block<2, kType>(p, 0);
  case 3:
    return signed_rows_block<3, kType>(p, 0);
  default:
    break;
  }
  throw std::invalid_argument("dot_q8_0_lanes_avx2: the in-place path takes 1 to 3 rows");
}

// The lane kernels of the signed legacy types, by rows per block.
struct Q8_0Lanes {
  template <int MR>
  static void block(const LaneGroupProblem& p, size_t row0) {
    q8_0_lanes_block<MR>(p, row0);
  }
};

template <int kOffset>
struct OffsetLanes {
  template <int MR>
  static void block(const LaneGroupProblem& p, size_t row0) {
    offset_lanes_block<MR, kOffset>(p, row0);
  }
};

// The last `left` < R + 1 rows from `row`, in one block.
template <typename Kernel, int R>
void lane_remainder(const LaneGroupProblem& p, size_t row, size_t left) {
  if constexpr (R > 0) {
    if (left == R)
      return Kernel::template block<R>(p, row);
    lane_remainder<Kernel, R - 1>(p, row, left);
  }
}

// All rows of x (at least kInterleaveMinRows) against an interleaved group:
// MR at a time, then those left.
template <int MR, typename Kernel>
void lane_rows(const LaneGroupProblem& p) {
  size_t row = 0;
  for (; row + MR <= p.m; row += MR)
    Kernel::template block<MR>(p, row);
  lane_remainder<Kernel, MR - 1>(p, row, p.m - row);
}

// Byte patterns picking sub-block scales 2c (8 times) and 2c + 1 (8 times)
// out of a super-block's 16.
alignas(16) constexpr uint8_t kScalePatterns[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

// The float steps of a K-quant lane kernel at the end of super-block b, for
// MR rows from row0 and the group's 8 columns at once (see
// SuperLaneGroupProblem). Both K-quant lane kernels take them from here, so
// that their outputs agree bit for bit. The accumulators stay in memory
// (`acc`, MR rows of 8 lanes) from one super-block to the next: in registers
// they would crowd out the integer sums, which the kernels touch far more
// often.
// w_d, w_dmin: the 8 columns' d and dmin of super-block b.
template <int MR, bool kWithMin>
inline void add_super_lane_block(const SuperLaneGroupProblem& p, size_t row0, size_t b, __m256 w_d,
                                 __m256 w_dmin, const __m256i (&sums)[MR],
                                 const __m256i (&min_sums)[MR], float (&acc)[MR][kLaneGroupCols]) {
  const size_t nb = p.k / 256;
  unrolled<MR>([&](int i) {
    const __m256 x_d = _mm256_set1_ps(p.x_d[(row0 + i) * nb + b]);
    __m256 a = _mm256_load_ps(acc[i]);
    if constexpr (kWithMin) {
      a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums[i]), x_d), w_d, a);
      a = _mm256_fnmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(min_sums[i]), x_d), w_dmin, a);
    } else {
      const __m256i offset_sums = _mm256_sub_epi32(sums[i], min_sums[i]);
      a = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(offset_sums), x_d), w_d, a);
    }
    _mm256_store_ps(acc[i], a);
  });
  // Keeps acc in memory: without it GCC promotes the array back to registers.
  __asm__("" : "+m"(acc));
}

// y = acc + bias for a K-quant lane kernel's accumulators in memory.
template <int MR>
inline void store_super_lane_rows(const SuperLaneGroupProblem& p, size_t row0,
                                  const float (&acc)[MR][kLaneGroupCols]) {
  __m256 out[MR];
  unrolled<MR>([&](int i) { out[i] = _mm256_load_ps(acc[i]); });
  store_lane_rows(p, row0, out);
}

// MR rows of x against an interleaved K-quant group. Per sub-block of 16
// values, the maddubs products of kChain quads (4 values of all 8 columns
// each) add up in int16 lanes (super_quads_per_chain() keeps them from
// saturating), then meet the sub-block's scales in one madd.
template <int MR, int kChain, bool kWithMin>
__attribute__((flatten, noinline)) void super_lanes_block(const SuperLaneGroupProblem& p,
                                                          size_t row0) {
  static_assert(4 % kChain == 0);
  const size_t k = p.k;
  const size_t nb = k / 256;
  const size_t subs = k / 16;
  alignas(32) float acc[MR][kLaneGroupCols] = {};
  for (size_t b = 0; b < nb; ++b) {
    __m256i sums[MR];
    unrolled<MR>([&](int i) { sums[i] = _mm256_setzero_si256(); });
    for (size_t sub = 16 * b; sub < 16 * b + 16; ++sub) {
      if (row0 == 0)
        prefetch_next_slice(p.next, p.next_bytes, sub, subs);
      const __m256i scales = load32(p.w.scales + 16 * sub);
#pragma GCC unroll 2
      for (size_t chain_start = 4 * sub; chain_start < 4 * sub + 4; chain_start += kChain) {
        // The chain's quads of all 8 columns, then row by row its products.
        __m256i w[kChain];
        unrolled<kChain>([&](int t) {
          w[t] = load32(p.w.q + 32 * (chain_start + t));
          __asm__("" : "+v"(w[t]));
        });
        unrolled<MR>([&](int i) {
          const int8_t* x = p.x_q + (row0 + i) * k + 4 * chain_start;
          __m256i chain = _mm256_setzero_si256();
          unrolled<kChain>([&](int t) {
            int32_t four;
            std::memcpy(&four, x + 4 * t, 4);
            chain = _mm256_add_epi16(chain, _mm256_maddubs_epi16(w[t], _mm256_set1_epi32(four)));
          });
          sums[i] = _mm256_add_epi32(sums[i], _mm256_madd_epi16(chain, scales));
          __asm__("" : "+v"(sums[i])); // an opaque chain, as in q8_0_lanes_block
        });
      }
    }
    __m256i min_sums[MR];
    unrolled<MR>([&](int i) { min_sums[i] = _mm256_setzero_si256(); });
    for (size_t pair = 8 * b; pair < 8 * b + 8; ++pair) {
      const __m256i mins = load32(p.w.mins + 16 * pair);
      unrolled<MR>([&](int i) {
        int32_t two;
        std::memcpy(&two, p.x_bsums + (row0 + i) * subs + 2 * pair, 4);
        min_sums[i] =
            _mm256_add_epi32(min_sums[i], _mm256_madd_epi16(mins, _mm256_set1_epi32(two)));
      });
    }
    add_super_lane_block<MR, kWithMin>(p, row0, b, _mm256_loadu_ps(p.d + kLaneGroupCols * b),
                                       _mm256_loadu_ps(p.dmin + kLaneGroupCols * b), sums, min_sums,
                                       acc);
  }
  store_super_lane_rows(p, row0, acc);
}

// MR < kInterleaveMinRows rows of x against a decoded K-quant group (all 8
// columns, zeros past p.cols): each column's 8 lanes of scaled products, and
// of mins times block sums, summed across lanes into one lane per column
// (exact), then the same float steps (add_super_lane_block).
template <int MR, bool kWithMin>
__attribute__((flatten, noinline)) void super_rows_block(const SuperLaneGroupProblem& p,
                                                         size_t row0) {
  const size_t k = p.k;
  const size_t nb = k / 256;
  const size_t subs = k / 16;
  alignas(32) float acc[MR][kLaneGroupCols] = {};
  for (size_t b = 0; b < nb; ++b) {
    prefetch_next_slice(p.next, p.next_bytes, b, nb);
    __m256i sums[MR];
    column_totals<MR>(
        [&](size_t j, __m256i(&lanes0)[MR], __m256i(&lanes1)[MR]) {
          const int8_t* scales0 = p.decoded.scales + j * subs + 16 * b;
          const __m128i packed0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales0));
          const __m128i packed1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(scales0 + subs));
          const uint8_t* q0 = p.decoded.q + j * k + 256 * b;
          unrolled<MR>([&](int i) {
            lanes0[i] = _mm256_setzero_si256();
            lanes1[i] = _mm256_setzero_si256();
          });
          for (size_t c = 0; c < 8; ++c) {
            // Sub-blocks 2c and 2c + 1: their scales, 8 int16 each.
            const __m128i pattern =
                _mm_load_si128(reinterpret_cast<const __m128i*>(kScalePatterns[c]));
            const __m256i scales0v = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(packed0, pattern));
            const __m256i scales1v = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(packed1, pattern));
            const __m256i w0 = load32(q0 + 32 * c);
            const __m256i w1 = load32(q0 + k + 32 * c);
            unrolled<MR>([&](int i) {
              const __m256i x = load32(p.x_q + (row0 + i) * k + 256 * b + 32 * c);
              lanes0[i] = _mm256_add_epi32(
                  lanes0[i], _mm256_madd_epi16(_mm256_maddubs_epi16(w0, x), scales0v));
              lanes1[i] = _mm256_add_epi32(
                  lanes1[i], _mm256_madd_epi16(_mm256_maddubs_epi16(w1, x), scales1v));
            });
          }
        },
        sums);
    __m256i min_sums[MR];
    column_totals<MR>(
        [&](size_t j, __m256i(&lanes0)[MR], __m256i(&lanes1)[MR]) {
          const __m256i mins0 = load32(p.decoded.mins + j * subs + 16 * b);
          const __m256i mins1 = load32(p.decoded.mins + (j + 1) * subs + 16 * b);
          unrolled<MR>([&](int i) {
            const __m256i bsums = load32(p.x_bsums + (row0 + i) * subs + 16 * b);
            lanes0[i] = _mm256_madd_epi16(mins0, bsums);
            lanes1[i] = _mm256_madd_epi16(mins1, bsums);
          });
        },
        min_sums);
    add_super_lane_block<MR, kWithMin>(p, row0, b, _mm256_loadu_ps(p.d + kLaneGroupCols * b),
                                       _mm256_loadu_ps(p.dmin + kLaneGroupCols * b), sums, min_sums,
                                       acc);
  }
  store_super_lane_rows(p, row0, acc);
}

// Byte patterns repeating word s (bytes 2s and 2s + 1) of each 128-bit lane
// over the whole lane, for s < 8.
struct WordPatterns {
  alignas(32) uint8_t bytes[8][32];
};

constexpr WordPatterns make_word_patterns() {
  WordPatterns patterns{};
  for (int s = 0; s < 8; ++s)
    for (int i = 0; i < 32; ++i)
      patterns.bytes[s][i] = static_cast<uint8_t>(2 * s + i % 2);
  return patterns;
}

constexpr WordPatterns kWordPatterns = make_word_patterns();

// The two f16 values at `first` and at the same place of the group's other
// rows (row_bytes apart), as floats: one masked gather of 4 bytes a row,
// zeros past p.cols.
inline void gather_f16_pairs(const SuperLaneGroupProblem& p, const uint8_t* first, __m256& low,
                             __m256& high) {
  const __m256i offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int>(p.row_bytes)));
  const __m256i words = _mm256_mask_i32gather_epi32(
      _mm256_setzero_si256(), reinterpret_cast<const int*>(first), offsets, tail_mask(p.cols), 1);
  const __m256i low16 = _mm256_and_si256(words, _mm256_set1_epi32(0xFFFF));
  const __m256i high16 = _mm256_srli_epi32(words, 16);
  low = _mm256_cvtph_ps(
      _mm_packus_epi32(_mm256_castsi256_si128(low16), _mm256_extracti128_si256(low16, 1)));
  high = _mm256_cvtph_ps(
      _mm_packus_epi32(_mm256_castsi256_si128(high16), _mm256_extracti128_si256(high16, 1)));
}

// MR < kInterleaveMinRows rows of x against a Q4_K group read in place, with
// no decoding pass: each column's nibbles times x, by its 32-value
// sub-blocks' 6-bit scales, in 8 lanes, and its mins times x's block sums;
// summed across lanes into one lane per column (the decoded path's exact
// integers), then the same float steps (add_super_lane_block).
template <int MR>
__attribute__((flatten, noinline)) void q4_k_rows_block(const SuperLaneGroupProblem& p,
                                                        size_t row0) {
  const size_t k = p.k;
  const size_t nb = k / 256;
  const size_t subs = k / 16;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  alignas(32) float acc[MR][kLaneGroupCols] = {};
  for (size_t b = 0; b < nb; ++b) {
    prefetch_next_slice(p.next, p.next_bytes, b, nb);
    const auto block_of = [&](size_t j) {
      return p.rows + j * p.row_bytes + b * sizeof(BlockQ4_K);
    };
    // Each column's 8 sub-block scales (bytes 0-7) and mins (8-15).
    alignas(16) uint8_t scales_mins[kLaneGroupCols][16];
    for (size_t j = 0; j < p.cols; ++j)
      _mm_store_si128(reinterpret_cast<__m128i*>(scales_mins[j]),
                      unpack_scales_k4(block_of(j) + offsetof(BlockQ4_K, scales)));
    // Column j's scaled products with each row; zeros past p.cols.
    const auto column_sums = [&](size_t j, __m256i(&lanes)[MR]) {
      unrolled<MR>([&](int i) { lanes[i] = _mm256_setzero_si256(); });
      if (j >= p.cols)
        return;
      // The 8 scales as int16, in both 128-bit lanes; kWordPatterns[s]
      // spreads scale s over all 16 words.
      const __m256i scales = _mm256_broadcastsi128_si256(
          _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales_mins[j]))));
      const uint8_t* qs = block_of(j) + offsetof(BlockQ4_K, qs);
      // Values 64c .. 64c + 31 are the low nibbles of qs[32c ..], the next
      // 32 the high ones: sub-blocks 2c and 2c + 1.
#pragma GCC unroll 4
      for (size_t c = 0; c < 4; ++c) {
        const __m256i packed = load32(qs + 32 * c);
        const __m256i low = _mm256_and_si256(packed, low4);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low4);
        const __m256i scale_low = _mm256_shuffle_epi8(scales, load32(kWordPatterns.bytes[2 * c]));
        const __m256i scale_high =
            _mm256_shuffle_epi8(scales, load32(kWordPatterns.bytes[2 * c + 1]));
        unrolled<MR>([&](int i) {
          const int8_t* x = p.x_q + (row0 + i) * k + 256 * b + 64 * c;
          lanes[i] = _mm256_add_epi32(
              lanes[i],
              _mm256_add_epi32(
                  _mm256_madd_epi16(_mm256_maddubs_epi16(low, load32(x)), scale_low),
                  _mm256_madd_epi16(_mm256_maddubs_epi16(high, load32(x + 32)), scale_high)));
        });
      }
    };
    // Column j's mins (each twice, one per 16 values) times x's block sums.
    const auto column_mins = [&](size_t j, __m256i(&lanes)[MR]) {
      unrolled<MR>([&](int i) { lanes[i] = _mm256_setzero_si256(); });
      if (j >= p.cols)
        return;
      const __m128i both = _mm_load_si128(reinterpret_cast<const __m128i*>(scales_mins[j]));
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_unpackhi_epi8(both, both));
      unrolled<MR>([&](int i) {
        lanes[i] = _mm256_madd_epi16(mins, load32(p.x_bsums + (row0 + i) * subs + 16 * b));
      });
    };
    __m256i sums[MR];
    column_totals_each<MR>(column_sums, sums);
    __m256i min_sums[MR];
    column_totals_each<MR>(column_mins, min_sums);
    // d and dmin of the 8 columns: the two f16 at each block's start.
    __m256 w_d, w_dmin;
    gather_f16_pairs(p, block_of(0), w_d, w_dmin);
    add_super_lane_block<MR, true>(p, row0, b, w_d, w_dmin, sums, min_sums, acc);
  }
  store_super_lane_rows(p, row0, acc);
}

// MR < kInterleaveMinRows rows of x against a Q6_K group read in place, as
// q4_k_rows_block does Q4_K: each column's 6-bit quants (stored + 32, as the
// decoder leaves them) assembled from ql and qh, times x, by the 16-value
// sub-blocks' int8 scales; the offset's share, 32 * scale times x's block
// sums, as the decoded path's mins.
template <int MR>
__attribute__((flatten, noinline)) void q6_k_rows_block(const SuperLaneGroupProblem& p,
                                                        size_t row0) {
  const size_t k = p.k;
  const size_t nb = k / 256;
  const size_t subs = k / 16;
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i bits45 = _mm256_set1_epi8(0x30);
  alignas(32) float acc[MR][kLaneGroupCols] = {};
  for (size_t b = 0; b < nb; ++b) {
    prefetch_next_slice(p.next, p.next_bytes, b, nb);
    const auto block_of = [&](size_t j) {
      return p.rows + j * p.row_bytes + b * sizeof(BlockQ6_K);
    };
    const auto column_sums = [&](size_t j, __m256i(&lanes)[MR]) {
      unrolled<MR>([&](int i) { lanes[i] = _mm256_setzero_si256(); });
      if (j >= p.cols)
        return;
      const uint8_t* block = block_of(j);
      const __m128i scales =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(block + offsetof(BlockQ6_K, scales)));
      // Values 32g .. 32g + 31, with the scales of sub-blocks 2g and 2g + 1.
      const auto add_chunk = [&](size_t g, __m256i q) {
        const __m256i scale_pair = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
            scales, _mm_load_si128(reinterpret_cast<const __m128i*>(kScalePatterns[g]))));
        unrolled<MR>([&](int i) {
          const int8_t* x = p.x_q + (row0 + i) * k + 256 * b + 32 * g;
          lanes[i] = _mm256_add_epi32(
              lanes[i], _mm256_madd_epi16(_mm256_maddubs_epi16(q, load32(x)), scale_pair));
        });
      };
      // Half h (128 values): ql[64h + l] holds the low 4 bits of values l
      // (low nibble) and l + 64 (high), ql[64h + 32 + l] those of l + 32 and
      // l + 96; qh[32h + l] the high 2 bits of l, l + 32, l + 64 and l + 96.
      for (size_t h = 0; h < 2; ++h) {
        const __m256i ql0 = load32(block + offsetof(BlockQ6_K, ql) + 64 * h);
        const __m256i ql1 = load32(block + offsetof(BlockQ6_K, ql) + 64 * h + 32);
        const __m256i qh = load32(block + offsetof(BlockQ6_K, qh) + 32 * h);
        add_chunk(4 * h, _mm256_or_si256(_mm256_and_si256(ql0, low4),
                                         _mm256_and_si256(_mm256_slli_epi16(qh, 4), bits45)));
        add_chunk(4 * h + 1, _mm256_or_si256(_mm256_and_si256(ql1, low4),
                                             _mm256_and_si256(_mm256_slli_epi16(qh, 2), bits45)));
        add_chunk(4 * h + 2, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                                             _mm256_and_si256(qh, bits45)));
        add_chunk(4 * h + 3, _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                                             _mm256_and_si256(_mm256_srli_epi16(qh, 2), bits45)));
      }
    };
    // 32 times each 16-value sub-block's scale, times x's block sums.
    const auto column_offsets = [&](size_t j, __m256i(&lanes)[MR]) {
      unrolled<MR>([&](int i) { lanes[i] = _mm256_setzero_si256(); });
      if (j >= p.cols)
        return;
      const __m256i mins =
          _mm256_slli_epi16(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(
                                block_of(j) + offsetof(BlockQ6_K, scales)))),
                            5);
      unrolled<MR>([&](int i) {
        lanes[i] = _mm256_madd_epi16(mins, load32(p.x_bsums + (row0 + i) * subs + 16 * b));
      });
    };
    __m256i sums[MR];
    column_totals_each<MR>(column_sums, sums);
    __m256i min_sums[MR];
    column_totals_each<MR>(column_offsets, min_sums);
    // d: the f16 after the scales' last two bytes (the gather reads 4 bytes
    // ending with the block).
    static_assert(offsetof(BlockQ6_K, d) + 2 == sizeof(BlockQ6_K));
    __m256 last_scales, w_d;
    gather_f16_pairs(p, block_of(0) + offsetof(BlockQ6_K, d) - 2, last_scales, w_d);
    add_super_lane_block<MR, false>(p, row0, b, w_d, w_d, sums, min_sums, acc);
  }
  store_super_lane_rows(p, row0, acc);
}

template <int kChain, bool kWithMin>
void super_lanes(const SuperLaneGroupProblem& p) {
  static_assert(kInterleaveMinRows == 4, "the decoded path takes 1 to 3 rows");
  switch (p.m) {
  case 1:
    return super_rows_block<1, kWithMin>(p, 0);
  case 2:
    return super_rows_block<2, kWithMin>(p, 0);
  case 3:
    return super_rows_block<3, kWithMin>(p, 0);
  default:
    break;
  }
  size_t row = 0;
  for (; row + 6 <= p.m; row += 6)
    super_lanes_block<6, kChain, kWithMin>(p, row);
  switch (p.m - row) {
  case 5:
    return super_lanes_block<5, kChain, kWithMin>(p, row);
  case 4:
    return super_lanes_block<4, kChain, kWithMin>(p, row);
  case 3:
    return super_lanes_block<3, kChain, kWithMin>(p, row);
  case 2:
    return super_lanes_block<2, kChain, kWithMin>(p, row);
  case 1:
    return super_lanes_block<1, kChain, kWithMin>(p, row);
  default:
    break;
  }
}

} // namespace

void dot_q8_0_lanes_avx2(const LaneGroupProblem& p) {
  if (p.m < kInterleaveMinRows) {
    switch (p.type) {
    case TensorType::Q8_0:
      return signed_rows<TensorType::Q8_0>(p);
    case TensorType::Q4_0:
      return signed_rows<TensorType::Q4_0>(p);
    case TensorType::Q5_0:
      return signed_rows<TensorType::Q5_0>(p);
    default:
      break;
    }
  } else {
    switch (p.type) {
    case TensorType::Q8_0:
      return lane_rows<4, Q8_0Lanes>(p);
    case TensorType::Q4_0:
      return lane_rows<4, OffsetLanes<8>>(p);
    case TensorType::Q5_0:
      return lane_rows<4, OffsetLanes<16>>(p);
    default:
      break;
    }
  }
  throw std::invalid_argument(std::string("dot_q8_0_lanes_avx2: ") + to_string(p.type) +
                              " blocks are not Q8_0, Q4_0 or Q5_0");
}

void dot_group_avx2(const GroupProblem& p) {
  switch (p.kind) {
  case QuantKind::kLegacySigned:
  case QuantKind::kLegacyOffset:
    throw std::invalid_argument("dot_group_avx2: Q8_0, Q4_0 and Q5_0 take dot_q8_0_lanes_avx2");
  case QuantKind::kLegacyWithMin:
    sweep<LegacyKernel, 3>(p);
    return;
  case QuantKind::kSuperWithMin:
  case QuantKind::kSuperOffset:
    throw std::invalid_argument("dot_group_avx2: the K-quants take dot_super_lanes_avx2");
  }
}

void dot_super_lanes_avx2(const SuperLaneGroupProblem& p) {
  static_assert(kInterleaveMinRows == 4, "the in-place paths take 1 to 3 rows");
  if (p.type == TensorType::Q4_K && p.m < kInterleaveMinRows) {
    switch (p.m) {
    case 1:
      return q4_k_rows_block<1>(p, 0);
    case 2:
      return q4_k_rows_block<2>(p, 0);
    default:
      return q4_k_rows_block<3>(p, 0);
    }
  }
  if (p.type == TensorType::Q6_K && p.m < kInterleaveMinRows) {
    switch (p.m) {
    case 1:
      return q6_k_rows_block<1>(p, 0);
    case 2:
      return q6_k_rows_block<2>(p, 0);
    default:
      return q6_k_rows_block<3>(p, 0);
    }
  }
  const bool with_min = p.kind == QuantKind::kSuperWithMin;
  if (p.kind != QuantKind::kSuperWithMin && p.kind != QuantKind::kSuperOffset)
    throw std::invalid_argument("dot_super_lanes_avx2: not a K-quant kind");
  if (p.quads_per_chain == 4)
    return with_min ? super_lanes<4, true>(p) : super_lanes<4, false>(p);
  if (p.quads_per_chain == 2)
    return with_min ? super_lanes<2, true>(p) : super_lanes<2, false>(p);
  throw std::invalid_argument("dot_super_lanes_avx2: quads_per_chain must be 2 or 4");
}

} // namespace caflm::detail

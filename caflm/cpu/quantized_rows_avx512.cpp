// dot_q8_0_rows_avx512(): 1 to 3 rows of x against a lane group of Q8_0,
// Q4_0 or Q5_0 weight rows read in place, with vpdpbusd. Compiled with
// AVX-512 enabled (caflm/cpu/CMakeLists.txt) and called only where the CPU
// has it. Internal linkage for everything else, as in the other AVX-512
// files.
//
// A single sequence's decode reads every weight once, so its kernel should
// keep pace with the memory. The AVX2 in-place kernel spends five 256-bit
// operations on each block of 32 quants of a column (abs, sign, maddubs,
// madd and the load) and ran at 29-49 GB/s of Q8_0 weights even with them
// in cache (2 threads, Zen 5), about what the memory gives there; here one
// vpdpbusd takes two blocks, and one gather both blocks' scales.
//
// The bits are those of the AVX2 kernel: per block and column the exact
// integer dot product S (the unsigned quants' sum less offset * sum(x)),
// then acc = fma(cvt(S) * d_x, d_w, acc) block after block, then + bias.

#include "caflm/cpu/avx512_intrinsics.hpp"

#include "caflm/cpu/quantized_matmul.hpp"

#include <cstddef>
#include <cstdint>
#include <stdexcept>

#include "caflm/cpu/block_readers.hpp"
#include "caflm/cpu/simd_helpers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

namespace caflm::detail {

namespace {

/// MR rows from row0 against the group's kLaneGroupCols columns. Each
/// column's two blocks b, b + 1 fill one vector of unsigned quants; a
/// vpdpbusd per row leaves block b's products in lanes 0-7 and b + 1's in
/// lanes 8-15, and lane_sums then a two-source permute gather, per row,
/// block b's sums of all 8 columns in lanes 0-7 and b + 1's in lanes 8-15.
template <int MR, TensorType kType>
__attribute__((flatten, noinline)) void rows_block(const LaneGroupProblem& p, std::size_t row0) {
  using Block = typename SignedBlocks<kType>::Block;
  const std::size_t k = p.k;
  const std::size_t nb = k / 32;
  // Columns past a ragged group's last read column 0's rows; their lanes
  // are never stored.
  const std::uint8_t* column[kLaneGroupCols];
  for (std::size_t j = 0; j < kLaneGroupCols; ++j)
    column[j] = p.rows + (j < p.cols ? j : 0) * p.row_bytes;
  const __m512i first_halves =
      _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
  const __m512i second_halves =
      _mm512_setr_epi32(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  __m256 acc[MR];
  unrolled<MR>([&](int i) { acc[i] = _mm256_setzero_ps(); });
  // Where each lane's scale lies from block b's of column 0: lanes 0-7
  // block b's of columns 0-7, lanes 8-15 block b + 1's.
  __m512i scale_offsets = _mm512_setzero_si512();
  for (int lane = 0; lane < 16; ++lane) {
    const auto at = static_cast<std::int32_t>((column[lane % 8] - column[0]) +
                                              (lane / 8) * sizeof(Block) + offsetof(Block, d));
    scale_offsets = _mm512_mask_set1_epi32(scale_offsets, static_cast<__mmask16>(1u << lane), at);
  }
  const auto group_lanes = static_cast<__mmask16>((1u << p.cols) - 1u);
  // The float steps of block b from its 8 exact column sums and scales.
  const auto add_block = [&](std::size_t b, int i, __m256i sums, __m256 w_d) {
    const std::size_t at = (row0 + i) * nb + b;
    sums = _mm256_sub_epi32(sums,
                            _mm256_set1_epi32(kUnsignedOffset<SignedBlocks<kType>> * p.x_sums[at]));
    acc[i] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(p.x_d[at])),
                             w_d, acc[i]);
  };
  const auto block_pair = [&](std::size_t b, bool second) {
    __m512i x[MR];
    unrolled<MR>([&](int i) {
      const std::int8_t* row = p.x_q + (row0 + i) * k + 32 * b;
      x[i] = second ? _mm512_loadu_si512(row) : _mm512_zextsi256_si512(load32(row));
    });
    __m512i dots[MR][kLaneGroupCols];
    unrolled<kLaneGroupCols>([&](int j) {
      const __m256i low = unsigned_quants<SignedBlocks<kType>>(block_at<Block>(column[j], b));
      const __m256i high =
          second ? unsigned_quants<SignedBlocks<kType>>(block_at<Block>(column[j], b + 1))
                 : _mm256_setzero_si256();
      const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1);
      unrolled<MR>(
          [&](int i) { dots[i][j] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, x[i]); });
    });
    // Both blocks' f16 scales in one gather: scalar loads stored to an
    // array and reloaded as a vector stalled on store forwarding each time.
    const auto lanes =
        static_cast<__mmask16>(second ? group_lanes | group_lanes << 8 : group_lanes);
    const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), lanes, scale_offsets,
                                                      column[0] + b * sizeof(Block), 1);
    const __m512 w_d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words));
    unrolled<MR>([&](int i) {
      const __m512i first4 = lane_sums(dots[i][0], dots[i][1], dots[i][2], dots[i][3]);
      const __m512i last4 = lane_sums(dots[i][4], dots[i][5], dots[i][6], dots[i][7]);
      const __m512i sums =
          _mm512_add_epi32(_mm512_permutex2var_epi32(first4, first_halves, last4),
                           _mm512_permutex2var_epi32(first4, second_halves, last4));
      add_block(b, i, _mm512_castsi512_si256(sums), _mm512_castps512_ps256(w_d));
      if (second)
        add_block(b + 1, i, _mm512_extracti64x4_epi64(sums, 1), _mm512_extractf32x8_ps(w_d, 1));
    });
  };
  std::size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    prefetch_next_slice(p.next, p.next_bytes, b, nb);
    prefetch_next_slice(p.next, p.next_bytes, b + 1, nb);
    block_pair(b, true);
  }
  if (b < nb) {
    prefetch_next_slice(p.next, p.next_bytes, b, nb);
    block_pair(b, false);
  }
  store_group_rows(p, row0, acc);
}

template <TensorType kType>
void rows_of(const LaneGroupProblem& p) {
  static_assert(kInterleaveMinRows == 4, "the in-place path takes 1 to 3 rows");
  switch (p.m) {
  case 1:
    return rows_block<1, kType>(p, 0);
  case 2:
    return rows_block<2, kType>(p, 0);
  case 3:
    return rows_block<3, kType>(p, 0);
  default:
    break;
  }
  throw std::invalid_argument("dot_q8_0_rows_avx512: the in-place path takes 1 to 3 rows");
}

} // namespace

void dot_q8_0_rows_avx512(const LaneGroupProblem& p) {
  visit_signed_type(
      p.type, "dot_q8_0_rows_avx512:", [&](auto kType) { rows_of<decltype(kType)::value>(p); });
}

} // namespace caflm::detail

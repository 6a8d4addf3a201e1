// interleave_unsigned() and interleave_super_wide(): the weight rows of one
// AVX-512 column group, interleaved for the wide lane kernels with 512-bit
// shuffles, straight from the rows. Compiled with AVX-512 enabled
// (caflm/cpu/CMakeLists.txt) and called only from the AVX-512 path of
// quantized_linear. Internal linkage for everything else, as in the other
// AVX-512 files.
//
// At 32 rows the interleave is a large share of a group's work (measured on
// Zen 5, 2048 x 2048 weights from L3: 40% of the Q8_0 lane kernel's time
// with 256-bit transposes of 8 columns; for Q4_K and Q6_K a decoding pass
// and an interleaving pass, 46%): each 512-bit shuffle here moves the same 4
// quants of 16 columns, where two 256-bit ones moved 8 each, and a K-quant
// chunk goes from its block to its place in registers.

#include "caflm/cpu/avx512_intrinsics.hpp"

#include "caflm/cpu/quantized_matmul.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "caflm/cpu/block_readers.hpp"
#include "caflm/cpu/simd_helpers.hpp"
#include "caflm/cpu/super_block_readers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

namespace caflm::detail {

namespace {

/// The 8 x 8 transpose of 32-bit elements in each 256-bit half at once:
/// half h of out[t], lane j = half h of in[j], lane t.
inline __attribute__((always_inline)) void transpose_halves_8x8_epi32(const __m512i (&in)[8],
                                                                      __m512i (&out)[8]) {
  // Plain loops GCC unrolls, not unrolled(): inside interleave_super_blocks
  // it compiled one of those lambdas out of line and passed the arrays
  // through memory (1.3% of a 32-sequence Q4_K_M decode in perf).
  __m512i t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  // Per half: the low 128-bit lanes of u[i] and u[4 + i], then the high ones.
  const __m512i low_lanes = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i high_lanes = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    out[i] = _mm512_permutex2var_epi64(u[i], low_lanes, u[4 + i]);
    out[4 + i] = _mm512_permutex2var_epi64(u[i], high_lanes, u[4 + i]);
  }
}

/// The 16 columns' rows, `rows + j * row_bytes` for j < cols; those past a
/// ragged group's last column read column 0's, and `keep` (one bit per
/// column) zeroes them after: one branch-free loop for every group.
struct GroupColumns {
  const std::uint8_t* row[kWideLaneGroupCols];
  __mmask16 keep;

  GroupColumns(const std::uint8_t* rows, std::size_t row_bytes, std::size_t cols)
    : keep(static_cast<__mmask16>(cols >= 16 ? 0xFFFFu : (1u << cols) - 1u)) {
    for (std::size_t j = 0; j < kWideLaneGroupCols; ++j)
      row[j] = rows + (j < cols ? j : 0) * row_bytes;
  }

  /// Column j's 8 dwords in the low half, column j + 8's in the high half,
  /// zeros for a column past the last.
  __m512i pair(int j, __m256i low, __m256i high) const {
    const auto halves = static_cast<__mmask16>((keep >> j & 1u ? 0x00FFu : 0u) |
                                               (keep >> (j + 8) & 1u ? 0xFF00u : 0u));
    return _mm512_maskz_mov_epi32(halves, _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1));
  }

  /// Transposes in[j] = pair(j, ...) for j < 8 and stores out[t] at
  /// to(t), 64 bytes each.
  template <typename To>
  void transpose_store(const __m512i (&in)[kLaneGroupCols], To to) const {
    __m512i out[kLaneGroupCols];
    transpose_halves_8x8_epi32(in, out);
    unrolled<kLaneGroupCols>([&](int t) { _mm512_storeu_si512(to(t), out[t]); });
  }

  /// The 16 columns' values, zeros past the last, to `to` as floats.
  void store_floats(const float (&values)[kWideLaneGroupCols], float* to) const {
    _mm512_storeu_ps(to, _mm512_maskz_mov_ps(keep, _mm512_loadu_ps(values)));
  }
};

template <TensorType kType>
void interleave_unsigned_blocks(const std::uint8_t* __restrict__ rows, std::size_t row_bytes,
                                std::size_t cols, std::size_t k, std::uint8_t* __restrict__ q,
                                float* __restrict__ d) {
  using Blocks = SignedBlocks<kType>;
  using Block = typename Blocks::Block;
  const GroupColumns group(rows, row_bytes, cols);
  for (std::size_t b = 0; b < k / 32; ++b) {
    __m512i in[kLaneGroupCols];
    unrolled<kLaneGroupCols>([&](int j) {
      in[j] = group.pair(j, unsigned_quants<Blocks>(block_at<Block>(group.row[j], b)),
                         unsigned_quants<Blocks>(block_at<Block>(group.row[j + 8], b)));
    });
    group.transpose_store(in, [&](int t) { return q + (8 * b + t) * 64; });
    float scales[kWideLaneGroupCols];
    unrolled<kWideLaneGroupCols>([&](int j) {
      scales[j] = half(u16_at(block_at<Block>(group.row[j], b) + offsetof(Block, d)));
    });
    group.store_floats(scales, d + kWideLaneGroupCols * b);
  }
}

template <TensorType kType>
void interleave_super_blocks(const std::uint8_t* __restrict__ rows, std::size_t row_bytes,
                             std::size_t cols, std::size_t k, const InterleavedSuperWideOut& out) {
  using Blocks = SuperBlocks<kType>;
  using Block = typename Blocks::Block;
  const GroupColumns group(rows, row_bytes, cols);
  for (std::size_t b = 0; b < k / 256; ++b) {
    const std::uint8_t* block[kWideLaneGroupCols];
    unrolled<kWideLaneGroupCols>([&](int j) { block[j] = block_at<Block>(group.row[j], b); });
    // Quants: chunk c (32 values, 8 quads) of every column at a time.
    for (int c = 0; c < 8; ++c) {
      __m512i in[kLaneGroupCols];
      unrolled<kLaneGroupCols>([&](int j) {
        in[j] = group.pair(j, Blocks::quants(block[j], c), Blocks::quants(block[j + 8], c));
      });
      group.transpose_store(in, [&](int t) { return out.q + (64 * b + 8 * c + t) * 64; });
    }
    alignas(16) std::int8_t scales[kWideLaneGroupCols][16];
    alignas(32) std::int16_t mins[kWideLaneGroupCols][16];
    float d[kWideLaneGroupCols], dmin[kWideLaneGroupCols] = {};
    for (std::size_t j = 0; j < kWideLaneGroupCols; ++j)
      Blocks::scales(block[j], scales[j], mins[j], &d[j], &dmin[j]);
    // Scales: 16s 8h .. 8h + 7 of every column, widened to int32.
    for (int h = 0; h < 2; ++h) {
      __m512i in[kLaneGroupCols];
      unrolled<kLaneGroupCols>([&](int j) {
        const auto eight = [&](int column) {
          std::int64_t bytes;
          std::memcpy(&bytes, scales[column] + 8 * h, 8);
          return _mm256_cvtepi8_epi32(_mm_cvtsi64_si128(bytes));
        };
        in[j] = group.pair(j, eight(j), eight(j + 8));
      });
      group.transpose_store(
          in, [&](int t) { return out.scales + kWideLaneGroupCols * (16 * b + 8 * h + t); });
    }
    // Mins: the 8 pairs of 16s of every column, a pair per int32.
    __m512i in[kLaneGroupCols];
    unrolled<kLaneGroupCols>(
        [&](int j) { in[j] = group.pair(j, load32(mins[j]), load32(mins[j + 8])); });
    group.transpose_store(in,
                          [&](int t) { return out.mins + 2 * kWideLaneGroupCols * (8 * b + t); });
    group.store_floats(d, out.d + kWideLaneGroupCols * b);
    group.store_floats(dmin, out.dmin + kWideLaneGroupCols * b);
  }
}

} // namespace

void interleave_unsigned(TensorType type, const std::uint8_t* __restrict__ rows,
                         std::size_t row_bytes, std::size_t cols, std::size_t k,
                         std::uint8_t* __restrict__ q, float* __restrict__ d) {
  visit_signed_type(type, "interleave_unsigned:", [&](auto kType) {
    interleave_unsigned_blocks<decltype(kType)::value>(rows, row_bytes, cols, k, q, d);
  });
}

void interleave_super_wide(TensorType type, const std::uint8_t* __restrict__ rows,
                           std::size_t row_bytes, std::size_t cols, std::size_t k,
                           const InterleavedSuperWideOut& out) {
  visit_super_type(type, "interleave_super_wide:", [&](auto kType) {
    interleave_super_blocks<decltype(kType)::value>(rows, row_bytes, cols, k, out);
  });
}

} // namespace caflm::detail

// interleave_unsigned(): Q8_0, Q4_0 and Q5_0 weight rows of one AVX-512
// column group, interleaved for the wide lane kernels with 512-bit
// shuffles. Compiled with AVX-512 enabled (caflm/cpu/CMakeLists.txt) and
// called only from the AVX-512 path of quantized_linear. Internal linkage
// for everything but interleave_unsigned, as in the other AVX-512 files.
//
// At 32 rows the interleave is a large share of a group's work (measured on
// Zen 5, Q8_0 2048 x 2048 from L3: 40% of the lane kernel's time with 256-bit
// transposes of 8 columns): each 512-bit shuffle here moves the same 4
// quants of 16 columns, where two 256-bit ones moved 8 each.

// GCC 12's AVX-512 intrinsics initialize their pass-through operand from an
// undefined value, which its own -Wuninitialized flags once inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__) // clang has no such warning, and warns of the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "caflm/cpu/quantized_matmul.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "caflm/cpu/block_readers.hpp"
#include "caflm/cpu/simd_helpers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

namespace caflm::detail {

namespace {

/// The 8 x 8 transpose of 32-bit elements in each 256-bit half at once:
/// half h of out[t], lane j = half h of in[j], lane t.
inline __attribute__((always_inline)) void transpose_halves_8x8_epi32(const __m512i (&in)[8],
                                                                      __m512i (&out)[8]) {
  __m512i t[8], u[8];
  unrolled<4>([&](int i) {
    t[2 * i] = _mm512_unpacklo_epi32(in[2 * i], in[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(in[2 * i], in[2 * i + 1]);
  });
  unrolled<2>([&](int h) {
    u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  });
  // Per half: the low 128-bit lanes of u[i] and u[4 + i], then the high ones.
  const __m512i low_lanes = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
  const __m512i high_lanes = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
  unrolled<4>([&](int i) {
    out[i] = _mm512_permutex2var_epi64(u[i], low_lanes, u[4 + i]);
    out[4 + i] = _mm512_permutex2var_epi64(u[i], high_lanes, u[4 + i]);
  });
}

/// The 32 quants of a block as vpdpbusd's unsigned operand takes them:
/// Q8_0's plus 128, Q4_0's and Q5_0's as stored.
template <typename Blocks>
inline __m256i unsigned_quants(const std::uint8_t* block) {
  if constexpr (Blocks::kOffset != 0)
    return Blocks::stored(block);
  else
    return _mm256_xor_si256(Blocks::quants(block), _mm256_set1_epi8(static_cast<char>(0x80)));
}

template <TensorType kType>
void interleave_unsigned_blocks(const std::uint8_t* __restrict__ rows, std::size_t row_bytes,
                                std::size_t cols, std::size_t k, std::uint8_t* __restrict__ q,
                                float* __restrict__ d) {
  using Blocks = SignedBlocks<kType>;
  using Block = typename Blocks::Block;
  const std::size_t nb = k / 32;
  // Columns past `cols` (a ragged last group) read as column 0 and are
  // zeroed after: one branch-free loop for every group.
  const std::uint8_t* column[kWideLaneGroupCols];
  for (std::size_t j = 0; j < kWideLaneGroupCols; ++j)
    column[j] = rows + (j < cols ? j : 0) * row_bytes;
  const auto keep = static_cast<__mmask16>(cols >= 16 ? 0xFFFFu : (1u << cols) - 1u);
  for (std::size_t b = 0; b < nb; ++b) {
    // Column j in the low half of in[j], column j + 8 in the high half.
    __m512i in[kLaneGroupCols], out[kLaneGroupCols];
    unrolled<kLaneGroupCols>([&](int j) {
      const __m256i low = unsigned_quants<Blocks>(block_at<Block>(column[j], b));
      const __m256i high = unsigned_quants<Blocks>(block_at<Block>(column[j + 8], b));
      in[j] = _mm512_maskz_mov_epi32(static_cast<__mmask16>((keep >> j & 1u ? 0x00FFu : 0u) |
                                                            (keep >> (j + 8) & 1u ? 0xFF00u : 0u)),
                                     _mm512_inserti64x4(_mm512_castsi256_si512(low), high, 1));
    });
    transpose_halves_8x8_epi32(in, out);
    unrolled<kLaneGroupCols>([&](int t) { _mm512_storeu_si512(q + (8 * b + t) * 64, out[t]); });
    alignas(32) std::uint16_t scales[kWideLaneGroupCols];
    unrolled<kWideLaneGroupCols>(
        [&](int j) { scales[j] = u16_at(block_at<Block>(column[j], b) + offsetof(Block, d)); });
    const __m512 d16 = _mm512_cvtph_ps(_mm256_load_si256(reinterpret_cast<const __m256i*>(scales)));
    _mm512_storeu_ps(d + kWideLaneGroupCols * b, _mm512_maskz_mov_ps(keep, d16));
  }
}

} // namespace

void interleave_unsigned(TensorType type, const std::uint8_t* __restrict__ rows,
                         std::size_t row_bytes, std::size_t cols, std::size_t k,
                         std::uint8_t* __restrict__ q, float* __restrict__ d) {
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

} // namespace caflm::detail

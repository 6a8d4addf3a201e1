// The AVX-512 (F, BW, VL, DQ, VNNI) dot kernels of quantized linear layers
// (see quantized_matmul.hpp). This file alone is compiled with AVX-512
// enabled (caflm/cpu/CMakeLists.txt), and dot_group_avx512 runs only where
// the CPU has it. Everything here has internal linkage and uses no library
// templates that emit code, so no AVX-512 instruction can leak into a
// function another translation unit shares through the linker.
//
// Per output element the float operations are those of the AMX kernels
// (quantized_kernels_amx.cpp), so that a CPU with AMX and one with AVX-512
// alone give the same bits, and the AMX ISA can take small batches here: for
// the legacy kinds, per block the exact integer sum S (of the 16 dpbusd lanes
// of a pair of blocks, lanes 0-7 the first block) and acc = fma(float(S) *
// d_x, d_w, acc), with a min also summ = fma(m_w, s_x, summ), then y = acc (+
// summ) (+ bias); for the K kinds, per super-block the exact integer sums S
// (scale * quant * x) and M (min * bsum), then acc = fma(float(S - M) * d_x,
// d_w, acc) (offset kinds) or acc = fma(float(S) * d_x, d_w, acc) and acc =
// fnmadd(float(M) * d_x, dmin_w, acc) (kinds with a min), then y = acc (+
// bias). A block's columns share the float lanes of one register. The lane
// kernels (dot_q8_0_lanes_avx512, dot_super_lanes_avx512) take the same
// float steps with a group's 16 columns in the lanes of one register, and
// exact integer sums of every product (vpdpbusd into int32, no saturating
// step), so they give the same bits.
#include "caflm/cpu/quantized_matmul.hpp"

#include "caflm/cpu/avx512_intrinsics.hpp"

#include <cstring>
#include <type_traits>
#include <utility>

#include "caflm/cpu/simd_helpers.hpp"

namespace caflm::detail {

namespace {

inline __m512i load(const void* p) {
  return _mm512_loadu_si512(p);
}

// 32 bytes in the low half, zeros above.
inline __m512i load_half(const void* p) {
  return _mm512_maskz_loadu_epi8(__mmask64{0xFFFFFFFFu}, p);
}

// The whole sums of v0 .. v3 in lanes 0 .. 3.
inline __m128i whole_sums(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512i c = lane_sums(v0, v1, v2, v3);
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(c), _mm512_extracti64x4_epi64(c, 1));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Column j's value of a per-column array in lane j (j < NR), zeros above.
template <int NR, typename F>
inline __m128 column_lanes(F value) {
  alignas(16) float lanes[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  unrolled<NR>([&](int j) { lanes[j] = value(j); });
  return _mm_load_ps(lanes);
}

// How a legacy kernel takes the weight quants: signed (Q8_0, made unsigned
// by + 128), stored with an offset (Q4_0, Q5_0), or unsigned with a min. The
// offsets are taken back through sum(x).
enum class Legacy { kSigned, kOffset, kWithMin };

// MR rows x NR (<= 4) columns; column j of a row in float lane j.
template <int MR, int NR, Legacy kMode>
__attribute__((flatten)) void legacy_block(const GroupProblem& p, size_t row0, size_t col0) {
  static_assert(NR <= 4);
  const size_t k = p.k;
  const size_t nb = k / 32;
  constexpr bool kWithMin = kMode == Legacy::kWithMin;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i offset =
      kMode == Legacy::kSigned ? flip : _mm512_set1_epi8(static_cast<char>(p.offset));
  const __m512i zero = _mm512_setzero_si512();
  __m128 acc[MR];
  __m128 summ[MR];
  unrolled<MR>([&](int i) {
    acc[i] = _mm_setzero_ps();
    summ[i] = _mm_setzero_ps();
  });
  // Blocks b and b + 1 (or b alone when `half`).
  const auto step = [&](size_t b, bool half) {
    __m512i w[NR];
    unrolled<NR>([&](int j) {
      const uint8_t* q = p.w.q + (col0 + j) * k + 32 * b;
      w[j] = half ? load_half(q) : load(q);
      if constexpr (kMode == Legacy::kSigned) {
        // Signed quants as unsigned q + 128, the 128 taken back below.
        w[j] = _mm512_xor_si512(w[j], flip);
      }
    });
    const __m128 w_d = column_lanes<NR>([&](int j) { return p.w.d[(col0 + j) * nb + b]; });
    __m128 w_d_next = w_d;
    if (!half) {
      w_d_next = column_lanes<NR>([&](int j) { return p.w.d[(col0 + j) * nb + b + 1]; });
    }
    __m128 w_m = w_d;
    __m128 w_m_next = w_d;
    if constexpr (kWithMin) {
      w_m = column_lanes<NR>([&](int j) { return p.w.m[(col0 + j) * nb + b]; });
      if (!half) {
        w_m_next = column_lanes<NR>([&](int j) { return p.w.m[(col0 + j) * nb + b + 1]; });
      }
    }
    unrolled<MR>([&](int i) {
      const size_t row = row0 + i;
      const int8_t* xq = p.x_q + row * k + 32 * b;
      const __m512i x = half ? load_half(xq) : load(xq);
      __m512i init = zero;
      if constexpr (!kWithMin) {
        init = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, x));
      }
      __m512i v[4] = {zero, zero, zero, zero};
      unrolled<NR>([&](int j) { v[j] = _mm512_dpbusd_epi32(init, w[j], x); });
      // Block b's exact sums in lanes 0-3, block b + 1's in lanes 8-11.
      const __m512i c = lane_sums(v[0], v[1], v[2], v[3]);
      const __m512i sums = _mm512_add_epi32(c, _mm512_shuffle_i32x4(c, c, _MM_SHUFFLE(2, 3, 0, 1)));
      const __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(_mm512_castsi512_si128(sums)),
                                  _mm_set1_ps(p.x_d[row * nb + b]));
      acc[i] = _mm_fmadd_ps(t, w_d, acc[i]);
      if constexpr (kWithMin) {
        summ[i] = _mm_fmadd_ps(w_m, _mm_set1_ps(p.x_s[row * nb + b]), summ[i]);
      }
      if (!half) {
        const __m128 t_next = _mm_mul_ps(_mm_cvtepi32_ps(_mm512_extracti32x4_epi32(sums, 2)),
                                         _mm_set1_ps(p.x_d[row * nb + b + 1]));
        acc[i] = _mm_fmadd_ps(t_next, w_d_next, acc[i]);
        if constexpr (kWithMin) {
          summ[i] = _mm_fmadd_ps(w_m_next, _mm_set1_ps(p.x_s[row * nb + b + 1]), summ[i]);
        }
      }
    });
  };
  size_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    step(b, false);
  }
  if (b < nb) {
    step(b, true);
  }
  for (int i = 0; i < MR; ++i) {
    alignas(16) float out[4];
    _mm_store_ps(out, kWithMin ? _mm_add_ps(acc[i], summ[i]) : acc[i]);
    for (int j = 0; j < NR; ++j) {
      p.y[(row0 + i) * p.y_stride + col0 + j] = p.bias ? out[j] + p.bias[col0 + j] : out[j];
    }
  }
}

// Byte patterns picking sub-block scales 4c .. 4c + 3 (8 times each) out of
// a super-block's 16 held in both 128-bit lanes.
alignas(32) constexpr uint8_t kScalePatterns[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5,
     6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8,  8,  8,  8,  8,  8,  8,  8,  9,  9,  9,  9,  9,  9,  9,  9,
     10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15}};

// The integer sums of super-block b for MR rows x NR columns: sumi[i][j]
// (16 lanes adding up to S, the sum of scale * quant * x) and mins[i][j] (8
// lanes adding up to M, the sum of min * bsum).
template <int MR, int NR>
inline void super_block_sums(const GroupProblem& p, size_t row0, size_t col0, size_t b,
                             __m512i (&sumi)[MR][NR], __m256i (&mins)[MR][NR]) {
  const size_t k = p.k;
  unrolled<MR>([&](int i) { unrolled<NR>([&](int j) { sumi[i][j] = _mm512_setzero_si512(); }); });
  // The super-block's 16 sub-block scales in both 128-bit lanes.
  __m256i packed_scales[NR];
  unrolled<NR>([&](int j) {
    packed_scales[j] = _mm256_broadcastsi128_si256(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(p.w.scales + (col0 + j) * (k / 16) + 16 * b)));
  });
  // Unrolled: rolled, GCC moved the integer sums between registers on
  // every pass, and the kernel ran 15-25% slower.
#pragma GCC unroll 4
  for (size_t c = 0; c < 4; ++c) {
    __m512i x[MR];
    unrolled<MR>([&](int i) { x[i] = load(p.x_q + (row0 + i) * k + 256 * b + 64 * c); });
    const __m256i pattern = _mm256_load_si256(reinterpret_cast<const __m256i*>(kScalePatterns[c]));
    unrolled<NR>([&](int j) {
      const size_t col = col0 + j;
      const __m512i w = load(p.w.q + col * k + 256 * b + 64 * c);
      // Sub-blocks 4c .. 4c + 3: their scales, 8 int16 each.
      const __m512i scales = _mm512_cvtepi8_epi16(_mm256_shuffle_epi8(packed_scales[j], pattern));
      unrolled<MR>([&](int i) {
        sumi[i][j] = _mm512_dpwssd_epi32(sumi[i][j], _mm512_maddubs_epi16(w, x[i]), scales);
      });
    });
  }
  unrolled<NR>([&](int j) {
    const __m256i w_mins = _mm256_loadu_si256(
        reinterpret_cast<const __m256i*>(p.w.mins + (col0 + j) * (k / 16) + 16 * b));
    unrolled<MR>([&](int i) {
      const __m256i bsums = _mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(p.x_bsums + (row0 + i) * (k / 16) + 16 * b));
      mins[i][j] = _mm256_madd_epi16(w_mins, bsums);
    });
  });
}

// Any MR x NR (<= 4) block; column j of a row in float lane j.
template <int MR, int NR, bool kOffset>
__attribute__((flatten)) void super_block(const GroupProblem& p, size_t row0, size_t col0) {
  static_assert(NR <= 4);
  const size_t k = p.k;
  const size_t nb = k / 256;
  const __m512i zero = _mm512_setzero_si512();
  __m128 acc[MR];
  unrolled<MR>([&](int i) { acc[i] = _mm_setzero_ps(); });
  for (size_t b = 0; b < nb; ++b) {
    __m512i sumi[MR][NR];
    __m256i mins[MR][NR];
    super_block_sums<MR, NR>(p, row0, col0, b, sumi, mins);
    const __m128 w_d = column_lanes<NR>([&](int j) { return p.w.d[(col0 + j) * nb + b]; });
    const __m128 w_dmin = column_lanes<NR>([&](int j) { return p.w.m[(col0 + j) * nb + b]; });
    unrolled<MR>([&](int i) {
      __m512i v[4] = {zero, zero, zero, zero};
      __m512i m[4] = {zero, zero, zero, zero};
      unrolled<NR>([&](int j) {
        v[j] = sumi[i][j];
        m[j] = _mm512_zextsi256_si512(mins[i][j]);
      });
      const __m128i sums = whole_sums(v[0], v[1], v[2], v[3]);
      const __m128i min_sums = whole_sums(m[0], m[1], m[2], m[3]);
      const __m128 x_d = _mm_set1_ps(p.x_d[(row0 + i) * nb + b]);
      if constexpr (kOffset) {
        const __m128 t = _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(sums, min_sums)), x_d);
        acc[i] = _mm_fmadd_ps(t, w_d, acc[i]);
      } else {
        acc[i] = _mm_fmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(sums), x_d), w_d, acc[i]);
        acc[i] = _mm_fnmadd_ps(_mm_mul_ps(_mm_cvtepi32_ps(min_sums), x_d), w_dmin, acc[i]);
      }
    });
  }
  for (int i = 0; i < MR; ++i) {
    alignas(16) float out[4];
    _mm_store_ps(out, acc[i]);
    for (int j = 0; j < NR; ++j) {
      p.y[(row0 + i) * p.y_stride + col0 + j] = p.bias ? out[j] + p.bias[col0 + j] : out[j];
    }
  }
}

// The 4 x 2 block of every whole row group, the same operations per element
// as super_block, with the reductions and float operations of all 8 elements
// shared: element (i, j) in float lane 2i + j (rows 0-1) or 8 + 2(i - 2) + j
// (rows 2-3).
template <bool kOffset>
__attribute__((flatten)) void super_block_4x2(const GroupProblem& p, size_t row0, size_t col0) {
  const size_t k = p.k;
  const size_t nb = k / 256;
  __m512 acc = _mm512_setzero_ps();
  for (size_t b = 0; b < nb; ++b) {
    __m512i sumi[4][2];
    __m256i mins[4][2];
    super_block_sums<4, 2>(p, row0, col0, b, sumi, mins);
    // S: 128-bit lane L of c01 holds lane L's sums of (0, 0), (0, 1), (1, 0),
    // (1, 1), of c23 those of rows 2 and 3; adding the 4 lanes up leaves
    // rows 0-1 in lanes 0-3 and rows 2-3 in lanes 8-11.
    const __m512i c01 = lane_sums(sumi[0][0], sumi[0][1], sumi[1][0], sumi[1][1]);
    const __m512i c23 = lane_sums(sumi[2][0], sumi[2][1], sumi[3][0], sumi[3][1]);
    const __m512i e = _mm512_add_epi32(_mm512_shuffle_i32x4(c01, c23, _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(c01, c23, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i sums = _mm512_add_epi32(e, _mm512_shuffle_i32x4(e, e, _MM_SHUFFLE(2, 3, 0, 1)));
    // M: rows 0-1 in the low 256 bits, rows 2-3 in the high, the same way.
    const __m512i u0 = _mm512_inserti64x4(_mm512_castsi256_si512(mins[0][0]), mins[2][0], 1);
    const __m512i u1 = _mm512_inserti64x4(_mm512_castsi256_si512(mins[0][1]), mins[2][1], 1);
    const __m512i u2 = _mm512_inserti64x4(_mm512_castsi256_si512(mins[1][0]), mins[3][0], 1);
    const __m512i u3 = _mm512_inserti64x4(_mm512_castsi256_si512(mins[1][1]), mins[3][1], 1);
    const __m512i g = lane_sums(u0, u1, u2, u3);
    const __m512i min_sums =
        _mm512_add_epi32(g, _mm512_shuffle_i32x4(g, g, _MM_SHUFFLE(2, 3, 0, 1)));
    const float* x_d = p.x_d + row0 * nb + b;
    const __m512 row_d = _mm512_setr_ps(x_d[0], x_d[0], x_d[nb], x_d[nb], 0, 0, 0, 0, x_d[2 * nb],
                                        x_d[2 * nb], x_d[3 * nb], x_d[3 * nb], 0, 0, 0, 0);
    const float d0 = p.w.d[col0 * nb + b], d1 = p.w.d[(col0 + 1) * nb + b];
    const __m512 w_d = _mm512_setr_ps(d0, d1, d0, d1, 0, 0, 0, 0, d0, d1, d0, d1, 0, 0, 0, 0);
    if constexpr (kOffset) {
      const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sums, min_sums)), row_d);
      acc = _mm512_fmadd_ps(t, w_d, acc);
    } else {
      const float m0 = p.w.m[col0 * nb + b], m1 = p.w.m[(col0 + 1) * nb + b];
      const __m512 w_dmin = _mm512_setr_ps(m0, m1, m0, m1, 0, 0, 0, 0, m0, m1, m0, m1, 0, 0, 0, 0);
      acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums), row_d), w_d, acc);
      acc = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(min_sums), row_d), w_dmin, acc);
    }
  }
  alignas(64) float out[16];
  _mm512_store_ps(out, acc);
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 2; ++j) {
      const float v = out[(i < 2 ? 2 * i : 8 + 2 * (i - 2)) + j];
      p.y[(row0 + i) * p.y_stride + col0 + j] = p.bias ? v + p.bias[col0 + j] : v;
    }
  }
}

template <Legacy kMode>
struct LegacyKernel {
  // 4 x 4: a row's work per pair of blocks (its load, its scales and the
  // offset correction, a dpbusd of its own) serves 4 columns instead of 2;
  // at 4 x 2 that work was a third of the kernel's vector operations.
  static constexpr int kWideNR = 4;
  template <int MR, int NR>
  static void block(const GroupProblem& p, size_t row0, size_t col0) {
    legacy_block<MR, NR, kMode>(p, row0, col0);
  }
};

template <bool kOffset>
struct Super {
  // 4 x 2 (4 x 4 and 2 x 4 measured slower, when each element still had a
  // 16-lane float accumulator beside its integer sums), with the shared
  // epilogue of super_block_4x2.
  static constexpr int kWideNR = 2;
  template <int MR, int NR>
  static void block(const GroupProblem& p, size_t row0, size_t col0) {
    if constexpr (MR == 4 && NR == 2) {
      super_block_4x2<kOffset>(p, row0, col0);
    } else {
      super_block<MR, NR, kOffset>(p, row0, col0);
    }
  }
};

// All rows of x against the group's columns: 4 rows x Kernel::kWideNR
// columns at a time (1 x 4 for rows left over), single columns in a ragged
// last group.
template <typename Kernel>
void sweep(const GroupProblem& p) {
  static_assert(4 % Kernel::kWideNR == 0, "the column group is 4 wide");
  size_t row = 0;
  for (; row + 4 <= p.m; row += 4) {
    if (p.cols == 4) {
      for (int col = 0; col < 4; col += Kernel::kWideNR)
        Kernel::template block<4, Kernel::kWideNR>(p, row, col);
    } else {
      for (size_t col = 0; col < p.cols; ++col) {
        Kernel::template block<4, 1>(p, row, col);
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

// Rows a lane kernel takes at once: 8 independent vpdpbusd chains per load
// of the weights.
constexpr int kLaneRows = 8;

// y = acc + bias for MR rows of a lane kernel from row0, the group's columns
// only.
template <int MR, typename Problem>
inline void store_lane_rows(const Problem& p, size_t row0, const __m512 (&acc)[MR]) {
  const auto valid = static_cast<__mmask16>((1u << p.cols) - 1);
  const __m512 bias =
      p.bias != nullptr ? _mm512_maskz_loadu_ps(valid, p.bias) : _mm512_setzero_ps();
  unrolled<MR>([&](int i) {
    const __m512 out = p.bias != nullptr ? _mm512_add_ps(acc[i], bias) : acc[i];
    _mm512_mask_storeu_ps(p.y + (row0 + i) * p.y_stride, valid, out);
  });
}

// The last `left` < R + 1 rows from `row`, in one block(row, MR).
template <int R, typename Block>
void lane_remainder(size_t row, size_t left, Block&& block) {
  if constexpr (R > 0) {
    if (left == R)
      return block(row, std::integral_constant<int, R>{});
    lane_remainder<R - 1>(row, left, block);
  }
}

// Calls block(row0, MR) (MR a std::integral_constant) over all m rows:
// kLaneRows at a time, then those left in one block.
template <typename Block>
void sweep_lane_rows(size_t m, Block&& block) {
  size_t row = 0;
  for (; row + kLaneRows <= m; row += kLaneRows)
    block(row, std::integral_constant<int, kLaneRows>{});
  lane_remainder<kLaneRows - 1>(row, m - row, block);
}

// MR rows of x against a lane group (see WideLaneGroupProblem): one
// vpdpbusd takes the same 4 quants of all 16 columns against 4 of a row's,
// and one set of float steps per block serves the 16 columns.
template <int MR>
__attribute__((flatten, noinline)) void q8_0_lanes_block(const WideLaneGroupProblem& p,
                                                         size_t row0) {
  const size_t k = p.k;
  const size_t nb = k / 32;
  __m512 acc[MR];
  unrolled<MR>([&](int i) { acc[i] = _mm512_setzero_ps(); });
  for (size_t b = 0; b < nb; ++b) {
    if (row0 == 0)
      prefetch_next_slice(p.next, p.next_bytes, b, nb);
    // Each sum starts at -offset * sum(x), leaving the signed quants' dot.
    __m512i sums[MR];
    unrolled<MR>([&](int i) {
      sums[i] = _mm512_set1_epi32(-p.offset * int32_t{p.x_sums[(row0 + i) * nb + b]});
    });
#pragma GCC unroll 8
    for (size_t t = 0; t < 8; ++t) {
      const size_t quad = 8 * b + t;
      const __m512i w = load(p.w.q + 64 * quad);
      unrolled<MR>([&](int i) {
        int32_t four;
        std::memcpy(&four, p.x_q + (row0 + i) * k + 4 * quad, 4);
        sums[i] = _mm512_dpbusd_epi32(sums[i], w, _mm512_set1_epi32(four));
      });
    }
    const __m512 w_d = _mm512_loadu_ps(p.w.d + kWideLaneGroupCols * b);
    unrolled<MR>([&](int i) {
      const __m512 x_d = _mm512_set1_ps(p.x_d[(row0 + i) * nb + b]);
      acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums[i]), x_d), w_d, acc[i]);
    });
  }
  store_lane_rows(p, row0, acc);
}

// MR rows of x against a K-quant lane group (see WideSuperLaneGroupProblem):
// per sub-block one vpdpbusd chain of kScaleQuads quads for all 16 columns,
// times the columns' scales; per super-block the mins against the row's
// block sums, two 16s per vpdpwssd.
template <int MR, bool kWithMin, int kScaleQuads>
__attribute__((flatten, noinline)) void super_lanes_block(const WideSuperLaneGroupProblem& p,
                                                          size_t row0) {
  const size_t k = p.k;
  const size_t nb = k / 256;
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[MR];
  unrolled<MR>([&](int i) { acc[i] = _mm512_setzero_ps(); });
  for (size_t b = 0; b < nb; ++b) {
    if (row0 == 0)
      prefetch_next_slice(p.next, p.next_bytes, b, nb);
    __m512i sums[MR];
    unrolled<MR>([&](int i) { sums[i] = zero; });
    for (size_t s = 0; s < 64 / kScaleQuads; ++s) {
      __m512i part[MR];
      unrolled<MR>([&](int i) { part[i] = zero; });
#pragma GCC unroll 8
      for (size_t t = 0; t < kScaleQuads; ++t) {
        const size_t quad = 64 * b + kScaleQuads * s + t;
        const __m512i w = load(p.w.q + 64 * quad);
        unrolled<MR>([&](int i) {
          int32_t four;
          std::memcpy(&four, p.x_q + (row0 + i) * k + 4 * quad, 4);
          part[i] = _mm512_dpbusd_epi32(part[i], w, _mm512_set1_epi32(four));
        });
      }
      // The scale of the sub-block's first 16 (the same for all of them).
      const __m512i scales = load(p.w.scales + kWideLaneGroupCols * (16 * b + kScaleQuads / 4 * s));
      unrolled<MR>(
          [&](int i) { sums[i] = _mm512_add_epi32(sums[i], _mm512_mullo_epi32(part[i], scales)); });
    }
    const __m512 w_d = _mm512_loadu_ps(p.d + kWideLaneGroupCols * b);
    const __m512 w_dmin = kWithMin ? _mm512_loadu_ps(p.dmin + kWideLaneGroupCols * b) : w_d;
    unrolled<MR>([&](int i) {
      const int16_t* bsums = p.x_bsums + (row0 + i) * (k / 16) + 16 * b;
      __m512i mins = zero;
#pragma GCC unroll 8
      for (size_t t = 0; t < 8; ++t) {
        int32_t pair;
        std::memcpy(&pair, bsums + 2 * t, 4);
        mins = _mm512_dpwssd_epi32(mins, load(p.w.mins + 2 * kWideLaneGroupCols * (8 * b + t)),
                                   _mm512_set1_epi32(pair));
      }
      const __m512 x_d = _mm512_set1_ps(p.x_d[(row0 + i) * nb + b]);
      if constexpr (kWithMin) {
        acc[i] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(sums[i]), x_d), w_d, acc[i]);
        acc[i] = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(mins), x_d), w_dmin, acc[i]);
      } else {
        const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(sums[i], mins)), x_d);
        acc[i] = _mm512_fmadd_ps(t, w_d, acc[i]);
      }
    });
  }
  store_lane_rows(p, row0, acc);
}

template <bool kWithMin, int kScaleQuads>
void super_lanes(const WideSuperLaneGroupProblem& p) {
  sweep_lane_rows(p.m, [&](size_t row, auto rows) {
    super_lanes_block<decltype(rows)::value, kWithMin, kScaleQuads>(p, row);
  });
}

} // namespace

void dot_q8_0_lanes_avx512(const WideLaneGroupProblem& p) {
  sweep_lane_rows(p.m,
                  [&](size_t row, auto rows) { q8_0_lanes_block<decltype(rows)::value>(p, row); });
}

void dot_super_lanes_avx512(const WideSuperLaneGroupProblem& p) {
  if (p.kind == QuantKind::kSuperOffset)
    super_lanes<false, 4>(p);
  else if (p.scale_quads == 8)
    super_lanes<true, 8>(p);
  else
    super_lanes<true, 4>(p);
}

void dot_group_avx512(const GroupProblem& p) {
  switch (p.kind) {
  case QuantKind::kLegacySigned:
    sweep<LegacyKernel<Legacy::kSigned>>(p);
    return;
  case QuantKind::kLegacyOffset:
    sweep<LegacyKernel<Legacy::kOffset>>(p);
    return;
  case QuantKind::kLegacyWithMin:
    sweep<LegacyKernel<Legacy::kWithMin>>(p);
    return;
  case QuantKind::kSuperWithMin:
    sweep<Super<false>>(p);
    return;
  case QuantKind::kSuperOffset:
    sweep<Super<true>>(p);
    return;
  }
}

} // namespace caflm::detail

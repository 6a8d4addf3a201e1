// The AVX-512 (F, BW, VL, DQ, VNNI) dot kernels of quantized linear layers
// (see quantized_matmul.hpp). This file alone is compiled with AVX-512
// enabled (caflm/cpu/CMakeLists.txt), and dot_group_avx512 runs only where
// the CPU has it. Everything here has internal linkage and uses no library
// templates that emit code, so no AVX-512 instruction can leak into a
// function another translation unit shares through the linker.
//
// Per output element the float operations are, for the legacy kinds, one
// 16-lane accumulator taking fma(cvt(sums) * d_x, d_w) for each pair of
// blocks (lanes 0-7 the first block, 8-15 the second; a last odd block alone
// in lanes 0-7), plus, with a min, the scalar fma(m_w, s_x) chain of the AVX2
// kernels; then a fixed horizontal sum, + the scalar chain, + bias. For the K
// kinds: per super-block the exact 16-lane integer sum of scale * quant * x,
// then acc = fma(cvt(sumi) * d_x, d_w, acc) and, with mins,
// acc = fnmadd(cvt(min . bsums) * d_x, dmin_w, acc) (min . bsums in lanes
// 0-7); then the horizontal sum, + bias.
#include "caflm/cpu/quantized_matmul.hpp"

// GCC 12's AVX-512 intrinsics (_mm512_cvtepi32_ps, _mm512_extractf32x8_ps...)
// initialize their pass-through operand from _mm512_undefined_ps(), which its
// own -Wuninitialized flags once inlined; there is nothing uninitialized here.
#pragma GCC diagnostic ignored "-Wuninitialized"
#if !defined(__clang__) // clang has no such warning, and warns of the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

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

// d[0] in lanes 0-7, d[1] in lanes 8-15.
inline __m512 pair_scales(const float* d) {
  return _mm512_mask_blend_ps(__mmask16{0xFF00}, _mm512_set1_ps(d[0]), _mm512_set1_ps(d[1]));
}

// d[0] in lanes 0-7, zeros above.
inline __m512 half_scales(const float* d) {
  return _mm512_maskz_mov_ps(__mmask16{0x00FF}, _mm512_set1_ps(d[0]));
}

// How a legacy kernel takes the weight quants: signed (Q8_0, made unsigned
// by + 128), stored with an offset (Q4_0, Q5_0), or unsigned with a min. The
// offsets are taken back through sum(x).
enum class Legacy { kSigned, kOffset, kWithMin };

template <int MR, int NR, Legacy kMode>
__attribute__((flatten)) void legacy_block(const GroupProblem& p, size_t row0, size_t col0) {
  const size_t k = p.k;
  const size_t nb = k / 32;
  constexpr bool kWithMin = kMode == Legacy::kWithMin;
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i offset =
      kMode == Legacy::kSigned ? flip : _mm512_set1_epi8(static_cast<char>(p.offset));
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[MR][NR];
  float summ[MR][NR];
  unrolled<MR>([&](int i) {
    unrolled<NR>([&](int j) {
      acc[i][j] = _mm512_setzero_ps();
      summ[i][j] = 0.0f;
    });
  });
  // Blocks b and b + 1 (or b alone when `half`).
  const auto step = [&](size_t b, bool half) {
    __m512i w[NR];
    __m512 w_d[NR];
    unrolled<NR>([&](int j) {
      const size_t col = col0 + j;
      const uint8_t* q = p.w.q + col * k + 32 * b;
      w[j] = half ? load_half(q) : load(q);
      if constexpr (kMode == Legacy::kSigned) {
        // Signed quants as unsigned q + 128, the 128 taken back below.
        w[j] = _mm512_xor_si512(w[j], flip);
      }
      w_d[j] = half ? half_scales(p.w.d + col * nb + b) : pair_scales(p.w.d + col * nb + b);
    });
    unrolled<MR>([&](int i) {
      const size_t row = row0 + i;
      const int8_t* xq = p.x_q + row * k + 32 * b;
      const __m512i x = half ? load_half(xq) : load(xq);
      const __m512 x_d =
          half ? half_scales(p.x_d + row * nb + b) : pair_scales(p.x_d + row * nb + b);
      __m512i init = zero;
      if constexpr (!kWithMin) {
        init = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, offset, x));
      }
      unrolled<NR>([&](int j) {
        const __m512 sums = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(init, w[j], x));
        acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(sums, x_d), w_d[j], acc[i][j]);
        if constexpr (kWithMin) {
          const size_t col = col0 + j;
          summ[i][j] = __builtin_fmaf(p.w.m[col * nb + b], p.x_s[row * nb + b], summ[i][j]);
          if (!half) {
            summ[i][j] =
                __builtin_fmaf(p.w.m[col * nb + b + 1], p.x_s[row * nb + b + 1], summ[i][j]);
          }
        }
      });
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
    for (int j = 0; j < NR; ++j) {
      float sum = hsum16(acc[i][j]);
      if constexpr (kWithMin) {
        sum += summ[i][j];
      }
      p.y[(row0 + i) * p.y_stride + col0 + j] = p.bias ? sum + p.bias[col0 + j] : sum;
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

template <int MR, int NR, bool kOffset>
__attribute__((flatten)) void super_block(const GroupProblem& p, size_t row0, size_t col0) {
  const size_t k = p.k;
  const size_t nb = k / 256;
  __m512 acc[MR][NR];
  unrolled<MR>([&](int i) { unrolled<NR>([&](int j) { acc[i][j] = _mm512_setzero_ps(); }); });
  for (size_t b = 0; b < nb; ++b) {
    __m512i sumi[MR][NR];
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
      const __m256i pattern =
          _mm256_load_si256(reinterpret_cast<const __m256i*>(kScalePatterns[c]));
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
      const size_t col = col0 + j;
      const __m256i mins =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.w.mins + col * (k / 16) + 16 * b));
      const __m512 w_d = _mm512_set1_ps(p.w.d[col * nb + b]);
      unrolled<MR>([&](int i) {
        const size_t row = row0 + i;
        const __m256i bsums = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(p.x_bsums + row * (k / 16) + 16 * b));
        const __m512i min_sums =
            _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_madd_epi16(mins, bsums), 0);
        const __m512 x_d = _mm512_set1_ps(p.x_d[row * nb + b]);
        if constexpr (kOffset) {
          const __m512 s = _mm512_cvtepi32_ps(_mm512_sub_epi32(sumi[i][j], min_sums));
          acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(s, x_d), w_d, acc[i][j]);
        } else {
          const __m512 s = _mm512_cvtepi32_ps(sumi[i][j]);
          acc[i][j] = _mm512_fmadd_ps(_mm512_mul_ps(s, x_d), w_d, acc[i][j]);
          const __m512 ms = _mm512_cvtepi32_ps(min_sums);
          acc[i][j] = _mm512_fnmadd_ps(_mm512_mul_ps(ms, x_d), _mm512_set1_ps(p.w.m[col * nb + b]),
                                       acc[i][j]);
        }
      });
    });
  }
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const float sum = hsum16(acc[i][j]);
      p.y[(row0 + i) * p.y_stride + col0 + j] = p.bias ? sum + p.bias[col0 + j] : sum;
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
  // 4 x 2: 4 x 4 would need 16 integer sums beside 16 accumulators, more
  // than the 32 registers (measured slower, as was 2 x 4).
  static constexpr int kWideNR = 2;
  template <int MR, int NR>
  static void block(const GroupProblem& p, size_t row0, size_t col0) {
    super_block<MR, NR, kOffset>(p, row0, col0);
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

} // namespace

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

#pragma once

// What every CPU kernel file shares: straight-line unrolling, the fixed
// orders of horizontal sums and the lane kernels' prefetch of the next
// group. Internal linkage, so that each file, compiled for its own
// instruction set, keeps its own copy (the AVX-512 ones only where the file
// is compiled with AVX-512). Internals of caflm/cpu.

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>

namespace caflm {
namespace {

template <typename F, int... I>
inline void unrolled_impl(F& f, std::integer_sequence<int, I...>) {
  (f(I), ...);
}

/// Calls f(0), f(1), ..., f(N - 1) as straight-line code. Block kernels
/// index their accumulator arrays only through it, so that the arrays live
/// in registers: GCC at -O2 does not fully unroll such nested loops itself.
template <int N, typename F>
inline void unrolled(F f) {
  unrolled_impl(f, std::make_integer_sequence<int, N>{});
}

// Lane masks for the last, partial chunk of 8: the 8 - r entries from offset
// r select the first r lanes.
alignas(32) constexpr int32_t kTailMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                    0,  0,  0,  0,  0,  0,  0,  0};

/// The first r <= 8 lanes set.
inline __m256i tail_mask(size_t r) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMaskTable + 8 - r));
}

/// The first `count` <= 8 floats at p in the low lanes, zeros above. Callers
/// pass a constant 8 for whole chunks, where this folds to a plain load.
inline __m256 load_lanes(const float* p, size_t count) {
  return count >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, tail_mask(count));
}

/// Stores the low `count` <= 8 lanes of v to p.
inline void store_lanes(float* p, size_t count, __m256 v) {
  if (count >= 8) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, tail_mask(count), v);
  }
}

/// Horizontal sum of 8 lanes in one fixed order: ((0+4)+(2+6)) + ((1+5)+(3+7)).
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

/// The largest of 8 lanes (of non-NaN values: any order gives the same).
inline float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

/// Asks L2 for part `slice` of `slices` equal parts of the next column
/// group's weight rows (next_bytes from next; see LaneGroupProblem::next).
/// The kernels spread these over their first rows' blocks: the next group's
/// burst of reads then finds its lines in the caches, where asking for them
/// all at once overflows the outstanding misses and loses most. L2 rather
/// than L1 for the same reason: L1 keeps fewer misses outstanding, and the
/// kernel's own loads wait behind them (measured on a 2-core Zen 4, decode
/// of 32 sequences: Q8_0 and Q4_K_M 10-15% faster; one sequence of Q4_K_M
/// about 10%).
inline void prefetch_next_slice(const uint8_t* next, size_t next_bytes, size_t slice,
                                size_t slices) {
  const size_t lines = (next_bytes + 63) / 64;
  const size_t per_slice = (lines + slices - 1) / slices;
  const size_t end = std::min(lines, (slice + 1) * per_slice);
  for (size_t line = slice * per_slice; line < end; ++line)
    _mm_prefetch(reinterpret_cast<const char*>(next + 64 * line), _MM_HINT_T1);
}

/// hsum8 of four vectors at once, [hsum8(v0), hsum8(v1), hsum8(v2),
/// hsum8(v3)]: each lane takes hsum8's additions in its order, so the same
/// bits, with a third of the shuffles and adds of four calls.
inline __m128 hsum8x4(__m256 v0, __m256 v1, __m256 v2, __m256 v3) {
  // [v0 lo + hi | v1 lo + hi] and likewise v2, v3: lanes i and i + 4.
  const __m256 b01 =
      _mm256_add_ps(_mm256_permute2f128_ps(v0, v1, 0x20), _mm256_permute2f128_ps(v0, v1, 0x31));
  const __m256 b23 =
      _mm256_add_ps(_mm256_permute2f128_ps(v2, v3, 0x20), _mm256_permute2f128_ps(v2, v3, 0x31));
  // Lanes 0 + 2 and 1 + 3 of each: [c0, c2 | c1, c3], two lanes each.
  const __m256 c = _mm256_add_ps(_mm256_shuffle_ps(b01, b23, _MM_SHUFFLE(1, 0, 1, 0)),
                                 _mm256_shuffle_ps(b01, b23, _MM_SHUFFLE(3, 2, 3, 2)));
  // Lane 0 + 1 of each: [d0, d2, d0, d2 | d1, d3, d1, d3].
  const __m256 d = _mm256_add_ps(_mm256_shuffle_ps(c, c, _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm256_shuffle_ps(c, c, _MM_SHUFFLE(3, 1, 3, 1)));
  return _mm256_castps256_ps128(
      _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 4, 1, 5, 0, 0, 0, 0)));
}

#if defined(__AVX512F__) && defined(__AVX512DQ__)
/// Horizontal sum of 16 lanes in one fixed order: lanes i and i + 8 first,
/// then hsum8's order on those sums.
inline float hsum16(__m512 v) {
  return hsum8(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

/// hsum16 of four vectors at once, [hsum16(v0), ..., hsum16(v3)], with
/// hsum16's additions in each lane, so the same bits.
inline __m128 hsum16x4(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  // [v0 lanes i + (i + 8) | v1's], [v2's | v3's].
  const __m512 a01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xEE));
  const __m512 a23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xEE));
  // hsum8's lanes i + (i + 4) of each: [b0 | b1 | b2 | b3], 4 lanes each.
  const __m512 b =
      _mm512_add_ps(_mm512_shuffle_f32x4(a01, a23, 0x88), _mm512_shuffle_f32x4(a01, a23, 0xDD));
  // Then lanes 0 + 2 and 1 + 3 of each, then 0 + 1: each sum in lane 0 of
  // its 128 bits.
  const __m512 c = _mm512_add_ps(b, _mm512_shuffle_ps(b, b, _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 d = _mm512_add_ps(c, _mm512_movehdup_ps(c));
  return _mm512_castps512_ps128(
      _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), d));
}

// Lanes 4L .. 4L + 3 of the result: the sums of 128-bit lane L of v0, v1, v2
// and v3, exact (integer adds, in any order the same).
inline __m512i lane_sums(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512i a = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
  const __m512i b = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(a, b), _mm512_unpackhi_epi64(a, b));
}

#if defined(__AVX512VL__)
/// y = acc + bias for MR rows from row0 of a lane group of up to 8 columns
/// (p.cols; p.y, p.y_stride and p.bias as the lane problems have them), the
/// group's columns only.
template <int MR, typename Problem>
inline void store_group_rows(const Problem& p, size_t row0, const __m256 (&acc)[MR]) {
  const auto valid = static_cast<__mmask8>((1u << p.cols) - 1u);
  const __m256 bias = p.bias != nullptr ? _mm256_maskz_loadu_ps(valid, p.bias) : __m256{};
  unrolled<MR>([&](int i) {
    const __m256 out = p.bias != nullptr ? _mm256_add_ps(acc[i], bias) : acc[i];
    _mm256_mask_storeu_ps(p.y + (row0 + i) * p.y_stride, valid, out);
  });
}
#endif
#endif

} // namespace
} // namespace caflm

#include "caflm/sampling/logit_kernels.hpp"

#include <cmath>
#include <limits>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define CAFLM_SAMPLING_AVX2 1
#else
#define CAFLM_SAMPLING_AVX2 0
#endif

namespace caflm {

namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

float sanitized(float logit) {
  return std::isnan(logit) ? kNegativeInfinity : logit;
}

#if CAFLM_SAMPLING_AVX2

// glibc's expf (sysdeps/ieee754/flt-32/e_expf.c, since 2.28): with x*32/ln2 = k + r,
// exp(x) = 2^(k/32) * 2^(r/32), the first from a table whose entries have (i << 47) taken off
// so that adding k << 47 both restores them and scales them by 2^(k/32 - i/32), the second from
// a cubic in r. The constants are the published ones; tests/test_sampler_equivalence.cpp checks
// this code against the libm it runs on.
alignas(32) constexpr std::uint64_t kExp2Table[32] = {
    0x3ff0000000000000, 0x3fefd9b0d3158574, 0x3fefb5586cf9890f, 0x3fef9301d0125b51,
    0x3fef72b83c7d517b, 0x3fef54873168b9aa, 0x3fef387a6e756238, 0x3fef1e9df51fdee1,
    0x3fef06fe0a31b715, 0x3feef1a7373aa9cb, 0x3feedea64c123422, 0x3feece086061892d,
    0x3feebfdad5362a27, 0x3feeb42b569d4f82, 0x3feeab07dd485429, 0x3feea47eb03a5585,
    0x3feea09e667f3bcd, 0x3fee9f75e8ec5f74, 0x3feea11473eb0187, 0x3feea589994cce13,
    0x3feeace5422aa0db, 0x3feeb737b0cdc5e5, 0x3feec49182a3f090, 0x3feed503b23e255d,
    0x3feee89f995ad3ad, 0x3feeff76f2fb5e47, 0x3fef199bdd85529c, 0x3fef3720dcef9069,
    0x3fef5818dcfba487, 0x3fef7c97337b9b5f, 0x3fefa4afa2a490da, 0x3fefd0765b6e4540,
};
constexpr double kInvLn2TimesN = 0x1.71547652b82fep+0 * 32;
constexpr double kRoundingShift = 0x1.8p+52;
constexpr double kCubic0 = 0x1.c6af84b912394p-5 / 32 / 32 / 32;
constexpr double kCubic1 = 0x1.ebfce50fac4f3p-3 / 32 / 32;
constexpr double kCubic2 = 0x1.62e42ff0c52d6p-1 / 32;
/// Below log(2^-150) glibc returns 0 without evaluating.
constexpr float kUnderflowBelow = -0x1.9fe368p6f;
/// From |x| >= 88 glibc checks for special cases; above it, and for NaN, this code defers to it.
constexpr float kSpecialFrom = 88.0f;

/// glibc's evaluation for 4 lanes, in double, before the rounding to float.
inline __m256d expf_core(__m256d xd) {
  // glibc's build contracts z * InvLn2N + shift and z - kd into fused multiply-adds.
  const __m256d inv_ln2_n = _mm256_set1_pd(kInvLn2TimesN);
  const __m256d shift = _mm256_set1_pd(kRoundingShift);
  const __m256d kd_shifted = _mm256_fmadd_pd(inv_ln2_n, xd, shift);
  const __m256i ki = _mm256_castpd_si256(kd_shifted);
  const __m256d kd = _mm256_sub_pd(kd_shifted, shift);
  const __m256d r = _mm256_fmsub_pd(inv_ln2_n, xd, kd);
  const __m256i index = _mm256_and_si256(ki, _mm256_set1_epi64x(31));
  __m256i t = _mm256_i64gather_epi64(reinterpret_cast<const long long*>(kExp2Table), index, 8);
  t = _mm256_add_epi64(t, _mm256_slli_epi64(ki, 47));
  const __m256d s = _mm256_castsi256_pd(t);
  const __m256d z = _mm256_fmadd_pd(_mm256_set1_pd(kCubic0), r, _mm256_set1_pd(kCubic1));
  const __m256d r2 = _mm256_mul_pd(r, r);
  __m256d y = _mm256_fmadd_pd(_mm256_set1_pd(kCubic2), r, _mm256_set1_pd(1.0));
  y = _mm256_fmadd_pd(z, r2, y);
  return _mm256_mul_pd(y, s);
}

/// expf of 8 lanes, bit for bit glibc's.
inline __m256 expf8(__m256 x) {
  const __m128 low = _mm256_cvtpd_ps(expf_core(_mm256_cvtps_pd(_mm256_castps256_ps128(x))));
  const __m128 high = _mm256_cvtpd_ps(expf_core(_mm256_cvtps_pd(_mm256_extractf128_ps(x, 1))));
  __m256 e = _mm256_set_m128(high, low);
  e = _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(kUnderflowBelow), _CMP_LT_OQ), e);
  // NaN, or large enough for overflow: never in a sampler's row of logit - max, but exact anyway.
  const __m256 special = _mm256_cmp_ps(x, _mm256_set1_ps(kSpecialFrom), _CMP_NLT_UQ);
  if (_mm256_movemask_ps(special) != 0) {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, x);
    for (float& lane : lanes)
      lane = std::exp(lane);
    e = _mm256_load_ps(lanes);
  }
  return e;
}

inline __m256 sanitized8(__m256 v) {
  // maxps returns its second operand when the first is NaN.
  return _mm256_max_ps(v, _mm256_set1_ps(kNegativeInfinity));
}

inline float horizontal_max(__m256 v) {
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, v);
  float best = lanes[0];
  for (int lane = 1; lane < 8; ++lane)
    best = lanes[lane] > best ? lanes[lane] : best;
  return best;
}

#endif // CAFLM_SAMPLING_AVX2

} // namespace

LogitRowMax logit_row_max(const float* logits, std::size_t n) {
  float max_logit = kNegativeInfinity;
  std::uint32_t nan_count = 0;
  std::size_t id = 0;
#if CAFLM_SAMPLING_AVX2
  __m256 max_lanes = _mm256_set1_ps(kNegativeInfinity);
  for (; id + 8 <= n; id += 8) {
    const __m256 v = _mm256_loadu_ps(logits + id);
    nan_count += static_cast<std::uint32_t>(
        __builtin_popcount(_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))));
    // maxps returns its second operand when the first is NaN.
    max_lanes = _mm256_max_ps(v, max_lanes);
  }
  max_logit = horizontal_max(max_lanes);
#endif
  for (; id < n; ++id) {
    nan_count += std::isnan(logits[id]) ? 1 : 0;
    max_logit = std::max(max_logit, sanitized(logits[id]));
  }
  // Every logit is -infinity or NaN: the first one "holds" the maximum.
  std::size_t first = 0;
  if (max_logit != kNegativeInfinity) {
    first = 0;
#if CAFLM_SAMPLING_AVX2
    const __m256 wanted = _mm256_set1_ps(max_logit);
    for (; first + 8 <= n; first += 8) {
      const int hits =
          _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + first), wanted, _CMP_EQ_OQ));
      if (hits != 0)
        return {max_logit, first + static_cast<std::size_t>(__builtin_ctz(hits)), nan_count};
    }
#endif
    while (!(logits[first] == max_logit))
      ++first;
  }
  return {max_logit, first, nan_count};
}

namespace {

template <bool kWithFloor>
double exp_sum_impl(const float* logits, std::size_t n, float shift, float scale, float floor) {
  std::size_t id = 0;
  double tail = 0.0;
#if CAFLM_SAMPLING_AVX2
  __m256d sum_low = _mm256_setzero_pd();
  __m256d sum_high = _mm256_setzero_pd();
  const __m256 shift8 = _mm256_set1_ps(shift);
  const __m256 scale8 = _mm256_set1_ps(scale);
  const __m256 floor8 = _mm256_set1_ps(floor);
  for (; id + 8 <= n; id += 8) {
    const __m256 v = sanitized8(_mm256_loadu_ps(logits + id));
    __m256 e = expf8(_mm256_mul_ps(_mm256_sub_ps(v, shift8), scale8));
    if (kWithFloor)
      e = _mm256_and_ps(_mm256_cmp_ps(v, floor8, _CMP_GE_OQ), e);
    sum_low = _mm256_add_pd(sum_low, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    sum_high = _mm256_add_pd(sum_high, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
#endif
  for (; id < n; ++id) {
    const float v = sanitized(logits[id]);
    if (v >= floor)
      tail += static_cast<double>(std::exp((v - shift) * scale));
  }
#if CAFLM_SAMPLING_AVX2
  // One fixed order: the 8 lane sums, then the scalar tail.
  alignas(32) double lanes[8];
  _mm256_store_pd(lanes, sum_low);
  _mm256_store_pd(lanes + 4, sum_high);
  double sum = 0.0;
  for (const double lane : lanes)
    sum += lane;
  return sum + tail;
#else
  return tail;
#endif
}

} // namespace

double exp_sum(const float* logits, std::size_t n, float shift, float scale, float floor) {
  // -infinity as the floor keeps every logit: the common case skips the comparison.
  return floor == kNegativeInfinity ? exp_sum_impl<false>(logits, n, shift, scale, floor)
                                    : exp_sum_impl<true>(logits, n, shift, scale, floor);
}

std::size_t collect_in_range(const float* logits, std::size_t n, float low, float high,
                             std::uint32_t* ids) {
  std::size_t count = 0;
  std::size_t id = 0;
#if CAFLM_SAMPLING_AVX2
  const __m256 low8 = _mm256_set1_ps(low);
  const __m256 high8 = _mm256_set1_ps(high);
  for (; id + 8 <= n; id += 8) {
    const __m256 v = _mm256_loadu_ps(logits + id);
    unsigned hits = static_cast<unsigned>(_mm256_movemask_ps(
        _mm256_and_ps(_mm256_cmp_ps(v, low8, _CMP_GE_OQ), _mm256_cmp_ps(v, high8, _CMP_LT_OQ))));
    while (hits != 0) {
      ids[count++] = static_cast<std::uint32_t>(id + static_cast<std::size_t>(__builtin_ctz(hits)));
      hits &= hits - 1;
    }
  }
#endif
  for (; id < n; ++id) {
    if (logits[id] >= low && logits[id] < high)
      ids[count++] = static_cast<std::uint32_t>(id);
  }
  return count;
}

std::size_t find_greater(const float* logits, std::size_t begin, std::size_t n, float threshold) {
  std::size_t id = begin;
#if CAFLM_SAMPLING_AVX2
  const __m256 threshold8 = _mm256_set1_ps(threshold);
  for (; id + 8 <= n; id += 8) {
    const int hits =
        _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(logits + id), threshold8, _CMP_GT_OQ));
    if (hits != 0)
      return id + static_cast<std::size_t>(__builtin_ctz(hits));
  }
#endif
  for (; id < n; ++id) {
    if (logits[id] > threshold)
      return id;
  }
  return n;
}

void expf_like_libm(const float* x, float* out, std::size_t n) {
  std::size_t i = 0;
#if CAFLM_SAMPLING_AVX2
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, expf8(_mm256_loadu_ps(x + i)));
#endif
  for (; i < n; ++i)
    out[i] = std::exp(x[i]);
}

} // namespace caflm

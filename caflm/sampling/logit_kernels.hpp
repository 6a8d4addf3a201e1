#pragma once

#include <cstddef>
#include <cstdint>

namespace caflm {

/// The passes of the Sampler over a whole row of logits, vectorised where the target has AVX2
/// and FMA (caflm's release flags ask for x86-64-v3) and scalar otherwise. Every one reads a NaN
/// logit as -infinity.
///
/// Exponentials are glibc's expf to the bit: the vector path evaluates glibc's algorithm (since
/// 2.28: its 32-entry 2^(i/32) table and cubic, in double, with the fused multiply-adds of
/// glibc's FMA build, which is the one glibc runs on any CPU that runs this path), so a
/// probability computed here equals std::exp(float) of the same argument; every float in
/// [-110, 89] was checked against glibc 2.36, and tests/test_sampler_equivalence.cpp checks a
/// spread of them against the libm it runs on. Sums of them are taken in double in a fixed order
/// (8 lanes, then the lanes' total): the terms of a scalar id-order loop, rounded differently in
/// the last bits of the double, and a result still depends on the row alone.

/// The largest logit of a row, where the first one of that value sits, and how many are NaN.
struct LogitRowMax {
  /// -infinity when every logit is -infinity or NaN.
  float max;
  /// The lowest id whose logit equals `max` (NaN counting as -infinity).
  std::size_t first;
  std::uint32_t nan_count;
};

/// Scans logits [n], n > 0.
LogitRowMax logit_row_max(const float* logits, std::size_t n);

/// Sum over the ids whose logit v is at least `floor` of double(expf((v - shift) * scale)).
/// - logits: [n]
double exp_sum(const float* logits, std::size_t n, float shift, float scale, float floor);

/// Writes to ids, in id order, the ids whose logit v satisfies low <= v < high, and returns how
/// many. NaN logits are never written (-infinity only when low is -infinity).
/// - logits: [n]; ids: [n] at most
std::size_t collect_in_range(const float* logits, std::size_t n, float low, float high,
                             std::uint32_t* ids);

/// The first id in [begin, n) whose logit is strictly greater than `threshold`, or n.
std::size_t find_greater(const float* logits, std::size_t begin, std::size_t n, float threshold);

/// out[i] = std::exp(x[i]) for i in [0, n), through the same code exp_sum uses; for tests.
/// - x: [n]; out: [n]
void expf_like_libm(const float* x, float* out, std::size_t n);

} // namespace caflm

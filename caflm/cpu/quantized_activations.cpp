// Activation rows quantized for the integer dot products: Q8_0, Q8_1 or Q8_K
// blocks (activation_type), with the block sums the kernels take.
#include "caflm/cpu/quantized_matmul.hpp"

#include "caflm/cpu/block_readers.hpp"
#include "caflm/cpu/cpu_matmul.hpp"
#include "caflm/cpu/simd_helpers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstddef>
#include <stdexcept>
#include <string>

namespace caflm::detail {

namespace {

// roundf() of each lane: to nearest, ties away from zero.
__m256 round_half_away(__m256 v) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256 a = _mm256_andnot_ps(sign_bit, v);
  const __m256 whole = _mm256_round_ps(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m256 up =
      _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(a, whole), _mm256_set1_ps(0.5f), _CMP_GE_OQ),
                    _mm256_set1_ps(1.0f));
  return _mm256_or_ps(_mm256_add_ps(whole, up), _mm256_and_ps(sign_bit, v));
}

// Packs 4 x 8 int32 (each within int8) into 32 int8 in element order.
__m256i pack_int8(const __m256i (&q32)[4]) {
  const __m256i q16_lo = _mm256_packs_epi32(q32[0], q32[1]);
  const __m256i q16_hi = _mm256_packs_epi32(q32[2], q32[3]);
  // The packs interleave 128-bit lanes; the permute restores element order.
  return _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16_lo, q16_hi),
                                     _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// ggml's quantize_row_q8_0_ref / quantize_row_q8_1_ref on one block of 32:
// d = max|x| / 127, q = roundf(x * (1 / d)), s = d * sum(q).
void quantize_block_q8(const float* __restrict__ x, int8_t* __restrict__ q, float* d, float* s,
                       int16_t* sum_out) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 v[4];
  __m256 max_abs = _mm256_setzero_ps();
  for (int c = 0; c < 4; ++c) {
    v[c] = _mm256_loadu_ps(x + 8 * c);
    max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, v[c]));
  }
  const float amax = hmax8(max_abs);
  const float scale = amax / 127.0f;
  const __m256 inverse = _mm256_set1_ps(scale != 0.0f ? 1.0f / scale : 0.0f);
  __m256i q32[4];
  for (int c = 0; c < 4; ++c) {
    q32[c] = _mm256_cvttps_epi32(round_half_away(_mm256_mul_ps(v[c], inverse)));
  }
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), pack_int8(q32));
  *d = half(f32_to_f16(scale));
  if (s != nullptr || sum_out != nullptr) {
    const __m256i sum4 =
        _mm256_add_epi32(_mm256_add_epi32(q32[0], q32[1]), _mm256_add_epi32(q32[2], q32[3]));
    __m128i sum = _mm_add_epi32(_mm256_castsi256_si128(sum4), _mm256_extracti128_si256(sum4, 1));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0x4E));
    sum = _mm_add_epi32(sum, _mm_shuffle_epi32(sum, 0xB1));
    const int total = _mm_cvtsi128_si32(sum); // |total| <= 32 * 127
    if (s != nullptr)
      *s = half(f32_to_f16(static_cast<float>(total) * scale));
    if (sum_out != nullptr)
      *sum_out = static_cast<int16_t>(total);
  }
}

// ggml's quantize_row_q8_K_ref on one super-block of 256: max = the first
// value of largest magnitude, q = min(127, nearest-even(x * -127 / max)),
// d = 1 / (-127 / max), bsums = sums of each 16 quants.
void quantize_block_q8_k(const float* __restrict__ x, int8_t* __restrict__ q, float* d,
                         int16_t* __restrict__ bsums) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  __m256 max_abs = _mm256_setzero_ps();
  for (int c = 0; c < 32; ++c) {
    max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, _mm256_loadu_ps(x + 8 * c)));
  }
  const float amax = hmax8(max_abs);
  if (amax == 0.0f) { // all zeros (or NaN-only maxima, which ggml leaves undefined)
    *d = 0.0f;
    std::memset(q, 0, 256);
    std::memset(bsums, 0, 16 * sizeof(int16_t));
    return;
  }
  float max = 0.0f;
  for (int c = 0; c < 32; ++c) {
    const __m256 v = _mm256_loadu_ps(x + 8 * c);
    const int hits = _mm256_movemask_ps(
        _mm256_cmp_ps(_mm256_andnot_ps(sign_bit, v), _mm256_set1_ps(amax), _CMP_EQ_OQ));
    if (hits != 0) {
      max = x[8 * c + __builtin_ctz(static_cast<unsigned>(hits))];
      break;
    }
  }
  const float iscale = -127.0f / max;
  const __m256 scale = _mm256_set1_ps(iscale);
  const __m256i limit = _mm256_set1_epi32(127);
  for (int g = 0; g < 8; ++g) {
    __m256i q32[4];
    for (int c = 0; c < 4; ++c) {
      q32[c] = _mm256_min_epi32(
          limit, _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 32 * g + 8 * c), scale)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * g), pack_int8(q32));
  }
  for (int j = 0; j < 16; ++j) {
    int sum = 0;
    for (int l = 0; l < 16; ++l) {
      sum += q[16 * j + l];
    }
    bsums[j] = static_cast<int16_t>(sum);
  }
  *d = 1.0f / iscale;
}

// Whether Q8_0 and Q8_1 rows take the AVX-512 quantizer: where the matmuls'
// kernels are AVX-512 or AMX (not with CAFLM_MATMUL_ISA=avx2, which keeps
// every kernel to AVX2).
bool quantize_with_avx512() {
  static const bool avx512 = default_matmul_isa() != MatmulIsa::Avx2;
  return avx512;
}

} // namespace

void quantize_activation_row(TensorType act_type, const float* __restrict__ x, size_t k,
                             const ActivationRow& out) {
  switch (act_type) {
  case TensorType::Q8_0:
  case TensorType::Q8_1:
    if (k % 32 != 0) {
      break;
    }
    if (quantize_with_avx512()) {
      quantize_q8_row_avx512(act_type, x, k, out);
      return;
    }
    for (size_t b = 0; b < k / 32; ++b) {
      quantize_block_q8(
          x + 32 * b, out.q + 32 * b, out.d + b, act_type == TensorType::Q8_1 ? out.s + b : nullptr,
          act_type == TensorType::Q8_0 && out.bsums != nullptr ? out.bsums + b : nullptr);
    }
    return;
  case TensorType::Q8_K:
    if (k % 256 != 0) {
      break;
    }
    for (size_t b = 0; b < k / 256; ++b) {
      quantize_block_q8_k(x + 256 * b, out.q + 256 * b, out.d + b, out.bsums + 16 * b);
    }
    return;
  default:
    throw std::invalid_argument(std::string("quantize_activation_row: ") + to_string(act_type) +
                                " is not an activation format");
  }
  throw std::invalid_argument(std::string("quantize_activation_row: ") + to_string(act_type) +
                              " row of " + std::to_string(k) + " values is not whole blocks");
}

void QuantizedActivations::quantize(TensorType act, const float* __restrict__ x, size_t m,
                                    size_t k) {
  act_ = act;
  m_ = m;
  k_ = k;
  const size_t x_blocks = k / tensor_block_size(act);
  q_.resize(m * k);
  d_.resize(m * x_blocks);
  s_.resize(act == TensorType::Q8_1 ? m * x_blocks : 0);
  bsums_.resize(act == TensorType::Q8_K ? m * k / 16 : act == TensorType::Q8_0 ? m * k / 32 : 0);
  int8_t* const xq = q_.data();
  float* const xd = d_.data();
  float* const xs = s_.empty() ? nullptr : s_.data();
  int16_t* const xb = bsums_.empty() ? nullptr : bsums_.data();
  const size_t row_sums = bsums_.size() / std::max<size_t>(m, 1);
  const auto rows = static_cast<ptrdiff_t>(m);
#pragma omp parallel for schedule(static) if (m * k >= kParallelMinMacs / 8)
  for (ptrdiff_t r = 0; r < rows; ++r) {
    const auto row = static_cast<size_t>(r);
    quantize_activation_row(act, x + row * k, k,
                            ActivationRow{xq + row * k, xd + row * x_blocks,
                                          xs != nullptr ? xs + row * x_blocks : nullptr,
                                          xb != nullptr ? xb + row * row_sums : nullptr});
  }
}

QuantizedRows QuantizedActivations::rows() const {
  return QuantizedRows{q_.data(), d_.data(), s_.empty() ? nullptr : s_.data(),
                       bsums_.empty() ? nullptr : bsums_.data()};
}

} // namespace caflm::detail

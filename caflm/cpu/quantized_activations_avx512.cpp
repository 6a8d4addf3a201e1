// Q8_0 and Q8_1 activation rows with 16 lanes, 16 blocks at a time: the
// only activation quantizer compiled with AVX-512 (caflm/cpu/CMakeLists.txt);
// quantize_activation_row calls it only where the CPU has it. The per-block
// work of quantized_activations.cpp (a horizontal maximum, two scalar
// divisions, a scalar f16 round trip) ran at about 1.6 cycles a value, 4.5%
// of a 32-sequence Q8_0 decode step of a SmolLM-shaped model on a 2-core
// Xeon; here the 16 blocks' maxima are reduced together and their scales
// divided and rounded as one vector.
//
// The bytes are those of quantize_block_q8 (ggml's quantize_row_q8_0_ref and
// _q8_1_ref) for finite values: d = max|x| / 127 rounded to f16, q =
// roundf(x * (1 / d)) with the unrounded d, s = f16(d * sum(q)).

#include "caflm/cpu/avx512_intrinsics.hpp"

#include "caflm/cpu/quantized_matmul.hpp"

#include <cstddef>
#include <cstdint>

namespace caflm::detail {

namespace {

// Blocks of 32 one pass takes: one lane of the scale vectors each.
constexpr std::size_t kChunkBlocks = 16;

/// Lane i: v[i]'s 16 lanes combined by `combine` (max or add: any order
/// gives the same), pairs within 128-bit lanes, then quads, then across the
/// 128-bit lanes. The shuffles only move bits, so integer lanes go through
/// as they are.
template <typename Combine>
__m512 combine_lanes(const __m512 (&v)[kChunkBlocks], Combine combine) {
  // Pairs: in each 128-bit lane, elements 0 and 2 from v[2i]'s halves of
  // that lane, 1 and 3 from v[2i + 1]'s.
  __m512 pairs[8];
  for (int i = 0; i < 8; ++i)
    pairs[i] = combine(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                       _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  // Quads: in each 128-bit lane L, element c all of L of v[4j + c].
  __m512 quads[4];
  for (int j = 0; j < 4; ++j)
    quads[j] = combine(_mm512_shuffle_ps(pairs[2 * j], pairs[2 * j + 1], 0x44),
                       _mm512_shuffle_ps(pairs[2 * j], pairs[2 * j + 1], 0xEE));
  // Then across the four 128-bit lanes: lanes 4j .. 4j + 3 from quads[j].
  const __m512 q01 = combine(_mm512_shuffle_f32x4(quads[0], quads[1], 0x44),
                             _mm512_shuffle_f32x4(quads[0], quads[1], 0xEE));
  const __m512 q23 = combine(_mm512_shuffle_f32x4(quads[2], quads[3], 0x44),
                             _mm512_shuffle_f32x4(quads[2], quads[3], 0xEE));
  return combine(_mm512_shuffle_f32x4(q01, q23, 0x88), _mm512_shuffle_f32x4(q01, q23, 0xDD));
}

/// Lane i: the maximum of v[i]'s 16 lanes (of non-negative values).
__m512 lane_maxima(const __m512 (&v)[kChunkBlocks]) {
  return combine_lanes(v, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); });
}

/// Lane i: the sum of the 16 int32 lanes held in v[i] (exact: integers).
__m512i lane_totals(const __m512 (&v)[kChunkBlocks]) {
  return _mm512_castps_si512(combine_lanes(v, [](__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }));
}

/// roundf() of each lane: to nearest, ties away from zero.
__m512 round_half_away(__m512 v) {
  const __m512 magnitude = _mm512_abs_ps(v);
  const __m512 whole = _mm512_roundscale_ps(magnitude, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __mmask16 up =
      _mm512_cmp_ps_mask(_mm512_sub_ps(magnitude, whole), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  const __m512 rounded = _mm512_mask_add_ps(whole, up, whole, _mm512_set1_ps(1.0f));
  return _mm512_castsi512_ps(
      _mm512_or_si512(_mm512_castps_si512(rounded),
                      _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN))));
}

/// f32 of the f16 nearest each lane (ties to even), as half(f32_to_f16(v)).
__m512 through_f16(__m512 v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

} // namespace

void quantize_q8_row_avx512(TensorType act_type, const float* __restrict__ x, std::size_t k,
                            const ActivationRow& out) {
  const std::size_t blocks = k / 32;
  const bool with_s = act_type == TensorType::Q8_1;
  const bool with_sums = act_type == TensorType::Q8_0 && out.bsums != nullptr;
  for (std::size_t b0 = 0; b0 < blocks; b0 += kChunkBlocks) {
    const std::size_t count = blocks - b0 < kChunkBlocks ? blocks - b0 : kChunkBlocks;
    const auto valid = static_cast<__mmask16>((1u << count) - 1u);
    const float* chunk = x + 32 * b0; // [count, 32]
    __m512 maxima[kChunkBlocks];
    for (std::size_t i = 0; i < kChunkBlocks; ++i) {
      maxima[i] = i < count ? _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(chunk + 32 * i)),
                                            _mm512_abs_ps(_mm512_loadu_ps(chunk + 32 * i + 16)))
                            : _mm512_setzero_ps();
    }
    const __m512 scale = _mm512_div_ps(lane_maxima(maxima), _mm512_set1_ps(127.0f));
    const __mmask16 nonzero = _mm512_cmp_ps_mask(scale, _mm512_setzero_ps(), _CMP_NEQ_UQ);
    alignas(64) float inverse[kChunkBlocks];
    _mm512_store_ps(inverse, _mm512_maskz_div_ps(nonzero, _mm512_set1_ps(1.0f), scale));
    _mm512_mask_storeu_ps(out.d + b0, valid, through_f16(scale));
    __m512 quant_sums[kChunkBlocks]; // int32 lanes
    for (std::size_t i = 0; i < kChunkBlocks; ++i) {
      if (i >= count) {
        quant_sums[i] = _mm512_setzero_ps();
        continue;
      }
      const __m512 times = _mm512_set1_ps(inverse[i]);
      const __m512i low = _mm512_cvttps_epi32(
          round_half_away(_mm512_mul_ps(_mm512_loadu_ps(chunk + 32 * i), times)));
      const __m512i high = _mm512_cvttps_epi32(
          round_half_away(_mm512_mul_ps(_mm512_loadu_ps(chunk + 32 * i + 16), times)));
      int8_t* q = out.q + 32 * (b0 + i);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(low));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(high));
      quant_sums[i] = _mm512_castsi512_ps(_mm512_add_epi32(low, high));
    }
    if (!with_s && !with_sums)
      continue;
    const __m512i totals = lane_totals(quant_sums); // |total| <= 32 * 127
    if (with_s)
      _mm512_mask_storeu_ps(out.s + b0, valid,
                            through_f16(_mm512_mul_ps(_mm512_cvtepi32_ps(totals), scale)));
    if (with_sums)
      _mm256_mask_storeu_epi16(out.bsums + b0, valid, _mm512_cvtepi32_epi16(totals));
  }
}

} // namespace caflm::detail

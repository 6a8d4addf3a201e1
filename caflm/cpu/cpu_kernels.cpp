#include "caflm/cpu/cpu_kernels.hpp"

#include "caflm/cpu/simd_helpers.hpp"

#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/quantize.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace caflm {

namespace {

// Below this many elements a kernel runs on the calling thread: waking the
// OpenMP team costs more than the work. Splitting is by whole rows, so the
// choice never changes a result.
constexpr size_t kParallelMinElements = size_t{1} << 15;

// Calls body(offset, count) for each chunk of 8 of [0, n), count < 8 only for
// the last.
template <typename Body>
void for_each_chunk(size_t n, Body body) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    body(i, size_t{8});
  }
  if (i < n) {
    body(i, n - i);
  }
}

// exp(x) in 8 lanes (Cephes expf: range reduction by ln 2 and a degree-6
// polynomial, within 2 ulp). Inputs below -87.3 give 0, above 87 give exp(87);
// callers only need values up to that. Always inlined: called for every 8
// values, a call reloaded all its constants each time.
inline __attribute__((always_inline)) __m256 exp256(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  // x - n ln2, with ln2 split so n * 0.693359375 is exact.
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  // 2^n built in the exponent field; n is within [-126, 126] after the clamp.
  const __m256i scale =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(underflow, _mm256_mul_ps(p, _mm256_castsi256_ps(scale)));
}

// Sum of chunk(offset, count) over the chunks of 8 of [0, n), chunk i going to
// accumulator i % 4, then ((a0 + a1) + (a2 + a3)) and hsum: an order fixed by
// n alone. `chunk` returns 8 lanes, those from `count` on zero.
template <typename Chunk>
float sum_chunks(size_t n, Chunk chunk) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc[0] = _mm256_add_ps(acc[0], chunk(i, size_t{8}));
    acc[1] = _mm256_add_ps(acc[1], chunk(i + 8, size_t{8}));
    acc[2] = _mm256_add_ps(acc[2], chunk(i + 16, size_t{8}));
    acc[3] = _mm256_add_ps(acc[3], chunk(i + 24, size_t{8}));
  }
  for (size_t lane = 0; i < n; i += 8, ++lane) {
    acc[lane] = _mm256_add_ps(acc[lane], chunk(i, std::min<size_t>(8, n - i)));
  }
  return hsum8(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
}

void dequantize_q8_0(const uint8_t* __restrict__ row, size_t n, float* __restrict__ out) {
  for (size_t block = 0; block < n / kQK8_0; ++block) {
    const uint8_t* bytes = row + block * sizeof(BlockQ8_0);
    uint16_t d_bits;
    std::memcpy(&d_bits, bytes, sizeof d_bits);
    const __m256 d = _mm256_set1_ps(f16_to_f32(d_bits));
    for (size_t j = 0; j < kQK8_0; j += 8) {
      const __m128i q8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + 2 + j));
      const __m256 q = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q8));
      _mm256_storeu_ps(out + block * kQK8_0 + j, _mm256_mul_ps(d, q));
    }
  }
}

void dequantize_f16(const uint16_t* __restrict__ row, size_t n, float* __restrict__ out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i))));
  }
  for (; i < n; ++i) {
    out[i] = f16_to_f32(row[i]);
  }
}

void dequantize_bf16(const uint16_t* __restrict__ row, size_t n, float* __restrict__ out) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i wide =
        _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + i)));
    _mm256_storeu_ps(out + i, _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16)));
  }
  for (; i < n; ++i) {
    out[i] = bf16_to_f32(row[i]);
  }
}

// dequantize_row (caflm/gguf/quantize.hpp) with AVX2 and F16C for the float
// types and Q8_0, for the embedding lookup; the results are the same (each
// value is one exact conversion or one product).
void dequantize_row_avx2(TensorType type, const void* __restrict__ row, size_t n,
                         float* __restrict__ out) {
  switch (type) {
  case TensorType::F32:
    std::memcpy(out, row, n * sizeof(float));
    return;
  case TensorType::F16:
    dequantize_f16(static_cast<const uint16_t*>(row), n, out);
    return;
  case TensorType::BF16:
    dequantize_bf16(static_cast<const uint16_t*>(row), n, out);
    return;
  case TensorType::Q8_0:
    if (n % kQK8_0 != 0) {
      throw std::invalid_argument("dequantize_row: q8_0 row length " + std::to_string(n) +
                                  " is not a multiple of 32");
    }
    dequantize_q8_0(static_cast<const uint8_t*>(row), n, out);
    return;
  default:
    // The other quantized types: one row per token, so the reference decoder
    // of the gguf layer is fast enough.
    dequantize_row(type, row, n, out);
    return;
  }
}

} // namespace

void embedding_lookup(const WeightView& table, const TokenId* __restrict__ tokens, size_t m,
                      float* __restrict__ out) {
  const uint64_t row_bytes = tensor_row_bytes(table.type, table.cols);
  const auto* data = static_cast<const uint8_t*>(table.data);
  for (size_t i = 0; i < m; ++i) {
    if (tokens[i] >= table.rows) {
      throw std::out_of_range("embedding_lookup: token id " + std::to_string(tokens[i]) +
                              " outside a table of " + std::to_string(table.rows) + " rows");
    }
  }
  for (size_t i = 0; i < m; ++i) {
    dequantize_row_avx2(table.type, data + tokens[i] * row_bytes, table.cols, out + i * table.cols);
  }
}

void rms_norm(const float* x, size_t m, size_t d, const float* __restrict__ weight, float eps,
              float* out) {
  const auto rows = static_cast<ptrdiff_t>(m);
#pragma omp parallel for schedule(static) if (m * d >= kParallelMinElements)
  for (ptrdiff_t row = 0; row < rows; ++row) {
    const float* xr = x + row * d;
    float* yr = out + row * d;
    const float sum_squares = sum_chunks(d, [xr](size_t i, size_t count) {
      const __m256 v = load_lanes(xr + i, count);
      return _mm256_mul_ps(v, v);
    });
    const float mean = sum_squares / static_cast<float>(d);
    // ggml scales first and multiplies by the weight in a second operation.
    const __m256 scale = _mm256_set1_ps(1.0f / std::sqrt(mean + eps));
    for_each_chunk(d, [&](size_t i, size_t count) {
      const __m256 scaled = _mm256_mul_ps(load_lanes(xr + i, count), scale);
      store_lanes(yr + i, count, _mm256_mul_ps(scaled, load_lanes(weight + i, count)));
    });
  }
}

void rope_angles(const int32_t* __restrict__ positions, size_t m, const RopeConfig& config,
                 float* __restrict__ cos_sin) {
  const size_t d = config.head_dim;
  if (d % 2 != 0) {
    throw std::invalid_argument("rope: head_dim " + std::to_string(d) + " is odd");
  }
  const size_t half = d / 2;
  const float theta_scale = std::pow(config.freq_base, -2.0f / static_cast<float>(d));
  const auto rows = static_cast<ptrdiff_t>(m);
#pragma omp parallel for schedule(static) if (m * d >= kParallelMinElements / 8)
  for (ptrdiff_t token = 0; token < rows; ++token) {
    float* cosines = cos_sin + token * d;
    float* sines = cosines + half;
    float theta = static_cast<float>(positions[token]);
    for (size_t i = 0; i < half; ++i) {
      // ggml's rope_yarn without YaRN: divide by the pair's factor, scale by
      // freq_scale, and multiply cos and sin by the attention factor.
      const float extrapolated = config.freq_factors ? theta / config.freq_factors[i] : theta;
      const float angle = config.freq_scale * extrapolated;
      cosines[i] = std::cos(angle) * config.attn_factor;
      sines[i] = std::sin(angle) * config.attn_factor;
      theta *= theta_scale;
    }
  }
}

namespace {

/// One pair: x0' = x0 c - x1 s, x1' = x1 c + x0 s, each as one fma of the
/// other term's rounded product, the order the vector code keeps per lane.
inline void rotate_pair(float& x0, float& x1, float c, float s) {
  const float a = x0;
  const float b = x1;
  x0 = std::fma(a, c, -(b * s));
  x1 = std::fma(b, c, a * s);
}

/// Pairs (2i, 2i + 1) of one head, eight values (four pairs) a vector.
void rotate_interleaved(float* __restrict__ v, size_t half, const float* __restrict__ cosines,
                        const float* __restrict__ sines) {
  // [c0 c0 c1 c1 c2 c2 c3 c3] from four consecutive angles.
  const __m256i twice = _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3);
  size_t i = 0;
  for (; i + 4 <= half; i += 4) {
    const __m256 c =
        _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(cosines + i)), twice);
    const __m256 s =
        _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_loadu_ps(sines + i)), twice);
    const __m256 x = _mm256_loadu_ps(v + 2 * i);
    const __m256 swapped = _mm256_permute_ps(x, 0xB1); // [x1 x0 ...] each pair's partner
    // Even lanes x0 c - (x1 s), odd lanes x1 c + (x0 s).
    _mm256_storeu_ps(v + 2 * i, _mm256_fmaddsub_ps(x, c, _mm256_mul_ps(swapped, s)));
  }
  for (; i < half; ++i)
    rotate_pair(v[2 * i], v[2 * i + 1], cosines[i], sines[i]);
}

/// Pairs (i, i + half) of one head, eight pairs a vector.
void rotate_neox(float* __restrict__ v, size_t half, const float* __restrict__ cosines,
                 const float* __restrict__ sines) {
  size_t i = 0;
  for (; i + 8 <= half; i += 8) {
    const __m256 c = _mm256_loadu_ps(cosines + i);
    const __m256 s = _mm256_loadu_ps(sines + i);
    const __m256 x0 = _mm256_loadu_ps(v + i);
    const __m256 x1 = _mm256_loadu_ps(v + half + i);
    _mm256_storeu_ps(v + i, _mm256_fmsub_ps(x0, c, _mm256_mul_ps(x1, s)));
    _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(x1, c, _mm256_mul_ps(x0, s)));
  }
  for (; i < half; ++i)
    rotate_pair(v[i], v[half + i], cosines[i], sines[i]);
}

} // namespace

void rope_rotate(float* __restrict__ x, size_t m, size_t n_heads, const float* __restrict__ cos_sin,
                 const RopeConfig& config) {
  const size_t d = config.head_dim;
  const size_t half = d / 2;
  const auto rows = static_cast<ptrdiff_t>(m);
#pragma omp parallel for schedule(static) if (m * n_heads * d >= kParallelMinElements)
  for (ptrdiff_t token = 0; token < rows; ++token) {
    const float* cosines = cos_sin + token * d;
    const float* sines = cosines + half;
    for (size_t head = 0; head < n_heads; ++head) {
      float* v = x + (token * n_heads + head) * d;
      // Pair i is (2i, 2i+1) interleaved, (i, i + d/2) in NeoX mode.
      if (config.mode == RopeMode::Interleaved) {
        rotate_interleaved(v, half, cosines, sines);
      } else {
        rotate_neox(v, half, cosines, sines);
      }
    }
  }
}

void rope(float* __restrict__ x, size_t m, size_t n_heads, const int32_t* __restrict__ positions,
          const RopeConfig& config) {
  std::vector<float> cos_sin(m * config.head_dim);
  rope_angles(positions, m, config, cos_sin.data());
  rope_rotate(x, m, n_heads, cos_sin.data(), config);
}

void silu_mul(const float* gate, const float* up, size_t m, size_t f, float* out) {
  const size_t n = m * f;
  const auto chunks = static_cast<ptrdiff_t>((n + 7) / 8);
  const __m256 one = _mm256_set1_ps(1.0f);
  // Purely elementwise: any split over threads gives the same bits.
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (ptrdiff_t chunk = 0; chunk < chunks; ++chunk) {
    const size_t i = static_cast<size_t>(chunk) * 8;
    const size_t count = std::min<size_t>(8, n - i);
    const __m256 g = load_lanes(gate + i, count);
    // silu(g) = g / (1 + exp(-g)), as ggml writes it.
    const __m256 silu =
        _mm256_div_ps(g, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    store_lanes(out + i, count, _mm256_mul_ps(silu, load_lanes(up + i, count)));
  }
}

void scale_f32(float alpha, float* __restrict__ x, size_t n) {
  const __m256 a = _mm256_set1_ps(alpha);
  for_each_chunk(n, [&](size_t i, size_t count) {
    store_lanes(x + i, count, _mm256_mul_ps(a, load_lanes(x + i, count)));
  });
}

void softmax_f32(float* __restrict__ x, size_t n) {
  if (n == 0) {
    return;
  }
  // The maximum 8 lanes at a time (the same value in any order), the last
  // chunk padded with its own first value.
  __m256 lanes_max = _mm256_set1_ps(x[0]);
  for_each_chunk(n, [&](size_t i, size_t count) {
    const __m256 chunk = count == 8
                             ? _mm256_loadu_ps(x + i)
                             : _mm256_blendv_ps(_mm256_set1_ps(x[i]), load_lanes(x + i, count),
                                                _mm256_castsi256_ps(tail_mask(count)));
    lanes_max = _mm256_max_ps(lanes_max, chunk);
  });
  const __m256 vmax = _mm256_set1_ps(hmax8(lanes_max));
  // Exponentiate in place while summing; lanes past the end must add 0, not
  // exp(0 - max).
  const float sum = sum_chunks(n, [x, vmax](size_t i, size_t count) {
    __m256 e = exp256(_mm256_sub_ps(load_lanes(x + i, count), vmax));
    if (count < 8) {
      e = _mm256_and_ps(e, _mm256_castsi256_ps(tail_mask(count)));
    }
    store_lanes(x + i, count, e);
    return e;
  });
  scale_f32(1.0f / sum, x, n);
}

} // namespace caflm

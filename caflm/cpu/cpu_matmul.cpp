#include "caflm/cpu/cpu_matmul.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace caflm {

namespace {

// Output columns per parallel work item: a multiple of every block width
// below, so only the last tile of a matrix has a ragged edge.
constexpr size_t kTileCols = 48;

// Below this many multiply-adds a call runs on the calling thread.
constexpr size_t kParallelMinMacs = size_t{1} << 18;

alignas(32) constexpr int32_t kTailMaskTable[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                    0,  0,  0,  0,  0,  0,  0,  0};

__m256i tail_mask(size_t r) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kTailMaskTable + 8 - r));
}

// Horizontal sum of 8 lanes in one fixed order: ((0+4)+(2+6)) + ((1+5)+(3+7)).
float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// What every block kernel needs: the operands, their shapes and the output.
struct Problem {
  const uint8_t* w; // [N, K] rows of w_row_bytes
  size_t w_row_bytes;
  const float* x;    // [m, K] (float kernels)
  const int8_t* x_q; // [m, K] quants of x (Q8_0 kernel)
  const float* x_d;  // [m, K/32] block scales of x (Q8_0 kernel)
  size_t k;
  size_t n;
  float* y;          // [m, N]
  const float* bias; // [N] or null
};

// Calls f(0), f(1), ..., f(N - 1) as straight-line code. The block kernels
// index their accumulator arrays only through it, so that the arrays live in
// registers: GCC at -O2 does not fully unroll these nested loops by itself.
template <typename F, int... I>
void unrolled_impl(F& f, std::integer_sequence<int, I...>) {
  (f(I), ...);
}

template <int N, typename F>
void unrolled(F f) {
  unrolled_impl(f, std::make_integer_sequence<int, N>{});
}

template <int MR, int NR>
void zero(__m256 (&acc)[MR][NR]) {
  unrolled<MR>([&](int i) { unrolled<NR>([&](int j) { acc[i][j] = _mm256_setzero_ps(); }); });
}

// Writes the finished accumulators of an MR x NR block.
template <int MR, int NR>
void store_block(const Problem& p, size_t row0, size_t col0, const __m256 (&acc)[MR][NR]) {
  for (int i = 0; i < MR; ++i) {
    for (int j = 0; j < NR; ++j) {
      const float sum = hsum(acc[i][j]);
      p.y[(row0 + i) * p.n + col0 + j] = p.bias ? sum + p.bias[col0 + j] : sum;
    }
  }
}

// Loads 8 consecutive weights of one row as f32. `load_partial` loads the
// first r < 8 and zeroes the rest.
struct F32Weights {
  static __m256 load(const uint8_t* row, size_t k) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + k);
  }
  static __m256 load_partial(const uint8_t* row, size_t k, size_t r) {
    return _mm256_maskload_ps(reinterpret_cast<const float*>(row) + k, tail_mask(r));
  }
};

struct F16Weights {
  static __m256 load(const uint8_t* row, size_t k) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  }
  static __m256 load_partial(const uint8_t* row, size_t k, size_t r) {
    alignas(16) uint16_t tail[8] = {};
    std::memcpy(tail, row + 2 * k, 2 * r);
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(tail)));
  }
};

struct Bf16Weights {
  static __m256 widen(__m128i bf16) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(bf16), 16));
  }
  static __m256 load(const uint8_t* row, size_t k) {
    return widen(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * k)));
  }
  static __m256 load_partial(const uint8_t* row, size_t k, size_t r) {
    alignas(16) uint16_t tail[8] = {};
    std::memcpy(tail, row + 2 * k, 2 * r);
    return widen(_mm_load_si128(reinterpret_cast<const __m128i*>(tail)));
  }
};

// MR rows x NR columns of y for F32/F16/BF16 weights: per element one 8-lane
// fma chain along K, the order described in cpu_matmul.hpp.
template <typename Weights>
struct FloatKernel {
  template <int MR, int NR>
  __attribute__((flatten)) static void block(const Problem& p, size_t row0, size_t col0) {
    const uint8_t* w_rows[NR];
    unrolled<NR>([&](int j) { w_rows[j] = p.w + (col0 + j) * p.w_row_bytes; });
    const float* x_rows[MR];
    unrolled<MR>([&](int i) { x_rows[i] = p.x + (row0 + i) * p.k; });
    __m256 acc[MR][NR];
    zero(acc);
    // One chunk of 8 along K for every element of the block.
    const auto accumulate = [&](const __m256(&w)[NR], auto load_x) {
      unrolled<MR>([&](int i) {
        const __m256 x = load_x(x_rows[i]);
        unrolled<NR>([&](int j) { acc[i][j] = _mm256_fmadd_ps(x, w[j], acc[i][j]); });
      });
    };
    size_t k = 0;
    for (; k + 8 <= p.k; k += 8) {
      __m256 w[NR];
      unrolled<NR>([&](int j) { w[j] = Weights::load(w_rows[j], k); });
      accumulate(w, [k](const float* x) { return _mm256_loadu_ps(x + k); });
    }
    if (k < p.k) {
      const size_t r = p.k - k;
      __m256 w[NR];
      unrolled<NR>([&](int j) { w[j] = Weights::load_partial(w_rows[j], k, r); });
      const __m256i mask = tail_mask(r);
      accumulate(w, [k, mask](const float* x) { return _mm256_maskload_ps(x + k, mask); });
    }
    store_block(p, row0, col0, acc);
  }
};

// MR rows x NR columns of y for Q8_0 weights against Q8_0-quantized x: per
// element one 8-lane accumulator takes fma(d_w * d_x, exact block sums) block
// by block along K. The block sums are llama.cpp's AVX2 q8_0 dot: |w| as
// unsigned bytes times x with w's sign, pairs added to int16 (no overflow:
// |x| <= 127) and then to 8 int32 lanes.
struct Q8Kernel {
  template <int MR, int NR>
  __attribute__((flatten)) static void block(const Problem& p, size_t row0, size_t col0) {
    const uint8_t* w_rows[NR];
    unrolled<NR>([&](int j) { w_rows[j] = p.w + (col0 + j) * p.w_row_bytes; });
    const size_t n_blocks = p.k / kQ8_0BlockSize;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[MR][NR];
    zero(acc);
    for (size_t b = 0; b < n_blocks; ++b) {
      __m256i w_q[NR];
      __m256i w_abs[NR];
      float w_d[NR];
      unrolled<NR>([&](int j) {
        const uint8_t* block = w_rows[j] + b * kQ8_0BlockBytes;
        uint16_t d_bits;
        std::memcpy(&d_bits, block, sizeof d_bits);
        w_d[j] = _cvtsh_ss(d_bits);
        w_q[j] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block + 2));
        w_abs[j] = _mm256_sign_epi8(w_q[j], w_q[j]);
      });
      unrolled<MR>([&](int i) {
        const size_t row = row0 + i;
        const __m256i x_q =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.x_q + row * p.k) + b);
        const float x_d = p.x_d[row * n_blocks + b];
        unrolled<NR>([&](int j) {
          const __m256i pairs = _mm256_maddubs_epi16(w_abs[j], _mm256_sign_epi8(x_q, w_q[j]));
          const __m256 sums = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
          acc[i][j] = _mm256_fmadd_ps(_mm256_set1_ps(w_d[j] * x_d), sums, acc[i][j]);
        });
      });
    }
    store_block(p, row0, col0, acc);
  }
};

// Quantizes one row of x to Q8_0 as llama.cpp's AVX2 quantize_row_q8_0 does:
// d = max|x| / 127 rounded to f16, q = round-to-nearest-even(x * 127 / max|x|).
// The f32 value of the f16 scale goes to `d`.
void quantize_row_q8_0(const float* __restrict__ x, size_t k, int8_t* __restrict__ q,
                       float* __restrict__ d) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  for (size_t b = 0; b < k / kQ8_0BlockSize; ++b) {
    const float* xb = x + b * kQ8_0BlockSize;
    __m256 v[4];
    __m256 max_abs = _mm256_setzero_ps();
    for (int c = 0; c < 4; ++c) {
      v[c] = _mm256_loadu_ps(xb + 8 * c);
      max_abs = _mm256_max_ps(max_abs, _mm256_andnot_ps(sign_bit, v[c]));
    }
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(max_abs, 1), _mm256_castps256_ps128(max_abs));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float max_scalar = _mm_cvtss_f32(m4);
    const float scale = max_scalar / 127.0f;
    d[b] = _cvtsh_ss(_cvtss_sh(scale, _MM_FROUND_TO_NEAREST_INT));
    const __m256 inverse = _mm256_set1_ps(max_scalar != 0.0f ? 127.0f / max_scalar : 0.0f);
    __m256i q32[4];
    for (int c = 0; c < 4; ++c) {
      q32[c] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[c], inverse),
                                                  _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    // Pack 4 x 8 int32 to 32 int8; packs interleave 128-bit lanes, the
    // permute restores element order.
    const __m256i q16_lo = _mm256_packs_epi32(q32[0], q32[1]);
    const __m256i q16_hi = _mm256_packs_epi32(q32[2], q32[3]);
    const __m256i q8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(q16_lo, q16_hi),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQ8_0BlockSize), q8);
  }
}

// Runs Kernel over the columns [col_begin, col_end) of MR rows from row0:
// NR columns at a time, single columns at a ragged edge.
template <typename Kernel, int MR, int NR>
void block_row(const Problem& p, size_t row0, size_t col_begin, size_t col_end) {
  size_t col = col_begin;
  for (; col + NR <= col_end; col += NR) {
    Kernel::template block<MR, NR>(p, row0, col);
  }
  for (; col < col_end; ++col) {
    Kernel::template block<MR, 1>(p, row0, col);
  }
}

// Computes y tile by tile. Within a tile, rows go in groups of 4 (4 x 3
// blocks: 12 accumulators), each group sweeping the tile's columns while its
// rows stay in L1 and the tile's weights in L2; the 1-3 rows left over use
// wider column groups. The block shapes differ only in how many elements share
// each load, never in the arithmetic of an element. Tiles are handed out
// dynamically: which thread computes a tile never changes its bits, and a
// thread slowed by other work on its core then takes fewer tiles.
template <typename Kernel>
void run_tiles(const Problem& p, size_t m) {
  const auto n_tiles = static_cast<ptrdiff_t>((p.n + kTileCols - 1) / kTileCols);
#pragma omp parallel for schedule(dynamic) if (m * p.n * p.k >= kParallelMinMacs)
  for (ptrdiff_t tile = 0; tile < n_tiles; ++tile) {
    const size_t col_begin = static_cast<size_t>(tile) * kTileCols;
    const size_t col_end = std::min(p.n, col_begin + kTileCols);
    size_t row = 0;
    for (; row + 4 <= m; row += 4) {
      block_row<Kernel, 4, 3>(p, row, col_begin, col_end);
    }
    switch (m - row) {
    case 3:
      block_row<Kernel, 3, 4>(p, row, col_begin, col_end);
      break;
    case 2:
      block_row<Kernel, 2, 6>(p, row, col_begin, col_end);
      break;
    case 1:
      block_row<Kernel, 1, 8>(p, row, col_begin, col_end);
      break;
    default:
      break;
    }
  }
}

} // namespace

void linear(const WeightView& w, const float* __restrict__ x, size_t m, float* __restrict__ y,
            const float* __restrict__ bias) {
  Problem p{};
  p.w = static_cast<const uint8_t*>(w.data);
  p.w_row_bytes = tensor_row_bytes(w.type, w.cols);
  p.x = x;
  p.k = w.cols;
  p.n = w.rows;
  p.y = y;
  p.bias = bias;
  if (m == 0 || p.n == 0) {
    return;
  }
  switch (w.type) {
  case TensorType::F32:
    run_tiles<FloatKernel<F32Weights>>(p, m);
    return;
  case TensorType::F16:
    run_tiles<FloatKernel<F16Weights>>(p, m);
    return;
  case TensorType::BF16:
    run_tiles<FloatKernel<Bf16Weights>>(p, m);
    return;
  case TensorType::Q8_0: {
    // The caller thread's scratch, grown once to the largest call.
    thread_local std::vector<int8_t> x_q;
    thread_local std::vector<float> x_d;
    const size_t n_blocks = p.k / kQ8_0BlockSize;
    x_q.resize(m * p.k);
    x_d.resize(m * n_blocks);
    int8_t* const q = x_q.data();
    float* const d = x_d.data();
    const auto rows = static_cast<ptrdiff_t>(m);
#pragma omp parallel for schedule(static) if (m * p.k >= kParallelMinMacs / 8)
    for (ptrdiff_t row = 0; row < rows; ++row) {
      quantize_row_q8_0(x + row * p.k, p.k, q + row * p.k, d + row * n_blocks);
    }
    p.x_q = q;
    p.x_d = d;
    run_tiles<Q8Kernel>(p, m);
    return;
  }
  }
  throw std::invalid_argument("linear: invalid weight type");
}

} // namespace caflm

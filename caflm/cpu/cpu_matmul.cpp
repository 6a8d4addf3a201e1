#include "caflm/cpu/cpu_matmul.hpp"

#include "caflm/cpu/quantized_matmul.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
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
  const float* x; // [m, K]
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

const char* to_string(MatmulIsa isa) {
  return isa == MatmulIsa::Avx512 ? "avx512" : "avx2";
}

bool matmul_isa_supported(MatmulIsa isa) {
  if (isa == MatmulIsa::Avx2) {
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  }
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("avx512vnni");
}

MatmulIsa default_matmul_isa() {
  static const MatmulIsa isa = [] {
    const char* forced = std::getenv("CAFLM_MATMUL_ISA");
    if (forced != nullptr && std::string_view(forced) == "avx2") {
      return MatmulIsa::Avx2;
    }
    return matmul_isa_supported(MatmulIsa::Avx512) ? MatmulIsa::Avx512 : MatmulIsa::Avx2;
  }();
  return isa;
}

void linear(const WeightView& w, const float* __restrict__ x, size_t m, float* __restrict__ y,
            const float* __restrict__ bias) {
  linear(w, x, m, y, bias, default_matmul_isa());
}

void linear(const WeightView& w, const float* __restrict__ x, size_t m, float* __restrict__ y,
            const float* __restrict__ bias, MatmulIsa isa) {
  if (w.type != TensorType::F32 && w.type != TensorType::F16 && w.type != TensorType::BF16) {
    if (!matmul_isa_supported(isa)) {
      throw std::invalid_argument(std::string("linear: this CPU cannot run the ") + to_string(isa) +
                                  " kernels");
    }
    detail::quantized_linear(isa, w, x, m, y, bias);
    return;
  }
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
  default:
    run_tiles<FloatKernel<Bf16Weights>>(p, m);
    return;
  }
}

} // namespace caflm

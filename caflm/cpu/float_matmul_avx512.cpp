// The 16-lane F32/F16/BF16 kernels of linear(): the only float kernels
// compiled with AVX-512 (see caflm/cpu/CMakeLists.txt); they run only where
// the CPU has it (matmul_isa_supported).
#include "caflm/cpu/float_matmul_kernels.hpp"

#include "caflm/cpu/avx512_intrinsics.hpp"

namespace caflm {
namespace {

__mmask16 first_lanes(std::size_t r) {
  return static_cast<__mmask16>((1u << r) - 1u);
}

/// 16 float lanes.
struct Avx512Simd {
  using V = __m512;
  static constexpr std::size_t kLanes = 16;
  static constexpr int kRegisters = 32;
  static V zero() { return _mm512_setzero_ps(); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V load_x(const float* x) { return _mm512_loadu_ps(x); }
  static void store(float* to, V v) { _mm512_storeu_ps(to, v); }
  static V load_x_partial(const float* x, std::size_t r) {
    return _mm512_maskz_loadu_ps(first_lanes(r), x);
  }
  static float hsum(V v) { return hsum16(v); }
  static __m128 hsum4(V a, V b, V c, V d) { return hsum16x4(a, b, c, d); }
};

// Loads 16 consecutive weights of one row as f32. `load_partial` loads the
// first r < 16 and zeroes the rest.
struct F32Weights512 {
  static constexpr std::size_t kBytes = 4; // per weight
  // Two 32-byte loads: GGUF aligns tensors to 32 bytes, not 64, and a
  // 64-byte load across two cache lines costs more than the insert.
  static __m512 load(const std::uint8_t* row, std::size_t k) {
    const float* at = reinterpret_cast<const float*>(row) + k;
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(at)), _mm256_loadu_ps(at + 8),
                              1);
  }
  static __m512 load_partial(const std::uint8_t* row, std::size_t k, std::size_t r) {
    return _mm512_maskz_loadu_ps(first_lanes(r), reinterpret_cast<const float*>(row) + k);
  }
};

// F32Weights512 for rows that all start on a 64-byte boundary (a file whose
// tensor data does, with rows of whole lines): one load, never across two
// lines. (Measured on a 2-core Xeon with AMX, 32 and 128 rows of K = 768:
// 10-18% faster than two loads and an insert with the weights in the
// caches, 3-8% from memory.)
struct F32AlignedWeights512 {
  static constexpr std::size_t kBytes = 4;
  static __m512 load(const std::uint8_t* row, std::size_t k) {
    return _mm512_load_ps(reinterpret_cast<const float*>(row) + k);
  }
  static __m512 load_partial(const std::uint8_t* row, std::size_t k, std::size_t r) {
    return F32Weights512::load_partial(row, k, r);
  }
};

/// Whether every weight row of the `count` products starts on a 64-byte
/// boundary.
bool rows_on_lines(const detail::FloatProblem* problems, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i)
    if (reinterpret_cast<std::uintptr_t>(problems[i].w) % 64 != 0 ||
        problems[i].w_row_bytes % 64 != 0)
      return false;
  return true;
}

struct F16Weights512 {
  static constexpr std::size_t kBytes = 2;
  static __m512 load(const std::uint8_t* row, std::size_t k) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
  static __m512 load_partial(const std::uint8_t* row, std::size_t k, std::size_t r) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(first_lanes(r), row + 2 * k));
  }
};

struct Bf16Weights512 {
  static constexpr std::size_t kBytes = 2;
  static __m512 widen(__m256i bf16) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(bf16), 16));
  }
  static __m512 load(const std::uint8_t* row, std::size_t k) {
    return widen(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * k)));
  }
  static __m512 load_partial(const std::uint8_t* row, std::size_t k, std::size_t r) {
    return widen(_mm256_maskz_loadu_epi16(first_lanes(r), row + 2 * k));
  }
};

/// Block widths for 4, 3, 2 and 1 rows: at most 24 accumulators and their
/// weight registers within the 32 zmm registers. One row streams its
/// weights from memory, and 8 rows of them at a time ran 15-30% faster than
/// 12 (Zen 5, F16, K = 2048 and 5632).
struct Avx512Shapes {
  static constexpr int NR4 = 6, NR3 = 6, NR2 = 8, NR1 = 8;
};

} // namespace

void detail::float_linear_avx512(TensorType type, const FloatProblem* problems, std::size_t count,
                                 std::size_t m) {
  // The same loads either way, and so the same bits.
  if (type == TensorType::F32 && rows_on_lines(problems, count))
    return run_float_tiles<FloatKernel<Avx512Simd, F32AlignedWeights512>, Avx512Shapes>(problems,
                                                                                        count, m);
  run_float_tiles_of<Avx512Simd, Avx512Shapes, F32Weights512, F16Weights512, Bf16Weights512>(
      type, problems, count, m);
}

} // namespace caflm

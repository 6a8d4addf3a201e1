#pragma once

#include "caflm/cpu/cpu_kernels.hpp"

#include <cstddef>
#include <initializer_list>

// Linear layers on the CPU (AVX2 + FMA, and AVX-512 where the CPU has it;
// OpenMP), batch invariant.
//
// Every output element y[r, n] is computed in one fixed order that depends on
// K and the instruction set alone: for F32/F16/BF16 weights, one accumulator
// of 8 lanes (AVX2) or 16 (AVX-512) takes fma(x[r, k..k+L], w[n, k..k+L])
// chunk by chunk along K (a partial last chunk zero-padded), then a fixed
// horizontal sum, then + bias[n] (caflm/cpu/float_matmul_kernels.hpp). The
// 16-lane kernels run prefill twice as fast or more where the CPU executes
// AVX-512 at full width (measured on AMD Zen 5). For quantized weights (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, Q2_K .. Q6_K) the row of x is first quantized on its own, as llama.cpp does, to Q8_0 (for
// Q4_0, Q5_0, Q8_0), Q8_1 (Q4_1, Q5_1) or Q8_K (the K-quants); each block's integer dot product is
// exact, and a float accumulator takes the scaled block sums block by block
// (caflm/cpu/quantized_matmul.hpp and the kernel files say exactly how). The kernels block over
// several rows and columns at once so that each loaded weight is reused, but every block shape
// performs exactly these operations per element, and threads split only the
// output columns, in tiles whose width never changes an element's arithmetic.
// So a row's result is bitwise the same at any batch size, any position in
// the batch and any thread count.
//
// Quantized weights are read in place (from the memory-mapped file): each
// group of 4 output columns (32 for AMX) is unpacked into per-thread scratch
// that then meets every row of the batch. All kernels come for AVX2 and for
// AVX-512 (F, BW, VL, DQ and VNNI), and the quantized ones for AMX-INT8
// tiles too, chosen at run time; they give results that differ in the last
// bits (16 float lanes instead of 8; whole-block integer sums on AMX), each
// batch invariant on its own; so results on a CPU without AVX-512 or AMX (or
// with CAFLM_MATMUL_ISA set lower) differ in the last bits from those on one
// with them. AMX runs at every batch size, one row as well as 512, so that a
// row's bits never depend on which kernel its batch size picked.
//
// OpenBLAS is not used, not even for F32. Measured with OpenBLAS 0.3.21
// (pthread), cblas_sgemm(RowMajor, NoTrans, Trans), against each row computed
// alone: the library picks its kernels at run time from the CPU, and each
// choice breaks invariance its own way. This Sapphire Rapids-class host is
// detected as "Prescott" (SSE3): rows differ between odd and even M. With the
// SkylakeX/Cooperlake kernels, small M (up to 6 in the shapes tried) takes
// another path than larger M. With the Haswell kernels (also chosen on AMD
// Zen), a row's bits change with its position inside a 16-row call and with
// the thread count. One discipline did give invariant rows with every kernel
// tried: rows zero-padded to tiles of 8, fixed 64-column tiles, one thread per
// call. But that rests on undocumented kernel internals of whatever CPU the
// library detects (16-row tiles already fail on Haswell), and it was several
// times slower than these kernels with the Prescott and Haswell kernels
// (single-threaded, K = 768, N = 2048: 1.5-1.8 against 14 GFLOP/s at M = 1,
// 10-13 against 34 at M = 128).

namespace caflm {

/// The instruction sets of the matmul kernels.
enum class MatmulIsa {
  Avx2,   ///< AVX2 + FMA + F16C (the build's baseline, x86-64-v3)
  Avx512, ///< AVX-512 F, BW, VL, DQ and VNNI
  /// AVX-512 and AMX-INT8 tiles for quantized weights (float weights as
  /// Avx512: AMX's BF16 would round them).
  Amx,
};

/// "avx2", "avx512" or "amx".
const char* to_string(MatmulIsa isa);

/// Whether this CPU can run the kernels of `isa` (for Amx: and the kernel
/// lets this process use the tiles, which the first call asks for).
bool matmul_isa_supported(MatmulIsa isa);

/// The instruction set linear() uses: the highest this CPU supports, unless
/// the environment variable CAFLM_MATMUL_ISA (read once) names a lower one
/// (avx2, avx512).
MatmulIsa default_matmul_isa();

/// y = x · W^T (+ bias): y[r, n] = sum_k x[r, k] * W[n, k] + bias[n], for a
/// weight W of any weight TensorType (kWeightTypes) stored [N, K] as GGUF does
/// (`w.rows` = N, `w.cols` = K; for quantized types, K a whole number of
/// blocks: 32, or 256 for the K-quants). `bias` may be null. Throws
/// std::invalid_argument, naming the type, for a type that is not a weight
/// type (Q8_1, Q8_K) or a K that is not whole blocks.
void linear(const WeightView& w, const float* __restrict__ x /* [m, K] */, size_t m,
            float* __restrict__ y /* [m, N] */, const float* __restrict__ bias /* [N] or null */);

/// One product of linear_shared_input: y = x · w^T (+ bias).
struct LinearOutput {
  const WeightView* w;
  float* y;          // [m, w->rows]
  const float* bias; // [w->rows] or null
};

/// linear() of several weights over the same x, as a layer's q, k and v
/// projections or its gate and up: the same bits, with x quantized once per
/// activation format that the quantized weights among them take rather than
/// once per weight, and the products' column tiles shared out in one
/// parallel loop (float weights of one type) or region (quantized ones)
/// rather than a fork and join each. Throws as linear() does; a quantized
/// weight is checked before it joins the products waiting to run, so one
/// that is refused leaves those waiting unrun.
void linear_shared_input(const float* __restrict__ x /* [m, K] */, size_t m,
                         std::initializer_list<LinearOutput> outputs);

/// linear_shared_input with the kernels of `isa`.
void linear_shared_input(const float* __restrict__ x /* [m, K] */, size_t m,
                         std::initializer_list<LinearOutput> outputs, MatmulIsa isa);

/// linear() with the kernels of `isa`, so that tests and benchmarks can run
/// each path.
/// Throws std::invalid_argument when this CPU cannot run `isa`.
void linear(const WeightView& w, const float* __restrict__ x /* [m, K] */, size_t m,
            float* __restrict__ y /* [m, N] */, const float* __restrict__ bias /* [N] or null */,
            MatmulIsa isa);

} // namespace caflm

#pragma once

#include "caflm/cpu/cpu_kernels.hpp"

#include <cstddef>

// Linear layers on the CPU (AVX2 + FMA, OpenMP), batch invariant.
//
// Every output element y[r, n] is computed in one fixed order that depends on
// K alone: for F32/F16/BF16 weights, one 8-lane accumulator takes
// fma(x[r, k..k+8], w[n, k..k+8]) chunk by chunk along K (a partial last chunk
// zero-padded), then a fixed horizontal sum, then + bias[n]. For Q8_0 weights
// the row of x is first quantized to Q8_0 blocks on its own (as llama.cpp
// does), each block's integer dot product is exact, and the 8-lane float
// accumulator takes fma(d_w * d_x, block sums) block by block. The kernels
// block over several rows and columns at once so that each loaded weight is
// reused, but every block shape performs exactly these operations per element,
// and threads split only the output columns in fixed tiles. So a row's result
// is bitwise the same at any batch size, any position in the batch and any
// thread count.
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

/// y = x · W^T (+ bias): y[r, n] = sum_k x[r, k] * W[n, k] + bias[n], for a
/// weight W of any TensorType stored [N, K] as GGUF does (`w.rows` = N,
/// `w.cols` = K; for Q8_0, K a multiple of 32). `bias` may be null.
/// Throws std::invalid_argument for a Q8_0 weight whose K is not a multiple of 32.
void linear(const WeightView& w, const float* __restrict__ x /* [m, K] */, size_t m,
            float* __restrict__ y /* [m, N] */, const float* __restrict__ bias /* [N] or null */);

} // namespace caflm

#pragma once

// The linear layer on the GPU, y[m, N] = x[m, K] * W[N, K]^T (+ bias[N]):
// host-side launch planning, free of CUDA headers so CPU-only code and tests
// can include it. The kernels and their launcher are in gemm_kernels.cuh.
//
// Why own kernels and not cuBLAS: cuBLAS (and cuBLASLt) choose their
// algorithm, tile shape and split-K factor from the problem size, M included,
// so a row's result would change with how many other rows share the batch.
// caflm promises that a sequence's results are bitwise the same whatever else
// shares its step; the kernels here reduce each output element over K in one
// order that depends only on K and the weight type.
//
// Weights stay in their GGUF bytes on the device (uploaded once) and are
// dequantized in the kernel, against FP32 activations that are never
// quantized: every product is an FP32 weight value (decoded exactly as
// dequantize_row decodes it) times an FP32 activation, accumulated in FP32.

#include <cstdint>

#include "caflm/gguf/tensor_type.hpp"

namespace caflm::cuda {

/// Values of K one lane of a warp decodes and multiplies per step.
inline constexpr std::uint32_t kGemmValuesPerLane = 8;
/// Values of K one warp covers per step (32 lanes of kGemmValuesPerLane).
inline constexpr std::uint32_t kGemmValuesPerWarpStep = 32 * kGemmValuesPerLane;
/// The largest number of rows of x one warp computes against one weight row
/// it has read (the reuse of a weight row across rows of x).
inline constexpr std::uint32_t kGemmMaxRowsPerTile = 16;

// How each tile size is launched. None of this changes the arithmetic of an
// output element, only which warp computes it and when its loads are issued.
// Chosen by timing every decode-step matrix of TinyLlama-1.1B in BF16 on an
// H200, at m = 1 ... 256 (the variants and their times: the README's CUDA
// section). At one row a warp streams one weight row and is bound by memory;
// from four rows on, a warp that reads the rows of x once for several
// columns does fewer loads of x per multiply, which is what bounds it there.

/// Warps per thread block for a tile of `rows_per_tile` rows of x.
constexpr std::uint32_t gemm_warps_per_block(std::uint32_t rows_per_tile) {
  return rows_per_tile >= 16 ? 4 : 8;
}

/// Output columns one warp computes for a tile of `rows_per_tile` rows: it
/// reads each value of x once for all of them.
constexpr std::uint32_t gemm_columns_per_warp(std::uint32_t rows_per_tile) {
  return rows_per_tile == 4 || rows_per_tile >= 16 ? 4 : rows_per_tile == 8 ? 2 : 1;
}

/// How a linear layer is launched: a grid of (ceil(N / (warps *
/// columns_per_warp)), ceil(m / rows_per_tile)) blocks of
/// `threads_per_block` threads. The tile shape only changes how many rows
/// and columns share a read of the weights and of x, never the arithmetic of
/// an output element.
struct GemmLaunchPlan {
  std::uint32_t rows_per_tile;     // 1, 2, 4, 8 or 16
  std::uint32_t columns_per_warp;  // gemm_columns_per_warp(rows_per_tile)
  std::uint32_t grid_x;            // blocks over N
  std::uint32_t grid_y;            // blocks over m
  std::uint32_t threads_per_block; // 32 * gemm_warps_per_block(rows_per_tile)
};

/// True for the types the GEMM decodes: F32, F16, BF16, Q4_0, Q4_1, Q5_0,
/// Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.
bool gemm_supports(TensorType type);

/// Checks the shape and picks the launch: rows_per_tile is the smallest
/// power of two >= m, at most kGemmMaxRowsPerTile. Throws
/// std::invalid_argument naming the fault: an unsupported type, K not whole
/// blocks of the type, K not a multiple of kGemmValuesPerLane (8; float
/// types), N or K of zero, or a grid beyond CUDA's limits. m == 0 gives
/// grid_y == 0 (nothing to launch).
GemmLaunchPlan plan_gemm_launch(TensorType type, std::uint64_t m, std::uint64_t n_out,
                                std::uint64_t k);

} // namespace caflm::cuda

// The batch-invariant linear layer: each warp computes a few output columns
// n (gemm_columns_per_warp), each lane decoding 8 consecutive weights of each
// of their rows per step and multiplying them with the same 8 activations of
// every row of x in its tile.
//
// Reduction order of y[r, n], fixed by K and the weight type alone:
//   lane l accumulates, with fmaf in FP32, the products of elements
//   k = k0 + 8 l + i for k0 = 0, 256, 512, ... and i = 0..7 in that order;
//   the 32 lane sums are then added by a butterfly of __shfl_xor_sync over
//   offsets 16, 8, 4, 2, 1; the bias (if any) is added last.
// Rows of x only share the read of a weight row, and columns the read of a
// row of x; no value of one row or column enters another's arithmetic, and a
// row's operations are the same whatever tile it falls in, how many rows the
// tile has or how many columns its warp computes (the tile sizes are template
// instances of the same code, and the float operations are written as
// explicit intrinsics, so the compiler cannot contract them differently).
// Weights are decoded (detail::decode8, gemm_kernels.cuh) with
// __fmul_rn/__fadd_rn/__fsub_rn in the operation order of dequantize_row, so
// the decoded values equal the CPU's; the per-lane loop is
// detail::accumulate_lane, which the tests also run on the host.
// Performance: at m = 1 every weight byte is read once, by lanes of one warp
// reading adjacent bytes (vector loads for F32/F16/BF16, 2-byte loads for
// block types, whose fields are only 2-byte aligned), with several steps'
// loads in flight; for larger m a weight row read serves up to 16 rows of x,
// and a read of x up to 4 columns.

#include "caflm/cuda/gemm_kernels.cuh"

#include "caflm/cuda/cuda_check.hpp"
#include "caflm/cuda/programmatic_launch.cuh"

#include <limits>
#include <stdexcept>
#include <string>

namespace caflm::cuda {

namespace {

using namespace detail;

// ---- the kernel ----

// The tile shape as constants device code can read (the functions in
// gemm_kernels.hpp are host-only).
template <int kRows>
constexpr int kColumnsPerWarp = static_cast<int>(gemm_columns_per_warp(kRows));
template <int kRows>
constexpr std::uint32_t kWarpsPerBlock = gemm_warps_per_block(kRows);
/// Bytes of one L2 cache line.
constexpr std::uint64_t kL2LineBytes = 128;

template <TensorType kType, int kRows>
__global__ void __launch_bounds__(32 * kWarpsPerBlock<kRows>)
    linear_kernel(const std::uint8_t* __restrict__ weight, // [N, row_bytes] GGUF bytes
                  std::uint64_t row_bytes,
                  const float* __restrict__ x, // [m, x_stride]
                  std::uint64_t x_stride, std::uint32_t m, std::uint32_t n_out, std::uint32_t k_len,
                  const float* __restrict__ bias, // [N] or null
                  float* __restrict__ y,          // [m, y_stride]
                  std::uint64_t y_stride, bool programmatic) {
  constexpr int kColumns = kColumnsPerWarp<kRows>;
  constexpr std::uint32_t kWarps = kWarpsPerBlock<kRows>;
  const std::uint32_t lane = threadIdx.x % 32;
  const std::uint32_t first_column = (blockIdx.x * kWarps + threadIdx.x / 32) * kColumns;
  if (first_column >= n_out)
    return; // the whole warp: the shuffles below see only full warps
  const std::uint32_t first_row = blockIdx.y * kRows;

  // Rows past m read row m - 1, columns past N weight row N - 1 (valid
  // memory); neither is written.
  const float* x_rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    x_rows[r] = x + min(first_row + r, m - 1) * x_stride;
  const std::uint8_t* w_rows[kColumns];
#pragma unroll
  for (int c = 0; c < kColumns; ++c)
    w_rows[c] = weight + min(first_column + c, n_out - 1) * row_bytes;

  // The weights do not depend on the kernel before this one: launched
  // programmatically, the warp fetches its rows into L2 while that kernel may
  // still run; x, y and the bias are touched only after it has ended.
  if (programmatic) {
    for (std::uint64_t offset = std::uint64_t{lane} * kL2LineBytes; offset < row_bytes;
         offset += 32 * kL2LineBytes) {
#pragma unroll
      for (int c = 0; c < kColumns; ++c)
        prefetch_to_l2(w_rows[c] + offset);
    }
  }
  wait_for_previous_kernel();
  allow_next_kernel_to_start();

  float acc[kColumns][kRows];
#pragma unroll
  for (int c = 0; c < kColumns; ++c) {
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      acc[c][r] = 0.0f;
  }

  accumulate_lane<kType, kRows, kColumns>(w_rows, x_rows, k_len, lane, acc);

  // Butterfly: every lane ends with the same sum (IEEE addition commutes).
#pragma unroll
  for (int c = 0; c < kColumns; ++c) {
    const std::uint32_t n = first_column + c;
    const float b = bias != nullptr && n < n_out ? bias[n] : 0.0f;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2)
        acc[c][r] = __fadd_rn(acc[c][r], __shfl_xor_sync(0xFFFFFFFFu, acc[c][r], offset));
      // The writes of a warp's outputs are spread over its lanes.
      if (lane == static_cast<std::uint32_t>((c * kRows + r) % 32) && first_row + r < m &&
          n < n_out)
        y[(first_row + r) * y_stride + n] = bias != nullptr ? __fadd_rn(acc[c][r], b) : acc[c][r];
    }
  }
}

template <TensorType kType, int kRows>
void launch_tile(const GemmLaunchPlan& plan, const WeightView& weight, std::uint64_t row_bytes,
                 const float* x, std::uint64_t x_stride, std::uint32_t m, const float* bias,
                 float* y, std::uint64_t y_stride, bool programmatic, cudaStream_t stream) {
  launch_kernel(linear_kernel<kType, kRows>, dim3(plan.grid_x, plan.grid_y),
                dim3(plan.threads_per_block), 0, stream, programmatic,
                static_cast<const std::uint8_t*>(weight.data), row_bytes, x, x_stride, m,
                static_cast<std::uint32_t>(weight.rows), static_cast<std::uint32_t>(weight.cols),
                bias, y, y_stride, programmatic);
}

template <TensorType kType>
void launch_type(const GemmLaunchPlan& plan, const WeightView& weight, std::uint64_t row_bytes,
                 const float* x, std::uint64_t x_stride, std::uint32_t m, const float* bias,
                 float* y, std::uint64_t y_stride, bool programmatic, cudaStream_t stream) {
  switch (plan.rows_per_tile) {
  case 1:
    return launch_tile<kType, 1>(plan, weight, row_bytes, x, x_stride, m, bias, y, y_stride,
                                 programmatic, stream);
  case 2:
    return launch_tile<kType, 2>(plan, weight, row_bytes, x, x_stride, m, bias, y, y_stride,
                                 programmatic, stream);
  case 4:
    return launch_tile<kType, 4>(plan, weight, row_bytes, x, x_stride, m, bias, y, y_stride,
                                 programmatic, stream);
  case 8:
    return launch_tile<kType, 8>(plan, weight, row_bytes, x, x_stride, m, bias, y, y_stride,
                                 programmatic, stream);
  default:
    return launch_tile<kType, kGemmMaxRowsPerTile>(plan, weight, row_bytes, x, x_stride, m, bias, y,
                                                   y_stride, programmatic, stream);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
}

} // namespace

bool gemm_supports(TensorType type) {
  switch (type) {
  case TensorType::F32:
  case TensorType::F16:
  case TensorType::BF16:
  case TensorType::Q4_0:
  case TensorType::Q4_1:
  case TensorType::Q5_0:
  case TensorType::Q5_1:
  case TensorType::Q8_0:
  case TensorType::Q2_K:
  case TensorType::Q3_K:
  case TensorType::Q4_K:
  case TensorType::Q5_K:
  case TensorType::Q6_K:
    return true;
  default:
    return false;
  }
}

GemmLaunchPlan plan_gemm_launch(TensorType type, std::uint64_t m, std::uint64_t n_out,
                                std::uint64_t k) {
  const std::string what = std::string("linear layer (") + to_string(type) + ", m " +
                           std::to_string(m) + ", N " + std::to_string(n_out) + ", K " +
                           std::to_string(k) + ")";
  if (!gemm_supports(type))
    throw std::invalid_argument(what + ": the GPU GEMM does not decode this type");
  if (n_out == 0 || k == 0)
    throw std::invalid_argument(what + ": N and K must be positive");
  tensor_row_bytes(type, k); // throws when K is not whole blocks
  if (k % kGemmValuesPerLane != 0)
    throw std::invalid_argument(what + ": K must be a multiple of " +
                                std::to_string(kGemmValuesPerLane));
  constexpr std::uint64_t kU32 = std::numeric_limits<std::uint32_t>::max();
  if (m > kU32 || n_out > kU32 || k > kU32 - kGemmValuesPerWarpStep)
    throw std::invalid_argument(what + ": dimensions must fit 32 bits");
  GemmLaunchPlan plan{};
  plan.rows_per_tile = 1;
  while (plan.rows_per_tile < m && plan.rows_per_tile < kGemmMaxRowsPerTile)
    plan.rows_per_tile *= 2;
  plan.columns_per_warp = gemm_columns_per_warp(plan.rows_per_tile);
  const std::uint32_t warps = gemm_warps_per_block(plan.rows_per_tile);
  plan.threads_per_block = 32 * warps;
  const std::uint64_t columns_per_block = std::uint64_t{warps} * plan.columns_per_warp;
  const std::uint64_t grid_x = (n_out + columns_per_block - 1) / columns_per_block;
  const std::uint64_t grid_y = (m + plan.rows_per_tile - 1) / plan.rows_per_tile;
  if (grid_x > 0x7FFFFFFFu || grid_y > 65535)
    throw std::invalid_argument(what + ": too large for one launch grid");
  plan.grid_x = static_cast<std::uint32_t>(grid_x);
  plan.grid_y = static_cast<std::uint32_t>(grid_y);
  return plan;
}

void launch_linear(const WeightView& weight, const float* x, std::uint64_t x_stride,
                   std::uint64_t m, const float* bias, float* y, std::uint64_t y_stride,
                   cudaStream_t stream, bool programmatic) {
  const GemmLaunchPlan plan = plan_gemm_launch(weight.type, m, weight.rows, weight.cols);
  if (m == 0)
    return;
  if (!aligned16(weight.data) || !aligned16(x) || x_stride % 4 != 0)
    throw std::invalid_argument(
        "launch_linear: the weights and x must be 16-byte aligned and x's row stride a "
        "multiple of 4 floats");
  if (x_stride < weight.cols || y_stride < weight.rows)
    throw std::invalid_argument("launch_linear: a row stride is shorter than its row");
  const std::uint64_t row_bytes = tensor_row_bytes(weight.type, weight.cols);
  const auto rows = static_cast<std::uint32_t>(m);
  switch (weight.type) {
#define CAFLM_GEMM_CASE(T)                                                                         \
  case TensorType::T:                                                                              \
    launch_type<TensorType::T>(plan, weight, row_bytes, x, x_stride, rows, bias, y, y_stride,      \
                               programmatic, stream);                                              \
    break;
    CAFLM_GEMM_CASE(F32)
    CAFLM_GEMM_CASE(F16)
    CAFLM_GEMM_CASE(BF16)
    CAFLM_GEMM_CASE(Q4_0)
    CAFLM_GEMM_CASE(Q4_1)
    CAFLM_GEMM_CASE(Q5_0)
    CAFLM_GEMM_CASE(Q5_1)
    CAFLM_GEMM_CASE(Q8_0)
    CAFLM_GEMM_CASE(Q2_K)
    CAFLM_GEMM_CASE(Q3_K)
    CAFLM_GEMM_CASE(Q4_K)
    CAFLM_GEMM_CASE(Q5_K)
    CAFLM_GEMM_CASE(Q6_K)
#undef CAFLM_GEMM_CASE
  default:
    throw std::invalid_argument("launch_linear: unsupported weight type"); // plan refused it
  }
}

} // namespace caflm::cuda

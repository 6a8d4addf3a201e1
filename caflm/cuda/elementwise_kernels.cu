#include "caflm/cuda/elementwise_kernels.cuh"

#include "caflm/cuda/cuda_check.hpp"
#include "caflm/cuda/gemm_kernels.cuh"
#include "caflm/cuda/programmatic_launch.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace caflm::cuda {

namespace {

/// Threads per block of the purely elementwise kernels (any value gives the
/// same bits: no element's result depends on another's).
constexpr int kElementwiseThreads = 256;
/// Values per Q8_0 block and its bytes (an f16 scale, 32 signed bytes), as
/// gguf/quant_blocks.hpp's BlockQ8_0.
constexpr int kQ8_0Values = 32;
constexpr int kQ8_0Bytes = 2 + kQ8_0Values;

/// Blocks for `n` elements at kElementwiseThreads per block, each thread
/// striding over the rest when the grid is capped.
unsigned elementwise_blocks(std::size_t n) {
  const std::size_t blocks = (n + kElementwiseThreads - 1) / kElementwiseThreads;
  constexpr std::size_t kMaxBlocks = 65535u * 16u;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}

/// Rows are one block each on the grid's x dimension (at most 2^31 - 1).
void check_row_count(const char* kernel, std::size_t rows) {
  if (rows > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
    throw std::invalid_argument(std::string(kernel) + ": " + std::to_string(rows) +
                                " rows exceed one grid");
  }
}

// -- RMSNorm ------------------------------------------------------------------

/// One block per row: thread t sums x[t], x[t + T], ... in order, then the
/// block adds the partial sums in a fixed tree (T a power of two).
__global__ void rms_norm_kernel(const float* x /* [rows, d] */, std::size_t d,
                                const float* __restrict__ weight /* [d] */, float eps,
                                float* out /* [rows, d] */) {
  extern __shared__ float partial[]; // [blockDim.x]
  wait_for_previous_kernel();
  allow_next_kernel_to_start(); // a linear layer's weights may stream in
  const std::size_t row = blockIdx.x;
  const float* xr = x + row * d;
  float* yr = out + row * d;
  float sum = 0.0f;
  for (std::size_t i = threadIdx.x; i < d; i += blockDim.x) {
    sum += xr[i] * xr[i];
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (unsigned width = blockDim.x / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      partial[threadIdx.x] += partial[threadIdx.x + width];
    }
    __syncthreads();
  }
  const float mean = partial[0] / static_cast<float>(d);
  // ggml scales first and multiplies by the weight in a second operation.
  const float scale = 1.0f / sqrtf(mean + eps);
  for (std::size_t i = threadIdx.x; i < d; i += blockDim.x) {
    yr[i] = (xr[i] * scale) * weight[i];
  }
}

void launch_rms_norm_rows(const char* name, const float* x, std::size_t rows, std::size_t d,
                          const float* weight, float eps, float* out, cudaStream_t stream,
                          bool programmatic) {
  if (d == 0) {
    throw std::invalid_argument(std::string(name) + ": rows of 0 values");
  }
  check_row_count(name, rows);
  if (rows == 0) {
    return;
  }
  const int threads = rms_norm_threads(d);
  // `out` may alias `x` (not __restrict__ there): each element is read and
  // written by one thread, the writes after the whole row's sum.
  launch_kernel(rms_norm_kernel, dim3(static_cast<unsigned>(rows)), dim3(threads),
                threads * sizeof(float), stream, programmatic, x, d, weight, eps, out);
}

// -- RoPE -----------------------------------------------------------------------

/// One thread per (token, head, pair). The pair's angle is computed as the CPU
/// does, by i repeated multiplications of the position by theta_scale, so
/// that both round identically.
__global__ void rope_kernel(float* __restrict__ x /* [m, n_heads, head_dim] */, std::size_t m,
                            std::size_t n_heads, std::size_t head_dim,
                            const std::int32_t* __restrict__ positions /* [m] */, float theta_scale,
                            const float* __restrict__ freq_factors /* [d/2] */, float freq_scale,
                            float attn_factor, bool neox) {
  wait_for_previous_kernel();
  allow_next_kernel_to_start();
  const std::size_t half = head_dim / 2;
  const std::size_t total = m * n_heads * half;
  for (std::size_t index = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x;
       index < total; index += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const std::size_t pair = index % half;
    const std::size_t head_row = index / half; // token * n_heads + head
    const std::size_t token = head_row / n_heads;
    float theta = static_cast<float>(positions[token]);
    for (std::size_t i = 0; i < pair; ++i) {
      theta = __fmul_rn(theta, theta_scale);
    }
    const float extrapolated =
        freq_factors != nullptr ? __fdiv_rn(theta, freq_factors[pair]) : theta;
    const float angle = __fmul_rn(freq_scale, extrapolated);
    const float c = __fmul_rn(cosf(angle), attn_factor);
    const float s = __fmul_rn(sinf(angle), attn_factor);
    float* v = x + head_row * head_dim;
    const std::size_t first = neox ? pair : 2 * pair;
    const std::size_t second = neox ? pair + half : 2 * pair + 1;
    const float x0 = v[first];
    const float x1 = v[second];
    v[first] = x0 * c - x1 * s;
    v[second] = x0 * s + x1 * c;
  }
}

// -- SwiGLU, bias, residual -----------------------------------------------------

__global__ void silu_mul_kernel(const float* gate /* [n] */, const float* up /* [n] */,
                                std::size_t n, float* out /* [n] */) {
  wait_for_previous_kernel();
  allow_next_kernel_to_start(); // the down projection's weights may stream in
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const float g = gate[i];
    // silu(g) = g / (1 + exp(-g)), as ggml writes it.
    out[i] = (g / (1.0f + expf(-g))) * up[i];
  }
}

__global__ void add_bias_kernel(float* __restrict__ x /* [m, n] */, std::size_t total,
                                std::size_t n, const float* __restrict__ bias /* [n] */) {
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    x[i] += bias[i % n];
  }
}

__global__ void residual_add_kernel(const float* a /* [n] */, const float* b /* [n] */,
                                    std::size_t n, float* out /* [n] */) {
  wait_for_previous_kernel();
  allow_next_kernel_to_start();
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = a[i] + b[i];
  }
}

// -- embedding gather ---------------------------------------------------------

/// Value `j` of a row of `type` starting at `row` (byte pointer: F16/BF16/Q8_0
/// rows need not be 4-byte aligned, so multi-byte fields are read bytewise
/// where they may straddle).
__device__ float dequantize_element(const unsigned char* __restrict__ row, TensorType type,
                                    std::uint64_t j) {
  switch (type) {
  case TensorType::F32: {
    const unsigned bits = static_cast<unsigned>(row[4 * j]) |
                          (static_cast<unsigned>(row[4 * j + 1]) << 8) |
                          (static_cast<unsigned>(row[4 * j + 2]) << 16) |
                          (static_cast<unsigned>(row[4 * j + 3]) << 24);
    return __uint_as_float(bits);
  }
  case TensorType::F16: {
    const auto bits = static_cast<unsigned short>(row[2 * j] | (row[2 * j + 1] << 8));
    return __half2float(__ushort_as_half(bits));
  }
  case TensorType::BF16: {
    const unsigned bits =
        (static_cast<unsigned>(row[2 * j]) << 16) | (static_cast<unsigned>(row[2 * j + 1]) << 24);
    return __uint_as_float(bits);
  }
  case TensorType::Q8_0: {
    const unsigned char* block = row + (j / kQ8_0Values) * kQ8_0Bytes;
    const auto d_bits = static_cast<unsigned short>(block[0] | (block[1] << 8));
    const auto q = static_cast<signed char>(block[2 + j % kQ8_0Values]);
    return __fmul_rn(__half2float(__ushort_as_half(d_bits)), static_cast<float>(q));
  }
  default:
    return __int_as_float(0x7fc00000); // refused by the launcher
  }
}

/// One thread per output element.
__global__ void embedding_gather_kernel(const unsigned char* __restrict__ table
                                        /* [rows, row_bytes] */,
                                        TensorType type, std::uint64_t rows, std::uint64_t cols,
                                        std::uint64_t row_bytes,
                                        const TokenId* __restrict__ tokens /* [m] */, std::size_t m,
                                        float* __restrict__ out /* [m, cols] */) {
  const std::size_t total = m * cols;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const TokenId token = tokens[i / cols];
    const std::uint64_t j = i % cols;
    out[i] = token < rows ? dequantize_element(table + token * row_bytes, type, j)
                          : __int_as_float(0x7fc00000);
  }
}

/// One thread per 8 values of an output row, decoding block-quantized rows
/// exactly as the linear kernel does (gemm_kernels.cuh's decode8).
template <TensorType kType>
__global__ void embedding_gather_blocks_kernel(const unsigned char* __restrict__ table
                                               /* [rows, row_bytes] */,
                                               std::uint64_t rows, std::uint64_t cols,
                                               std::uint64_t row_bytes,
                                               const TokenId* __restrict__ tokens /* [m] */,
                                               std::size_t m, float* __restrict__ out
                                               /* [m, cols] */) {
  const std::size_t groups_per_row = cols / 8;
  const std::size_t total = m * groups_per_row;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    const TokenId token = tokens[i / groups_per_row];
    const auto k = static_cast<std::uint32_t>(8 * (i % groups_per_row));
    float* row_out = out + (i / groups_per_row) * cols + k;
    if (token >= rows) {
      for (int j = 0; j < 8; ++j)
        row_out[j] = __int_as_float(0x7fc00000);
      continue;
    }
    float w[8];
    detail::decode8<kType>(table + token * row_bytes, k, w);
    for (int j = 0; j < 8; ++j)
      row_out[j] = w[j];
  }
}

/// One thread per output element: out[r, j] = x[rows[r], j].
__global__ void gather_rows_kernel(const float* __restrict__ x /* [*, d] */,
                                   const std::uint32_t* __restrict__ rows /* [n_rows] */,
                                   std::size_t n_rows, std::size_t d,
                                   float* __restrict__ out /* [n_rows, d] */) {
  wait_for_previous_kernel();
  allow_next_kernel_to_start();
  const std::size_t total = n_rows * d;
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    out[i] = x[static_cast<std::size_t>(rows[i / d]) * d + i % d];
}

/// The block-quantized types the gather decodes with decode8.
bool gathers_by_blocks(TensorType type) {
  switch (type) {
  case TensorType::Q4_0:
  case TensorType::Q4_1:
  case TensorType::Q5_0:
  case TensorType::Q5_1:
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

template <TensorType kType>
void launch_gather_blocks(const void* table, std::uint64_t rows, std::uint64_t cols,
                          const TokenId* tokens, std::size_t m, float* out, cudaStream_t stream) {
  embedding_gather_blocks_kernel<kType>
      <<<elementwise_blocks(m * (cols / 8)), kElementwiseThreads, 0, stream>>>(
          static_cast<const unsigned char*>(table), rows, cols, tensor_row_bytes(kType, cols),
          tokens, m, out);
  CAFLM_CUDA_CHECK_LAUNCH(embedding_gather_blocks_kernel);
}

} // namespace

int rms_norm_threads(std::size_t d) {
  int threads = 32;
  while (threads < 1024 && static_cast<std::size_t>(threads) * 4 < d) {
    threads *= 2;
  }
  return threads;
}

void launch_rms_norm(const float* x, std::size_t m, std::size_t d, const float* weight, float eps,
                     float* out, cudaStream_t stream, bool programmatic) {
  launch_rms_norm_rows("launch_rms_norm", x, m, d, weight, eps, out, stream, programmatic);
}

void launch_head_rms_norm(const float* x, std::size_t m, std::size_t n_heads, std::size_t head_dim,
                          const float* weight, float eps, float* out, cudaStream_t stream,
                          bool programmatic) {
  // Heads are contiguous rows of head_dim values: the same kernel, more rows.
  launch_rms_norm_rows("launch_head_rms_norm", x, m * n_heads, head_dim, weight, eps, out, stream,
                       programmatic);
}

float rope_theta_scale(float freq_base, std::size_t head_dim) {
  return std::pow(freq_base, -2.0f / static_cast<float>(head_dim));
}

void launch_rope(float* x, std::size_t m, std::size_t n_heads, const std::int32_t* positions,
                 const CudaRopeConfig& config, cudaStream_t stream, bool programmatic) {
  const std::size_t d = config.head_dim;
  if (d == 0 || d % 2 != 0) {
    throw std::invalid_argument("launch_rope: head_dim " + std::to_string(d) +
                                " is not a positive even number");
  }
  const std::size_t total = m * n_heads * (d / 2);
  if (total == 0) {
    return;
  }
  launch_kernel(rope_kernel, dim3(elementwise_blocks(total)), dim3(kElementwiseThreads), 0, stream,
                programmatic, x, m, n_heads, d, positions, rope_theta_scale(config.freq_base, d),
                config.freq_factors, config.freq_scale, config.attn_factor,
                config.mode == RopeMode::NeoX);
}

void launch_silu_mul(const float* gate, const float* up, std::size_t m, std::size_t f, float* out,
                     cudaStream_t stream, bool programmatic) {
  const std::size_t n = m * f;
  if (n == 0) {
    return;
  }
  launch_kernel(silu_mul_kernel, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads), 0, stream,
                programmatic, gate, up, n, out);
}

void launch_add_bias(float* x, std::size_t m, std::size_t n, const float* bias,
                     cudaStream_t stream) {
  const std::size_t total = m * n;
  if (total == 0) {
    return;
  }
  add_bias_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, stream>>>(x, total, n, bias);
  CAFLM_CUDA_CHECK_LAUNCH(add_bias_kernel);
}

void launch_residual_add(const float* a, const float* b, std::size_t n, float* out,
                         cudaStream_t stream, bool programmatic) {
  if (n == 0) {
    return;
  }
  launch_kernel(residual_add_kernel, dim3(elementwise_blocks(n)), dim3(kElementwiseThreads), 0,
                stream, programmatic, a, b, n, out);
}

bool embedding_gather_supports(TensorType type) {
  return type == TensorType::F32 || type == TensorType::F16 || type == TensorType::BF16 ||
         type == TensorType::Q8_0 || gathers_by_blocks(type);
}

void launch_gather_rows(const float* x, const std::uint32_t* rows, std::size_t n_rows,
                        std::size_t d, float* out, cudaStream_t stream, bool programmatic) {
  const std::size_t total = n_rows * d;
  if (total == 0)
    return;
  launch_kernel(gather_rows_kernel, dim3(elementwise_blocks(total)), dim3(kElementwiseThreads), 0,
                stream, programmatic, x, rows, n_rows, d, out);
}

void launch_embedding_gather(const void* table, TensorType type, std::uint64_t rows,
                             std::uint64_t cols, const TokenId* tokens, std::size_t m, float* out,
                             cudaStream_t stream) {
  if (!embedding_gather_supports(type)) {
    throw std::invalid_argument(std::string("launch_embedding_gather: table type ") +
                                caflm::to_string(type) + " is not one the gather decodes");
  }
  if (gathers_by_blocks(type)) {
    // plan_gemm_launch checks what decode8 needs: whole blocks of the type.
    (void)plan_gemm_launch(type, 1, rows, cols);
    if (m * cols == 0)
      return;
    switch (type) {
    case TensorType::Q4_0:
      return launch_gather_blocks<TensorType::Q4_0>(table, rows, cols, tokens, m, out, stream);
    case TensorType::Q4_1:
      return launch_gather_blocks<TensorType::Q4_1>(table, rows, cols, tokens, m, out, stream);
    case TensorType::Q5_0:
      return launch_gather_blocks<TensorType::Q5_0>(table, rows, cols, tokens, m, out, stream);
    case TensorType::Q5_1:
      return launch_gather_blocks<TensorType::Q5_1>(table, rows, cols, tokens, m, out, stream);
    case TensorType::Q2_K:
      return launch_gather_blocks<TensorType::Q2_K>(table, rows, cols, tokens, m, out, stream);
    case TensorType::Q3_K:
      return launch_gather_blocks<TensorType::Q3_K>(table, rows, cols, tokens, m, out, stream);
    case TensorType::Q4_K:
      return launch_gather_blocks<TensorType::Q4_K>(table, rows, cols, tokens, m, out, stream);
    case TensorType::Q5_K:
      return launch_gather_blocks<TensorType::Q5_K>(table, rows, cols, tokens, m, out, stream);
    default:
      return launch_gather_blocks<TensorType::Q6_K>(table, rows, cols, tokens, m, out, stream);
    }
  }
  if (type == TensorType::Q8_0 && cols % kQ8_0Values != 0) {
    throw std::invalid_argument("launch_embedding_gather: a Q8_0 row of " + std::to_string(cols) +
                                " values is not whole blocks of 32");
  }
  const std::size_t total = m * cols;
  if (total == 0) {
    return;
  }
  embedding_gather_kernel<<<elementwise_blocks(total), kElementwiseThreads, 0, stream>>>(
      static_cast<const unsigned char*>(table), type, rows, cols, tensor_row_bytes(type, cols),
      tokens, m, out);
  CAFLM_CUDA_CHECK_LAUNCH(embedding_gather_kernel);
}

} // namespace caflm::cuda

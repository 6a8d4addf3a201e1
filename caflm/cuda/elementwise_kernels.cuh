#pragma once

#include "caflm/gguf/tensor_type.hpp"
#include "caflm/kv/token_id.hpp"
#include "caflm/model/model_config.hpp"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

// Elementwise and per-row kernels of the forward pass on the GPU (the matrix
// products are in cuda/gemm_kernels.cuh): the CUDA counterparts of
// cpu/cpu_kernels.hpp, with the same semantics.
//
// Every pointer is device memory. Every launcher enqueues its kernel on
// `stream` and returns at once; it throws std::invalid_argument for bad
// shapes and std::runtime_error when the launch fails. Those taking
// `programmatic` launch their kernel programmatically when it is true (a
// device of compute capability 9.0 or later only): it may start while the
// kernel before it ends, and waits for it before touching memory
// (programmatic_launch.cuh).
//
// Batch invariance: a row's result depends only on that row's inputs. The
// per-row reductions (RMSNorm) run in one block per row whose size depends
// only on the row length, summing in a fixed strided order and then a fixed
// tree, never in an order that depends on the number of rows.

namespace caflm::cuda {

/// Threads of the block that normalizes one row of `d` values: a power of two
/// from 32 to 1024, about d/4, chosen from `d` alone (so that a row's sum is
/// reduced in the same order whatever the batch).
int rms_norm_threads(std::size_t d);

/// RMSNorm as ggml computes it: out = (x * 1/sqrt(mean(x^2) + eps)) * weight,
/// one block per row. `out` may equal `x`.
void launch_rms_norm(const float* x /* [m, d] */, std::size_t m, std::size_t d,
                     const float* weight /* [d] */, float eps, float* out /* [m, d] */,
                     cudaStream_t stream, bool programmatic = false);

/// RMSNorm of every head on its own with one weight shared by all heads
/// (qwen3's q_norm/k_norm). `out` may equal `x`.
void launch_head_rms_norm(const float* x /* [m, n_heads, head_dim] */, std::size_t m,
                          std::size_t n_heads, std::size_t head_dim,
                          const float* weight /* [head_dim] */, float eps,
                          float* out /* [m, n_heads, head_dim] */, cudaStream_t stream,
                          bool programmatic = false);

/// Rotary position embedding parameters, from the model's metadata (as
/// cpu/cpu_kernels.hpp's RopeConfig; `freq_factors` is device memory).
struct CudaRopeConfig {
  RopeMode mode = RopeMode::Interleaved;
  std::size_t head_dim = 0;   ///< d; must be even
  float freq_base = 10000.0f; ///< rope.freq_base (theta)
  const float* freq_factors =
      nullptr;              ///< [d/2] on the device, divisors of each pair's angle, or null
  float freq_scale = 1.0f;  ///< multiplies every angle (1 / linear scaling factor)
  float attn_factor = 1.0f; ///< multiplies cos and sin
};

/// base^(-2/d) computed on the host exactly as the CPU rope does (std::pow in
/// float), so that both multiply the same factor.
float rope_theta_scale(float freq_base, std::size_t head_dim);

/// Rotates every head of `x` in place by its token's position, with angles
/// computed as ggml does: theta_i = pos * base^(-2i/d) by repeated float
/// multiplication, divided by the pair's factor, times freq_scale, then
/// cosf/sinf times attn_factor. Pairs are (2i, 2i+1) interleaved, (i, i + d/2)
/// in NeoX mode. Call it once for q and once for k.
void launch_rope(float* x /* [m, n_heads, head_dim] */, std::size_t m, std::size_t n_heads,
                 const std::int32_t* positions /* [m] */, const CudaRopeConfig& config,
                 cudaStream_t stream, bool programmatic = false);

/// SwiGLU: out = silu(gate) * up, silu(g) = g / (1 + exp(-g)). `out` may
/// equal `gate` or `up`.
void launch_silu_mul(const float* gate /* [m, f] */, const float* up /* [m, f] */, std::size_t m,
                     std::size_t f, float* out /* [m, f] */, cudaStream_t stream,
                     bool programmatic = false);

/// x[row, j] += bias[j] for every row.
void launch_add_bias(float* x /* [m, n] */, std::size_t m, std::size_t n,
                     const float* bias /* [n] */, cudaStream_t stream);

/// out = a + b elementwise (the residual connection). `out` may equal `a` or `b`.
void launch_residual_add(const float* a /* [n] */, const float* b /* [n] */, std::size_t n,
                         float* out /* [n] */, cudaStream_t stream, bool programmatic = false);

/// out[r] = x[rows[r]] for rows of `d` floats: the rows whose logits a step
/// needs (each item's last token), gathered before the output projection.
void launch_gather_rows(const float* x /* [*, d] */, const std::uint32_t* rows /* [n_rows] */,
                        std::size_t n_rows, std::size_t d, float* out /* [n_rows, d] */,
                        cudaStream_t stream, bool programmatic = false);

/// True for the table types launch_embedding_gather reads: F32, F16, BF16,
/// Q8_0, and the legacy and K block types the linear kernel decodes.
bool embedding_gather_supports(TensorType type);

/// Copies each token's row of `table` ([rows, cols] elements of `type`, rows
/// of tensor_row_bytes(type, cols) bytes as GGUF stores them) to `out` as f32,
/// dequantized as ggml does (block types exactly as the linear kernel decodes
/// them). A token id outside the table cannot be reported
/// from the device: its row becomes NaN (callers validate ids on the host).
/// Throws std::invalid_argument for a type embedding_gather_supports refuses
/// or `cols` not whole blocks of the type.
void launch_embedding_gather(const void* table /* [rows, row_bytes] */, TensorType type,
                             std::uint64_t rows, std::uint64_t cols,
                             const TokenId* tokens /* [m] */, std::size_t m,
                             float* out /* [m, cols] */, cudaStream_t stream);

} // namespace caflm::cuda

#pragma once

#include "caflm/gguf/tensor_type.hpp"
#include "caflm/kv/token_id.hpp"
#include "caflm/model/model_config.hpp"
#include "caflm/model/weight_view.hpp"

#include <cstddef>
#include <cstdint>

// Elementwise and per-row CPU kernels of the Llama/Qwen2 forward pass (the
// matrix products are in cpu/cpu_matmul.hpp, attention over the paged cache
// in cpu/paged_attention.hpp).
//
// Batch invariance: every result element depends only on its own row's inputs
// and is computed in an order fixed by the row length alone, never by the
// number of rows, a row's position in the batch or the thread count. The
// kernels that split work over threads split only whole rows.

namespace caflm {

/// Copies each token's row of `table` ([vocab, D], any type) to `out` as f32.
/// Throws std::out_of_range for a token id outside the table.
void embedding_lookup(const WeightView& table, const TokenId* __restrict__ tokens, size_t m,
                      float* __restrict__ out /* [m, D] */);

/// RMSNorm as ggml computes it: out = (x * 1/sqrt(mean(x^2) + eps)) * weight,
/// each row on its own. `out` may equal `x`.
void rms_norm(const float* x /* [m, d] */, size_t m, size_t d,
              const float* __restrict__ weight /* [d] */, float eps, float* out /* [m, d] */);

/// Rotary position embedding parameters, from the model's metadata.
struct RopeConfig {
  RopeMode mode;
  size_t head_dim;                     ///< d; must be even
  float freq_base;                     ///< rope.freq_base (theta), e.g. 10000
  const float* freq_factors = nullptr; ///< [d/2] divisors of each pair's angle (llama 3.1
                                       ///< rope_freqs, phi3 LongRoPE factors), or null
  float freq_scale = 1.0f;             ///< multiplies every angle (1 / linear scaling factor)
  float attn_factor = 1.0f;            ///< multiplies cos and sin (phi3 rope.scaling.attn_factor)
};

/// Rotates every head of `x` in place by its token's position, computing
/// angles exactly as ggml does (theta_i = pos * base^(-2i/d) by repeated float
/// multiplication, divided by the pair's factor, times freq_scale, then
/// cosf/sinf times attn_factor). Call it once for q and once for k.
/// rope_angles then rope_rotate, which a model runner calls apart to compute
/// the angles once per step for q, k and every layer.
void rope(float* __restrict__ x /* [m, n_heads, head_dim] */, size_t m, size_t n_heads,
          const int32_t* __restrict__ positions /* [m] */, const RopeConfig& config);

/// The cosine and sine (times attn_factor) of every pair's angle at each of
/// the `m` positions, as rope computes them: for token t, cos_sin[t, i] and
/// cos_sin[t, head_dim / 2 + i] for pair i.
void rope_angles(const int32_t* __restrict__ positions /* [m] */, size_t m,
                 const RopeConfig& config, float* __restrict__ cos_sin /* [m, head_dim] */);

/// Rotates every head of `x` in place by the angles rope_angles gave for its
/// token (config.mode picks the pairs): x0' = fma(x0, c, -(x1 s)),
/// x1' = fma(x1, c, x0 s) for each pair, in vectors or one pair at a time
/// alike.
void rope_rotate(float* __restrict__ x /* [m, n_heads, head_dim] */, size_t m, size_t n_heads,
                 const float* __restrict__ cos_sin /* [m, head_dim] */, const RopeConfig& config);

/// SwiGLU: out = silu(gate) * up, elementwise. `out` may equal `gate` or `up`.
void silu_mul(const float* gate /* [m, f] */, const float* up /* [m, f] */, size_t m, size_t f,
              float* out /* [m, f] */);

/// x[i] *= alpha.
void scale_f32(float alpha, float* __restrict__ x, size_t n);

/// In-place softmax of one row: exp(x - max) / sum, the sum in an order fixed
/// by `n` alone. Entries of -infinity (masked) become 0.
void softmax_f32(float* __restrict__ x, size_t n);

} // namespace caflm

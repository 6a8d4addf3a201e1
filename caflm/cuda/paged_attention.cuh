#pragma once

#include <cstdint>
#include <vector>

#include <cuda_runtime.h>

#include "caflm/cuda/block_table_upload.hpp"
#include "caflm/cuda/paged_attention.hpp"

// With `programmatic` (a device of compute capability 9.0 or later only) a
// launcher launches its kernel programmatically: it may start while the
// kernel before it ends, and waits for it before touching memory
// (programmatic_launch.cuh).

namespace caflm::cuda {

/// Writes the step's new K and V rows into their cache cells (slot mapping
/// `step.slots`), for one layer. Launch before that layer's attention on the
/// same stream: a prefill chunk attends to its own keys.
void launch_store_kv(const float* k,     // [token_count, n_kv_heads * head_dim]
                     const float* v,     // [token_count, n_kv_heads * head_dim]
                     float* key_cache,   // [n_blocks, n_kv_heads, block_size, head_dim], one layer
                     float* value_cache, // [n_blocks, n_kv_heads, block_size, head_dim], one layer
                     const DeviceRaggedStep& step, const PagedKvGeometry& geometry,
                     cudaStream_t stream, bool programmatic = false);

/// Causal paged attention for one layer: every (token, query head) of the
/// step attends to positions 0..its own position of its own sequence,
/// through its item's block table; query head h reads KV head
/// h / (n_heads / n_kv_heads); scores are scaled by 1/sqrt(head_dim).
/// Batch invariant: each output is computed by one thread block in an order
/// that depends only on its position and head_dim (see paged_attention.cu).
void launch_paged_attention(const float* q,           // [token_count, n_heads * head_dim]
                            const float* key_cache,   // one layer, as in launch_store_kv
                            const float* value_cache, // one layer, as in launch_store_kv
                            float* out,               // [token_count, n_heads * head_dim]
                            std::uint32_t n_heads, const DeviceRaggedStep& step,
                            const PagedKvGeometry& geometry, cudaStream_t stream,
                            bool programmatic = false);

/// Performs the step's copy-on-write block copies, whole blocks of every
/// layer's K and V, with the result of doing them in order: one launch per
/// wave of `copy_wave_ends` (RaggedStepPacker::copy_wave_ends). Launch before
/// any KV store of the step.
void launch_copy_blocks(
    float* key_cache,   // [n_layers, n_blocks, n_kv_heads, block_size, head_dim]
    float* value_cache, // [n_layers, n_blocks, n_kv_heads, block_size, head_dim]
    const DeviceRaggedStep& step, const std::vector<std::uint32_t>& copy_wave_ends,
    const PagedKvGeometry& geometry, cudaStream_t stream);

} // namespace caflm::cuda

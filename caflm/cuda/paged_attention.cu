#include "caflm/cuda/paged_attention.cuh"

#include <cmath>
#include <cstddef>

#include "caflm/cuda/cuda_check.hpp"
#include "caflm/cuda/programmatic_launch.cuh"

// Paged attention over the ragged step ABI (caflm/scheduler/ragged_batch.hpp)
// with the CPU runner's semantics (CpuModelRunner::store_kv, attention_layer).
//
// Batch invariance. Every output row (token, query head) is computed by one
// thread block, and every reduction in it runs in an order fixed by the
// token's context length (position + 1) and head_dim alone:
//  - score of position p: one warp; lane l accumulates, with fmaf, the x then
//    y component of head_dim pairs l, l + 32, l + 64, l + 96 in that order,
//    then the 32 lanes combine by an xor butterfly (offsets 16, 8, 4, 2, 1);
//    the result times 1/sqrt(head_dim). Which warp takes p changes nothing.
//  - the context is cut into tiles of kAttentionScoreTile positions from
//    position 0; in each tile, in tile order:
//    - max: thread t takes tile positions t, t + 128, ... in order, then an
//      xor butterfly per warp, then warps 0, 1, 2, 3 in order (max is exact
//      anyway);
//    - exp-sum: e = expf(score - max) in place; thread t sums its positions
//      t, t + 128, ... in order, xor butterfly per warp, then
//      ((w0 + w1) + w2) + w3;
//    - weighted V sum: thread t owns output pair t and adds e * V[p] with
//      fmaf for every p of the tile in increasing position order.
//    Across tiles the running sum and V sum are rescaled by
//    expf(old max - new max) (online softmax); with a single tile, i.e. any
//    context up to kAttentionScoreTile, this is exactly the CPU's max,
//    exp-sum, weighted-sum sequence.
//  - out = V sum * (1 / exp-sum).
// Nothing depends on the grid, the number of tokens or heads in the step, or
// on other sequences, so a sequence's outputs are bitwise the same alone or
// in any step.

namespace caflm::cuda {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr std::uint32_t kWarpSize = 32;
constexpr std::uint32_t kAttentionWarps = kAttentionThreads / kWarpSize;
constexpr std::uint32_t kPairsPerLane = kMaxHeadDim / 2 / kWarpSize;
static_assert(kMaxHeadDim / 2 <= kAttentionThreads, "one output pair per thread");

__device__ __forceinline__ float warp_sum(float value) {
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(kFullMask, value, offset);
  return value;
}

__device__ __forceinline__ float warp_max(float value) {
  for (unsigned offset = kWarpSize / 2; offset > 0; offset /= 2)
    value = fmaxf(value, __shfl_xor_sync(kFullMask, value, offset));
  return value;
}

/// Index of (block, head, cell) in one layer's K or V cache.
__device__ __forceinline__ std::size_t cache_index(std::uint32_t block, std::uint32_t head,
                                                   std::uint32_t cell, std::uint32_t n_kv_heads,
                                                   std::uint32_t block_size,
                                                   std::uint32_t head_dim) {
  return ((std::size_t{block} * n_kv_heads + head) * block_size + cell) * head_dim;
}

__global__ void
store_kv_kernel(const float* __restrict__ k,     // [n_tokens, kv_dim]
                const float* __restrict__ v,     // [n_tokens, kv_dim]
                float* __restrict__ key_cache,   // [n_blocks, n_kv_heads, block_size, head_dim]
                float* __restrict__ value_cache, // [n_blocks, n_kv_heads, block_size, head_dim]
                const std::uint32_t* __restrict__ slots, // [n_tokens]
                std::uint32_t n_kv_heads, std::uint32_t block_size, std::uint32_t head_dim) {
  wait_for_previous_kernel();
  allow_next_kernel_to_start();
  const std::uint32_t token = blockIdx.x;
  const std::uint32_t slot = slots[token];
  const std::uint32_t block = slot / block_size;
  const std::uint32_t cell = slot % block_size;
  const std::uint32_t kv_dim = n_kv_heads * head_dim;
  const float* k_row = k + std::size_t{token} * kv_dim;
  const float* v_row = v + std::size_t{token} * kv_dim;
  for (std::uint32_t e = threadIdx.x; e < kv_dim; e += blockDim.x) {
    const std::uint32_t head = e / head_dim;
    const std::size_t destination =
        cache_index(block, head, cell, n_kv_heads, block_size, head_dim) + e % head_dim;
    key_cache[destination] = k_row[e];
    value_cache[destination] = v_row[e];
  }
}

__global__ void __launch_bounds__(kAttentionThreads) paged_attention_kernel(
    const float* __restrict__ q,                     // [n_tokens, n_heads, head_dim]
    const float* __restrict__ key_cache,             // [n_blocks, n_kv_heads, block_size, head_dim]
    const float* __restrict__ value_cache,           // [n_blocks, n_kv_heads, block_size, head_dim]
    float* __restrict__ out,                         // [n_tokens, n_heads, head_dim]
    const std::uint32_t* __restrict__ positions,     // [n_tokens]
    const std::uint32_t* __restrict__ table_offsets, // [n_tokens]
    const std::uint32_t* __restrict__ block_tables,  // [table entries]
    std::uint32_t n_heads, std::uint32_t n_kv_heads, std::uint32_t block_size,
    std::uint32_t head_dim, float scale) {
  __shared__ float scores[kAttentionScoreTile];
  __shared__ float warp_maxima[kAttentionWarps];
  __shared__ float warp_sums[kAttentionWarps];
  wait_for_previous_kernel();
  allow_next_kernel_to_start(); // the output projection's weights may stream in

  const std::uint32_t token = blockIdx.x;
  const std::uint32_t head = blockIdx.y;
  const std::uint32_t kv_head = head / (n_heads / n_kv_heads);
  const std::uint32_t lane = threadIdx.x % kWarpSize;
  const std::uint32_t warp = threadIdx.x / kWarpSize;
  const std::uint32_t pairs = head_dim / 2;
  const std::uint32_t context = positions[token] + 1; // causal: positions 0..own
  const std::uint32_t* pages = block_tables + table_offsets[token];

  // The query, pair l + 32 j in lane l's register j (zero past head_dim).
  const float2* query = reinterpret_cast<const float2*>(q + (std::size_t{token} * n_heads + head) *
                                                                head_dim); // [pairs]
  float2 query_pairs[kPairsPerLane];
#pragma unroll
  for (std::uint32_t j = 0; j < kPairsPerLane; ++j) {
    const std::uint32_t pair = lane + j * kWarpSize;
    query_pairs[j] = pair < pairs ? query[pair] : make_float2(0.0f, 0.0f);
  }

  const std::uint32_t own_pair = threadIdx.x; // output pair this thread sums
  float running_max = 0.0f;
  float running_sum = 0.0f;
  float2 accumulator = make_float2(0.0f, 0.0f);

  for (std::uint32_t tile_begin = 0; tile_begin < context; tile_begin += kAttentionScoreTile) {
    const std::uint32_t tile_length = min(kAttentionScoreTile, context - tile_begin);

    // Scores: one warp per position.
    for (std::uint32_t i = warp; i < tile_length; i += kAttentionWarps) {
      const std::uint32_t pos = tile_begin + i;
      const float2* key = reinterpret_cast<const float2*>(
          key_cache + cache_index(pages[pos / block_size], kv_head, pos % block_size, n_kv_heads,
                                  block_size, head_dim)); // [pairs]
      float partial = 0.0f;
#pragma unroll
      for (std::uint32_t j = 0; j < kPairsPerLane; ++j) {
        const std::uint32_t pair = lane + j * kWarpSize;
        if (pair < pairs) {
          const float2 key_pair = key[pair];
          partial = fmaf(query_pairs[j].x, key_pair.x, partial);
          partial = fmaf(query_pairs[j].y, key_pair.y, partial);
        }
      }
      partial = warp_sum(partial);
      if (lane == 0)
        scores[i] = partial * scale;
    }
    __syncthreads();

    // Tile maximum.
    float tile_max = -INFINITY;
    for (std::uint32_t i = threadIdx.x; i < tile_length; i += kAttentionThreads)
      tile_max = fmaxf(tile_max, scores[i]);
    tile_max = warp_max(tile_max);
    if (lane == 0)
      warp_maxima[warp] = tile_max;
    __syncthreads();
    tile_max = warp_maxima[0];
    for (std::uint32_t w = 1; w < kAttentionWarps; ++w)
      tile_max = fmaxf(tile_max, warp_maxima[w]);
    const float new_max = tile_begin == 0 ? tile_max : fmaxf(running_max, tile_max);

    // Exponentials, in place, and their sum.
    float tile_sum = 0.0f;
    for (std::uint32_t i = threadIdx.x; i < tile_length; i += kAttentionThreads) {
      const float e = expf(scores[i] - new_max);
      scores[i] = e;
      tile_sum += e;
    }
    tile_sum = warp_sum(tile_sum);
    if (lane == 0)
      warp_sums[warp] = tile_sum;
    __syncthreads(); // also publishes the exponentials
    tile_sum = warp_sums[0];
    for (std::uint32_t w = 1; w < kAttentionWarps; ++w)
      tile_sum += warp_sums[w];

    // Earlier tiles' sums were taken against a smaller maximum.
    const float correction = tile_begin == 0 ? 0.0f : expf(running_max - new_max);
    running_sum = tile_begin == 0 ? tile_sum : fmaf(running_sum, correction, tile_sum);
    running_max = new_max;

    // Weighted V sum, in position order.
    if (own_pair < pairs) {
      if (tile_begin != 0) {
        accumulator.x *= correction;
        accumulator.y *= correction;
      }
      for (std::uint32_t i = 0; i < tile_length; ++i) {
        const std::uint32_t pos = tile_begin + i;
        const float2 value = reinterpret_cast<const float2*>(
            value_cache + cache_index(pages[pos / block_size], kv_head, pos % block_size,
                                      n_kv_heads, block_size, head_dim))[own_pair];
        accumulator.x = fmaf(scores[i], value.x, accumulator.x);
        accumulator.y = fmaf(scores[i], value.y, accumulator.y);
      }
    }
    __syncthreads(); // the next tile overwrites scores and the partials
  }

  if (own_pair < pairs) {
    const float inverse_sum = 1.0f / running_sum;
    float2* output = reinterpret_cast<float2*>(out + (std::size_t{token} * n_heads + head) *
                                                         head_dim); // [pairs]
    output[own_pair] = make_float2(accumulator.x * inverse_sum, accumulator.y * inverse_sum);
  }
}

/// Copies whole blocks: x = copy of the wave, y = layer, z = 0 for K, 1 for V.
/// Source and destination may alias (a block copied onto itself).
__global__ void copy_blocks_kernel(float* key_cache,   // [n_layers, n_blocks, block_floats]
                                   float* value_cache, // [n_layers, n_blocks, block_floats]
                                   const std::uint32_t* __restrict__ copies, // [copy_count, 2]
                                   std::uint32_t wave_begin, std::size_t block_floats,
                                   std::size_t layer_floats) {
  const std::uint32_t c = wave_begin + blockIdx.x;
  float* cache = (blockIdx.z == 0 ? key_cache : value_cache) + blockIdx.y * layer_floats;
  const float* source = cache + copies[2 * c] * block_floats;
  float* destination = cache + copies[2 * c + 1] * block_floats;
  for (std::size_t i = threadIdx.x; i < block_floats; i += blockDim.x)
    destination[i] = source[i];
}

dim3 grid_of(const LaunchShape& shape) {
  return dim3(shape.grid_x, shape.grid_y, shape.grid_z);
}

} // namespace

void launch_store_kv(const float* k, const float* v, float* key_cache, float* value_cache,
                     const DeviceRaggedStep& step, const PagedKvGeometry& geometry,
                     cudaStream_t stream, bool programmatic) {
  check_geometry(geometry);
  if (step.token_count == 0)
    return;
  const LaunchShape shape = store_kv_launch_shape(step.token_count);
  launch_kernel(store_kv_kernel, grid_of(shape), dim3(shape.block_x), 0, stream, programmatic, k, v,
                key_cache, value_cache, step.slots, geometry.n_kv_heads, geometry.block_size,
                geometry.head_dim);
}

void launch_paged_attention(const float* q, const float* key_cache, const float* value_cache,
                            float* out, std::uint32_t n_heads, const DeviceRaggedStep& step,
                            const PagedKvGeometry& geometry, cudaStream_t stream,
                            bool programmatic) {
  const LaunchShape shape = attention_launch_shape(step.token_count, n_heads, geometry);
  if (step.token_count == 0)
    return;
  const float scale = 1.0f / std::sqrt(static_cast<float>(geometry.head_dim));
  launch_kernel(paged_attention_kernel, grid_of(shape), dim3(shape.block_x), 0, stream,
                programmatic, q, key_cache, value_cache, out, step.positions, step.table_offsets,
                step.block_tables, n_heads, geometry.n_kv_heads, geometry.block_size,
                geometry.head_dim, scale);
}

void launch_copy_blocks(float* key_cache, float* value_cache, const DeviceRaggedStep& step,
                        const std::vector<std::uint32_t>& copy_wave_ends,
                        const PagedKvGeometry& geometry, cudaStream_t stream) {
  check_geometry(geometry);
  if ((copy_wave_ends.empty() ? 0u : copy_wave_ends.back()) != step.copy_count)
    throw std::invalid_argument("block copies: the waves do not end at the step's copy count");
  std::uint32_t wave_begin = 0;
  for (const std::uint32_t wave_end : copy_wave_ends) {
    if (wave_end <= wave_begin)
      throw std::invalid_argument("block copies: waves are not increasing");
    const LaunchShape shape = copy_blocks_launch_shape(wave_end - wave_begin, geometry);
    copy_blocks_kernel<<<grid_of(shape), shape.block_x, 0, stream>>>(
        key_cache, value_cache, step.copies, wave_begin, geometry.block_floats(),
        geometry.layer_floats());
    CAFLM_CUDA_CHECK_LAUNCH(copy_blocks_kernel);
    wave_begin = wave_end;
  }
}

} // namespace caflm::cuda

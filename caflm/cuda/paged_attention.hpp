#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include "caflm/cuda/block_table_upload.hpp"

namespace caflm::cuda {

/// Threads of one attention block: four warps work on one (token, query head).
inline constexpr std::uint32_t kAttentionThreads = 128;
/// Positions whose scores one attention block keeps in shared memory at a
/// time. A fixed constant, never derived from the step, so a context is cut
/// into the same tiles whatever else shares the step. Contexts up to this
/// length take the exact three-pass softmax the CPU runner does.
inline constexpr std::uint32_t kAttentionScoreTile = 4096;
/// Largest head_dim the attention kernel holds (one float2 per lane, 4 pairs).
inline constexpr std::uint32_t kMaxHeadDim = 256;
/// Threads of one KV store block and of one block-copy block.
inline constexpr std::uint32_t kStoreThreads = 128;
inline constexpr std::uint32_t kCopyThreads = 256;

/// A 2D grid and a 1D block, as plain numbers (dim3 without CUDA headers).
struct LaunchShape {
  std::uint32_t grid_x = 0;
  std::uint32_t grid_y = 1;
  std::uint32_t grid_z = 1;
  std::uint32_t block_x = 0;
};

/// The attention kernel's launch: one block per (token, query head), tokens
/// on x (up to 2^31 - 1), heads on y. Throws std::invalid_argument when the
/// heads do not group onto the KV heads or the geometry is unsupported.
inline LaunchShape attention_launch_shape(std::uint32_t token_count, std::uint32_t n_heads,
                                          const PagedKvGeometry& geometry) {
  check_geometry(geometry);
  if (n_heads == 0 || n_heads % geometry.n_kv_heads != 0 || n_heads > 65535)
    throw std::invalid_argument("paged attention: " + std::to_string(n_heads) +
                                " query heads do not group onto " +
                                std::to_string(geometry.n_kv_heads) + " KV heads");
  return LaunchShape{token_count, n_heads, 1, kAttentionThreads};
}

/// The KV store's launch: one block per token, its threads striding over
/// every KV head's dimensions.
inline LaunchShape store_kv_launch_shape(std::uint32_t token_count) {
  return LaunchShape{token_count, 1, 1, kStoreThreads};
}

/// One wave of block copies: x = copy in the wave, y = layer, z = K or V.
inline LaunchShape copy_blocks_launch_shape(std::uint32_t wave_size,
                                            const PagedKvGeometry& geometry) {
  if (geometry.n_layers > 65535)
    throw std::invalid_argument("block copies: more than 65535 layers");
  return LaunchShape{wave_size, geometry.n_layers, 2, kCopyThreads};
}

} // namespace caflm::cuda

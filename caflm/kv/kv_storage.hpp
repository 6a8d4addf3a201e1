#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "caflm/kv/block_pool.hpp"

namespace caflm {

/// The physical KV cache on the CPU: for every layer, K and V in F32, paged
/// in blocks of `block_size` positions. Within a block each KV head's
/// positions are contiguous, so attention streams one head's keys at a time.
class KvStorage {
 public:
  KvStorage(std::uint32_t n_layers, std::uint32_t n_blocks, std::uint32_t block_size,
            std::uint32_t n_kv_heads, std::uint32_t head_dim);

  std::uint32_t block_count() const { return n_blocks_; }
  std::uint32_t block_size() const { return block_size_; }
  std::size_t bytes() const { return (keys_.size() + values_.size()) * sizeof(float); }

  /// One head's keys in one block. // [block_size, head_dim]
  float* keys(std::uint32_t layer, BlockId block, std::uint32_t head) {
    return keys_.data() + offset(layer, block, head);
  }
  /// One head's values in one block. // [block_size, head_dim]
  float* values(std::uint32_t layer, BlockId block, std::uint32_t head) {
    return values_.data() + offset(layer, block, head);
  }

  /// Copies a whole block, every layer's K and V (copy-on-write).
  void copy_block(BlockId source, BlockId destination);

 private:
  std::size_t offset(std::uint32_t layer, BlockId block, std::uint32_t head) const {
    return ((std::size_t{layer} * n_blocks_ + block) * n_kv_heads_ + head) * head_stride_;
  }

  std::uint32_t n_layers_;
  std::uint32_t n_blocks_;
  std::uint32_t block_size_;
  std::uint32_t n_kv_heads_;
  std::size_t head_stride_;   // block_size * head_dim
  std::vector<float> keys_;   // [n_layers, n_blocks, n_kv_heads, block_size, head_dim]
  std::vector<float> values_; // [n_layers, n_blocks, n_kv_heads, block_size, head_dim]
};

} // namespace caflm

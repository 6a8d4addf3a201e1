#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "caflm/kv/block_pool.hpp"
#include "caflm/kv/huge_page_buffer.hpp"

namespace caflm {

/// The element type of a KV cache.
enum class KvCacheType {
  F16, ///< IEEE half, rounded to nearest even from f32 (llama.cpp's default cache type)
  F32,
};

/// "f16" or "f32".
const char* to_string(KvCacheType type);

/// The type named `name` ("f16", "f32"), or std::nullopt.
std::optional<KvCacheType> parse_kv_cache_type(std::string_view name);

/// Bytes of one cached element.
std::size_t kv_element_bytes(KvCacheType type);

/// The physical KV cache on the CPU: for every layer, K and V in `type`,
/// paged in blocks of `block_size` positions. Within a block each KV head's
/// keys are stored transposed, one row per dimension, so attention scores a
/// run of positions with one vector per dimension; each head's values are one
/// row per position, so the weighted sum adds whole rows. Blocks are laid out
/// block-major, a block's KV heads side by side within each layer: a decode
/// step's attention walks all heads of a sequence block by block, reading
/// one run of n_kv_heads * block_size * head_dim elements per block, where
/// head-major blocks gave it one head's 4 KiB (64 dimensions of F32, 16
/// positions) and the hardware prefetchers, which stop at every 4 KiB page,
/// a fresh start each time (measured on a 2-core Zen 5: a 1 GiB buffer read
/// in a random order at 15-20 GB/s in runs of 4 KiB, 37 in runs of 48 KiB;
/// bench_kernels' BM_decode_attention, 32 sequences of a 134M-shaped F32
/// cache, at 19 GB/s one head at a time, 30 a block at a time). The blocks
/// a sequence was given together, neighbouring ids, are one stream still.
class KvStorage {
 public:
  KvStorage(KvCacheType type, std::uint32_t n_layers, std::uint32_t n_blocks,
            std::uint32_t block_size, std::uint32_t n_kv_heads, std::uint32_t head_dim);

  KvCacheType type() const { return type_; }
  std::uint32_t block_count() const { return n_blocks_; }
  std::uint32_t block_size() const { return block_size_; }
  std::uint32_t head_dim() const { return head_dim_; }
  std::size_t bytes() const { return keys_.size() + values_.size(); }

  /// Bytes of one head's keys (or values) in one block; keys(layer, block,
  /// head + 1) is keys(layer, block, head) + head_bytes(), values likewise.
  std::size_t head_bytes() const { return head_stride_; }

  /// One head's keys in one block, transposed. // [head_dim, block_size] of type()
  std::uint8_t* keys(std::uint32_t layer, BlockId block, std::uint32_t head) {
    return keys_.data() + offset(layer, block, head);
  }
  const std::uint8_t* keys(std::uint32_t layer, BlockId block, std::uint32_t head) const {
    return keys_.data() + offset(layer, block, head);
  }
  /// One head's values in one block. // [block_size, head_dim] of type()
  std::uint8_t* values(std::uint32_t layer, BlockId block, std::uint32_t head) {
    return values_.data() + offset(layer, block, head);
  }
  const std::uint8_t* values(std::uint32_t layer, BlockId block, std::uint32_t head) const {
    return values_.data() + offset(layer, block, head);
  }

  /// Copies a whole block, every layer's K and V (copy-on-write).
  void copy_block(BlockId source, BlockId destination);

 private:
  std::size_t offset(std::uint32_t layer, BlockId block, std::uint32_t head) const {
    return ((std::size_t{layer} * n_blocks_ + block) * n_kv_heads_ + head) * head_stride_;
  }

  KvCacheType type_;
  std::uint32_t n_layers_;
  std::uint32_t n_blocks_;
  std::uint32_t block_size_;
  std::uint32_t n_kv_heads_;
  std::uint32_t head_dim_;
  std::size_t head_stride_; // bytes of one head's block: block_size * head_dim elements
  HugePageBuffer keys_;     // [n_layers, n_blocks, n_kv_heads, head_dim, block_size]
  HugePageBuffer values_;   // [n_layers, n_blocks, n_kv_heads, block_size, head_dim]
};

} // namespace caflm

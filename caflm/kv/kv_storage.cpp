#include "caflm/kv/kv_storage.hpp"

#include <algorithm>

namespace caflm {

const char* to_string(KvCacheType type) {
  return type == KvCacheType::F16 ? "f16" : "f32";
}

std::optional<KvCacheType> parse_kv_cache_type(std::string_view name) {
  if (name == "f16")
    return KvCacheType::F16;
  if (name == "f32")
    return KvCacheType::F32;
  return std::nullopt;
}

std::size_t kv_element_bytes(KvCacheType type) {
  return type == KvCacheType::F16 ? 2 : 4;
}

KvStorage::KvStorage(KvCacheType type, std::uint32_t n_layers, std::uint32_t n_blocks,
                     std::uint32_t block_size, std::uint32_t n_kv_heads, std::uint32_t head_dim)
  : type_(type)
  , n_layers_(n_layers)
  , n_blocks_(n_blocks)
  , block_size_(block_size)
  , n_kv_heads_(n_kv_heads)
  , head_dim_(head_dim)
  , head_stride_(std::size_t{block_size} * head_dim * kv_element_bytes(type))
  , keys_(std::size_t{n_layers} * n_blocks * n_kv_heads * head_stride_)
  , values_(keys_.size()) {}

void KvStorage::copy_block(BlockId source, BlockId destination) {
  // A layer's block is its heads side by side: one run of bytes each.
  const std::size_t block_bytes = std::size_t{n_kv_heads_} * head_stride_;
  for (std::uint32_t layer = 0; layer < n_layers_; ++layer) {
    std::copy_n(keys(layer, source, 0), block_bytes, keys(layer, destination, 0));
    std::copy_n(values(layer, source, 0), block_bytes, values(layer, destination, 0));
  }
}

} // namespace caflm

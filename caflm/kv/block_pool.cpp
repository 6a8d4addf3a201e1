#include "caflm/kv/block_pool.hpp"

#include <algorithm>
#include <functional>
#include <limits>

namespace caflm {

BlockPool::BlockPool(std::uint32_t block_count)
  : refcounts_(block_count, 0)
  , cached_(block_count, 0) {
  free_list_.reserve(block_count);
  // Ascending ids are already a min-heap.
  for (std::uint32_t i = 0; i < block_count; ++i)
    free_list_.push_back(i);
}

BlockPool::RefCount BlockPool::refcount(BlockId block) const {
  return block < refcounts_.size() ? refcounts_[block] : 0;
}

Expected<BlockId, KvError> BlockPool::allocate() {
  if (free_list_.empty())
    return KvError::Exhausted;
  std::pop_heap(free_list_.begin(), free_list_.end(), std::greater<>{});
  BlockId block = free_list_.back();
  free_list_.pop_back();
  refcounts_[block] = 1;
  return block;
}

Expected<void, KvError> BlockPool::retain(BlockId block) {
  if (block >= refcounts_.size() || refcounts_[block] == 0)
    return KvError::InvalidBlock;
  if (refcounts_[block] == std::numeric_limits<RefCount>::max())
    return KvError::ReferenceOverflow;
  if (cached_[block] != 0 && refcounts_[block] == 1)
    --cached_only_;
  ++refcounts_[block];
  return {};
}

Expected<void, KvError> BlockPool::release(BlockId block) {
  if (block >= refcounts_.size())
    return KvError::InvalidBlock;
  if (refcounts_[block] == 0)
    return KvError::DoubleRelease;
  const RefCount left = --refcounts_[block];
  if (cached_[block] != 0 && left == 1)
    ++cached_only_;
  if (left == 0) {
    // The cache's own reference, dropped without set_cached(block, false).
    if (cached_[block] != 0) {
      cached_[block] = 0;
      --cached_only_;
    }
    free_list_.push_back(block);
    std::push_heap(free_list_.begin(), free_list_.end(), std::greater<>{});
  }
  return {};
}

void BlockPool::set_cached(BlockId block, bool cached) {
  if (block >= refcounts_.size() || refcounts_[block] == 0 || (cached_[block] != 0) == cached)
    return;
  cached_[block] = cached ? 1 : 0;
  if (refcounts_[block] == 1) {
    if (cached)
      ++cached_only_;
    else
      --cached_only_;
  }
}

} // namespace caflm

#include "caflm/kv/block_pool.hpp"

#include <limits>

namespace caflm {

BlockPool::BlockPool(std::uint32_t block_count)
  : refcounts_(block_count, 0) {
  free_list_.reserve(block_count);
  // Lowest ids come out first, which keeps logs and tests readable.
  for (std::uint32_t i = block_count; i > 0; --i)
    free_list_.push_back(i - 1);
}

BlockPool::RefCount BlockPool::refcount(BlockId block) const {
  return block < refcounts_.size() ? refcounts_[block] : 0;
}

Expected<BlockId, KvError> BlockPool::allocate() {
  if (free_list_.empty())
    return KvError::Exhausted;
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
  ++refcounts_[block];
  return {};
}

Expected<void, KvError> BlockPool::release(BlockId block) {
  if (block >= refcounts_.size())
    return KvError::InvalidBlock;
  if (refcounts_[block] == 0)
    return KvError::DoubleRelease;
  if (--refcounts_[block] == 0)
    free_list_.push_back(block);
  return {};
}

} // namespace caflm

#pragma once

#include <cstdint>
#include <vector>

#include "caflm/kv/expected.hpp"
#include "caflm/kv/kv_error.hpp"

namespace caflm {

/// Index of a physical KV block.
using BlockId = std::uint32_t;

/// A fixed number of physical KV blocks, shared by reference count.
///
/// A block is free (count 0) or held by one or more owners: block tables of
/// running sequences and the prefix cache. Allocation takes the lowest free
/// id, from a min-heap of free ids reserved at construction, so the pool
/// never allocates memory afterwards. Lowest first keeps a sequence's blocks
/// ascending and, where the pool has room, adjacent: each layer's cache of a
/// run of them is then one rising run of memory, which the hardware
/// prefetchers stream (a LIFO list hands a sequence the blocks just freed in
/// reverse order, and after some churn, scattered ones).
class BlockPool {
 public:
  using RefCount = std::uint16_t;

  explicit BlockPool(std::uint32_t block_count);

  std::uint32_t block_count() const { return static_cast<std::uint32_t>(refcounts_.size()); }
  std::uint32_t free_count() const { return static_cast<std::uint32_t>(free_list_.size()); }
  std::uint32_t used_count() const { return block_count() - free_count(); }

  /// Current reference count of `block`; 0 for a free or out-of-range block.
  RefCount refcount(BlockId block) const;

  /// Takes a free block with reference count 1.
  Expected<BlockId, KvError> allocate();

  /// Adds one reference to an allocated block.
  Expected<void, KvError> retain(BlockId block);

  /// Drops one reference; the block returns to the free list at zero.
  Expected<void, KvError> release(BlockId block);

  /// Marks whether the prefix cache holds one of `block`'s references: set
  /// as it takes its reference, cleared before it drops it. Ignored for a
  /// free or out-of-range block.
  void set_cached(BlockId block, bool cached);

  /// Blocks whose only reference is the prefix cache's (what it could evict
  /// now), kept as references come and go: a load report every step then
  /// costs nothing, where walking the cache cost a step time in proportion
  /// to its size.
  std::uint32_t cached_only_count() const { return cached_only_; }

 private:
  std::vector<RefCount> refcounts_;  // [block_count]
  std::vector<BlockId> free_list_;   // capacity block_count; a min-heap, front() is next
  std::vector<std::uint8_t> cached_; // [block_count] 1 where the prefix cache holds a reference
  std::uint32_t cached_only_ = 0;    // blocks cached with a reference count of 1
};

} // namespace caflm

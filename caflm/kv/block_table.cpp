#include "caflm/kv/block_table.hpp"

namespace caflm {

BlockTable::BlockTable(std::uint32_t max_pages)
  : pages_(max_pages, 0) {}

Expected<CopyOnWrite, KvError> BlockTable::ensure_writable(std::uint32_t page, BlockPool& pool) {
  if (page > page_count_ || page >= capacity())
    return KvError::PageOutOfRange;
  if (page == page_count_) {
    auto fresh = pool.allocate();
    if (!fresh)
      return fresh.error();
    pages_[page_count_++] = *fresh;
    return CopyOnWrite{CopyOnWrite::Kind::Allocated, *fresh, *fresh};
  }
  BlockId current = pages_[page];
  auto holders = pool.refcount(current);
  if (holders == 0)
    return KvError::InvalidBlock;
  if (holders == 1)
    return CopyOnWrite{CopyOnWrite::Kind::Existing, current, current};
  auto copy = pool.allocate();
  if (!copy)
    return copy.error();
  // Cannot fail: `current` has other holders, so this only decrements.
  (void)pool.release(current);
  pages_[page] = *copy;
  return CopyOnWrite{CopyOnWrite::Kind::Copy, *copy, current};
}

void BlockTable::revert_writable(std::uint32_t page, const CopyOnWrite& change, BlockPool& pool) {
  switch (change.kind) {
  case CopyOnWrite::Kind::Allocated:
    // Newest first: the appended page is the last one.
    --page_count_;
    (void)pool.release(change.block);
    return;
  case CopyOnWrite::Kind::Copy:
    // The source kept its other holders, so it is still allocated.
    (void)pool.retain(change.source);
    (void)pool.release(change.block);
    pages_[page] = change.source;
    return;
  case CopyOnWrite::Kind::Existing:
    return;
  }
}

Expected<void, KvError> BlockTable::install_prefix(const BlockId* blocks, std::uint32_t count,
                                                   BlockPool& pool) {
  if (!empty())
    return KvError::TableNotEmpty;
  if (count > capacity())
    return KvError::PageOutOfRange;
  for (std::uint32_t i = 0; i < count; ++i) {
    if (auto retained = pool.retain(blocks[i]); !retained) {
      while (i > 0)
        (void)pool.release(blocks[--i]);
      return retained.error();
    }
  }
  for (std::uint32_t i = 0; i < count; ++i)
    pages_[i] = blocks[i];
  page_count_ = count;
  return {};
}

Expected<void, KvError> BlockTable::fork_from(const BlockTable& parent, BlockPool& pool) {
  return install_prefix(parent.blocks(), parent.page_count(), pool);
}

Expected<void, KvError> BlockTable::release_all(BlockPool& pool) {
  for (std::uint32_t i = 0; i < page_count_; ++i)
    if (pool.refcount(pages_[i]) == 0)
      return pool.block_count() <= pages_[i] ? KvError::InvalidBlock : KvError::DoubleRelease;
  for (std::uint32_t i = 0; i < page_count_; ++i)
    (void)pool.release(pages_[i]);
  page_count_ = 0;
  return {};
}

} // namespace caflm

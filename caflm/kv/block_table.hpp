#pragma once

#include <cstdint>
#include <vector>

#include "caflm/kv/block_pool.hpp"

namespace caflm {

/// What `BlockTable::ensure_writable` did to make a page writable.
struct CopyOnWrite {
  enum class Kind : std::uint8_t {
    /// The page was past the end; a fresh block was appended.
    Allocated,
    /// The page's block is held by this table alone and may be written.
    Existing,
    /// The page's block was shared: `source` must be copied into `block`
    /// before anything writes into `block`.
    Copy,
  };

  Kind kind;
  /// The block the sequence now writes into.
  BlockId block;
  /// For `Copy`, the shared block whose contents `block` must receive.
  BlockId source;
};

/// One sequence's map from logical pages to physical KV blocks.
///
/// The table owns one reference to each of its blocks. Its capacity is fixed
/// at construction, so no operation allocates memory afterwards. Every
/// operation either succeeds or leaves table and pool unchanged.
class BlockTable {
 public:
  explicit BlockTable(std::uint32_t max_pages);

  std::uint32_t page_count() const { return page_count_; }
  std::uint32_t capacity() const { return static_cast<std::uint32_t>(pages_.size()); }
  bool empty() const { return page_count_ == 0; }

  /// The physical block of each logical page. // [page_count]
  const BlockId* blocks() const { return pages_.data(); }
  BlockId operator[](std::uint32_t page) const { return pages_[page]; }

  /// Makes `page` safe to write: appends a block when `page == page_count()`,
  /// replaces a shared block by a private copy, or keeps a private one.
  Expected<CopyOnWrite, KvError> ensure_writable(std::uint32_t page, BlockPool& pool);

  /// Undoes what `ensure_writable(page)` returned as `change`: drops an
  /// appended page, or puts a copied page's shared source back. Changes must
  /// be undone newest first; then table and pool are as they were before.
  void revert_writable(std::uint32_t page, const CopyOnWrite& change, BlockPool& pool);

  /// Attaches `count` shared blocks (a cached prefix) to an empty table,
  /// taking a reference to each; all of them or none.
  Expected<void, KvError> install_prefix(const BlockId* blocks, std::uint32_t count,
                                         BlockPool& pool);

  /// Makes this empty table share every page of `parent` (copy-on-write).
  Expected<void, KvError> fork_from(const BlockTable& parent, BlockPool& pool);

  /// Drops this table's reference to every block. Checks every block first,
  /// so a failure releases nothing and a success releases everything.
  Expected<void, KvError> release_all(BlockPool& pool);

 private:
  std::vector<BlockId> pages_; // [capacity]; the first page_count_ are live
  std::uint32_t page_count_ = 0;
};

} // namespace caflm

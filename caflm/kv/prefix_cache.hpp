#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "caflm/kv/block_pool.hpp"
#include "caflm/kv/token_id.hpp"

namespace caflm {

/// Content-addressed cache of full KV blocks, for sharing prompt prefixes.
///
/// A block's key hashes its parent block's key, its own token ids and a
/// model salt, so equal keys mean equal prefixes up to hash collisions. The
/// cache does not trust the hash: every entry stores its token ids and its
/// parent entry, and a lookup only follows entries whose tokens and parent
/// match exactly. The cache holds one reference to each cached block; blocks
/// that only the cache holds are evicted in least-recently-used order.
/// Nothing allocates after construction.
class PrefixCache {
 public:
  /// Hash of one block: (parent block's key, its tokens, model salt) -> key.
  using HashFn = std::uint64_t (*)(std::uint64_t parent_key, const TokenId* tokens,
                                   std::uint32_t count, std::uint64_t salt);

  static std::uint64_t default_hash(std::uint64_t parent_key, const TokenId* tokens,
                                    std::uint32_t count, std::uint64_t salt);

  /// Caches at most `capacity` blocks of `block_size` tokens each.
  PrefixCache(std::uint32_t capacity, std::uint32_t block_size, std::uint64_t model_salt,
              HashFn hash = &default_hash);

  std::uint32_t block_size() const { return block_size_; }
  std::uint32_t capacity() const { return static_cast<std::uint32_t>(entries_.size()); }
  std::uint32_t size() const { return size_; }

  /// Finds the longest cached prefix of `tokens` in whole blocks, writes at
  /// most `max_blocks` of their ids to `out` and returns how many it wrote.
  /// Marks them recently used and counts hits and misses.
  std::uint32_t lookup(const TokenId* tokens, std::size_t count, BlockId* out,
                       std::uint32_t max_blocks);

  /// Caches the full blocks of a computed sequence: `tokens` live in
  /// `blocks` (one per page). Takes a reference to every block it adds and
  /// returns how many it added; blocks already cached are only touched.
  std::uint32_t publish(const TokenId* tokens, std::size_t count, const BlockId* blocks,
                        std::uint32_t page_count, BlockPool& pool);

  /// Frees up to `wanted` least recently used blocks that only the cache
  /// holds; returns how many went back to the pool.
  std::uint32_t evict(std::uint32_t wanted, BlockPool& pool);

  /// Drops every entry, releasing the cache's references.
  void clear(BlockPool& pool);

  /// Calls `visit(BlockId)` for every cached block.
  template <class Visit>
  void for_each_block(Visit&& visit) const {
    for (std::uint32_t i = lru_head_; i != none; i = entries_[i].lru_next)
      visit(entries_[i].block);
  }

  /// Blocks found by lookups so far.
  std::uint64_t hits() const { return hits_; }
  /// Full blocks looked up but not found.
  std::uint64_t misses() const { return misses_; }

 private:
  static constexpr std::uint32_t none = UINT32_MAX;

  struct Entry {
    std::uint64_t key = 0;
    BlockId block = 0;
    std::uint32_t parent = none; // entry index of the previous block
    std::uint32_t parent_generation = 0;
    std::uint32_t generation = 0; // bumped when the entry is reused
    std::uint32_t lru_prev = none;
    std::uint32_t lru_next = none;
    bool used = false;
  };

  /// The entry for the block after `parent` holding `tokens`, or `none`.
  std::uint32_t find(std::uint64_t key, std::uint32_t parent, const TokenId* tokens) const;
  bool same_parent(const Entry& entry, std::uint32_t parent) const;
  std::uint32_t home_slot(std::uint64_t key) const;
  void map_insert(std::uint32_t index);
  void map_erase(std::uint32_t index);
  void lru_unlink(std::uint32_t index);
  void lru_push_back(std::uint32_t index);
  void remove(std::uint32_t index, BlockPool& pool);

  std::uint32_t block_size_;
  std::uint64_t salt_;
  HashFn hash_;
  std::vector<Entry> entries_;        // [capacity]
  std::vector<TokenId> entry_tokens_; // [capacity, block_size]
  std::vector<std::uint32_t> free_entries_;
  std::vector<std::uint32_t> map_; // open addressing, linear probing; entry index or none
  std::uint32_t map_mask_ = 0;
  std::uint32_t lru_head_ = none; // least recently used
  std::uint32_t lru_tail_ = none;
  std::uint32_t size_ = 0;
  std::uint64_t hits_ = 0;
  std::uint64_t misses_ = 0;
};

} // namespace caflm

#include "caflm/kv/prefix_cache.hpp"

#include <algorithm>
#include <xxhash.h>

namespace caflm {

namespace {

std::uint32_t map_size_for(std::uint32_t capacity) {
  // At most half full, so probe sequences stay short.
  std::uint32_t size = 2;
  while (size < 2 * std::max<std::uint32_t>(capacity, 1))
    size *= 2;
  return size;
}

} // namespace

std::uint64_t PrefixCache::default_hash(std::uint64_t parent_key, const TokenId* tokens,
                                        std::uint32_t count, std::uint64_t salt) {
  // Chain the parent's key and the model salt through the seed.
  std::uint64_t seed = XXH3_64bits_withSeed(&parent_key, sizeof(parent_key), salt);
  return XXH3_64bits_withSeed(tokens, count * sizeof(TokenId), seed);
}

PrefixCache::PrefixCache(std::uint32_t capacity, std::uint32_t block_size, std::uint64_t model_salt,
                         HashFn hash)
  : block_size_(block_size)
  , salt_(model_salt)
  , hash_(hash)
  , entries_(capacity)
  , entry_tokens_(static_cast<std::size_t>(capacity) * block_size)
  , map_(map_size_for(capacity), none)
  , map_mask_(static_cast<std::uint32_t>(map_.size()) - 1) {
  free_entries_.reserve(capacity);
  for (std::uint32_t i = capacity; i > 0; --i)
    free_entries_.push_back(i - 1);
}

std::uint32_t PrefixCache::home_slot(std::uint64_t key) const {
  return static_cast<std::uint32_t>(key ^ (key >> 32)) & map_mask_;
}

bool PrefixCache::same_parent(const Entry& entry, std::uint32_t parent) const {
  if (entry.parent != parent)
    return false;
  return parent == none || entry.parent_generation == entries_[parent].generation;
}

std::uint32_t PrefixCache::find(std::uint64_t key, std::uint32_t parent,
                                const TokenId* tokens) const {
  for (std::uint32_t slot = home_slot(key); map_[slot] != none; slot = (slot + 1) & map_mask_) {
    std::uint32_t index = map_[slot];
    const Entry& entry = entries_[index];
    if (entry.key != key || !same_parent(entry, parent))
      continue;
    const TokenId* stored = &entry_tokens_[static_cast<std::size_t>(index) * block_size_];
    if (std::equal(tokens, tokens + block_size_, stored))
      return index;
  }
  return none;
}

std::uint32_t PrefixCache::lookup(const TokenId* tokens, std::size_t count, BlockId* out,
                                  std::uint32_t max_blocks) {
  auto full_blocks = static_cast<std::uint32_t>(count / block_size_);
  std::uint32_t parent = none;
  std::uint64_t parent_key = 0;
  std::uint32_t found = 0;
  for (; found < full_blocks && found < max_blocks; ++found) {
    const TokenId* block_tokens = tokens + static_cast<std::size_t>(found) * block_size_;
    std::uint64_t key = hash_(parent_key, block_tokens, block_size_, salt_);
    std::uint32_t index = find(key, parent, block_tokens);
    if (index == none)
      break;
    out[found] = entries_[index].block;
    lru_unlink(index);
    lru_push_back(index);
    parent = index;
    parent_key = key;
  }
  hits_ += found;
  misses_ += std::min(full_blocks, max_blocks) - found;
  return found;
}

std::uint32_t PrefixCache::publish(const TokenId* tokens, std::size_t count, const BlockId* blocks,
                                   std::uint32_t page_count, BlockPool& pool) {
  auto full_blocks = std::min(static_cast<std::uint32_t>(count / block_size_), page_count);
  std::uint32_t parent = none;
  std::uint64_t parent_key = 0;
  std::uint32_t added = 0;
  for (std::uint32_t b = 0; b < full_blocks; ++b) {
    const TokenId* block_tokens = tokens + static_cast<std::size_t>(b) * block_size_;
    std::uint64_t key = hash_(parent_key, block_tokens, block_size_, salt_);
    std::uint32_t index = find(key, parent, block_tokens);
    if (index == none) {
      if (free_entries_.empty()) {
        std::uint32_t parent_generation = parent == none ? 0 : entries_[parent].generation;
        if (evict(1, pool) == 0)
          break;
        // Eviction may have taken the parent itself; its children would be
        // unreachable, so stop here.
        if (parent != none && entries_[parent].generation != parent_generation)
          break;
      }
      if (!pool.retain(blocks[b]))
        break;
      pool.set_cached(blocks[b], true);
      index = free_entries_.back();
      free_entries_.pop_back();
      Entry& entry = entries_[index];
      entry.key = key;
      entry.block = blocks[b];
      entry.parent = parent;
      entry.parent_generation = parent == none ? 0 : entries_[parent].generation;
      entry.used = true;
      std::copy(block_tokens, block_tokens + block_size_,
                &entry_tokens_[static_cast<std::size_t>(index) * block_size_]);
      map_insert(index);
      ++size_;
      ++added;
    } else {
      lru_unlink(index);
    }
    lru_push_back(index);
    parent = index;
    parent_key = key;
  }
  return added;
}

std::uint32_t PrefixCache::evict(std::uint32_t wanted, BlockPool& pool) {
  std::uint32_t freed = 0;
  std::uint32_t index = lru_head_;
  while (index != none && freed < wanted) {
    std::uint32_t next = entries_[index].lru_next;
    if (pool.refcount(entries_[index].block) == 1) {
      remove(index, pool);
      ++freed;
    }
    index = next;
  }
  return freed;
}

void PrefixCache::clear(BlockPool& pool) {
  while (lru_head_ != none)
    remove(lru_head_, pool);
}

void PrefixCache::remove(std::uint32_t index, BlockPool& pool) {
  Entry& entry = entries_[index];
  map_erase(index);
  lru_unlink(index);
  pool.set_cached(entry.block, false);
  (void)pool.release(entry.block);
  entry.used = false;
  // Children of this entry now name a stale generation, so no lookup can
  // reach them through whatever entry reuses this slot.
  ++entry.generation;
  free_entries_.push_back(index);
  --size_;
}

void PrefixCache::map_insert(std::uint32_t index) {
  std::uint32_t slot = home_slot(entries_[index].key);
  while (map_[slot] != none)
    slot = (slot + 1) & map_mask_;
  map_[slot] = index;
}

void PrefixCache::map_erase(std::uint32_t index) {
  std::uint32_t hole = home_slot(entries_[index].key);
  while (map_[hole] != index)
    hole = (hole + 1) & map_mask_;
  // Backward-shift deletion keeps every probe sequence unbroken.
  for (std::uint32_t slot = (hole + 1) & map_mask_; map_[slot] != none;
       slot = (slot + 1) & map_mask_) {
    std::uint32_t home = home_slot(entries_[map_[slot]].key);
    bool home_in_gap = hole <= slot ? (hole < home && home <= slot) : (hole < home || home <= slot);
    if (home_in_gap)
      continue;
    map_[hole] = map_[slot];
    hole = slot;
  }
  map_[hole] = none;
}

void PrefixCache::lru_unlink(std::uint32_t index) {
  Entry& entry = entries_[index];
  if (entry.lru_prev != none)
    entries_[entry.lru_prev].lru_next = entry.lru_next;
  else if (lru_head_ == index)
    lru_head_ = entry.lru_next;
  if (entry.lru_next != none)
    entries_[entry.lru_next].lru_prev = entry.lru_prev;
  else if (lru_tail_ == index)
    lru_tail_ = entry.lru_prev;
  entry.lru_prev = entry.lru_next = none;
}

void PrefixCache::lru_push_back(std::uint32_t index) {
  Entry& entry = entries_[index];
  entry.lru_prev = lru_tail_;
  entry.lru_next = none;
  if (lru_tail_ != none)
    entries_[lru_tail_].lru_next = index;
  else
    lru_head_ = index;
  lru_tail_ = index;
}

} // namespace caflm

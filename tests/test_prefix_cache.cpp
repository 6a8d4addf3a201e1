#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "caflm/kv/block_table.hpp"
#include "caflm/kv/prefix_cache.hpp"

using namespace caflm;

namespace {

constexpr std::uint32_t block_size = 4;

/// Every block hashes to the same key: only the stored tokens tell apart.
std::uint64_t colliding_hash(std::uint64_t, const TokenId*, std::uint32_t, std::uint64_t) {
  return 42;
}

std::vector<TokenId> iota_tokens(std::size_t count, TokenId first) {
  std::vector<TokenId> tokens(count);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

/// Allocates and fills a table for `tokens`, as a finished prefill would.
BlockTable computed_table(const std::vector<TokenId>& tokens, BlockPool& pool) {
  BlockTable table(16);
  for (std::uint32_t page = 0; page * block_size < tokens.size(); ++page)
    REQUIRE(table.ensure_writable(page, pool));
  return table;
}

} // namespace

TEST_CASE("publish then lookup finds the longest cached prefix in whole blocks") {
  BlockPool pool(16);
  PrefixCache cache(16, block_size, 7);
  auto tokens = iota_tokens(10, 100); // two full blocks and a partial one
  BlockTable producer = computed_table(tokens, pool);
  CHECK(cache.publish(tokens.data(), tokens.size(), producer.blocks(), producer.page_count(),
                      pool) == 2);
  CHECK(cache.size() == 2);
  CHECK(pool.refcount(producer[0]) == 2);
  CHECK(pool.refcount(producer[2]) == 1); // partial block is not cached

  std::vector<BlockId> found(4);
  auto query = iota_tokens(12, 100);
  CHECK(cache.lookup(query.data(), query.size(), found.data(), 4) == 2);
  CHECK(found[0] == producer[0]);
  CHECK(found[1] == producer[1]);
  CHECK(cache.hits() == 2);
  CHECK(cache.misses() == 1);

  // A prefix that differs in the second block matches only the first.
  query[5] = 1;
  CHECK(cache.lookup(query.data(), query.size(), found.data(), 4) == 1);
  // max_blocks bounds the answer.
  query[5] = 105;
  CHECK(cache.lookup(query.data(), query.size(), found.data(), 1) == 1);
}

TEST_CASE("publishing the same prefix twice caches it once") {
  BlockPool pool(16);
  PrefixCache cache(16, block_size, 7);
  auto tokens = iota_tokens(8, 0);
  BlockTable a = computed_table(tokens, pool);
  BlockTable b = computed_table(tokens, pool);
  CHECK(cache.publish(tokens.data(), tokens.size(), a.blocks(), a.page_count(), pool) == 2);
  CHECK(cache.publish(tokens.data(), tokens.size(), b.blocks(), b.page_count(), pool) == 0);
  CHECK(cache.size() == 2);
  CHECK(pool.refcount(b[0]) == 1);
}

TEST_CASE("the model salt separates caches of different models") {
  BlockPool pool(16);
  PrefixCache model_a(16, block_size, 1);
  PrefixCache model_b(16, block_size, 2);
  auto tokens = iota_tokens(4, 0);
  BlockTable t = computed_table(tokens, pool);
  REQUIRE(model_a.publish(tokens.data(), 4, t.blocks(), 1, pool) == 1);
  BlockId found = 0;
  CHECK(model_b.lookup(tokens.data(), 4, &found, 1) == 0);
  CHECK(PrefixCache::default_hash(0, tokens.data(), 4, 1) !=
        PrefixCache::default_hash(0, tokens.data(), 4, 2));
}

TEST_CASE("forced hash collisions never return blocks of other tokens") {
  BlockPool pool(32);
  PrefixCache cache(32, block_size, 7, &colliding_hash);
  auto first = iota_tokens(8, 0);
  auto second = iota_tokens(8, 50);
  // Same first block as `first`, different second block.
  auto mixed = first;
  for (std::size_t i = 4; i < 8; ++i)
    mixed[i] = 900 + static_cast<TokenId>(i);
  BlockTable t1 = computed_table(first, pool);
  BlockTable t2 = computed_table(second, pool);
  BlockTable t3 = computed_table(mixed, pool);
  REQUIRE(cache.publish(first.data(), 8, t1.blocks(), 2, pool) == 2);
  REQUIRE(cache.publish(second.data(), 8, t2.blocks(), 2, pool) == 2);
  REQUIRE(cache.publish(mixed.data(), 8, t3.blocks(), 2, pool) == 1); // shares block 0

  std::vector<BlockId> found(2);
  REQUIRE(cache.lookup(second.data(), 8, found.data(), 2) == 2);
  CHECK(found[0] == t2[0]);
  CHECK(found[1] == t2[1]);
  REQUIRE(cache.lookup(mixed.data(), 8, found.data(), 2) == 2);
  CHECK(found[0] == t1[0]);
  CHECK(found[1] == t3[1]);

  // A block that matches tokens but under another parent is not a hit:
  // second's block 1 tokens following first's block 0.
  std::vector<TokenId> spliced(first.begin(), first.begin() + 4);
  spliced.insert(spliced.end(), second.begin() + 4, second.end());
  REQUIRE(cache.lookup(spliced.data(), 8, found.data(), 2) == 1);
  CHECK(found[0] == t1[0]);

  auto unknown = iota_tokens(8, 500);
  CHECK(cache.lookup(unknown.data(), 8, found.data(), 2) == 0);
}

TEST_CASE("eviction frees least recently used blocks that only the cache holds") {
  BlockPool pool(8);
  PrefixCache cache(8, block_size, 7);
  auto a = iota_tokens(4, 0);
  auto b = iota_tokens(4, 10);
  auto c = iota_tokens(4, 20);
  BlockTable ta = computed_table(a, pool);
  BlockTable tb = computed_table(b, pool);
  BlockTable tc = computed_table(c, pool);
  cache.publish(a.data(), 4, ta.blocks(), 1, pool);
  cache.publish(b.data(), 4, tb.blocks(), 1, pool);
  cache.publish(c.data(), 4, tc.blocks(), 1, pool);
  BlockId a_block = ta[0];
  REQUIRE(ta.release_all(pool));
  REQUIRE(tb.release_all(pool));
  // tc still holds c: it must survive any eviction.
  BlockId found = 0;
  REQUIRE(cache.lookup(a.data(), 4, &found, 1) == 1); // a is now most recent
  CHECK(pool.free_count() == 5);

  CHECK(cache.evict(1, pool) == 1); // b: least recently used, cache-only
  CHECK(cache.lookup(b.data(), 4, &found, 1) == 0);
  CHECK(cache.lookup(a.data(), 4, &found, 1) == 1);
  CHECK(cache.evict(5, pool) == 1); // only a remains evictable
  CHECK(pool.refcount(a_block) == 0);
  CHECK(cache.lookup(c.data(), 4, &found, 1) == 1);
  CHECK(cache.size() == 1);
  CHECK(pool.free_count() == 7);
}

TEST_CASE("an evicted parent makes its children unreachable even when its entry is reused") {
  BlockPool pool(8);
  PrefixCache cache(2, block_size, 7, &colliding_hash);
  auto tokens = iota_tokens(8, 0);
  BlockTable t = computed_table(tokens, pool);
  REQUIRE(cache.publish(tokens.data(), 8, t.blocks(), 2, pool) == 2);
  // Copy-on-write left the parent block cache-only while the child is
  // still shared; the parent is evicted first.
  BlockTable other(4);
  BlockId child = t[1];
  REQUIRE(other.install_prefix(&child, 1, pool));
  REQUIRE(t.release_all(pool));
  REQUIRE(cache.evict(1, pool) == 1);
  // Its entry is reused for another block with the same tokens as before.
  BlockTable fresh = computed_table(iota_tokens(4, 0), pool);
  auto head = iota_tokens(4, 0);
  REQUIRE(cache.publish(head.data(), 4, fresh.blocks(), 1, pool) == 1);
  std::vector<BlockId> found(2);
  CHECK(cache.lookup(tokens.data(), 8, found.data(), 2) == 1);
  CHECK(found[0] == fresh[0]);
}

TEST_CASE("clear returns every cache-only block") {
  BlockPool pool(8);
  PrefixCache cache(8, block_size, 7);
  auto tokens = iota_tokens(16, 0);
  BlockTable t = computed_table(tokens, pool);
  cache.publish(tokens.data(), 16, t.blocks(), 4, pool);
  REQUIRE(t.release_all(pool));
  cache.clear(pool);
  CHECK(cache.size() == 0);
  CHECK(pool.free_count() == 8);
}

#include <catch2/catch.hpp>

#include "caflm/kv/block_pool.hpp"

using namespace caflm;

TEST_CASE("a new pool has every block free") {
  BlockPool pool(4);
  CHECK(pool.block_count() == 4);
  CHECK(pool.free_count() == 4);
  for (BlockId b = 0; b < 4; ++b)
    CHECK(pool.refcount(b) == 0);
}

TEST_CASE("allocate hands out distinct blocks until the pool is exhausted") {
  BlockPool pool(3);
  auto a = pool.allocate();
  auto b = pool.allocate();
  auto c = pool.allocate();
  REQUIRE((a && b && c));
  CHECK(*a != *b);
  CHECK(*b != *c);
  CHECK(*a != *c);
  auto d = pool.allocate();
  REQUIRE_FALSE(d);
  CHECK(d.error() == KvError::Exhausted);
  CHECK(pool.free_count() == 0);
}

TEST_CASE("retain and release count references; the last release frees") {
  BlockPool pool(2);
  BlockId block = *pool.allocate();
  REQUIRE(pool.retain(block));
  CHECK(pool.refcount(block) == 2);
  REQUIRE(pool.release(block));
  CHECK(pool.refcount(block) == 1);
  CHECK(pool.free_count() == 1);
  REQUIRE(pool.release(block));
  CHECK(pool.refcount(block) == 0);
  CHECK(pool.free_count() == 2);
}

TEST_CASE("releasing a free block is a double release and changes nothing") {
  BlockPool pool(2);
  BlockId block = *pool.allocate();
  REQUIRE(pool.release(block));
  auto again = pool.release(block);
  REQUIRE_FALSE(again);
  CHECK(again.error() == KvError::DoubleRelease);
  CHECK(pool.free_count() == 2);
}

TEST_CASE("out-of-range and free blocks are invalid to retain") {
  BlockPool pool(2);
  CHECK(pool.retain(7).error() == KvError::InvalidBlock);
  CHECK(pool.release(7).error() == KvError::InvalidBlock);
  CHECK(pool.retain(0).error() == KvError::InvalidBlock);
}

TEST_CASE("a reference count never wraps around") {
  BlockPool pool(1);
  BlockId block = *pool.allocate();
  bool retained = true;
  for (int i = 1; i < UINT16_MAX; ++i)
    retained = retained && pool.retain(block).has_value();
  REQUIRE(retained);
  auto overflow = pool.retain(block);
  REQUIRE_FALSE(overflow);
  CHECK(overflow.error() == KvError::ReferenceOverflow);
  CHECK(pool.refcount(block) == UINT16_MAX);
}

TEST_CASE("allocation takes the lowest free block, however blocks were released") {
  BlockPool pool(8);
  for (BlockId b = 0; b < 8; ++b)
    REQUIRE(*pool.allocate() == b);
  // Released in the order a finished sequence gives them back, then out of
  // order: a sequence allocated next still gets ascending ids.
  for (BlockId b : {0u, 1u, 2u, 3u, 6u, 4u, 7u})
    REQUIRE(pool.release(b));
  for (BlockId b : {0u, 1u, 2u, 3u, 4u, 6u, 7u})
    CHECK(*pool.allocate() == b);
  CHECK(pool.free_count() == 0);
}

TEST_CASE("the pool counts the blocks only the prefix cache holds as references come and go") {
  BlockPool pool(4);
  const BlockId a = *pool.allocate();
  const BlockId b = *pool.allocate();
  CHECK(pool.cached_only_count() == 0);
  // The cache takes its reference beside the sequence's: held by two.
  REQUIRE(pool.retain(a));
  pool.set_cached(a, true);
  pool.set_cached(a, true); // marking twice counts once
  CHECK(pool.cached_only_count() == 0);
  // The sequence lets go: only the cache holds it.
  REQUIRE(pool.release(a));
  CHECK(pool.cached_only_count() == 1);
  // A later sequence finds it in the cache.
  REQUIRE(pool.retain(a));
  CHECK(pool.cached_only_count() == 0);
  REQUIRE(pool.release(a));
  CHECK(pool.cached_only_count() == 1);
  // Cached while only the cache holds it (b's sequence let go first).
  pool.set_cached(b, true);
  CHECK(pool.cached_only_count() == 2);
  // Evicted: the cache unmarks, then drops its reference.
  pool.set_cached(a, false);
  CHECK(pool.cached_only_count() == 1);
  REQUIRE(pool.release(a));
  CHECK(pool.cached_only_count() == 1);
  // A reference dropped without unmarking still leaves the count right,
  // and the block comes back unmarked.
  REQUIRE(pool.release(b));
  CHECK(pool.cached_only_count() == 0);
  const BlockId again = *pool.allocate();
  CHECK(pool.cached_only_count() == 0);
  REQUIRE(pool.retain(again));
  REQUIRE(pool.release(again));
  CHECK(pool.cached_only_count() == 0);
  // Free and out-of-range blocks are ignored.
  pool.set_cached(3, true);
  pool.set_cached(99, true);
  CHECK(pool.cached_only_count() == 0);
}

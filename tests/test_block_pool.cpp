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

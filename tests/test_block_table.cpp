#include <catch2/catch.hpp>

#include "caflm/kv/block_table.hpp"

using namespace caflm;

TEST_CASE("writing past the end allocates; writing an owned page keeps it") {
  BlockPool pool(4);
  BlockTable table(4);
  auto first = table.ensure_writable(0, pool);
  REQUIRE(first);
  CHECK(first->kind == CopyOnWrite::Kind::Allocated);
  CHECK(table.page_count() == 1);
  auto again = table.ensure_writable(0, pool);
  REQUIRE(again);
  CHECK(again->kind == CopyOnWrite::Kind::Existing);
  CHECK(again->block == first->block);
  CHECK(pool.free_count() == 3);
}

TEST_CASE("pages must be written in order and within capacity") {
  BlockPool pool(4);
  BlockTable table(2);
  CHECK(table.ensure_writable(1, pool).error() == KvError::PageOutOfRange);
  REQUIRE(table.ensure_writable(0, pool));
  REQUIRE(table.ensure_writable(1, pool));
  CHECK(table.ensure_writable(2, pool).error() == KvError::PageOutOfRange);
  CHECK(pool.free_count() == 2);
}

TEST_CASE("fork then write gives Copy and the parent keeps its block") {
  BlockPool pool(8);
  BlockTable parent(4);
  REQUIRE(parent.ensure_writable(0, pool));
  REQUIRE(parent.ensure_writable(1, pool));
  BlockTable child(4);
  REQUIRE(child.fork_from(parent, pool));
  CHECK(child.page_count() == 2);
  CHECK(pool.refcount(parent[1]) == 2);

  auto write = child.ensure_writable(1, pool);
  REQUIRE(write);
  CHECK(write->kind == CopyOnWrite::Kind::Copy);
  CHECK(write->source == parent[1]);
  CHECK(write->block != parent[1]);
  CHECK(child[1] == write->block);
  CHECK(child[0] == parent[0]);
  CHECK(pool.refcount(parent[1]) == 1);
  CHECK(pool.refcount(child[1]) == 1);

  // The parent still owns its page alone and writes it in place.
  auto parent_write = parent.ensure_writable(1, pool);
  REQUIRE(parent_write);
  CHECK(parent_write->kind == CopyOnWrite::Kind::Existing);
}

TEST_CASE("a copy that cannot be allocated leaves the table shared") {
  BlockPool pool(2);
  BlockTable parent(2);
  REQUIRE(parent.ensure_writable(0, pool));
  BlockTable child(2);
  REQUIRE(child.fork_from(parent, pool));
  REQUIRE(parent.ensure_writable(1, pool)); // takes the last free block
  auto write = child.ensure_writable(0, pool);
  REQUIRE_FALSE(write);
  CHECK(write.error() == KvError::Exhausted);
  CHECK(child[0] == parent[0]);
  CHECK(pool.refcount(parent[0]) == 2);
}

TEST_CASE("install_prefix is all or nothing") {
  BlockPool pool(4);
  BlockId a = *pool.allocate();
  BlockId b = *pool.allocate();
  BlockId blocks[] = {a, b, 3}; // 3 is free: invalid to share
  BlockTable table(4);
  auto installed = table.install_prefix(blocks, 3, pool);
  REQUIRE_FALSE(installed);
  CHECK(installed.error() == KvError::InvalidBlock);
  CHECK(table.empty());
  CHECK(pool.refcount(a) == 1);
  CHECK(pool.refcount(b) == 1);

  REQUIRE(table.install_prefix(blocks, 2, pool));
  CHECK(table.page_count() == 2);
  CHECK(pool.refcount(a) == 2);
  CHECK(table.install_prefix(blocks, 1, pool).error() == KvError::TableNotEmpty);
}

TEST_CASE("release_all releases every page or none") {
  BlockPool pool(4);
  BlockTable table(4);
  REQUIRE(table.ensure_writable(0, pool));
  REQUIRE(table.ensure_writable(1, pool));
  REQUIRE(table.release_all(pool));
  CHECK(table.empty());
  CHECK(pool.free_count() == 4);

  // A table whose block was already freed behind its back: releasing again
  // must not free the other, still valid page.
  REQUIRE(table.ensure_writable(0, pool));
  REQUIRE(table.ensure_writable(1, pool));
  BlockId stolen = table[1];
  REQUIRE(pool.release(stolen));
  auto released = table.release_all(pool);
  REQUIRE_FALSE(released);
  CHECK(released.error() == KvError::DoubleRelease);
  CHECK(table.page_count() == 2);
  CHECK(pool.refcount(table[0]) == 1);
}

TEST_CASE("a double release through two tables is caught") {
  BlockPool pool(2);
  BlockTable table(2);
  REQUIRE(table.ensure_writable(0, pool));
  BlockId block = table[0];
  REQUIRE(table.release_all(pool));
  CHECK(pool.release(block).error() == KvError::DoubleRelease);
}

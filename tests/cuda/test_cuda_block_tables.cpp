#include "caflm/cuda/block_table_upload.hpp"
#include "caflm/cuda/paged_attention.hpp"

#include <catch2/catch.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

using caflm::BlockCopy;
using caflm::BlockId;
using caflm::RaggedBatch;
using caflm::RaggedBatchItem;
using caflm::TokenId;
using caflm::cuda::PagedKvGeometry;
using caflm::cuda::RaggedStepPacker;
using caflm::cuda::RaggedStepSections;

namespace {

PagedKvGeometry geometry_of(std::uint32_t n_blocks, std::uint32_t block_size,
                            std::uint32_t head_dim = 64) {
  PagedKvGeometry geometry;
  geometry.n_layers = 2;
  geometry.n_blocks = n_blocks;
  geometry.block_size = block_size;
  geometry.n_kv_heads = 2;
  geometry.head_dim = head_dim;
  return geometry;
}

/// A step of a prefill chunk (positions 5..8 of a sequence on pages 7, 3, 9)
/// and a decode (position 9 on pages 1, 4, 6), block size 4, with two copies.
struct TwoItemStep {
  std::vector<RaggedBatchItem> items{
      RaggedBatchItem{11, 0, 0, 5, 0, 3, 4},
      RaggedBatchItem{12, 1, 4, 9, 3, 3, 1},
  };
  std::vector<TokenId> tokens{1, 2, 3, 4, 5};
  std::vector<BlockId> tables{7, 3, 9, 1, 4, 6};
  std::vector<BlockCopy> copies{{2, 9}, {5, 6}};

  RaggedBatch batch() const {
    return RaggedBatch{items.data(),  static_cast<std::uint32_t>(items.size()),
                       tokens.data(), static_cast<std::uint32_t>(tokens.size()),
                       tables.data(), static_cast<std::uint32_t>(tables.size()),
                       copies.data(), static_cast<std::uint32_t>(copies.size())};
  }
};

} // namespace

TEST_CASE("a packed step holds each token's position, table offset and slot") {
  TwoItemStep step;
  RaggedStepPacker packer(8, 16, 4);
  const RaggedStepSections& s = packer.pack(step.batch(), geometry_of(16, 4), 64);
  REQUIRE(s.token_count == 5);
  CHECK(s.block_table_size == 6);
  CHECK(s.copy_count == 2);
  CHECK(s.max_context == 10);
  CHECK(s.positions == 0);
  CHECK(s.table_offsets == 5);
  CHECK(s.slots == 10);
  CHECK(s.block_tables == 15);
  CHECK(s.copies == 21);
  CHECK(s.total == 25);
  const std::uint32_t* w = packer.words();
  CHECK(std::vector<std::uint32_t>(w + s.positions, w + s.positions + 5) ==
        std::vector<std::uint32_t>{5, 6, 7, 8, 9});
  CHECK(std::vector<std::uint32_t>(w + s.table_offsets, w + s.table_offsets + 5) ==
        std::vector<std::uint32_t>{0, 0, 0, 0, 3});
  // Positions 5, 6, 7 are cells 1..3 of page 1 (block 3), 8 is cell 0 of
  // page 2 (block 9); the decode's 9 is cell 1 of its page 2 (block 6).
  CHECK(std::vector<std::uint32_t>(w + s.slots, w + s.slots + 5) ==
        std::vector<std::uint32_t>{3 * 4 + 1, 3 * 4 + 2, 3 * 4 + 3, 9 * 4 + 0, 6 * 4 + 1});
  CHECK(std::vector<std::uint32_t>(w + s.block_tables, w + s.block_tables + 6) ==
        std::vector<std::uint32_t>{7, 3, 9, 1, 4, 6});
  CHECK(std::vector<std::uint32_t>(w + s.copies, w + s.copies + 4) ==
        std::vector<std::uint32_t>{2, 9, 5, 6});
  CHECK(packer.copy_wave_ends() == std::vector<std::uint32_t>{2});
}

TEST_CASE("device_step points each section at its offset in the uploaded words") {
  TwoItemStep step;
  RaggedStepPacker packer(8, 16, 4);
  const RaggedStepSections& s = packer.pack(step.batch(), geometry_of(16, 4), 64);
  std::vector<std::uint32_t> fake_device(s.total);
  const auto view = caflm::cuda::device_step(s, fake_device.data());
  CHECK(view.positions == fake_device.data() + s.positions);
  CHECK(view.table_offsets == fake_device.data() + s.table_offsets);
  CHECK(view.slots == fake_device.data() + s.slots);
  CHECK(view.block_tables == fake_device.data() + s.block_tables);
  CHECK(view.copies == fake_device.data() + s.copies);
  CHECK(view.token_count == 5);
  CHECK(view.copy_count == 2);
  CHECK(view.max_context == 10);
}

TEST_CASE("packing reuses its storage") {
  TwoItemStep step;
  RaggedStepPacker packer(8, 16, 4);
  const std::size_t capacity = packer.capacity_words();
  CHECK(capacity >= 3 * 8 + 16 + 2 * 4);
  packer.pack(step.batch(), geometry_of(16, 4), 64);
  const std::uint32_t* first = packer.words();
  step.items.pop_back();
  step.tokens.pop_back();
  packer.pack(step.batch(), geometry_of(16, 4), 64);
  CHECK(packer.words() == first);
  CHECK(packer.capacity_words() == capacity);
  CHECK(packer.sections().token_count == 4);
  CHECK(packer.sections().max_context == 9);
}

TEST_CASE("packing rejects a step the CPU runner would reject") {
  TwoItemStep step;
  RaggedStepPacker packer(8, 16, 4);
  const PagedKvGeometry geometry = geometry_of(16, 4);
  SECTION("a valid step packs") {
    CHECK_NOTHROW(packer.pack(step.batch(), geometry, 64));
  }
  SECTION("an empty item") {
    step.items[1].query_length = 0;
    step.tokens.pop_back();
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
  SECTION("a gap between items") {
    step.items[1].token_offset = 5;
    step.tokens.push_back(6);
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
  SECTION("items covering fewer tokens than the batch has") {
    step.tokens.push_back(6);
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
  SECTION("an item running past the tokens") {
    step.items[1].query_length = 2;
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
  SECTION("pages not covering the positions") {
    step.items[0].page_count = 2; // 8 cells for positions up to 8
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
  SECTION("pages past the block tables") {
    step.items[1].block_table_offset = 4;
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
  SECTION("a page outside the cache") {
    step.tables[2] = 16;
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
  SECTION("a copy outside the cache") {
    step.copies[1].destination = 16;
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
  SECTION("a position past the context limit") {
    CHECK_NOTHROW(packer.pack(step.batch(), geometry, 10));
    CHECK_THROWS_AS(packer.pack(step.batch(), geometry, 9), std::invalid_argument);
  }
  SECTION("more tokens, table entries or copies than the capacity") {
    RaggedStepPacker small_tokens(4, 16, 4);
    CHECK_THROWS_AS(small_tokens.pack(step.batch(), geometry, 64), std::invalid_argument);
    RaggedStepPacker small_tables(8, 5, 4);
    CHECK_THROWS_AS(small_tables.pack(step.batch(), geometry, 64), std::invalid_argument);
    RaggedStepPacker small_copies(8, 16, 1);
    CHECK_THROWS_AS(small_copies.pack(step.batch(), geometry, 64), std::invalid_argument);
  }
}

TEST_CASE("the geometry must suit the kernels") {
  CHECK_NOTHROW(caflm::cuda::check_geometry(geometry_of(16, 4, 96)));
  CHECK_NOTHROW(caflm::cuda::check_geometry(geometry_of(16, 4, 256)));
  CHECK_THROWS_AS(caflm::cuda::check_geometry(geometry_of(16, 4, 97)), std::invalid_argument);
  CHECK_THROWS_AS(caflm::cuda::check_geometry(geometry_of(16, 4, 258)), std::invalid_argument);
  CHECK_THROWS_AS(caflm::cuda::check_geometry(geometry_of(0, 4)), std::invalid_argument);
  CHECK_THROWS_AS(caflm::cuda::check_geometry(geometry_of(1u << 16, 1u << 16)),
                  std::invalid_argument);
  CHECK_NOTHROW(caflm::cuda::check_geometry(geometry_of(1u << 16, (1u << 16) - 1)));
}

TEST_CASE("copies split into waves that keep their sequential meaning") {
  std::vector<std::uint32_t> waves;
  SECTION("no copies, no waves") {
    CHECK(caflm::cuda::plan_copy_waves(nullptr, 0, waves) == 0);
    CHECK(waves.empty());
  }
  SECTION("independent copies share one wave") {
    const std::vector<BlockCopy> copies{{1, 2}, {3, 4}, {1, 5}};
    CHECK(caflm::cuda::plan_copy_waves(copies.data(), 3, waves) == 1);
    CHECK(waves == std::vector<std::uint32_t>{3});
  }
  SECTION("reading an earlier destination starts a wave") {
    const std::vector<BlockCopy> copies{{1, 2}, {2, 3}};
    CHECK(caflm::cuda::plan_copy_waves(copies.data(), 2, waves) == 2);
    CHECK(waves == std::vector<std::uint32_t>{1, 2});
  }
  SECTION("writing an earlier destination starts a wave") {
    const std::vector<BlockCopy> copies{{1, 2}, {3, 2}};
    CHECK(caflm::cuda::plan_copy_waves(copies.data(), 2, waves) == 2);
  }
  SECTION("overwriting an earlier source starts a wave") {
    const std::vector<BlockCopy> copies{{1, 2}, {3, 1}};
    CHECK(caflm::cuda::plan_copy_waves(copies.data(), 2, waves) == 2);
  }
  SECTION("a conflict only with a closed wave does not split again") {
    // {2,3} reads wave 0's destination and opens wave 1; {4,5} joins it;
    // {2,6} reads 2, written only in the closed wave 0, so joins too; {5,7}
    // reads wave 1's destination 5 and opens wave 2.
    const std::vector<BlockCopy> copies{{1, 2}, {2, 3}, {4, 5}, {2, 6}, {5, 7}};
    CHECK(caflm::cuda::plan_copy_waves(copies.data(), 5, waves) == 3);
    CHECK(waves == std::vector<std::uint32_t>{1, 4, 5});
  }
  SECTION("a wave list is cleared before planning") {
    waves = {9, 9};
    const std::vector<BlockCopy> copies{{1, 2}};
    CHECK(caflm::cuda::plan_copy_waves(copies.data(), 1, waves) == 1);
    CHECK(waves == std::vector<std::uint32_t>{1});
  }
}

TEST_CASE("launch shapes follow the step, never its contents") {
  const PagedKvGeometry geometry = geometry_of(16, 4, 128); // 2 KV heads
  const auto attention = caflm::cuda::attention_launch_shape(37, 8, geometry);
  CHECK(attention.grid_x == 37);
  CHECK(attention.grid_y == 8);
  CHECK(attention.grid_z == 1);
  CHECK(attention.block_x == caflm::cuda::kAttentionThreads);
  CHECK_THROWS_AS(caflm::cuda::attention_launch_shape(37, 7, geometry), std::invalid_argument);
  CHECK_THROWS_AS(caflm::cuda::attention_launch_shape(37, 0, geometry), std::invalid_argument);
  const auto store = caflm::cuda::store_kv_launch_shape(37);
  CHECK(store.grid_x == 37);
  CHECK(store.block_x == caflm::cuda::kStoreThreads);
  const auto copy = caflm::cuda::copy_blocks_launch_shape(3, geometry);
  CHECK(copy.grid_x == 3);
  CHECK(copy.grid_y == 2); // layers
  CHECK(copy.grid_z == 2); // K and V
}

TEST_CASE("a step padded to a graph bucket lays its padding tokens on the padding block") {
  TwoItemStep step;
  RaggedStepPacker packer(8, 16, 4);
  // 5 tokens padded to 8; block 16 is the padding block, outside the 16
  // blocks the scheduler sees.
  const RaggedStepSections& s = packer.pack(step.batch(), geometry_of(16, 4), 64, 8, 16);
  REQUIRE(s.token_count == 8);
  // The sections sit where an 8-token step's do, whatever the real count.
  CHECK(s.table_offsets == 8);
  CHECK(s.slots == 16);
  CHECK(s.block_tables == 24);
  const std::uint32_t* w = packer.words();
  // The real tokens are packed as without padding.
  CHECK(w[s.positions + 4] == 9);
  CHECK(w[s.slots + 4] == 6 * 4 + 1); // position 9 on page 2 of item 1 (block 6)
  for (std::uint32_t row = 5; row < 8; ++row) {
    INFO("padding row " << row);
    CHECK(w[s.positions + row] == 0);
    CHECK(w[s.table_offsets + row] == 0);
    CHECK(w[s.slots + row] == 16 * 4);
  }
  CHECK(s.max_context == 10);
  // More padding than the packer holds is refused.
  CHECK_THROWS_AS(packer.pack(step.batch(), geometry_of(16, 4), 64, 9, 16), std::invalid_argument);
  // Padding no larger than the batch changes nothing.
  const RaggedStepSections& same = packer.pack(step.batch(), geometry_of(16, 4), 64, 3, 16);
  CHECK(same.token_count == 5);
}

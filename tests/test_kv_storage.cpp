// The CPU KV cache's storage (caflm/kv/kv_storage.hpp): every (layer, block,
// head) its own bytes, a block's heads side by side, copy-on-write copies
// whole blocks and nothing else; and its backing memory
// (huge_page_buffer.hpp): zeroed, writable to its last byte, moved without
// copying or double freeing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>
#include <utility>

#include "caflm/kv/huge_page_buffer.hpp"
#include "caflm/kv/kv_storage.hpp"

using namespace caflm;

TEST_CASE("a huge page buffer is zeroed, whole, and moves") {
  // Not a whole number of 2 MiB pages, to reach the rounded-up tail.
  constexpr std::size_t kBytes = (std::size_t{5} << 20) + 12345;
  HugePageBuffer buffer(kBytes);
  REQUIRE(buffer.data() != nullptr);
  CHECK(buffer.size() == kBytes);
  CHECK(std::all_of(buffer.data(), buffer.data() + kBytes, [](std::uint8_t b) { return b == 0; }));
  buffer.data()[0] = 1;
  buffer.data()[kBytes - 1] = 2;

  HugePageBuffer moved(std::move(buffer));
  CHECK(buffer.data() == nullptr);
  CHECK(buffer.size() == 0);
  REQUIRE(moved.size() == kBytes);
  CHECK(moved.data()[0] == 1);
  CHECK(moved.data()[kBytes - 1] == 2);

  HugePageBuffer assigned(100);
  assigned = std::move(moved);
  CHECK(moved.data() == nullptr);
  CHECK(assigned.size() == kBytes);
  CHECK(assigned.data()[kBytes - 1] == 2);

  const HugePageBuffer empty(0);
  CHECK(empty.data() == nullptr);
  CHECK(empty.size() == 0);
}

namespace {

/// A byte that names (layer, block, head, byte) in a cache of 3 x 5 x 2.
std::uint8_t tag(std::uint32_t layer, BlockId block, std::uint32_t head, std::size_t i) {
  return static_cast<std::uint8_t>(layer * 61 + block * 13 + head * 7 + i);
}

} // namespace

TEST_CASE("each head of each block owns its bytes; copy_block copies whole blocks only") {
  const KvCacheType type = GENERATE(KvCacheType::F32, KvCacheType::F16);
  constexpr std::uint32_t kLayers = 3, kBlocks = 5, kHeads = 2, kBlockSize = 4, kHeadDim = 3;
  KvStorage kv(type, kLayers, kBlocks, kBlockSize, kHeads, kHeadDim);
  const std::size_t head_bytes = kBlockSize * kHeadDim * kv_element_bytes(type);
  CHECK(kv.bytes() == 2 * kLayers * kBlocks * kHeads * head_bytes);
  std::set<const std::uint8_t*> starts;
  for (std::uint32_t layer = 0; layer < kLayers; ++layer)
    for (BlockId block = 0; block < kBlocks; ++block)
      for (std::uint32_t head = 0; head < kHeads; ++head) {
        starts.insert(kv.keys(layer, block, head));
        starts.insert(kv.values(layer, block, head));
        for (std::size_t i = 0; i < head_bytes; ++i) {
          kv.keys(layer, block, head)[i] = tag(layer, block, head, i);
          kv.values(layer, block, head)[i] = static_cast<std::uint8_t>(~tag(layer, block, head, i));
        }
      }
  // No two heads share a start, and no write above ran over another's bytes.
  CHECK(starts.size() == 2 * kLayers * kBlocks * kHeads);
  // A block's heads lie side by side: attention reads them as one run.
  CHECK(kv.head_bytes() == head_bytes);
  for (std::uint32_t layer = 0; layer < kLayers; ++layer)
    for (BlockId block = 0; block < kBlocks; ++block)
      for (std::uint32_t head = 1; head < kHeads; ++head) {
        CHECK(kv.keys(layer, block, head) == kv.keys(layer, block, head - 1) + head_bytes);
        CHECK(kv.values(layer, block, head) == kv.values(layer, block, head - 1) + head_bytes);
      }

  kv.copy_block(1, 3);
  for (std::uint32_t layer = 0; layer < kLayers; ++layer)
    for (BlockId block = 0; block < kBlocks; ++block)
      for (std::uint32_t head = 0; head < kHeads; ++head) {
        const BlockId from = block == 3 ? 1 : block;
        INFO("layer " << layer << ", block " << block << ", head " << head);
        for (std::size_t i = 0; i < head_bytes; ++i) {
          REQUIRE(kv.keys(layer, block, head)[i] == tag(layer, from, head, i));
          REQUIRE(kv.values(layer, block, head)[i] ==
                  static_cast<std::uint8_t>(~tag(layer, from, head, i)));
        }
      }
}

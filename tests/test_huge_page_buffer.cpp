// The KV cache's backing memory (caflm/kv/huge_page_buffer.hpp): zeroed,
// writable to its last byte, moved without copying or double freeing.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "caflm/kv/huge_page_buffer.hpp"

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

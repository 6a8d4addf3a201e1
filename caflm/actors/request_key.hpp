#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include <caf/actor_addr.hpp>

namespace caflm {

/// A request as its sink named it: what identifies a request in an engine
/// (see "Request identity" in messages.hpp).
struct RequestKey {
  caf::actor_addr sink;
  std::uint64_t id = 0;
  std::uint32_t attempt = 0;

  bool operator==(const RequestKey& other) const {
    return id == other.id && attempt == other.attempt && sink == other.sink;
  }
};

struct RequestKeyHash {
  std::size_t operator()(const RequestKey& key) const {
    // CAF's hash of an address dereferences it: an invalid one (from a
    // careless or hostile peer) hashes as 0.
    std::size_t h = key.sink ? std::hash<caf::actor_addr>{}(key.sink) : 0;
    h ^= std::hash<std::uint64_t>{}(key.id) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h ^= std::hash<std::uint32_t>{}(key.attempt) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h;
  }
};

} // namespace caflm

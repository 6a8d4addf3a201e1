#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <caf/fwd.hpp>

#include "caflm/engine/cpu_engine.hpp"
#include "caflm/kv/token_id.hpp"
#include "caflm/messages/interfaces.hpp"

namespace caflm {

/// Tuning of a coordinator.
struct CoordinatorConfig {
  /// How often each engine's load is polled.
  std::chrono::milliseconds poll_interval{100};
  /// Route by prefix affinity at all; false routes by load alone (ties
  /// round robin), the baseline to measure affinity against.
  bool prefix_routing = true;
  /// Engines whose score is within this margin of the best are candidates;
  /// among them, the one holding the longest prefix of the request wins. A
  /// hot prefix therefore stays on one engine only until that engine is
  /// more than the margin above the least loaded one.
  double affinity_margin = 4.0;
  /// Block keys remembered per engine (least recently routed forgotten
  /// first): the coordinator's picture of that engine's prefix cache.
  std::uint32_t prefix_block_memory = 16384;
  /// Tokens per KV block and model salt of the engines' prefix caches, so
  /// the keys routed by are the keys the engines cache by.
  std::uint32_t block_size = kCpuKvBlockSize;
  std::uint64_t cache_salt = 0;
};

/// Spawns the data-parallel coordinator. It polls every registered engine's
/// load and counts the requests it routed since (optimistically, so a burst
/// does not all land on one engine); the score is 4 * waiting + running.
/// A request goes to the candidate (see `affinity_margin`) holding the
/// longest prefix of its block key chain (`prefix_block_keys`), ties broken
/// by score, then round robin. A prompt given only as text routes by a hash
/// of its first bytes (`prefix_hash`) as a chain of one key. Engines are
/// monitored: one that goes down is dropped, with what it was thought to
/// hold, and taken back when it registers again.
dp_coordinator_actor spawn_coordinator(caf::actor_system& system,
                                       const CoordinatorConfig& config = {});

/// Writes to `out` (replacing its contents) the prefix cache keys of the
/// full `block_size`-token blocks of `tokens`, first block first: each key
/// hashes its parent's key, its tokens and `salt`, exactly as
/// `PrefixCache` keys them. A prompt shorter than one block has none.
void prefix_block_keys(const TokenId* tokens, std::size_t count, std::uint32_t block_size,
                       std::uint64_t salt, std::vector<std::uint64_t>& out);

/// The routing key of a prompt given only as text: a hash of its first
/// bytes.
std::uint64_t prefix_hash(std::string_view prompt);

} // namespace caflm

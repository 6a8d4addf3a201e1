#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include <caf/fwd.hpp>

#include "caflm/messages/interfaces.hpp"

namespace caflm {

/// Tuning of a coordinator.
struct CoordinatorConfig {
  /// How often each engine's load is polled.
  std::chrono::milliseconds poll_interval{100};
  /// Engines whose score is within this margin of the best count as equally
  /// loaded; among them, one holding the request's prefix wins.
  double affinity_margin = 4.0;
  /// Prefix hashes remembered per engine.
  std::uint32_t prefix_memory = 1024;
};

/// Spawns the data-parallel coordinator. It polls every registered engine's
/// load and counts the requests it routed since (optimistically, so a burst
/// does not all land on one engine); the score is 4 * waiting + running,
/// ties broken round robin. Engines are monitored: one that goes down is
/// dropped, and taken back when it registers again.
dp_coordinator_actor spawn_coordinator(caf::actor_system& system,
                                       const CoordinatorConfig& config = {});

/// The routing key of a prompt: a hash of its first bytes.
std::uint64_t prefix_hash(std::string_view prompt);

} // namespace caflm

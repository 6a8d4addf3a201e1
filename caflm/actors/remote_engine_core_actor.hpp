#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include <caf/fwd.hpp>

#include "caflm/messages/interfaces.hpp"

namespace caflm {

/// Connection and liveness timing of a remote engine proxy.
struct RemoteEngineOptions {
  /// Liveness probe period, and how long the remote may take to answer one
  /// before it counts as down (a stopped process keeps its socket open).
  std::chrono::milliseconds ping_interval{250};
  std::chrono::milliseconds ping_timeout{1500};
  /// First and longest wait between connection attempts.
  std::chrono::milliseconds first_backoff{100};
  std::chrono::milliseconds max_backoff{2000};
  /// How long the remote may take to answer `add` or `get_load`.
  std::chrono::milliseconds request_timeout{5000};
};

/// Spawns a local stand-in for the engine that `caflm worker` publishes at
/// host:port. It connects (and reconnects) with backoff, registers itself
/// with `coordinator` while the remote is reachable and deregisters when it
/// is not; requests it forwarded then get `engine_unavailable`, so their
/// request actors resubmit elsewhere. The remote worker sends it one token
/// batch per step, which it fans out to the request actors on this node.
engine_core_actor spawn_remote_engine(caf::actor_system& system, std::string host,
                                      std::uint16_t port, dp_coordinator_actor coordinator,
                                      const RemoteEngineOptions& options = {});

} // namespace caflm

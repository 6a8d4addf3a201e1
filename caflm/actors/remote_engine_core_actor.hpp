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
  /// How long the remote may take to connect, and to answer a forwarded
  /// `add`: past it the local request is refused with
  /// `engine_unavailable` (to try elsewhere) and cancelled on the remote.
  /// A slow `add` never drops the connection; only the probe does.
  std::chrono::milliseconds request_timeout{5000};
};

/// How a proxy reaches the engine published at host:port: the middleman in
/// production (spawn_middleman_connector), a stand-in in tests.
using engine_connector = caf::typed_actor<
    caf::replies_to<connect_atom, std::string, std::uint16_t>::with<engine_core_actor>>;

/// A connector that asks this system's middleman for the remote engine:
/// CAF's OpenSSL module when the system uses TLS (see node_tls.hpp), else
/// the plain one. Throws std::runtime_error for anonymous TLS.
engine_connector spawn_middleman_connector(caf::actor_system& system);

/// Spawns a local stand-in for the engine that `caflm worker` publishes at
/// host:port. It connects (and reconnects) with backoff, registers itself
/// with `coordinator` while the remote is reachable and deregisters when it
/// is not; requests it forwarded then get `engine_unavailable`, so their
/// request actors resubmit elsewhere, and are cancelled on the remote
/// should it come back. It is the sink of every request it forwards, under
/// an id of its own, so local requests never collide on the remote engine. The remote worker sends
/// it one token batch per step, which it fans out to the request actors on this node.
remote_engine_actor spawn_remote_engine(caf::actor_system& system, std::string host,
                                        std::uint16_t port, dp_coordinator_actor coordinator,
                                        const RemoteEngineOptions& options = {});

/// As above, reaching the remote through `connector`.
remote_engine_actor spawn_remote_engine(caf::actor_system& system, std::string host,
                                        std::uint16_t port, dp_coordinator_actor coordinator,
                                        const RemoteEngineOptions& options,
                                        engine_connector connector);

} // namespace caflm

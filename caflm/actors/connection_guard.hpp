#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <caf/fwd.hpp>

namespace caflm {

/// Bounds on what a peer can make this node's middleman hold. CAF 0.17
/// bounds none of them: one 32-byte BASP header announcing a 4 GiB payload
/// makes the receiver allocate and zero 4 GiB, and a connection that never
/// speaks is held forever. TLS keeps strangers out; these bound members of
/// the cluster too (a bug, a compromised node).
struct ConnectionLimits {
  /// Largest message a peer may announce. A request's prompt is at most a
  /// few MiB (RequestLimits), a token batch far less.
  std::uint32_t max_frame_bytes = std::uint32_t{64} << 20;
  /// Connections open at once from one address.
  std::uint32_t max_connections_per_peer = 64;
  /// Connections open at once in all.
  std::uint32_t max_connections = 1024;
  /// How long a new connection may take to finish CAF's handshake (TLS's
  /// included).
  std::chrono::milliseconds handshake_timeout{10000};
  /// How long a connected peer may stay silent. caflm's own peers probe
  /// each other four times a second (RemoteEngineOptions::ping_interval).
  std::chrono::milliseconds idle_timeout{120000};
};

/// Returns why `limits` cannot work (a zero), or std::nullopt.
std::optional<std::string> validate(const ConnectionLimits& limits);

/// Makes `system`'s middleman enforce `limits`: a peer that exceeds one, or
/// sends a frame of an unknown type, is disconnected and logged (at
/// warning), and nothing else is affected. It watches the BASP broker from
/// the middleman's own event loop: frames are checked on arrival, before
/// CAF reads (and allocates) their payload; handshakes and silence every
/// quarter of the shorter timeout. Call once per system, after the
/// middleman started (the first call wins).
void start_connection_guard(caf::actor_system& system, const ConnectionLimits& limits = {});

} // namespace caflm

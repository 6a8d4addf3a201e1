#pragma once

#include <chrono>

#include <caf/fwd.hpp>

#include "caflm/messages/interfaces.hpp"

namespace caflm {

/// One request's representative: it gets an engine from the coordinator,
/// submits, and forwards the stream to the user's sink. When its engine
/// dies (or its remote proxy reports it unavailable), it resubmits the
/// prompt plus the tokens already generated, so the user sees one stream
/// with nothing lost or repeated. Send it `cancel` to cancel the request.
using request_actor = token_sink::extend<caf::reacts_to<cancel_atom>>;

/// Failover timing of a request actor.
struct RequestOptions {
  /// How long an engine may take to answer `add`.
  std::chrono::milliseconds admission_timeout{10000};
  /// First and longest wait before asking for an engine again (on
  /// backpressure or when none is available); doubles in between.
  std::chrono::milliseconds first_backoff{20};
  std::chrono::milliseconds max_backoff{1000};
  /// Give up with `engine_unavailable` after this long without an engine.
  std::chrono::milliseconds unavailable_deadline{30000};
};

/// Spawns the actor for `request`; the user's `sink` receives its chunks
/// (TokenBatch) and, if it fails, one InferenceError. If the sink goes
/// down, the request is cancelled.
request_actor spawn_request(caf::actor_system& system, dp_coordinator_actor coordinator,
                            GenerateRequest request, token_sink sink,
                            const RequestOptions& options = {});

} // namespace caflm

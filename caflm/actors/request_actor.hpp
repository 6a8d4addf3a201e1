#pragma once

#include <chrono>

#include <caf/fwd.hpp>

#include "caflm/messages/interfaces.hpp"

namespace caflm {

/// One request's representative: it gets an engine from the coordinator,
/// submits, and forwards the stream to the user's sink. It is the sink of
/// its request for every engine it tries and numbers its attempts, so that
/// a late or slow engine can never repeat a token: chunks of an abandoned
/// attempt are dropped, and every chunk must start at the next token the
/// user has not seen. When its engine dies, faults, or is too slow to admit
/// the request, it cancels the request there and resubmits the prompt plus
/// the tokens already generated (and the seed, drawn at the start when the
/// request has none), so the user sees one stream with nothing lost,
/// repeated or changed. Send it `cancel` to cancel the request.
using request_actor = token_sink::extend<caf::reacts_to<cancel_atom>>;

/// Failover timing of a request actor.
struct RequestOptions {
  /// How long an engine may take to answer `add`; then the attempt is
  /// abandoned (and cancelled there) and another engine tried.
  std::chrono::milliseconds admission_timeout{10000};
  /// First and longest wait before asking again, after backpressure or when
  /// no engine is available; doubles in between.
  std::chrono::milliseconds first_backoff{20};
  std::chrono::milliseconds max_backoff{1000};
  /// Give up with `engine_unavailable` after this long without any engine
  /// that answers: none registered, or each one tried dead or unreachable.
  /// Backpressure is an answer, so a busy but healthy cluster never trips
  /// it: the request waits, retrying with backoff.
  std::chrono::milliseconds unavailable_deadline{30000};
  /// Most engines a request may leave (dead, faulted, too slow to admit it)
  /// before it fails with the last problem: a request that brings down
  /// every engine it runs on must not take the whole cluster with it.
  std::uint32_t max_failovers = 8;
  /// Refusals for a full queue (backpressure) after which a request that no
  /// engine has admitted yet fails with `backpressure` instead of waiting;
  /// zero: it waits, retrying with backoff, however long. A server sets it
  /// to its number of engines, to answer 429 when every queue is full.
  std::uint32_t max_backpressure_refusals = 0;
  /// The whole request's time limit, from its start: it then ends with
  /// `deadline_exceeded` (and is cancelled where it runs). Zero: none.
  std::chrono::milliseconds deadline{0};
};

/// Spawns the actor for `request`; the user's `sink` receives its chunks
/// (TokenBatch) and, if it fails, one InferenceError, both under
/// `request.id`. If the sink goes down, the request is cancelled.
request_actor spawn_request(caf::actor_system& system, dp_coordinator_actor coordinator,
                            GenerateRequest request, token_sink sink,
                            const RequestOptions& options = {});

} // namespace caflm

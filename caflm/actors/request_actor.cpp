#include "caflm/actors/request_actor.hpp"

#include <random>
#include <unordered_map>

#include <caf/all.hpp>

#include "caflm/actors/dp_coordinator_actor.hpp"
#include "caflm/engine/log.hpp"

namespace caflm {

namespace {

struct RequestState {
  RequestOptions options;
  dp_coordinator_actor coordinator;
  /// The user's request; its seed is set before the first attempt.
  GenerateRequest request;
  token_sink user;
  /// The current attempt and its engine (invalid between attempts).
  std::uint32_t attempt = 0;
  engine_core_actor engine;
  bool admitted = false;
  /// Whether any engine ever admitted the request (it may have streamed).
  bool ever_admitted = false;
  /// Refusals for a full queue before the first admission.
  std::uint32_t backpressure_refusals = 0;
  bool started = false;
  /// Attempts given up on that an engine may still run, to cancel again
  /// should their chunks arrive.
  std::unordered_map<std::uint32_t, engine_core_actor> abandoned;
  /// The engine the next route should avoid (it just failed the request).
  engine_core_actor avoid;
  /// Everything streamed to the user so far.
  std::vector<TokenId> generated;
  bool prompt_forwarded = false;
  bool routing = false;
  std::uint32_t failovers = 0;
  /// Spreads the backoffs of requests refused together.
  std::minstd_rand jitter;
  std::chrono::milliseconds backoff{0};
  /// Since when no engine has answered; the unavailable deadline counts
  /// from there.
  caf::actor_clock::time_point unserved_since;
  /// Why the last engine could not serve the request, for the final error.
  std::string last_problem = "no engine is registered";

  static inline const char* name = "caflm.request";
};

/// The request actor as it sees itself: it also takes its timers.
using request_internal_actor =
    request_actor::extend<caf::reacts_to<retry_atom>,
                          caf::reacts_to<admission_timeout_atom, std::uint32_t>,
                          caf::reacts_to<deadline_atom>>;
using request_pointer = request_internal_actor::stateful_pointer<RequestState>;

token_sink as_sink(request_pointer self) {
  return caf::actor_cast<token_sink>(self);
}

/// Leaves the current attempt: the engine is told to stop it (unless it is
/// known to have ended it), and chunks of it are dropped from now on.
void abandon(request_pointer self, bool cancel) {
  auto& st = self->state;
  if (!st.engine)
    return;
  self->demonitor(st.engine.address());
  if (cancel) {
    self->send(st.engine, cancel_atom::value, as_sink(self), st.request.id, st.attempt);
    st.abandoned.emplace(st.attempt, st.engine);
  }
  st.engine = engine_core_actor{};
  st.admitted = false;
}

/// Ends the request actor, its monitors first: a monitor outlives the actor
/// that set it, and one left on a long-lived engine or user sink would keep
/// this actor's memory for as long as that one lives.
void end(request_pointer self) {
  auto& st = self->state;
  if (st.engine)
    self->demonitor(st.engine.address());
  st.engine = engine_core_actor{};
  self->demonitor(st.user.address());
  self->quit();
}

void fail(request_pointer self, InferenceErrorCode code, std::string message) {
  auto& st = self->state;
  abandon(self, true);
  self->send(st.user, InferenceError{st.request.id, st.attempt, code, std::move(message)});
  end(self);
}

/// Asks for an engine again after the current backoff.
void retry_later(request_pointer self) {
  auto& st = self->state;
  if (self->clock().now() - st.unserved_since > st.options.unavailable_deadline) {
    fail(self, InferenceErrorCode::engine_unavailable,
         "no engine could take the request for " +
             std::to_string(st.options.unavailable_deadline.count()) +
             " ms; the last problem: " + st.last_problem);
    return;
  }
  st.backoff = std::min(st.options.max_backoff, std::max(st.options.first_backoff, st.backoff * 2));
  // Jittered, to between half and all of the backoff: requests refused
  // together do not all come back together.
  const auto jittered =
      st.backoff / 2 + std::chrono::milliseconds(st.jitter() % (st.backoff.count() / 2 + 1));
  self->delayed_send(self, jittered, retry_atom::value);
}

/// The current attempt cannot go on at its engine (it died, faulted, or was
/// too slow): try another one at once.
void fail_over(request_pointer self, bool cancel, std::string problem) {
  auto& st = self->state;
  log(LogLevel::Info, "request {} leaves its engine after attempt {}: {}", st.request.id,
      st.attempt, problem);
  st.avoid = st.engine;
  abandon(self, cancel);
  if (++st.failovers > st.options.max_failovers) {
    fail(self, InferenceErrorCode::engine_fault,
         "the request failed on " + std::to_string(st.failovers) +
             " engines; the last problem: " + problem);
    return;
  }
  st.last_problem = std::move(problem);
  st.backoff = std::chrono::milliseconds{0};
  self->send(self, retry_atom::value);
}

void on_admission(request_pointer self, const engine_core_actor& engine, std::uint32_t attempt,
                  const Admission& admission) {
  auto& st = self->state;
  if (attempt != st.attempt || engine != st.engine)
    return; // an attempt given up on already, and cancelled then
  if (admission.accepted) {
    st.admitted = true;
    st.ever_admitted = true;
    st.backoff = std::chrono::milliseconds{0};
    st.unserved_since = self->clock().now();
    return;
  }
  const InferenceError& error = admission.error;
  if (error.code == InferenceErrorCode::backpressure) {
    // A caller that wants backpressure to reach its own client (an HTTP
    // 429) gets it once every engine refused a request not started
    // anywhere; a request that already streamed is never given up for it.
    if (st.options.max_backpressure_refusals > 0 && !st.ever_admitted &&
        ++st.backpressure_refusals >= st.options.max_backpressure_refusals) {
      abandon(self, false);
      fail(self, InferenceErrorCode::backpressure, error.message);
      return;
    }
    // A full queue is a healthy engine's answer: try another, or wait and
    // ask again.
    st.avoid = st.engine;
    st.unserved_since = self->clock().now();
    st.last_problem = error.message;
    abandon(self, false);
    retry_later(self);
  } else if (error.code == InferenceErrorCode::engine_unavailable) {
    // A proxy whose worker was lost between routing and admission: the
    // request never ran there, so this is no failover; ask again.
    st.avoid = st.engine;
    st.last_problem = error.message;
    abandon(self, false);
    retry_later(self);
  } else if (retryable(error.code)) {
    fail_over(self, false, error.message);
  } else {
    abandon(self, false);
    fail(self, error.code, error.message);
  }
}

void submit(request_pointer self, engine_core_actor engine) {
  auto& st = self->state;
  if (st.started)
    ++st.attempt;
  st.started = true;
  st.engine = engine;
  st.admitted = false;
  self->monitor(engine);
  GenerateRequest attempt = st.request;
  attempt.attempt = st.attempt;
  attempt.generated = st.generated;
  const std::uint32_t number = st.attempt;
  // No timeout on the request itself: CAF drops an answer that comes after
  // one, and a late admission must still be seen (and cancelled). The
  // admission timer below gives up on the attempt instead.
  self->request(engine, caf::infinite, add_atom::value, std::move(attempt), as_sink(self))
      .then([self, engine,
             number](const Admission& admission) { on_admission(self, engine, number, admission); },
            [self, engine, number](const caf::error& error) {
              auto& st = self->state;
              if (number == st.attempt && engine == st.engine)
                fail_over(self, true, "its engine did not answer: " + self->system().render(error));
            });
  self->delayed_send(self, st.options.admission_timeout, admission_timeout_atom::value, number);
}

void route(request_pointer self) {
  auto& st = self->state;
  if (st.engine || st.routing)
    return;
  st.routing = true;
  self->request(st.coordinator, std::chrono::seconds(5), route_atom::value, st.request, st.avoid)
      .then(
          [self](const engine_core_actor& engine) {
            auto& st = self->state;
            st.routing = false;
            st.avoid = engine_core_actor{};
            if (engine) {
              submit(self, engine);
            } else {
              st.last_problem = "no engine is registered";
              retry_later(self);
            }
          },
          [self](const caf::error& error) {
            self->state.routing = false;
            self->state.last_problem =
                "the coordinator did not answer: " + self->system().render(error);
            retry_later(self);
          });
}

/// Checks a chunk of the current attempt against what the user has:
/// returns false when it must not be forwarded (a repeat is dropped; a gap
/// or a changed token fails the attempt over).
bool in_sequence(request_pointer self, const TokenChunk& chunk) {
  auto& st = self->state;
  const std::size_t have = st.generated.size();
  if (chunk.first_token == have)
    return true;
  if (chunk.first_token < have && chunk.first_token + chunk.tokens.size() <= have &&
      chunk.finish == FinishReason::None &&
      std::equal(chunk.tokens.begin(), chunk.tokens.end(),
                 st.generated.begin() + chunk.first_token))
    return false; // a repeat of tokens the user already has
  fail_over(self, true,
            "its engine sent tokens from index " + std::to_string(chunk.first_token) +
                " when the next was " + std::to_string(have));
  return false;
}

void on_batch(request_pointer self, TokenBatch& batch) {
  auto& st = self->state;
  for (std::size_t i = 0; i < batch.chunks.size(); ++i) {
    TokenChunk& chunk = batch.chunks[i];
    if (chunk.request_id != st.request.id)
      continue;
    if (!st.engine || chunk.attempt != st.attempt) {
      // A stale attempt: never forwarded. Its engine was told to stop; tell
      // it again, in case that message was lost with a connection.
      auto it = st.abandoned.find(chunk.attempt);
      if (it != st.abandoned.end()) {
        self->send(it->second, cancel_atom::value, as_sink(self), st.request.id, chunk.attempt);
        if (chunk.finish != FinishReason::None)
          st.abandoned.erase(it);
      }
      continue;
    }
    // Chunks may overtake the admission's answer (they come from the
    // engine's worker): a chunk means the engine took the request.
    st.admitted = true;
    if (!in_sequence(self, chunk))
      continue;
    if (!st.prompt_forwarded && !chunk.prompt_tokens.empty()) {
      // Resubmissions send tokens: no engine tokenizes twice.
      st.request.prompt_tokens = chunk.prompt_tokens;
      st.prompt_forwarded = true;
    } else {
      chunk.prompt_tokens.clear();
    }
    st.generated.insert(st.generated.end(), chunk.tokens.begin(), chunk.tokens.end());
    chunk.engine_actor_id = st.engine.id();
    const bool last = chunk.finish != FinishReason::None;
    // The usual batch holds this request's chunk alone: it goes on as it
    // came, without a new vector.
    const bool alone = batch.chunks.size() == 1;
    if (alone) {
      self->send(st.user, std::move(batch));
    } else {
      TokenBatch single;
      single.chunks.reserve(1);
      single.chunks.push_back(std::move(chunk));
      self->send(st.user, std::move(single));
    }
    if (last) {
      end(self);
      return;
    }
    if (alone)
      return;
  }
}

void on_error(request_pointer self, InferenceError& error) {
  auto& st = self->state;
  if (error.request_id != st.request.id)
    return;
  if (!st.engine || error.attempt != st.attempt) {
    st.abandoned.erase(error.attempt); // that attempt has ended
    return;
  }
  if (retryable(error.code)) {
    // The engine ended the attempt (a fault, or a proxy that lost its
    // worker): nothing to cancel there.
    fail_over(self, false, error.message);
    return;
  }
  abandon(self, false);
  fail(self, error.code, std::move(error.message));
}

request_internal_actor::behavior_type request_behavior(request_pointer self,
                                                       dp_coordinator_actor coordinator,
                                                       GenerateRequest request, token_sink user,
                                                       RequestOptions options) {
  auto& st = self->state;
  st.options = options;
  st.coordinator = std::move(coordinator);
  st.request = std::move(request);
  // Drawn once and kept for every attempt: a request resumed on another
  // engine continues with the draws it would have had.
  if (!st.request.params.seed)
    st.request.params.seed = random_seed();
  st.user = std::move(user);
  st.unserved_since = self->clock().now();
  st.jitter.seed(static_cast<std::uint32_t>(self->id()));
  self->monitor(st.user);
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& st = self->state;
    if (down.source == st.user.address()) {
      // Nobody listens any more.
      abandon(self, true);
      end(self);
    } else if (st.engine && down.source == st.engine.address()) {
      fail_over(self, false, "its engine went down");
    }
  });
  if (options.deadline.count() > 0)
    self->delayed_send(self, options.deadline, deadline_atom::value);
  self->send(self, retry_atom::value);
  return {
      [self](TokenBatch& batch) { on_batch(self, batch); },
      [self](InferenceError& error) { on_error(self, error); },
      [self](cancel_atom) { fail(self, InferenceErrorCode::cancelled, "cancelled by the client"); },
      [self](retry_atom) { route(self); },
      [self](admission_timeout_atom, std::uint32_t attempt) {
        auto& st = self->state;
        if (attempt == st.attempt && st.engine && !st.admitted)
          fail_over(self, true,
                    "its engine did not answer within " +
                        std::to_string(st.options.admission_timeout.count()) + " ms");
      },
      [self](deadline_atom) {
        fail(self, InferenceErrorCode::deadline_exceeded,
             "the request did not finish within its deadline of " +
                 std::to_string(self->state.options.deadline.count()) + " ms");
      },
  };
}

} // namespace

request_actor spawn_request(caf::actor_system& system, dp_coordinator_actor coordinator,
                            GenerateRequest request, token_sink sink,
                            const RequestOptions& options) {
  return system.spawn(request_behavior, std::move(coordinator), std::move(request), std::move(sink),
                      options);
}

} // namespace caflm

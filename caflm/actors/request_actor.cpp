#include "caflm/actors/request_actor.hpp"

#include <caf/all.hpp>

#include "caflm/actors/dp_coordinator_actor.hpp"

namespace caflm {

namespace {

struct RequestState {
  RequestOptions options;
  dp_coordinator_actor coordinator;
  GenerateRequest request;
  token_sink user;
  /// The engine serving the request now, if any.
  engine_core_actor engine;
  /// Everything streamed to the user so far.
  std::vector<TokenId> generated;
  bool prompt_forwarded = false;
  bool routing = false;
  std::chrono::milliseconds backoff{0};
  /// When the request last had no engine; the deadline counts from there.
  caf::actor_clock::time_point unserved_since;

  static inline const char* name = "caflm.request";
};

/// The request actor as it sees itself: it also takes its retry timer.
using request_internal_actor = request_actor::extend<caf::reacts_to<retry_atom>>;
using request_pointer = request_internal_actor::stateful_pointer<RequestState>;

void fail(request_pointer self, InferenceErrorCode code, std::string message) {
  self->send(self->state.user, InferenceError{self->state.request.id, code, std::move(message)});
  self->quit();
}

/// Asks for an engine again after the current backoff.
void retry_later(request_pointer self) {
  auto& st = self->state;
  if (st.engine)
    self->demonitor(st.engine.address());
  st.engine = engine_core_actor{};
  if (self->clock().now() - st.unserved_since > st.options.unavailable_deadline) {
    fail(self, InferenceErrorCode::engine_unavailable, "no engine could take the request");
    return;
  }
  st.backoff = std::min(st.options.max_backoff, std::max(st.options.first_backoff, st.backoff * 2));
  self->delayed_send(self, st.backoff, retry_atom::value);
}

/// Lost the engine mid-stream: route again at once.
void engine_lost(request_pointer self) {
  auto& st = self->state;
  if (st.engine)
    self->demonitor(st.engine.address());
  st.engine = engine_core_actor{};
  st.backoff = std::chrono::milliseconds{0};
  st.unserved_since = self->clock().now();
  self->send(self, retry_atom::value);
}

void submit(request_pointer self, engine_core_actor engine) {
  auto& st = self->state;
  st.engine = engine;
  self->monitor(engine);
  GenerateRequest attempt = st.request;
  attempt.generated = st.generated;
  self->request(engine, st.options.admission_timeout, add_atom::value, std::move(attempt),
                caf::actor_cast<token_sink>(self))
      .then(
          [self, engine](const Admission& admission) {
            auto& st = self->state;
            if (st.engine != engine)
              return; // a stale answer from an engine given up on
            if (admission.accepted) {
              st.backoff = std::chrono::milliseconds{0};
              return;
            }
            // A full queue, or a remote proxy whose worker was lost between
            // routing and admission: another engine may take the request.
            if (admission.error.code == InferenceErrorCode::backpressure ||
                admission.error.code == InferenceErrorCode::engine_unavailable)
              retry_later(self);
            else
              fail(self, admission.error.code, admission.error.message);
          },
          [self, engine](const caf::error&) {
            // Dead, unreachable or too slow: try elsewhere.
            if (self->state.engine == engine)
              retry_later(self);
          });
}

/// The prefix hash the coordinator routes by: of the prompt's token ids
/// when given (they win over the text), else of its text. Hashing only the
/// text would give every token-id prompt the same key, and affinity would
/// pile them onto one engine.
std::uint64_t routing_key(const GenerateRequest& request) {
  if (request.prompt_tokens.empty())
    return prefix_hash(request.prompt);
  return prefix_hash(std::string_view(reinterpret_cast<const char*>(request.prompt_tokens.data()),
                                      request.prompt_tokens.size() * sizeof(TokenId)));
}

void route(request_pointer self) {
  auto& st = self->state;
  if (st.engine || st.routing)
    return;
  st.routing = true;
  self->request(st.coordinator, std::chrono::seconds(5), route_atom::value, routing_key(st.request))
      .then(
          [self](const engine_core_actor& engine) {
            self->state.routing = false;
            if (engine)
              submit(self, engine);
            else
              retry_later(self);
          },
          [self](const caf::error&) {
            self->state.routing = false;
            retry_later(self);
          });
}

request_internal_actor::behavior_type request_behavior(request_pointer self,
                                                       dp_coordinator_actor coordinator,
                                                       GenerateRequest request, token_sink user,
                                                       RequestOptions options) {
  auto& st = self->state;
  st.options = options;
  st.coordinator = std::move(coordinator);
  st.request = std::move(request);
  st.user = std::move(user);
  st.unserved_since = self->clock().now();
  self->monitor(st.user);
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& st = self->state;
    if (down.source == st.user.address()) {
      // Nobody listens: quitting makes the worker cancel the request.
      self->quit();
    } else if (st.engine && down.source == st.engine.address()) {
      engine_lost(self);
    }
  });
  self->send(self, retry_atom::value);
  return {
      [self](TokenBatch& batch) {
        auto& st = self->state;
        for (TokenChunk& chunk : batch.chunks) {
          if (chunk.request_id != st.request.id)
            continue;
          if (!st.prompt_forwarded && !chunk.prompt_tokens.empty()) {
            // Resubmissions send tokens: no engine tokenizes twice.
            st.request.prompt_tokens = chunk.prompt_tokens;
            st.prompt_forwarded = true;
          } else {
            chunk.prompt_tokens.clear();
          }
          st.generated.insert(st.generated.end(), chunk.tokens.begin(), chunk.tokens.end());
          bool last = chunk.finish != FinishReason::None;
          self->send(st.user, TokenBatch{{std::move(chunk)}});
          if (last) {
            self->quit();
            return;
          }
        }
      },
      [self](InferenceError& error) {
        if (error.code == InferenceErrorCode::engine_unavailable)
          engine_lost(self);
        else
          fail(self, error.code, std::move(error.message));
      },
      [self](cancel_atom) {
        auto& st = self->state;
        if (st.engine)
          self->send(st.engine, cancel_atom::value, st.request.id);
        fail(self, InferenceErrorCode::cancelled, "cancelled by the client");
      },
      [self](retry_atom) { route(self); },
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

#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <caf/typed_actor.hpp>

#include "caflm/messages/atoms.hpp"
#include "caflm/messages/messages.hpp"

namespace caflm {

/// Receives a request's tokens (in batches, one per step and destination)
/// or its error. A request actor is one; so is a remote engine's proxy,
/// which fans batches out to request actors on its own node.
using token_sink = caf::typed_actor<caf::reacts_to<TokenBatch>, caf::reacts_to<InferenceError>>;

/// One model replica. `add` answers at once (admission); tokens stream to
/// the sink separately. `cancel` names a request as (sink, id, attempt), as
/// it was added (see "Request identity" in messages.hpp).
using engine_core_actor =
    caf::typed_actor<caf::replies_to<add_atom, GenerateRequest, token_sink>::with<Admission>,
                     caf::replies_to<get_load_atom>::with<LoadReport>,
                     caf::reacts_to<cancel_atom, token_sink, std::uint64_t, std::uint32_t>>;

/// What a coordinator knows of its engines.
struct CoordinatorStats {
  std::uint32_t engines = 0;
  std::uint64_t routed = 0;
  /// The last load each registered engine reported, and that engine.
  std::vector<LoadReport> loads;
  std::vector<engine_core_actor> handles;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CoordinatorStats& x) {
  return f(caf::meta::type_name("caflm::CoordinatorStats"), x.engines, x.routed, x.loads,
           x.handles);
}

/// Spreads requests over engines by load and prefix affinity. `route`
/// takes the request (it routes by its prompt) and an engine to avoid if
/// any other is registered (one that just failed the request; an invalid
/// handle for none), and answers an invalid handle when no engine is
/// registered.
using dp_coordinator_actor = caf::typed_actor<
    caf::replies_to<route_atom, GenerateRequest, engine_core_actor>::with<engine_core_actor>,
    caf::reacts_to<register_atom, engine_core_actor>,
    caf::reacts_to<deregister_atom, engine_core_actor>,
    caf::replies_to<stats_atom>::with<CoordinatorStats>>;

/// The engine core as its worker sees it: the worker reports, after each
/// step, which requests ended (by the engine's own ids) and the KV cache's
/// state.
using engine_core_internal_actor =
    engine_core_actor::extend<caf::reacts_to<done_atom, std::vector<std::uint64_t>, LoadReport>>;

/// The detached actor that owns a model runner and runs the step loop. The
/// core hands it each request with the engine's own id for it, unique in
/// the engine, and the steady-clock time in nanoseconds when the request
/// reached the core (its queue time counts from there); it cancels by that
/// id.
using worker_actor = caf::typed_actor<
    caf::reacts_to<add_atom, std::uint64_t, GenerateRequest, token_sink, std::int64_t>,
    caf::reacts_to<cancel_atom, std::uint64_t>, caf::reacts_to<step_atom>>;

/// How a remote engine's proxy stands with its worker.
struct RemoteEngineStatus {
  bool connected = false;
  /// Why the last attempt to connect failed (empty before any failed).
  std::string problem;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RemoteEngineStatus& x) {
  return f(caf::meta::type_name("caflm::RemoteEngineStatus"), x.connected, x.problem);
}

/// A remote engine's proxy: an engine that also says how its connection
/// stands.
using remote_engine_actor =
    engine_core_actor::extend<caf::replies_to<status_atom>::with<RemoteEngineStatus>>;

/// Tokenizes prompts for an engine core, off the core's mailbox: a burst of
/// long prompts must not delay the core's answers to `get_load`.
using tokenizer_actor =
    caf::typed_actor<caf::replies_to<tokenize_atom, std::string>::with<std::vector<TokenId>>>;

} // namespace caflm

#include "caflm/actors/engine_core_actor.hpp"

#include <map>
#include <unordered_set>

#include <caf/all.hpp>

#include "caflm/actors/worker_actor.hpp"
#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/model/model.hpp"

namespace caflm {

namespace {

/// A request waiting for the worker.
struct Pending {
  GenerateRequest request;
  token_sink sink;
};

struct EngineCoreState {
  std::shared_ptr<InferenceEngine> engine;
  EngineLimits limits;
  worker_actor worker;
  /// Waiting requests by (-priority, arrival): begin() runs next.
  std::map<std::pair<std::int64_t, std::uint64_t>, Pending> queue;
  std::uint64_t arrivals = 0;
  /// Requests in the worker, until their last chunk.
  std::unordered_set<std::uint64_t> in_flight;
  /// The worker's latest view of its KV cache.
  LoadReport kv;

  static inline const char* name = "caflm.engine_core";
};

using core_pointer = engine_core_internal_actor::stateful_pointer<EngineCoreState>;

Admission refuse(std::uint64_t id, InferenceErrorCode code, std::string message) {
  return Admission{id, false, InferenceError{id, code, std::move(message)}};
}

bool known(const EngineCoreState& st, std::uint64_t id) {
  if (st.in_flight.count(id) != 0)
    return true;
  for (const auto& entry : st.queue)
    if (entry.second.request.id == id)
      return true;
  return false;
}

/// Checks and tokenizes a request; on success its prompt_tokens are set.
std::optional<Admission> check(EngineCoreState& st, GenerateRequest& request) {
  const std::uint64_t id = request.id;
  if (auto problem = validate(request.params))
    return refuse(id, InferenceErrorCode::bad_request, *problem);
  if (known(st, id))
    return refuse(id, InferenceErrorCode::bad_request,
                  "request id " + std::to_string(id) + " is already in use");
  if (request.generated.size() >= request.params.max_tokens)
    return refuse(id, InferenceErrorCode::bad_request, "no tokens left to generate");
  // Checked before tokenizing: a vocabulary that adds BOS would turn an
  // empty text into a one-token prompt, and the request would be served.
  if (request.prompt.empty() && request.prompt_tokens.empty())
    return refuse(id, InferenceErrorCode::bad_request, "the prompt is empty");
  const Tokenizer& tokenizer = st.engine->tokenizer();
  if (request.prompt_tokens.empty())
    request.prompt_tokens = tokenizer.encode(request.prompt, tokenizer.vocabulary().add_bos());
  if (request.prompt_tokens.empty())
    return refuse(id, InferenceErrorCode::bad_request, "the prompt is empty");
  const std::size_t vocab = tokenizer.vocabulary().size();
  for (TokenId token : request.prompt_tokens)
    if (token >= vocab)
      return refuse(id, InferenceErrorCode::bad_request,
                    "token id " + std::to_string(token) + " is outside the vocabulary");
  const std::size_t length = request.prompt_tokens.size() + request.generated.size();
  if (length >= st.engine->max_context())
    return refuse(id, InferenceErrorCode::context_length_exceeded,
                  "the prompt has " + std::to_string(length) + " tokens; the context holds " +
                      std::to_string(st.engine->max_context()) + " including the reply");
  if (st.queue.size() >= st.limits.queue_capacity)
    return refuse(id, InferenceErrorCode::backpressure,
                  "the engine's queue of " + std::to_string(st.limits.queue_capacity) +
                      " requests is full");
  return std::nullopt;
}

/// Moves queued requests to the worker while it has room.
void dispatch(core_pointer self) {
  auto& st = self->state;
  while (st.in_flight.size() < st.limits.max_concurrent && !st.queue.empty()) {
    auto next = st.queue.begin();
    st.in_flight.insert(next->second.request.id);
    self->send(st.worker, add_atom::value, std::move(next->second.request),
               std::move(next->second.sink));
    st.queue.erase(next);
  }
}

engine_core_internal_actor::behavior_type engine_core(core_pointer self,
                                                      std::shared_ptr<InferenceEngine> engine,
                                                      EngineLimits limits,
                                                      WorkerFactory make_worker) {
  auto& st = self->state;
  st.engine = std::move(engine);
  st.limits = limits;
  st.kv.total_blocks = st.kv.free_blocks = st.engine->load().total_blocks;
  st.worker = make_worker(self->system(), st.engine, self);
  // The worker lives and dies with its core.
  self->link_to(st.worker);
  return {
      [self](add_atom, GenerateRequest& request, token_sink& sink) -> Admission {
        auto& st = self->state;
        if (auto refused = check(st, request))
          return *refused;
        const std::uint64_t id = request.id;
        st.queue.emplace(std::make_pair(-std::int64_t{request.priority}, st.arrivals++),
                         Pending{std::move(request), std::move(sink)});
        dispatch(self);
        return Admission{id, true, {}};
      },
      [self](get_load_atom) -> LoadReport {
        auto& st = self->state;
        LoadReport report = st.kv;
        report.running = static_cast<std::uint32_t>(st.in_flight.size());
        report.waiting = static_cast<std::uint32_t>(st.queue.size());
        report.score = 4.0 * report.waiting + report.running;
        return report;
      },
      [self](cancel_atom, std::uint64_t id) {
        auto& st = self->state;
        for (auto it = st.queue.begin(); it != st.queue.end(); ++it) {
          if (it->second.request.id != id)
            continue;
          self->send(it->second.sink,
                     InferenceError{id, InferenceErrorCode::cancelled, "cancelled while waiting"});
          st.queue.erase(it);
          return;
        }
        if (st.in_flight.count(id) != 0)
          self->send(st.worker, cancel_atom::value, id);
      },
      [self](done_atom, const std::vector<std::uint64_t>& ended, const LoadReport& kv) {
        auto& st = self->state;
        for (std::uint64_t id : ended)
          st.in_flight.erase(id);
        st.kv = kv;
        dispatch(self);
      },
  };
}

} // namespace

engine_core_actor spawn_engine_core(caf::actor_system& system,
                                    std::shared_ptr<InferenceEngine> engine,
                                    const EngineLimits& limits) {
  return spawn_engine_core(system, std::move(engine), limits, spawn_worker);
}

engine_core_actor spawn_engine_core(caf::actor_system& system,
                                    std::shared_ptr<InferenceEngine> engine,
                                    const EngineLimits& limits, WorkerFactory make_worker) {
  return system.spawn(engine_core, std::move(engine), limits, std::move(make_worker));
}

engine_core_actor spawn_cpu_engine(caf::actor_system& system, std::shared_ptr<const Model> model,
                                   std::shared_ptr<const Tokenizer> tokenizer,
                                   const EngineLimits& limits, std::size_t kv_cache_bytes) {
  EngineConfig config = cpu_engine_config(*model, 0, kv_cache_bytes);
  config.scheduler.max_requests = std::max(config.scheduler.max_requests, limits.max_concurrent);
  config.scheduler.max_running = std::min(config.scheduler.max_running, limits.max_concurrent);
  std::shared_ptr<InferenceEngine> engine =
      make_cpu_engine(std::move(model), std::move(tokenizer), config);
  return spawn_engine_core(system, std::move(engine), limits);
}

} // namespace caflm

#include "caflm/actors/engine_core_actor.hpp"

#include <chrono>
#include <map>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include <caf/all.hpp>

#include "caflm/actors/request_key.hpp"
#include "caflm/actors/sink_watch.hpp"
#include "caflm/actors/worker_actor.hpp"
#include "caflm/engine/engine_factory.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/model/model.hpp"
#include "caflm/text/tokenizer.hpp"
#include "caflm/text/vocabulary.hpp"

namespace caflm {

namespace {

/// A request waiting for the worker.
struct Pending {
  std::uint64_t engine_id;
  GenerateRequest request;
  token_sink sink;
  /// When the request reached the core (steady clock), for its queue time.
  std::int64_t arrival_ns;
};

/// Queue order: higher priority first, then arrival.
using QueuePosition = std::pair<std::int64_t, std::uint64_t>;

struct EngineCoreState {
  std::shared_ptr<InferenceEngine> engine;
  EngineLimits limits;
  worker_actor worker;
  tokenizer_actor tokenizer;
  /// The engine's own id for the next request: unique for the engine's life.
  std::uint64_t next_engine_id = 1;
  /// Every request from admission to its last chunk: the engine's id for it
  /// by its key, and its key by that id.
  std::unordered_map<RequestKey, std::uint64_t, RequestKeyHash> ids;
  std::unordered_map<std::uint64_t, RequestKey> keys;
  /// Requests whose text is being tokenized; true once cancelled meanwhile.
  std::unordered_map<std::uint64_t, bool> tokenizing;
  /// Waiting requests: begin() runs next. And where each one waits.
  std::map<QueuePosition, Pending> queue;
  std::unordered_map<std::uint64_t, QueuePosition> queued;
  std::uint64_t arrivals = 0;
  /// Requests in the worker, until their last chunk.
  std::unordered_set<std::uint64_t> in_flight;
  /// Sinks of waiting requests (tokenizing or queued): a request whose
  /// client died leaves at once.
  SinkWatch watched_sinks;
  /// The worker's latest view of its KV cache.
  LoadReport kv;
  /// Backpressure refusals not logged yet, and when the last line was.
  std::uint64_t unlogged_backpressure = 0;
  caf::actor_clock::time_point backpressure_logged;

  static inline const char* name = "caflm.engine_core";

  std::size_t waiting() const { return queue.size() + tokenizing.size(); }
};

using core_pointer = engine_core_internal_actor::stateful_pointer<EngineCoreState>;

Admission refuse(const GenerateRequest& request, InferenceErrorCode code, std::string message) {
  log(LogLevel::Info, "engine refused request {} (attempt {}): {}: {}", request.id, request.attempt,
      to_string(code), message);
  return Admission::refuse(request.id, request.attempt, code, std::move(message));
}

/// Refused for a full queue. Under overload that is every request, so the
/// log gets one line a second with the count, not one per refusal.
Admission refuse_backpressure(core_pointer self, const GenerateRequest& request) {
  auto& st = self->state;
  ++st.unlogged_backpressure;
  const auto now = self->clock().now();
  if (now - st.backpressure_logged >= std::chrono::seconds(1)) {
    log(LogLevel::Warning,
        "engine refused {} request(s) with backpressure: its queue of {} is full",
        st.unlogged_backpressure, st.limits.queue_capacity);
    st.unlogged_backpressure = 0;
    st.backpressure_logged = now;
  }
  return Admission::refuse(request.id, request.attempt, InferenceErrorCode::backpressure,
                           "the engine's queue of " + std::to_string(st.limits.queue_capacity) +
                               " requests is full");
}

void watch(core_pointer self, const token_sink& sink) {
  self->state.watched_sinks.add(self, sink);
}

void unwatch(core_pointer self, const caf::actor_addr& sink) {
  self->state.watched_sinks.remove(self, sink);
}

/// Forgets a request that left the engine (or never entered it).
void forget(core_pointer self, std::uint64_t engine_id) {
  auto& st = self->state;
  auto it = st.keys.find(engine_id);
  if (it == st.keys.end())
    return;
  st.ids.erase(it->second);
  st.keys.erase(it);
}

/// Checks what can be checked before tokenizing: cheap, so that refused
/// requests cost the core nothing and a full queue answers at once.
std::optional<Admission> precheck(core_pointer self, const GenerateRequest& request,
                                  const token_sink& sink) {
  auto& st = self->state;
  if (!sink)
    return refuse(request, InferenceErrorCode::bad_request, "the request has no sink");
  if (st.ids.count(RequestKey{sink.address(), request.id, request.attempt}) != 0)
    return refuse(request, InferenceErrorCode::bad_request,
                  "request " + std::to_string(request.id) + " attempt " +
                      std::to_string(request.attempt) + " of this sink is already in the engine");
  if (auto problem = validate(request.params))
    return refuse(request, InferenceErrorCode::bad_request, *problem);
  // The engine's request limits, for requests from any client or peer.
  const RequestLimits& limits = st.engine->request_limits();
  if (auto problem = check_params(limits, request.params, st.engine->max_context()))
    return refuse(request, InferenceErrorCode::bad_request, *problem);
  if (request.generated.size() >= request.params.max_tokens)
    return refuse(request, InferenceErrorCode::bad_request, "no tokens left to generate");
  // Text is tokenized only without tokens; its size bounds the tokenizer's work.
  if (request.prompt_tokens.empty())
    if (auto problem = check_prompt_bytes(limits, request.prompt.size()))
      return refuse(request, InferenceErrorCode::bad_request, *problem);
  // Checked before tokenizing: a vocabulary that adds BOS would turn an
  // empty text into a one-token prompt, and the request would be served.
  if (request.prompt.empty() && request.prompt_tokens.empty())
    return refuse(request, InferenceErrorCode::bad_request, "the prompt is empty");
  if (st.waiting() >= st.limits.queue_capacity)
    return refuse_backpressure(self, request);
  return std::nullopt;
}

/// Checks a tokenized request against the model; nullopt when it may run.
std::optional<Admission> check_tokens(const EngineCoreState& st, const GenerateRequest& request) {
  if (request.prompt_tokens.empty())
    return refuse(request, InferenceErrorCode::bad_request, "the prompt is empty");
  // Lengths before the scans below: a peer's sequence may be of any length.
  if (auto problem = check_prompt_tokens(st.engine->request_limits(), request.prompt_tokens.size(),
                                         request.generated.size()))
    return refuse(request, InferenceErrorCode::context_length_exceeded, *problem);
  const std::size_t length = request.prompt_tokens.size() + request.generated.size();
  if (length >= st.engine->max_context())
    return refuse(request, InferenceErrorCode::context_length_exceeded,
                  "the prompt has " + std::to_string(length) + " tokens; the engine's context " +
                      "holds " + std::to_string(st.engine->max_context()) + " including the reply");
  const std::size_t vocab = st.engine->tokenizer().vocabulary().size();
  for (TokenId token : request.prompt_tokens)
    if (token >= vocab)
      return refuse(request, InferenceErrorCode::bad_request,
                    "token id " + std::to_string(token) + " is outside the vocabulary of " +
                        std::to_string(vocab));
  for (TokenId token : request.generated)
    if (token >= vocab)
      return refuse(request, InferenceErrorCode::bad_request,
                    "generated token id " + std::to_string(token) + " is outside the vocabulary");
  return std::nullopt;
}

/// Moves queued requests to the worker while it has room.
void dispatch(core_pointer self) {
  auto& st = self->state;
  while (st.in_flight.size() < st.limits.max_concurrent && !st.queue.empty()) {
    auto next = st.queue.begin();
    Pending& pending = next->second;
    st.queued.erase(pending.engine_id);
    st.in_flight.insert(pending.engine_id);
    // The worker watches the sinks of the requests it runs.
    unwatch(self, pending.sink.address());
    self->send(st.worker, add_atom::value, pending.engine_id, std::move(pending.request),
               std::move(pending.sink), pending.arrival_ns);
    st.queue.erase(next);
  }
}

/// Queues a checked, tokenized request, or refuses it.
Admission admit(core_pointer self, std::uint64_t engine_id, GenerateRequest request,
                token_sink sink, std::int64_t arrival_ns) {
  auto& st = self->state;
  if (auto refused = check_tokens(st, request)) {
    unwatch(self, sink.address());
    forget(self, engine_id);
    return *refused;
  }
  const Admission accepted = Admission::accept(request.id, request.attempt);
  const QueuePosition position{-std::int64_t{request.priority}, st.arrivals++};
  st.queued.emplace(engine_id, position);
  st.queue.emplace(position, Pending{engine_id, std::move(request), std::move(sink), arrival_ns});
  dispatch(self);
  return accepted;
}

/// Takes a waiting request out of the queue; false if it is not there.
bool dequeue(core_pointer self, std::uint64_t engine_id) {
  auto& st = self->state;
  auto position = st.queued.find(engine_id);
  if (position == st.queued.end())
    return false;
  auto it = st.queue.find(position->second);
  unwatch(self, it->second.sink.address());
  st.queue.erase(it);
  st.queued.erase(position);
  forget(self, engine_id);
  return true;
}

caf::result<Admission> add(core_pointer self, GenerateRequest& request, token_sink& sink) {
  auto& st = self->state;
  if (auto refused = precheck(self, request, sink))
    return *refused;
  const std::uint64_t engine_id = st.next_engine_id++;
  const std::int64_t arrival_ns =
      std::chrono::steady_clock::now().time_since_epoch() / std::chrono::nanoseconds(1);
  const RequestKey key{sink.address(), request.id, request.attempt};
  st.ids.emplace(key, engine_id);
  st.keys.emplace(engine_id, key);
  watch(self, sink);
  if (!request.prompt_tokens.empty())
    return admit(self, engine_id, std::move(request), std::move(sink), arrival_ns);
  // Text is tokenized by the tokenizer actor, and admission answered when its
  // tokens are back; meanwhile the request counts as waiting.
  st.tokenizing.emplace(engine_id, false);
  auto promise = self->make_response_promise<Admission>();
  const std::uint64_t id = request.id;
  const std::uint32_t attempt = request.attempt;
  std::string text = std::move(request.prompt);
  self->request(st.tokenizer, caf::infinite, tokenize_atom::value, std::move(text))
      .then(
          [self, promise, engine_id, arrival_ns, request = std::move(request),
           sink = std::move(sink)](std::vector<TokenId>& tokens) mutable {
            auto& st = self->state;
            auto it = st.tokenizing.find(engine_id);
            const bool cancelled = it->second;
            st.tokenizing.erase(it);
            if (cancelled) {
              forget(self, engine_id);
              promise.deliver(Admission::refuse(request.id, request.attempt,
                                                InferenceErrorCode::cancelled,
                                                "cancelled while its prompt was tokenized"));
              return;
            }
            request.prompt_tokens = std::move(tokens);
            promise.deliver(
                admit(self, engine_id, std::move(request), std::move(sink), arrival_ns));
          },
          [self, promise, engine_id, id, attempt](const caf::error& error) mutable {
            auto& st = self->state;
            auto it = st.tokenizing.find(engine_id);
            // A cancelled request stopped being watched when it was cancelled.
            auto key = st.keys.find(engine_id);
            if (!it->second && key != st.keys.end())
              unwatch(self, key->second.sink);
            st.tokenizing.erase(it);
            forget(self, engine_id);
            promise.deliver(
                Admission::refuse(id, attempt, InferenceErrorCode::engine_fault,
                                  "tokenizing failed: " + self->system().render(error)));
          });
  return promise;
}

void cancel(core_pointer self, const RequestKey& key) {
  auto& st = self->state;
  auto found = st.ids.find(key);
  if (found == st.ids.end())
    return;
  const std::uint64_t engine_id = found->second;
  if (auto it = st.tokenizing.find(engine_id); it != st.tokenizing.end()) {
    if (!it->second) {
      it->second = true;
      unwatch(self, key.sink);
    }
    return;
  }
  if (dequeue(self, engine_id)) {
    self->send(caf::actor_cast<token_sink>(key.sink),
               InferenceError{key.id, key.attempt, InferenceErrorCode::cancelled,
                              "cancelled while waiting"});
    return;
  }
  if (st.in_flight.count(engine_id) != 0)
    self->send(st.worker, cancel_atom::value, engine_id);
}

/// A sink went down: its waiting requests leave the engine (the worker
/// cancels those it runs).
void sink_down(core_pointer self, const caf::actor_addr& sink) {
  auto& st = self->state;
  if (!st.watched_sinks.watches(sink))
    return;
  std::vector<std::uint64_t> orphans;
  for (const auto& [engine_id, key] : st.keys)
    if (key.sink == sink && st.in_flight.count(engine_id) == 0)
      orphans.push_back(engine_id);
  for (std::uint64_t engine_id : orphans) {
    if (auto it = st.tokenizing.find(engine_id); it != st.tokenizing.end()) {
      it->second = true;
      continue;
    }
    dequeue(self, engine_id);
  }
  st.watched_sinks.erase(sink);
  if (!orphans.empty())
    log(LogLevel::Info, "engine dropped {} waiting request(s) whose client went away",
        orphans.size());
}

struct TokenizerState {
  std::shared_ptr<const Tokenizer> tokenizer;

  static inline const char* name = "caflm.tokenizer";
};

tokenizer_actor::behavior_type
tokenizer_behavior(tokenizer_actor::stateful_pointer<TokenizerState> self,
                   std::shared_ptr<const Tokenizer> tokenizer) {
  self->state.tokenizer = std::move(tokenizer);
  return {
      [self](tokenize_atom, const std::string& text) {
        // As llama.cpp's server and CLI tokenize prompts: BOS and EOS as the
        // vocabulary says, and special tokens' texts (<|im_start|>, <s>)
        // become those tokens, so a prompt rendered by a chat template
        // means to the model what the template meant.
        return self->state.tokenizer->tokenize(text, /*add_special=*/true,
                                               /*parse_special=*/true);
      },
  };
}

engine_core_internal_actor::behavior_type engine_core(core_pointer self,
                                                      std::shared_ptr<InferenceEngine> engine,
                                                      EngineLimits limits,
                                                      WorkerFactory make_worker) {
  auto& st = self->state;
  st.engine = std::move(engine);
  st.limits = limits;
  st.kv = st.engine->load();
  st.worker = make_worker(self->system(), st.engine, self);
  // One tokenizer actor per core: a burst of long prompts queues in its
  // mailbox, not the core's, and occupies at most one of CAF's scheduler
  // threads at a time.
  st.tokenizer = self->system().spawn(tokenizer_behavior, st.engine->shared_tokenizer());
  // Worker and tokenizer live and die with their core.
  self->link_to(st.worker);
  self->link_to(st.tokenizer);
  self->set_down_handler([self](const caf::down_msg& down) { sink_down(self, down.source); });
  return {
      [self](add_atom, GenerateRequest& request, token_sink& sink) -> caf::result<Admission> {
        return add(self, request, sink);
      },
      [self](get_load_atom) -> LoadReport {
        auto& st = self->state;
        LoadReport report = st.kv;
        report.running = static_cast<std::uint32_t>(st.in_flight.size());
        report.waiting = static_cast<std::uint32_t>(st.waiting());
        report.score = load_score(report.running, report.waiting);
        return report;
      },
      [self](cancel_atom, const token_sink& sink, std::uint64_t id, std::uint32_t attempt) {
        cancel(self, RequestKey{sink.address(), id, attempt});
      },
      [self](done_atom, const std::vector<std::uint64_t>& ended, const LoadReport& kv) {
        auto& st = self->state;
        for (std::uint64_t engine_id : ended) {
          st.in_flight.erase(engine_id);
          forget(self, engine_id);
        }
        st.kv = kv;
        dispatch(self);
      },
  };
}

} // namespace

engine_core_actor spawn_engine_core(caf::actor_system& system,
                                    std::shared_ptr<InferenceEngine> engine,
                                    const EngineLimits& limits) {
  const WorkerOptions worker_options{limits.token_flush_interval};
  return spawn_engine_core(
      system, std::move(engine), limits,
      [worker_options](caf::actor_system& system, std::shared_ptr<InferenceEngine> engine,
                       engine_core_internal_actor core) {
        return spawn_worker(system, std::move(engine), std::move(core), worker_options);
      });
}

engine_core_actor spawn_engine_core(caf::actor_system& system,
                                    std::shared_ptr<InferenceEngine> engine,
                                    const EngineLimits& limits, WorkerFactory make_worker) {
  if (auto problem = validate(limits))
    throw std::invalid_argument(*problem);
  return system.spawn(engine_core, std::move(engine), limits, std::move(make_worker));
}

std::optional<std::string> validate(const EngineLimits& limits) {
  // Either at zero admits requests that never run.
  if (limits.max_concurrent == 0)
    return "an engine needs max_concurrent of at least 1";
  if (limits.queue_capacity == 0)
    return "an engine needs a queue of at least 1";
  if (limits.token_flush_interval.count() < 0)
    return "an engine's token flush interval cannot be negative";
  return std::nullopt;
}

EngineOptions engine_options_for(const EngineLimits& limits, EngineOptions options) {
  options.max_requests = std::max(options.max_requests, limits.max_concurrent);
  options.max_running = std::min(options.max_running, limits.max_concurrent);
  return options;
}

engine_core_actor spawn_engine(caf::actor_system& system, std::shared_ptr<const Model> model,
                               std::shared_ptr<const Tokenizer> tokenizer,
                               const EngineLimits& limits, const EngineOptions& options) {
  if (auto problem = validate(limits))
    throw std::invalid_argument(*problem);
  std::shared_ptr<InferenceEngine> engine =
      make_engine(std::move(model), std::move(tokenizer), engine_options_for(limits, options));
  return spawn_engine_core(system, std::move(engine), limits);
}

} // namespace caflm

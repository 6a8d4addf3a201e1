#include "caflm/actors/worker_actor.hpp"

#include <unordered_map>
#include <unordered_set>

#include <caf/all.hpp>

#include "caflm/engine/inference_engine.hpp"

namespace caflm {

namespace {

struct WorkerState {
  std::shared_ptr<InferenceEngine> engine;
  engine_core_internal_actor core;
  /// The sink of each running request, and its prompt until the first chunk.
  std::unordered_map<std::uint64_t, token_sink> sinks;
  std::unordered_map<std::uint64_t, std::vector<TokenId>> unsent_prompts;
  /// Requests per monitored sink, to cancel them when the sink goes down.
  std::unordered_map<caf::actor_addr, std::unordered_set<std::uint64_t>> by_sink;
  bool step_pending = false;
  /// Free KV blocks in the last report to the core.
  std::uint32_t reported_free_blocks = 0;

  static inline const char* name = "caflm.worker";
};

using worker_pointer = worker_actor::stateful_pointer<WorkerState>;

/// Tells the core which requests ended and the KV cache's state. Sent when
/// a request ended or the free blocks changed, so the core's LoadReport
/// follows a long decode's growing KV use, not just its end.
void report(worker_pointer self, std::vector<std::uint64_t> ended) {
  auto& st = self->state;
  LoadReport kv = st.engine->load();
  if (ended.empty() && kv.free_blocks == st.reported_free_blocks)
    return;
  st.reported_free_blocks = kv.free_blocks;
  self->send(st.core, done_atom::value, std::move(ended), kv);
}

void schedule_step(worker_pointer self) {
  if (!self->state.step_pending && self->state.engine->has_work()) {
    self->state.step_pending = true;
    self->send(self, step_atom::value);
  }
}

/// Forgets a request that ended; returns its sink.
token_sink forget(worker_pointer self, std::uint64_t id) {
  auto& st = self->state;
  token_sink sink = st.sinks[id];
  st.sinks.erase(id);
  st.unsent_prompts.erase(id);
  auto it = st.by_sink.find(sink.address());
  if (it != st.by_sink.end()) {
    it->second.erase(id);
    if (it->second.empty()) {
      self->demonitor(sink.address());
      st.by_sink.erase(it);
    }
  }
  return sink;
}

TokenChunk to_chunk(WorkerState& st, TokenEvent& event) {
  TokenChunk chunk;
  chunk.request_id = event.request_id;
  if (auto prompt = st.unsent_prompts.find(event.request_id); prompt != st.unsent_prompts.end()) {
    chunk.prompt_tokens = std::move(prompt->second);
    st.unsent_prompts.erase(prompt);
  }
  chunk.tokens.push_back(event.token);
  chunk.text = std::move(event.text);
  chunk.logprobs.push_back(event.logprob);
  if (!event.top_logprobs.empty())
    chunk.top_logprobs.push_back(std::move(event.top_logprobs));
  chunk.finish = event.finish;
  if (event.finish != FinishReason::None)
    chunk.usage = Usage{event.prompt_tokens, event.completion_tokens, event.cached_prompt_tokens};
  return chunk;
}

/// Ends requests cancelled here (by the core or a dead sink) with a last,
/// empty chunk, and tells the core they are no longer in flight.
void cancel_requests(worker_pointer self, const std::vector<std::uint64_t>& ids) {
  std::vector<std::uint64_t> ended;
  for (std::uint64_t id : ids) {
    if (!self->state.engine->cancel(id))
      continue;
    token_sink sink = forget(self, id);
    TokenChunk last;
    last.request_id = id;
    last.finish = FinishReason::Cancelled;
    self->send(sink, TokenBatch{{std::move(last)}});
    ended.push_back(id);
  }
  report(self, std::move(ended));
}

void run_step(worker_pointer self) {
  auto& st = self->state;
  st.step_pending = false;
  std::vector<TokenEvent> events = st.engine->step();
  // One batch per destination per step: a remote proxy forwarding many
  // requests gets one message, not one per token.
  std::unordered_map<caf::actor_addr, TokenBatch> batches;
  std::unordered_map<caf::actor_addr, token_sink> destinations;
  std::vector<std::uint64_t> ended;
  for (TokenEvent& event : events) {
    auto sink_it = st.sinks.find(event.request_id);
    if (sink_it == st.sinks.end())
      continue;
    token_sink sink = sink_it->second;
    if (event.finish == FinishReason::Error) {
      forget(self, event.request_id);
      self->send(sink, InferenceError{event.request_id, InferenceErrorCode::internal,
                                      "the request does not fit in the KV cache"});
      ended.push_back(event.request_id);
      continue;
    }
    destinations.emplace(sink.address(), sink);
    batches[sink.address()].chunks.push_back(to_chunk(st, event));
    if (event.finish != FinishReason::None) {
      forget(self, event.request_id);
      ended.push_back(event.request_id);
    }
  }
  for (auto& [address, batch] : batches)
    self->send(destinations[address], std::move(batch));
  report(self, std::move(ended));
  schedule_step(self);
}

worker_actor::behavior_type worker(worker_pointer self, std::shared_ptr<InferenceEngine> engine,
                                   engine_core_internal_actor core) {
  self->state.engine = std::move(engine);
  self->state.core = std::move(core);
  self->state.reported_free_blocks = self->state.engine->load().free_blocks;
  self->set_down_handler([self](const caf::down_msg& down) {
    auto it = self->state.by_sink.find(down.source);
    if (it == self->state.by_sink.end())
      return;
    std::vector<std::uint64_t> orphans(it->second.begin(), it->second.end());
    cancel_requests(self, orphans);
  });
  return {
      [self](add_atom, GenerateRequest& request, token_sink& sink) {
        auto& st = self->state;
        GenerationRequest generation{request.id, request.prompt_tokens, std::move(request.params),
                                     std::move(request.generated)};
        if (auto refused = st.engine->add(std::move(generation))) {
          // The core checked the request; this is a capacity mismatch.
          self->send(sink,
                     InferenceError{request.id, InferenceErrorCode::internal, to_string(*refused)});
          report(self, {request.id});
          return;
        }
        auto& ids = st.by_sink[sink.address()];
        if (ids.empty())
          self->monitor(sink);
        ids.insert(request.id);
        st.sinks.emplace(request.id, sink);
        st.unsent_prompts.emplace(request.id, std::move(request.prompt_tokens));
        schedule_step(self);
      },
      [self](cancel_atom, std::uint64_t id) { cancel_requests(self, {id}); },
      [self](step_atom) { run_step(self); },
  };
}

} // namespace

worker_actor spawn_worker(caf::actor_system& system, std::shared_ptr<InferenceEngine> engine,
                          engine_core_internal_actor core) {
  return system.spawn<caf::detached>(worker, std::move(engine), std::move(core));
}

} // namespace caflm

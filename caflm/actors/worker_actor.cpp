#include "caflm/actors/worker_actor.hpp"

#include <algorithm>
#include <chrono>
#include <unordered_map>
#include <unordered_set>

#include <caf/all.hpp>

#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/log.hpp"

namespace caflm {

namespace {

/// A request the worker runs, by the engine's id for it.
struct Served {
  token_sink sink;
  /// The request's id and attempt for its sink, which every chunk names.
  std::uint64_t id = 0;
  std::uint32_t attempt = 0;
  /// Index of the next token among all the request's generated tokens.
  std::uint32_t next_token = 0;
  /// The prompt's token ids, until the first chunk carries them.
  std::vector<TokenId> unsent_prompt;
  /// Whether the request asked for log-probabilities: its chunks carry them.
  bool logprobs = false;
  /// Whether a token of this request has been posted.
  bool sent_any = false;
  /// Where this request's unsent chunk is: chunk `chunk` of outbox
  /// `outbox`, while `flush_generation` is the worker's (a flush empties
  /// every outbox and moves the worker on to the next generation).
  std::uint64_t flush_generation = 0;
  std::uint32_t outbox = 0;
  std::uint32_t chunk = 0;
};

/// Chunks made for one sink and not sent yet.
struct Outbox {
  token_sink sink;
  TokenBatch batch;
  /// Chunks already sent on their own (their request ended): left out.
  std::vector<std::uint32_t> sent;
};

struct WorkerState {
  std::shared_ptr<InferenceEngine> engine;
  engine_core_internal_actor core;
  std::unordered_map<std::uint64_t, Served> served;
  /// Requests per monitored sink, to cancel them when the sink goes down.
  std::unordered_map<caf::actor_addr, std::unordered_set<std::uint64_t>> by_sink;
  bool step_pending = false;
  /// Free KV blocks in the last report to the core.
  std::uint32_t reported_free_blocks = 0;
  WorkerOptions options;
  /// The latest step's events: one buffer for every step.
  std::vector<TokenEvent> events;
  /// Unsent chunks, one outbox per sink in order of first use, and the
  /// outbox of each sink that has one.
  std::vector<Outbox> outboxes;
  std::unordered_map<caf::actor_addr, std::uint32_t> outbox_of;
  /// With a flush interval: the chunks that may not wait for it (requests'
  /// first tokens from this engine and their last ones), one outbox per
  /// sink, sent at the step's end.
  std::vector<Outbox> step_end;
  std::unordered_map<caf::actor_addr, std::uint32_t> step_end_of;
  /// Counts flushes from 1, so that a Served's zero never names a chunk.
  std::uint64_t flush_generation = 1;
  /// When the oldest unsent chunk was made.
  std::chrono::steady_clock::time_point unsent_since;

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

/// Forgets a request that ended; returns what the worker knew of it.
Served forget(worker_pointer self, std::uint64_t engine_id) {
  auto& st = self->state;
  auto it = st.served.find(engine_id);
  Served served = std::move(it->second);
  st.served.erase(it);
  auto sink = st.by_sink.find(served.sink.address());
  if (sink != st.by_sink.end()) {
    sink->second.erase(engine_id);
    if (sink->second.empty()) {
      self->demonitor(served.sink.address());
      st.by_sink.erase(sink);
    }
  }
  return served;
}

TokenChunk to_chunk(Served& served, TokenEvent& event) {
  TokenChunk chunk;
  chunk.request_id = served.id;
  chunk.attempt = served.attempt;
  chunk.first_token = served.next_token;
  chunk.prompt_tokens = std::move(served.unsent_prompt);
  served.unsent_prompt.clear();
  if (event.finish != FinishReason::Cancelled) {
    chunk.tokens.push_back(event.token);
    if (served.logprobs)
      chunk.logprobs.push_back(event.logprob);
    if (!event.top_logprobs.empty())
      chunk.top_logprobs.push_back(std::move(event.top_logprobs));
    ++served.next_token;
  }
  chunk.text = std::move(event.text);
  chunk.finish = event.finish;
  chunk.queue_seconds = event.queue_seconds;
  if (event.finish != FinishReason::None)
    chunk.usage = Usage{event.prompt_tokens, event.completion_tokens, event.cached_prompt_tokens};
  return chunk;
}

/// Adds `event`'s token to `chunk`, the unsent chunk of the same request
/// from an earlier step: its tokens, text, logprobs and alternatives grow,
/// and the last event's finish and usage are the chunk's.
void append_to_chunk(TokenChunk& chunk, Served& served, TokenEvent& event) {
  chunk.tokens.push_back(event.token);
  if (served.logprobs)
    chunk.logprobs.push_back(event.logprob);
  if (!event.top_logprobs.empty())
    chunk.top_logprobs.push_back(std::move(event.top_logprobs));
  ++served.next_token;
  chunk.text += event.text;
  chunk.finish = event.finish;
  // Only a request's first event carries its queue time.
  if (event.queue_seconds >= 0.0f)
    chunk.queue_seconds = event.queue_seconds;
  if (event.finish != FinishReason::None)
    chunk.usage = Usage{event.prompt_tokens, event.completion_tokens, event.cached_prompt_tokens};
}

/// The outbox of `sink` among `boxes`, added when it has none.
Outbox& outbox_for(std::vector<Outbox>& boxes,
                   std::unordered_map<caf::actor_addr, std::uint32_t>& index,
                   const token_sink& sink, std::uint32_t* position = nullptr) {
  const auto next = static_cast<std::uint32_t>(boxes.size());
  auto [entry, added] = index.try_emplace(sink.address(), next);
  if (added)
    boxes.push_back(Outbox{sink, TokenBatch{}, {}});
  if (position != nullptr)
    *position = entry->second;
  return boxes[entry->second];
}

/// Sends the chunks that go at the step's end, one TokenBatch per sink.
void send_step_end(worker_pointer self) {
  auto& st = self->state;
  for (Outbox& box : st.step_end)
    self->send(box.sink, std::move(box.batch));
  st.step_end.clear();
  st.step_end_of.clear();
}

/// Sends every outbox, one TokenBatch per sink, and empties them.
void flush(worker_pointer self) {
  auto& st = self->state;
  if (st.outboxes.empty())
    return;
  for (Outbox& box : st.outboxes) {
    std::vector<TokenChunk>& chunks = box.batch.chunks;
    if (!box.sent.empty()) {
      // From the back, so that the indices still to erase stay put.
      std::sort(box.sent.begin(), box.sent.end());
      for (auto index = box.sent.rbegin(); index != box.sent.rend(); ++index)
        chunks.erase(chunks.begin() + *index);
    }
    if (!chunks.empty())
      self->send(box.sink, std::move(box.batch));
  }
  st.outboxes.clear();
  st.outbox_of.clear();
  ++st.flush_generation;
}

/// Puts `event` (a token, maybe the last) in its sink's outbox: into the
/// request's unsent chunk when it has one, else as a new chunk. With a
/// flush interval, a request's first token from this engine and its last
/// chunk (all its unsent tokens) go at the end of this step, not at the
/// next flush: the interval holds neither a request's time to first token
/// nor its client, who may start the next request once this one ends.
void post(worker_pointer self, Served& served, TokenEvent& event) {
  auto& st = self->state;
  const bool at_step_end = st.options.token_flush_interval.count() > 0 &&
                           (event.finish != FinishReason::None || !served.sent_any);
  served.sent_any = true;
  if (served.flush_generation == st.flush_generation) {
    Outbox& box = st.outboxes[served.outbox];
    TokenChunk& chunk = box.batch.chunks[served.chunk];
    append_to_chunk(chunk, served, event);
    if (at_step_end) {
      box.sent.push_back(served.chunk);
      outbox_for(st.step_end, st.step_end_of, served.sink).batch.chunks.push_back(std::move(chunk));
    }
    return;
  }
  if (at_step_end) {
    outbox_for(st.step_end, st.step_end_of, served.sink)
        .batch.chunks.push_back(to_chunk(served, event));
    return;
  }
  std::uint32_t position = 0;
  std::vector<TokenChunk>& chunks =
      outbox_for(st.outboxes, st.outbox_of, served.sink, &position).batch.chunks;
  served.flush_generation = st.flush_generation;
  served.outbox = position;
  served.chunk = static_cast<std::uint32_t>(chunks.size());
  chunks.push_back(to_chunk(served, event));
}

/// The code a client sees for a request the engine ended with an error:
/// only a fault of the engine itself is worth trying elsewhere.
InferenceErrorCode error_code(EngineFault fault) {
  switch (fault) {
  case EngineFault::DoesNotFit:
    return InferenceErrorCode::context_length_exceeded;
  case EngineFault::NanLogits:
    return InferenceErrorCode::internal;
  case EngineFault::LifetimeExceeded:
    return InferenceErrorCode::deadline_exceeded;
  case EngineFault::StepFailed:
  case EngineFault::None:
    break;
  }
  return InferenceErrorCode::engine_fault;
}

/// The same for a request the engine refused; the core checked it, so a
/// refusal here is mostly the engine's own (its slots are full).
InferenceErrorCode error_code(AddError error) {
  switch (error) {
  case AddError::EmptyPrompt:
  case AddError::InvalidToken:
  case AddError::BadParams:
  case AddError::LimitExceeded:
    return InferenceErrorCode::bad_request;
  case AddError::ContextLengthExceeded:
    return InferenceErrorCode::context_length_exceeded;
  case AddError::Full:
  case AddError::DuplicateRequest:
    break;
  }
  return InferenceErrorCode::engine_fault;
}

/// Ends requests cancelled here (by the core or a dead sink) with a last,
/// empty chunk, and tells the core they are no longer in flight.
void cancel_requests(worker_pointer self, const std::vector<std::uint64_t>& engine_ids) {
  // A request's unsent tokens go before its last chunk.
  flush(self);
  std::vector<std::uint64_t> ended;
  for (std::uint64_t engine_id : engine_ids) {
    if (!self->state.engine->cancel(engine_id))
      continue;
    Served served = forget(self, engine_id);
    TokenEvent cancelled;
    cancelled.finish = FinishReason::Cancelled;
    self->send(served.sink, TokenBatch{{to_chunk(served, cancelled)}});
    ended.push_back(engine_id);
  }
  report(self, std::move(ended));
}

void log_preemptions(WorkerState& st) {
  if (!log_enabled(LogLevel::Info))
    return;
  const LoadReport kv = st.engine->load();
  for (std::uint64_t engine_id : st.engine->last_preempted()) {
    auto it = st.served.find(engine_id);
    if (it != st.served.end())
      log(LogLevel::Info,
          "engine preempted request {} (attempt {}) to free KV blocks ({} of {} free); it will "
          "recompute",
          it->second.id, it->second.attempt, kv.free_blocks, kv.total_blocks);
  }
}

void run_step(worker_pointer self) {
  auto& st = self->state;
  st.step_pending = false;
  std::vector<TokenEvent>& events = st.events;
  st.engine->step(events);
  log_preemptions(st);
  const bool had_unsent = !st.outboxes.empty();
  // One batch per destination per flush: a remote proxy forwarding many
  // requests gets one message, not one per token.
  std::vector<std::uint64_t> ended;
  std::uint32_t step_faults = 0;
  std::string step_error;
  for (TokenEvent& event : events) {
    auto it = st.served.find(event.request_id);
    if (it == st.served.end())
      continue;
    if (event.finish == FinishReason::Error) {
      // Its unsent tokens go before its error.
      flush(self);
      Served served = forget(self, event.request_id);
      if (event.fault == EngineFault::StepFailed && step_faults++ == 0)
        step_error = event.error;
      else if (event.fault != EngineFault::StepFailed)
        // An outlived lifetime is the request's, not a fault of the engine.
        log(event.fault == EngineFault::LifetimeExceeded ? LogLevel::Warning : LogLevel::Error,
            "engine ended request {} (attempt {}): {}", served.id, served.attempt, event.error);
      self->send(served.sink, InferenceError{served.id, served.attempt, error_code(event.fault),
                                             std::move(event.error)});
      ended.push_back(event.request_id);
      continue;
    }
    post(self, it->second, event);
    if (event.finish != FinishReason::None) {
      forget(self, event.request_id);
      ended.push_back(event.request_id);
    }
  }
  if (step_faults > 0)
    log(LogLevel::Error, "{}; its {} request(s) fail over", step_error, step_faults);
  send_step_end(self);
  if (st.options.token_flush_interval.count() <= 0 || !st.engine->has_work()) {
    flush(self);
  } else if (!st.outboxes.empty()) {
    const auto now = std::chrono::steady_clock::now();
    if (!had_unsent)
      st.unsent_since = now;
    else if (now - st.unsent_since >= st.options.token_flush_interval)
      flush(self);
  }
  report(self, std::move(ended));
  schedule_step(self);
}

void add(worker_pointer self, std::uint64_t engine_id, GenerateRequest& request, token_sink& sink,
         std::int64_t arrival_ns) {
  auto& st = self->state;
  const bool logprobs = wants_logprobs(request.params);
  GenerationRequest generation{engine_id, request.prompt_tokens, std::move(request.params),
                               request.generated};
  generation.prefill_group = request.prefill_group;
  generation.arrival = std::chrono::steady_clock::time_point(std::chrono::nanoseconds(arrival_ns));
  if (auto refused = st.engine->add(std::move(generation))) {
    log(LogLevel::Warning, "engine refused request {} (attempt {}) the core had admitted: {}",
        request.id, request.attempt, to_string(*refused));
    self->send(sink, InferenceError{request.id, request.attempt, error_code(*refused),
                                    to_string(*refused)});
    report(self, {engine_id});
    return;
  }
  auto& ids = st.by_sink[sink.address()];
  if (ids.empty())
    self->monitor(sink);
  ids.insert(engine_id);
  const auto first_token = static_cast<std::uint32_t>(request.generated.size());
  st.served.emplace(engine_id, Served{std::move(sink), request.id, request.attempt, first_token,
                                      std::move(request.prompt_tokens), logprobs});
  schedule_step(self);
}

worker_actor::behavior_type worker(worker_pointer self, std::shared_ptr<InferenceEngine> engine,
                                   engine_core_internal_actor core, WorkerOptions options) {
  self->state.engine = std::move(engine);
  self->state.options = options;
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
      [self](add_atom, std::uint64_t engine_id, GenerateRequest& request, token_sink& sink,
             std::int64_t arrival_ns) { add(self, engine_id, request, sink, arrival_ns); },
      [self](cancel_atom, std::uint64_t engine_id) { cancel_requests(self, {engine_id}); },
      [self](step_atom) { run_step(self); },
  };
}

} // namespace

worker_actor spawn_worker(caf::actor_system& system, std::shared_ptr<InferenceEngine> engine,
                          engine_core_internal_actor core, const WorkerOptions& options) {
  return system.spawn<caf::detached>(worker, std::move(engine), std::move(core), options);
}

} // namespace caflm

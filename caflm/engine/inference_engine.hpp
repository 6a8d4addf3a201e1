#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "caflm/engine/request_limits.hpp"
#include "caflm/kv/kv_storage.hpp"
#include "caflm/sampling/sampler.hpp"
#include "caflm/sampling/sampling_params.hpp"
#include "caflm/scheduler/step.hpp"
#include "caflm/text/detokenizer.hpp"
#include "caflm/text/stop_matcher.hpp"
#include "caflm/text/tokenizer.hpp"

namespace caflm {

/// Why a generation ended.
enum class FinishReason : std::uint8_t {
  None,
  /// An end-of-generation token or a stop string.
  Stop,
  /// max_tokens reached, or the context is full.
  Length,
  /// Cancelled by the caller.
  Cancelled,
  /// The engine could not serve it; TokenEvent::fault says why.
  Error,
};

/// OpenAI's spelling: "stop", "length", "cancelled", "error".
const char* to_string(FinishReason reason);

/// One request to generate from a tokenized prompt.
struct GenerationRequest {
  std::uint64_t id = 0;
  std::vector<TokenId> prompt;
  SamplingParams params;
  /// Tokens this request already generated elsewhere (resumption after a
  /// replica failure): they follow the prompt, count towards max_tokens, and
  /// sampling continues at step `generated.size()`.
  std::vector<TokenId> generated;
  /// Parallel samples of one prompt (an API request's `n` choices) share a
  /// nonzero group. A request of a group whose prompt equals that of a
  /// member still in prefill waits for that prefill instead of repeating it,
  /// then forks the member's KV pages copy-on-write and samples its first
  /// token from the same logits. A hint only: sharing needs equal prompts,
  /// so requests that collide on a group are still computed correctly.
  std::uint64_t prefill_group = 0;
  /// When the request reached this node (its queue wait is measured from
  /// here); the epoch means "when added".
  std::chrono::steady_clock::time_point arrival{};
};

/// Why the engine ended a request with FinishReason::Error.
enum class EngineFault : std::uint8_t {
  None,
  /// A step failed (in the backend, or the scheduler's checks of its
  /// outputs): a fault of this engine, not of the request. Every request of
  /// the step ends; another replica can serve them.
  StepFailed,
  /// The request needs more KV blocks than the whole pool holds.
  DoesNotFit,
  /// The model produced NaN logits for it: its weights or the backend are
  /// broken, and a sample would be meaningless.
  NanLogits,
  /// The request outlived RequestLimits::max_lifetime.
  LifetimeExceeded,
};

const char* to_string(EngineFault fault);

/// What one step produced for one request.
struct TokenEvent {
  std::uint64_t request_id = 0;
  TokenId token = 0;
  /// Text that may be shown now: whole UTF-8 characters, stop text held back.
  std::string text;
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
  FinishReason finish = FinishReason::None;
  /// Usage, set on the last event.
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;
  std::uint32_t cached_prompt_tokens = 0;
  /// On a request's first event: seconds from its arrival to the first step
  /// that ran it (or, for a fork, that computed its prompt); -1 on later
  /// events.
  float queue_seconds = -1.0f;
  /// With FinishReason::Error: why, and a sentence for the client.
  EngineFault fault = EngineFault::None;
  std::string error;
};

/// Why `InferenceEngine::add` refused a request.
enum class AddError : std::uint8_t {
  Full,
  DuplicateRequest,
  EmptyPrompt,
  ContextLengthExceeded,
  InvalidToken,
  BadParams,
  /// Beyond the engine's RequestLimits; check_limits says which.
  LimitExceeded,
};

const char* to_string(AddError error);

/// Configuration of one engine (one model replica).
struct EngineConfig {
  SchedulerConfig scheduler;
  /// Physical KV blocks of `scheduler.block_size` tokens.
  std::uint32_t kv_blocks = 1024;
  /// The element type of a CPU backend's KV cache.
  KvCacheType kv_cache_type = KvCacheType::F32;
  bool prefix_caching = true;
  /// What one request may ask; the engine refuses (and ends) those beyond.
  RequestLimits requests;
};

/// `config` with its context cut to what its KV pool holds, so that a
/// sequence an engine accepts always fits in the pool alone. Every engine
/// applies it to the config it is given.
EngineConfig fit_context_to_pool(EngineConfig config);

/// Point-in-time load of an engine, for routing: the same report crosses
/// the network (messages/) and reaches the coordinator.
struct LoadReport {
  std::uint32_t running = 0;
  std::uint32_t waiting = 0;
  std::uint32_t free_blocks = 0;
  std::uint32_t total_blocks = 0;
  /// Blocks in use that only the prefix cache holds: free for the taking
  /// (evicted on demand), so used minus cached is what requests hold.
  std::uint32_t cached_blocks = 0;
  double prefix_hit_rate = 0.0;
  /// load_score(running, waiting): lower is better.
  double score = 0.0;
  // Totals since the engine started (Prometheus counters).
  /// Requests preempted to free KV blocks.
  std::uint64_t preemptions = 0;
  /// Prompt tokens of admitted requests, and tokens generated.
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  /// Tokens looked up in the prefix cache (whole blocks of admitted
  /// prompts), and those found there.
  std::uint64_t prefix_queried_tokens = 0;
  std::uint64_t prefix_hit_tokens = 0;
  /// Tokens run through the model, prompt and generated, recomputation
  /// after a preemption included.
  std::uint64_t computed_tokens = 0;
};

/// The KV cache's token slots at one moment: those of the blocks requests
/// hold, those holding a computed token (a block shared by several requests
/// counts its tokens for each, so compare without prefix sharing), and those
/// of the blocks only the prefix cache holds, which it gives up whenever a
/// request needs room (free space that may still be hit, as vLLM counts it).
struct KvOccupancy {
  std::uint64_t allocated_slots = 0;
  std::uint64_t used_slots = 0;
  std::uint64_t cached_slots = 0;
};

/// How loaded an engine is for routing: a waiting request counts four
/// running ones, since it waits behind all of them.
inline double load_score(std::uint32_t running, std::uint32_t waiting) {
  return 4.0 * waiting + running;
}

/// Continuous batching over one backend: requests join and leave between
/// steps; each step is one ragged batch, sampled with a counter-based RNG,
/// detokenized in stream and checked for stop strings. Not thread-safe: one
/// owner (the worker actor, or the command line) drives it.
class InferenceEngine {
 public:
  /// The engine's time: requests' arrivals, queue times and lifetimes.
  using Clock = std::function<std::chrono::steady_clock::time_point()>;

  /// The backend's KV storage must have at least `config.kv_blocks` blocks
  /// of `config.scheduler.block_size`; see `make_cpu_engine`.
  InferenceEngine(std::shared_ptr<const Tokenizer> tokenizer,
                  std::unique_ptr<RaggedBackend> backend, const EngineConfig& config,
                  std::uint64_t cache_salt);

  /// Queues a request; it starts in a later step. A request without a seed
  /// gets a random one.
  std::optional<AddError> add(GenerationRequest request);
  /// Why `request` exceeds the engine's RequestLimits (stop strings,
  /// max_tokens, prompt tokens), or nullopt: the message of
  /// AddError::LimitExceeded.
  std::optional<std::string> check_limits(const GenerationRequest& request) const;
  /// Ends a request at once, releasing its blocks; false if unknown.
  bool cancel(std::uint64_t request_id);

  bool has_work() const { return !requests_.empty(); }
  std::size_t active() const { return requests_.size(); }
  LoadReport load() const;
  KvOccupancy kv_occupancy() const;
  const EngineConfig& config() const { return config_; }
  const RequestLimits& request_limits() const { return config_.requests; }
  /// Replaces the engine's clock (std::chrono::steady_clock by default), so
  /// that a test drives lifetimes and queue times without waiting. Set it
  /// before the first request.
  void set_clock(Clock clock) { clock_ = std::move(clock); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  /// The tokenizer, to share with other threads (it is immutable).
  const std::shared_ptr<const Tokenizer>& shared_tokenizer() const { return tokenizer_; }
  /// Longest sequence this engine accepts, prompt and generation together:
  /// the configured context, at most what the KV pool holds, so a sequence
  /// that is accepted always fits in the pool alone.
  std::uint32_t max_context() const { return config_.scheduler.max_context; }

  /// Runs one step and returns its events: one per sampled token, and a
  /// final one (finish reason set) per request that ended.
  std::vector<TokenEvent> step();
  /// The same into `events` (cleared first), so that a caller that steps in
  /// a loop keeps one buffer rather than allocating one per step.
  void step(std::vector<TokenEvent>& events);

  /// Requests the last step preempted to free KV blocks (they wait to
  /// recompute; nothing they generated is lost).
  const std::vector<std::uint64_t>& last_preempted() const { return preempted_; }

 private:
  struct Active {
    GenerationRequest request;
    /// RequestTable::no_slot while it follows a leader's prefill.
    std::uint32_t slot;
    std::uint32_t generated = 0;
    StreamingDetokenizer detokenizer;
    StopMatcher stops;
    /// The group member whose prefill this request waits for, or 0.
    std::uint64_t leader = 0;
    /// Seconds from arrival to the first step that ran it; -1 until then.
    float queue_seconds = -1.0f;
    bool queue_reported = false;
  };

  /// A request due to sample from the step's logits row `row`.
  struct DueSample {
    std::uint64_t request_id;
    std::uint32_t row;
  };

  /// The group member still before its first token whose prefill a new
  /// request with the same prompt can share, or null.
  const Active* prefill_leader(const GenerationRequest& request) const;
  /// Forks the followers of `leader`, whose prompt the step just computed,
  /// off its pages; each is due to sample from the same `row`.
  void fork_followers(const Active& leader, std::uint32_t row);
  /// `leader` leaves before its prompt was computed: its first follower
  /// takes its place in the table and leads the others.
  void promote_followers(std::uint64_t leader);
  /// Records the queue time of the requests that ran for the first time in
  /// the step that started at `step_start`, and counts its tokens.
  void note_step(std::chrono::steady_clock::time_point step_start);
  void sample_into(Active& active, const float* logits, std::vector<TokenEvent>& events);
  /// Samples every due request on the backend's device, in as many
  /// sample() calls as its capacity needs. False when the backend
  /// failed (`error` says why); the caller ends every request.
  bool sample_on_device(std::vector<TokenEvent>& events, BackendError& error);
  /// Appends spec `item`'s penalty window (distinct tokens and counts) to
  /// the device batch being built.
  void add_penalty_window(const Active& active, RaggedSampleSpec& spec);
  /// Takes a sampled token (or ends the request on NaN logits): the request's
  /// event goes to `events`.
  void accept_sample(Active& active, const SampleResult& sampled, const TokenLogprob* top,
                     std::uint32_t top_count, std::vector<TokenEvent>& events);
  void finish(Active& active, FinishReason reason, TokenEvent& last);
  /// Takes `active`, which is leaving, out of the follower and queue-time
  /// counts and, unless it still followed a leader, out of the table
  /// (`completed`: finished, its full blocks cached; else cancelled). The
  /// caller forgets it.
  void release(const Active& active, bool completed);
  /// Sets the queue time on `active`'s first event.
  void report_queue_time(Active& active, TokenEvent& event);
  /// Ends the requests that outlived their lifetime at `now`.
  void end_expired(std::chrono::steady_clock::time_point now, std::vector<TokenEvent>& events);
  /// Ends every request with `fault` (after a failed step).
  void end_all(EngineFault fault, const std::string& error, std::vector<TokenEvent>& events);
  /// Ends `active` with FinishReason::Error and `fault` (the caller forgets
  /// it).
  TokenEvent end_with_error(Active& active, EngineFault fault, std::string error);

  std::shared_ptr<const Tokenizer> tokenizer_;
  std::unique_ptr<RaggedBackend> backend_;
  EngineConfig config_;
  BlockPool pool_;
  PrefixCache cache_;
  RequestTable table_;
  StepPlanner planner_;
  StepPlan plan_;
  RaggedBatchBuffers buffers_;
  Sampler sampler_;
  std::vector<TokenId> banned_;
  std::vector<TokenLogprob> top_scratch_;
  // Device sampling: one call's specs, lists and results, sized to the
  // backend's capacity once.
  RaggedSampleCapacity sample_capacity_;
  std::vector<RaggedSampleSpec> sample_specs_;
  std::vector<TokenId> penalty_tokens_;
  std::vector<std::uint32_t> penalty_counts_;
  std::vector<TokenId> sample_banned_;
  std::vector<RaggedSampleResult> sample_results_;
  std::vector<RaggedTopLogprob> sample_top_;
  std::vector<TokenId> window_scratch_;
  std::vector<std::uint64_t> preempted_;
  std::vector<std::uint64_t> expired_;
  Clock clock_ = [] { return std::chrono::steady_clock::now(); };
  std::vector<DueSample> due_;               // [max_requests]
  std::vector<std::uint64_t> sample_owners_; // [sample_capacity_.max_specs]
  /// Requests that wait for a leader's prefill; each holds a table slot in
  /// reserve, so that its fork always finds one.
  std::uint32_t followers_ = 0;
  /// Requests whose queue time is not measured yet.
  std::uint32_t unmeasured_ = 0;
  // Totals for LoadReport.
  std::uint64_t preemptions_total_ = 0;
  std::uint64_t prompt_tokens_total_ = 0;
  std::uint64_t generated_tokens_total_ = 0;
  std::uint64_t computed_tokens_total_ = 0;
  std::unordered_map<std::uint64_t, Active> requests_;
};

} // namespace caflm

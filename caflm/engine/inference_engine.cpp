#include "caflm/engine/inference_engine.hpp"

#include <algorithm>
#include <stdexcept>

#include "caflm/text/vocabulary.hpp"

namespace caflm {

const char* to_string(FinishReason reason) {
  switch (reason) {
  case FinishReason::None:
    return "none";
  case FinishReason::Stop:
    return "stop";
  case FinishReason::Length:
    return "length";
  case FinishReason::Cancelled:
    return "cancelled";
  case FinishReason::Error:
    return "error";
  }
  return "unknown";
}

const char* to_string(EngineFault fault) {
  switch (fault) {
  case EngineFault::None:
    return "none";
  case EngineFault::StepFailed:
    return "the engine's step failed";
  case EngineFault::DoesNotFit:
    return "the request needs more KV blocks than the engine has";
  case EngineFault::NanLogits:
    return "the model produced NaN logits";
  case EngineFault::LifetimeExceeded:
    return "the request outlived the engine's request lifetime";
  }
  return "unknown fault";
}

EngineConfig fit_context_to_pool(EngineConfig config) {
  const std::uint64_t pool_tokens = std::uint64_t{config.kv_blocks} * config.scheduler.block_size;
  if (pool_tokens < config.scheduler.max_context)
    config.scheduler.max_context = static_cast<std::uint32_t>(pool_tokens);
  return config;
}

const char* to_string(AddError error) {
  switch (error) {
  case AddError::Full:
    return "the engine has no free request slot";
  case AddError::DuplicateRequest:
    return "a request with this id is already running";
  case AddError::EmptyPrompt:
    return "the prompt is empty";
  case AddError::ContextLengthExceeded:
    return "the prompt does not fit in the context";
  case AddError::InvalidToken:
    return "the prompt holds a token id outside the vocabulary";
  case AddError::BadParams:
    return "invalid sampling parameters";
  case AddError::LimitExceeded:
    return "the request exceeds the engine's request limits";
  }
  return "unknown error";
}

InferenceEngine::InferenceEngine(std::shared_ptr<const Tokenizer> tokenizer,
                                 std::unique_ptr<RaggedBackend> backend, const EngineConfig& config,
                                 std::uint64_t cache_salt)
  : tokenizer_(std::move(tokenizer))
  , backend_(std::move(backend))
  , config_(fit_context_to_pool(config))
  , pool_(config.kv_blocks)
  , cache_(config.prefix_caching ? config.kv_blocks : 0, config.scheduler.block_size, cache_salt)
  , table_(config_.scheduler, pool_, config.prefix_caching ? &cache_ : nullptr)
  , planner_(config_.scheduler)
  , plan_(config.scheduler.max_requests)
  , buffers_(config_.scheduler.max_requests, config_.scheduler.token_budget,
             config_.scheduler.max_requests * config_.scheduler.max_pages(), backend_->vocab_size())
  , sampler_(backend_->vocab_size())
  , top_scratch_(kMaxTopLogprobs) {
  if (auto problem = validate(config_.requests))
    throw std::invalid_argument(*problem);
  preempted_.reserve(config_.scheduler.max_requests);
  expired_.reserve(config_.scheduler.max_requests);
  due_.reserve(config_.scheduler.max_requests);
  if (backend_->samples_on_device()) {
    sample_capacity_ = backend_->sample_capacity();
    sample_specs_.reserve(sample_capacity_.max_specs);
    sample_owners_.reserve(sample_capacity_.max_specs);
    penalty_tokens_.reserve(sample_capacity_.max_penalty_entries);
    penalty_counts_.reserve(sample_capacity_.max_penalty_entries);
    sample_banned_.reserve(sample_capacity_.max_banned);
    sample_results_.resize(sample_capacity_.max_specs);
    sample_top_.resize(std::size_t{sample_capacity_.max_specs} * kMaxSampleTopLogprobs);
    window_scratch_.reserve(config_.scheduler.max_context);
  }
  const Vocabulary& vocab = tokenizer_->vocabulary();
  for (TokenId id = 0; id < vocab.size(); ++id)
    if (vocab.is_eog(id))
      banned_.push_back(id);
}

std::optional<AddError> InferenceEngine::add(GenerationRequest request) {
  if (validate(request.params))
    return AddError::BadParams;
  if (request.generated.size() >= request.params.max_tokens)
    return AddError::BadParams;
  if (request.prompt.empty())
    return AddError::EmptyPrompt;
  if (requests_.count(request.id) != 0)
    return AddError::DuplicateRequest;
  if (check_limits(request))
    return AddError::LimitExceeded;
  // Before copying it: a sequence from a peer may be of any length.
  if (request.prompt.size() + request.generated.size() >= max_context())
    return AddError::ContextLengthExceeded;
  if (!request.params.seed)
    request.params.seed = random_seed();
  if (request.arrival == std::chrono::steady_clock::time_point{})
    request.arrival = clock_();
  std::vector<TokenId> sequence = request.prompt;
  sequence.insert(sequence.end(), request.generated.begin(), request.generated.end());
  // Room for at least one more token: a prompt is never truncated.
  if (sequence.size() >= max_context())
    return AddError::ContextLengthExceeded;
  for (TokenId token : sequence)
    if (token >= backend_->vocab_size())
      return AddError::InvalidToken;
  // Followers hold their slots in reserve.
  if (table_.active_count() + followers_ >= table_.capacity())
    return AddError::Full;
  std::uint32_t slot = RequestTable::no_slot;
  std::uint64_t leader = 0;
  if (const Active* member = prefill_leader(request)) {
    leader = member->request.id;
    ++followers_;
  } else {
    auto admitted =
        table_.admit(request.id, sequence.data(), static_cast<std::uint32_t>(sequence.size()));
    if (!admitted)
      return admitted.error() == SchedulerError::DuplicateRequest ? AddError::DuplicateRequest
                                                                  : AddError::Full;
    slot = *admitted;
  }
  StopMatcher stops(request.params.stop);
  Active active{std::move(request), slot, 0, StreamingDetokenizer(*tokenizer_), std::move(stops)};
  active.leader = leader;
  // Replay what was already streamed, so held-back bytes and stop-string
  // prefixes continue exactly where the previous engine left them.
  for (TokenId token : active.request.generated)
    active.stops.push(active.detokenizer.push(token));
  active.generated = static_cast<std::uint32_t>(active.request.generated.size());
  std::uint64_t id = active.request.id;
  prompt_tokens_total_ += active.request.prompt.size();
  ++unmeasured_;
  requests_.emplace(id, std::move(active));
  return std::nullopt;
}

std::optional<std::string> InferenceEngine::check_limits(const GenerationRequest& request) const {
  if (auto problem = check_params(config_.requests, request.params, max_context()))
    return problem;
  return check_prompt_tokens(config_.requests, request.prompt.size(), request.generated.size());
}

const InferenceEngine::Active*
InferenceEngine::prefill_leader(const GenerationRequest& request) const {
  if (request.prefill_group == 0 || !request.generated.empty())
    return nullptr;
  // Between steps every sampled token has been taken, so a member that
  // generated nothing yet has not finished its prefill.
  for (const auto& entry : requests_) {
    const Active& member = entry.second;
    if (member.request.prefill_group == request.prefill_group && member.leader == 0 &&
        member.generated == 0 && member.request.generated.empty() &&
        member.request.prompt == request.prompt)
      return &member;
  }
  return nullptr;
}

void InferenceEngine::fork_followers(const Active& leader, std::uint32_t row) {
  const auto now = clock_();
  for (auto& entry : requests_) {
    Active& follower = entry.second;
    if (follower.leader != leader.request.id)
      continue;
    follower.leader = 0;
    --followers_;
    follower.queue_seconds = std::chrono::duration<float>(now - follower.request.arrival).count();
    --unmeasured_;
    auto forked = table_.fork(leader.request.id, follower.request.id);
    if (forked) {
      follower.slot = *forked;
      due_.push_back(DueSample{follower.request.id, row});
      continue;
    }
    // No room to run one more request now: it waits like any other, and
    // finds the prompt's full blocks in the prefix cache when it starts.
    auto admitted = table_.admit(follower.request.id, follower.request.prompt.data(),
                                 static_cast<std::uint32_t>(follower.request.prompt.size()));
    // Never fails: its slot was held in reserve.
    follower.slot = admitted ? *admitted : RequestTable::no_slot;
  }
}

void InferenceEngine::promote_followers(std::uint64_t leader) {
  if (followers_ == 0)
    return;
  Active* heir = nullptr;
  for (auto& entry : requests_) {
    Active& follower = entry.second;
    if (follower.leader != leader)
      continue;
    if (heir != nullptr) {
      follower.leader = heir->request.id;
      continue;
    }
    auto admitted = table_.admit(follower.request.id, follower.request.prompt.data(),
                                 static_cast<std::uint32_t>(follower.request.prompt.size()));
    if (!admitted) // unreachable: its slot was held in reserve
      continue;
    heir = &follower;
    follower.leader = 0;
    follower.slot = *admitted;
    --followers_;
  }
}

bool InferenceEngine::cancel(std::uint64_t request_id) {
  auto it = requests_.find(request_id);
  if (it == requests_.end())
    return false;
  const Active& active = it->second;
  const bool may_lead = active.leader == 0 && active.generated == 0;
  release(active, /*completed=*/false);
  requests_.erase(it);
  if (may_lead)
    promote_followers(request_id);
  return true;
}

LoadReport InferenceEngine::load() const {
  LoadReport load;
  load.running = table_.running_count();
  load.waiting = table_.active_count() - table_.running_count() + followers_;
  load.free_blocks = pool_.free_count();
  load.total_blocks = pool_.block_count();
  load.cached_blocks = pool_.cached_only_count();
  std::uint64_t looked_up = cache_.hits() + cache_.misses();
  load.prefix_hit_rate = looked_up == 0 ? 0.0 : double(cache_.hits()) / double(looked_up);
  load.score = load_score(load.running, load.waiting);
  load.preemptions = preemptions_total_;
  load.prompt_tokens = prompt_tokens_total_;
  load.generated_tokens = generated_tokens_total_;
  load.prefix_hit_tokens = cache_.hits() * config_.scheduler.block_size;
  load.prefix_queried_tokens = (cache_.hits() + cache_.misses()) * config_.scheduler.block_size;
  load.computed_tokens = computed_tokens_total_;
  return load;
}

KvOccupancy InferenceEngine::kv_occupancy() const {
  KvOccupancy occupancy;
  const std::uint64_t block_size = config_.scheduler.block_size;
  const std::uint32_t cached_only = pool_.cached_only_count();
  occupancy.allocated_slots =
      std::uint64_t{pool_.block_count() - pool_.free_count() - cached_only} * block_size;
  occupancy.cached_slots = std::uint64_t{cached_only} * block_size;
  for (std::uint32_t slot = 0; slot < table_.capacity(); ++slot) {
    const RequestView view = table_.view(slot);
    if (view.state != RequestState::Empty && view.running)
      occupancy.used_slots += view.computed;
  }
  return occupancy;
}

void InferenceEngine::note_step(std::chrono::steady_clock::time_point step_start) {
  computed_tokens_total_ += buffers_.token_count;
  if (unmeasured_ == 0)
    return;
  for (std::uint32_t i = 0; i < buffers_.item_count && unmeasured_ > 0; ++i) {
    Active& active = requests_.at(buffers_.items[i].request_id);
    if (active.queue_seconds >= 0.0f)
      continue;
    active.queue_seconds =
        std::chrono::duration<float>(step_start - active.request.arrival).count();
    --unmeasured_;
  }
}

std::vector<TokenEvent> InferenceEngine::step() {
  std::vector<TokenEvent> events;
  step(events);
  return events;
}

void InferenceEngine::step(std::vector<TokenEvent>& events) {
  events.clear();
  preempted_.clear();
  if (requests_.empty())
    return;
  const auto step_start = clock_();
  if (config_.requests.max_lifetime.count() > 0) {
    end_expired(step_start, events);
    if (requests_.empty())
      return;
  }
  BackendError backend_error = BackendError::DeviceFailure;
  auto receipt = run_step(table_, planner_, *backend_, plan_, buffers_, &backend_error);
  if (!receipt) {
    // A failed step is the engine's fault, not the requests': end every one
    // so that each can be served elsewhere, rather than loop on it.
    const std::string error =
        std::string("the engine's step failed: ") +
        (receipt.error() == SchedulerError::BackendFailed ? to_string(backend_error)
                                                          : to_string(receipt.error()));
    end_all(EngineFault::StepFailed, error, events);
    return;
  }
  note_step(step_start);
  // About one event per item: grown once, not doubling through the step.
  events.reserve(buffers_.item_count + plan_.unfittable_count);
  for (std::uint32_t i = 0; i < plan_.preempted_count; ++i)
    preempted_.push_back(table_.view(plan_.preempted[i]).request_id);
  preemptions_total_ += plan_.preempted_count;
  for (std::uint32_t i = 0; i < plan_.unfittable_count; ++i) {
    const RequestView view = table_.view(plan_.unfittable[i]);
    auto it = requests_.find(view.request_id);
    events.push_back(end_with_error(it->second, EngineFault::DoesNotFit,
                                    "the request's " + std::to_string(view.token_count) +
                                        " tokens need more KV blocks than the " +
                                        std::to_string(pool_.block_count()) + " the engine has"));
    const bool may_lead = it->second.generated == 0;
    requests_.erase(it);
    if (may_lead)
      promote_followers(view.request_id);
  }
  // Who samples from which logits row: each item that computed its last
  // known token, and the followers of those whose prompt was just computed.
  due_.clear();
  for (std::uint32_t i = 0; i < buffers_.item_count; ++i) {
    const RaggedBatchItem& item = buffers_.items[i];
    if (!table_.view(item.slot).awaiting_token)
      continue;
    due_.push_back(DueSample{item.request_id, i});
    const Active& active = requests_.at(item.request_id);
    if (followers_ > 0 && active.generated == 0)
      fork_followers(active, i);
  }
  if (backend_->samples_on_device()) {
    if (!sample_on_device(events, backend_error))
      end_all(EngineFault::StepFailed,
              std::string("the engine's sampling failed: ") + to_string(backend_error), events);
    return;
  }
  for (const DueSample& due : due_) {
    auto it = requests_.find(due.request_id);
    sample_into(it->second, buffers_.logits_row(due.row), events);
    if (events.back().finish != FinishReason::None)
      requests_.erase(it);
  }
}

void InferenceEngine::end_expired(std::chrono::steady_clock::time_point now,
                                  std::vector<TokenEvent>& events) {
  const auto lifetime = config_.requests.max_lifetime;
  expired_.clear();
  for (const auto& entry : requests_)
    if (now - entry.second.request.arrival > lifetime)
      expired_.push_back(entry.first);
  for (std::uint64_t id : expired_) {
    auto it = requests_.find(id);
    Active& active = it->second;
    const bool may_lead = active.leader == 0 && active.generated == 0;
    events.push_back(end_with_error(active, EngineFault::LifetimeExceeded,
                                    lifetime_exceeded_message(config_.requests)));
    requests_.erase(it);
    // Its followers (unless they expired too) go on without it.
    if (may_lead)
      promote_followers(id);
  }
}

void InferenceEngine::end_all(EngineFault fault, const std::string& error,
                              std::vector<TokenEvent>& events) {
  for (auto& entry : requests_)
    events.push_back(end_with_error(entry.second, fault, error));
  requests_.clear();
}

void InferenceEngine::add_penalty_window(const Active& active, RaggedSampleSpec& spec) {
  const SamplingParams& params = active.request.params;
  spec.penalty_offset = static_cast<std::uint32_t>(penalty_tokens_.size());
  spec.penalty_count = 0;
  const RequestView view = table_.view(active.slot);
  const std::size_t window =
      params.penalty_last_n < 0
          ? view.token_count
          : std::min<std::size_t>(view.token_count,
                                  static_cast<std::size_t>(params.penalty_last_n));
  const bool penalize =
      window > 0 && (params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
                     params.frequency_penalty != 0.0f);
  if (!penalize)
    return;
  // The window's distinct tokens with their counts, as the host sampler
  // counts them (ids outside the vocabulary ignored).
  const TokenId* history = table_.tokens(active.slot);
  window_scratch_.assign(history + (view.token_count - window), history + view.token_count);
  std::sort(window_scratch_.begin(), window_scratch_.end());
  for (std::size_t i = 0; i < window_scratch_.size();) {
    std::size_t j = i;
    while (j < window_scratch_.size() && window_scratch_[j] == window_scratch_[i])
      ++j;
    if (window_scratch_[i] < backend_->vocab_size()) {
      penalty_tokens_.push_back(window_scratch_[i]);
      penalty_counts_.push_back(static_cast<std::uint32_t>(j - i));
      ++spec.penalty_count;
    }
    i = j;
  }
}

bool InferenceEngine::sample_on_device(std::vector<TokenEvent>& events, BackendError& error) {
  std::size_t next = 0;
  while (next < due_.size()) {
    sample_specs_.clear();
    sample_owners_.clear();
    penalty_tokens_.clear();
    penalty_counts_.clear();
    sample_banned_.clear();
    // Fill one call with as many due requests as its capacity holds.
    for (; next < due_.size(); ++next) {
      const Active& active = requests_.at(due_[next].request_id);
      const SamplingParams& params = active.request.params;
      const std::size_t window_bound = params.penalty_last_n < 0
                                           ? table_.view(active.slot).token_count
                                           : static_cast<std::size_t>(params.penalty_last_n);
      const std::size_t bans = params.ignore_eos ? banned_.size() : 0;
      if (!sample_specs_.empty() &&
          (sample_specs_.size() == sample_capacity_.max_specs ||
           penalty_tokens_.size() + window_bound > sample_capacity_.max_penalty_entries ||
           sample_banned_.size() + bans > sample_capacity_.max_banned))
        break;
      RaggedSampleSpec spec{};
      spec.item = due_[next].row;
      spec.temperature = params.temperature;
      spec.top_k = params.top_k;
      spec.top_p = params.top_p;
      spec.min_p = params.min_p;
      spec.repetition_penalty = params.repetition_penalty;
      spec.presence_penalty = params.presence_penalty;
      spec.frequency_penalty = params.frequency_penalty;
      spec.uniform = counter_uniform(params.seed.value_or(0), active.generated);
      spec.top_logprobs = std::min(params.top_logprobs, kMaxSampleTopLogprobs);
      add_penalty_window(active, spec);
      spec.banned_offset = static_cast<std::uint32_t>(sample_banned_.size());
      spec.banned_count = static_cast<std::uint32_t>(bans);
      sample_banned_.insert(sample_banned_.end(), banned_.begin(), banned_.begin() + bans);
      sample_specs_.push_back(spec);
      sample_owners_.push_back(active.request.id);
    }
    const RaggedSampleBatch batch{sample_specs_.data(),
                                  static_cast<std::uint32_t>(sample_specs_.size()),
                                  penalty_tokens_.data(),
                                  penalty_counts_.data(),
                                  static_cast<std::uint32_t>(penalty_tokens_.size()),
                                  sample_banned_.data(),
                                  static_cast<std::uint32_t>(sample_banned_.size())};
    auto sampled = backend_->sample(batch, sample_results_.data(), sample_top_.data());
    if (!sampled) {
      error = sampled.error();
      return false;
    }
    for (std::size_t s = 0; s < sample_specs_.size(); ++s) {
      const RaggedSampleResult& result = sample_results_[s];
      auto it = requests_.find(sample_owners_[s]);
      const RaggedTopLogprob* top = sample_top_.data() + s * kMaxSampleTopLogprobs;
      for (std::uint32_t t = 0; t < result.top_count; ++t)
        top_scratch_[t] = TokenLogprob{top[t].token, top[t].logprob};
      accept_sample(it->second, SampleResult{result.token, result.logprob, result.nan_logits},
                    top_scratch_.data(), result.top_count, events);
      if (events.back().finish != FinishReason::None)
        requests_.erase(it);
    }
  }
  return true;
}

void InferenceEngine::sample_into(Active& active, const float* logits,
                                  std::vector<TokenEvent>& events) {
  const SamplingParams& params = active.request.params;
  const RequestView view = table_.view(active.slot);
  SampleResult sampled = sampler_.sample(
      logits, params, table_.tokens(active.slot), view.token_count, active.generated,
      banned_.data(), params.ignore_eos ? banned_.size() : 0, top_scratch_.data());
  accept_sample(active, sampled, top_scratch_.data(),
                std::min<std::uint32_t>(params.top_logprobs, backend_->vocab_size()), events);
}

void InferenceEngine::accept_sample(Active& active, const SampleResult& sampled,
                                    const TokenLogprob* top, std::uint32_t top_count,
                                    std::vector<TokenEvent>& events) {
  const SamplingParams& params = active.request.params;
  const Vocabulary& vocab = tokenizer_->vocabulary();
  RequestView view = table_.view(active.slot);
  if (sampled.nan_logits > 0) {
    // Sampling around NaN would stream tokens of a broken model as if they
    // were its answer.
    events.push_back(
        end_with_error(active, EngineFault::NanLogits,
                       "the model produced NaN logits (" + std::to_string(sampled.nan_logits) +
                           " of " + std::to_string(backend_->vocab_size()) +
                           ") for generated token " + std::to_string(active.generated)));
    return;
  }
  (void)table_.append_token(active.slot, sampled.token);
  ++active.generated;
  ++generated_tokens_total_;

  TokenEvent event;
  event.request_id = active.request.id;
  report_queue_time(active, event);
  event.token = sampled.token;
  // A device sampler computes it either way; unasked, it is 0 on every backend.
  event.logprob = wants_logprobs(params) ? sampled.logprob : 0.0f;
  event.top_logprobs.assign(top, top + top_count);

  bool end_of_generation = !params.ignore_eos && vocab.is_eog(sampled.token);
  if (!end_of_generation)
    event.text = active.stops.push(active.detokenizer.push(sampled.token));
  if (end_of_generation || active.stops.stopped())
    finish(active, FinishReason::Stop, event);
  else if (active.generated >= params.max_tokens || view.token_count + 1 >= max_context())
    finish(active, FinishReason::Length, event);
  events.push_back(std::move(event));
}

TokenEvent InferenceEngine::end_with_error(Active& active, EngineFault fault, std::string error) {
  TokenEvent last;
  last.request_id = active.request.id;
  report_queue_time(active, last);
  last.fault = fault;
  last.error = std::move(error);
  finish(active, FinishReason::Error, last);
  return last;
}

void InferenceEngine::finish(Active& active, FinishReason reason, TokenEvent& last) {
  if (reason == FinishReason::Stop || reason == FinishReason::Length) {
    last.text += active.stops.push(active.detokenizer.flush());
    last.text += active.stops.flush();
  }
  last.finish = reason;
  last.prompt_tokens = static_cast<std::uint32_t>(active.request.prompt.size());
  last.completion_tokens = active.generated;
  // A follower still waiting for its leader's prefill (the engine ends all)
  // has no slot, and no cached tokens.
  if (active.leader == 0)
    last.cached_prompt_tokens =
        std::min(table_.view(active.slot).cached_prompt_tokens, last.prompt_tokens);
  release(active, /*completed=*/true);
}

void InferenceEngine::release(const Active& active, bool completed) {
  if (active.queue_seconds < 0.0f)
    --unmeasured_;
  if (active.leader != 0) {
    --followers_;
    return;
  }
  if (completed)
    (void)table_.finish(active.request.id);
  else
    (void)table_.cancel(active.request.id);
}

void InferenceEngine::report_queue_time(Active& active, TokenEvent& event) {
  if (active.queue_reported)
    return;
  active.queue_reported = true;
  event.queue_seconds = active.queue_seconds;
}

} // namespace caflm

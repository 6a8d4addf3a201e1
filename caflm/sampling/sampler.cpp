#include "caflm/sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace caflm {

namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();

/// The first partial sort covers this many candidates; each later one doubles the sorted prefix.
/// LLM distributions are peaked, so top_p and the draw rarely need more than the first chunk.
constexpr std::size_t kFirstSortedChunk = 64;

/// NaN would break the strict weak ordering the sorts need; it means "impossible" here.
float sanitized(float logit) {
  return std::isnan(logit) ? kNegativeInfinity : logit;
}

/// log(sum(exp(logits))) over [vocab_size] logits, summed in id order so the result is the same
/// on every platform; `nan_count` receives how many of them are NaN.
float log_sum_exp(const float* logits, std::size_t vocab_size, std::uint32_t& nan_count) {
  float max_logit = kNegativeInfinity;
  for (std::size_t id = 0; id < vocab_size; ++id)
    max_logit = std::max(max_logit, sanitized(logits[id]));
  // A NaN logit makes the sum NaN; only then are they counted and left out,
  // so rows without one pay nothing for the check.
  double sum = 0.0;
  for (std::size_t id = 0; id < vocab_size; ++id)
    sum += std::exp(logits[id] - max_logit);
  nan_count = 0;
  if (std::isnan(sum)) {
    sum = 0.0;
    for (std::size_t id = 0; id < vocab_size; ++id) {
      nan_count += std::isnan(logits[id]) ? 1 : 0;
      sum += std::exp(sanitized(logits[id]) - max_logit);
    }
  }
  return max_logit + static_cast<float>(std::log(sum));
}

/// llama.cpp's penalties: repetition scales the logit towards "less likely" whatever its sign;
/// frequency and presence subtract as OpenAI defines them.
float penalized(float logit, std::uint32_t count, const SamplingParams& params) {
  logit = logit > 0.0f ? logit / params.repetition_penalty : logit * params.repetition_penalty;
  return logit - static_cast<float>(count) * params.frequency_penalty - params.presence_penalty;
}

} // namespace

Sampler::Sampler(std::size_t vocab_size)
  : vocab_size_(vocab_size)
  , candidates_(vocab_size)
  , counts_(vocab_size, 0)
  , banned_(vocab_size, 0) {}

SampleResult Sampler::sample(const float* logits, const SamplingParams& params,
                             const TokenId* history, std::size_t history_len, std::uint64_t step,
                             const TokenId* banned, std::size_t n_banned,
                             TokenLogprob* top_logprobs_out) {
  return sample_with_uniform(logits, params, history, history_len,
                             counter_uniform(params.seed.value_or(0), step), banned, n_banned,
                             top_logprobs_out);
}

SampleResult Sampler::sample_with_uniform(const float* logits, const SamplingParams& params,
                                          const TokenId* history, std::size_t history_len,
                                          float uniform, const TokenId* banned,
                                          std::size_t n_banned, TokenLogprob* top_logprobs_out) {
  std::uint32_t nan_logits = 0;
  const float log_normalizer = log_sum_exp(logits, vocab_size_, nan_logits);
  if (params.top_logprobs > 0 && top_logprobs_out != nullptr)
    fill_top_logprobs(logits, log_normalizer, params.top_logprobs, top_logprobs_out);

  const std::size_t count =
      build_candidates(logits, params, history, history_len, banned, n_banned);
  if (count == 0)
    throw std::invalid_argument("Sampler::sample: every token is banned");
  const bool greedy = params.temperature <= kGreedyTemperature;
  // An infinite top logit leaves no finite distribution to draw from; the argmax is the answer.
  const TokenId token = greedy || !std::isfinite(candidates_[best_].logit)
                            ? candidates_[best_].id
                            : draw(count, params, uniform);
  return {token, sanitized(logits[token]) - log_normalizer, nan_logits};
}

std::size_t Sampler::build_candidates(const float* logits, const SamplingParams& params,
                                      const TokenId* history, std::size_t history_len,
                                      const TokenId* banned, std::size_t n_banned) {
  for (std::size_t i = 0; i < n_banned; ++i) {
    if (banned[i] < vocab_size_)
      banned_[banned[i]] = 1;
  }
  const std::size_t window =
      params.penalty_last_n < 0
          ? history_len
          : std::min(history_len, static_cast<std::size_t>(params.penalty_last_n));
  const bool penalize =
      window > 0 && (params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
                     params.frequency_penalty != 0.0f);
  const TokenId* window_begin = history + (history_len - window);
  if (penalize) {
    for (std::size_t i = 0; i < window; ++i) {
      if (window_begin[i] < vocab_size_)
        ++counts_[window_begin[i]];
    }
  }

  std::size_t count = 0;
  best_ = 0;
  for (std::size_t id = 0; id < vocab_size_; ++id) {
    if (banned_[id] != 0)
      continue;
    float logit = sanitized(logits[id]);
    if (counts_[id] > 0)
      logit = penalized(logit, counts_[id], params);
    candidates_[count] = {logit, static_cast<TokenId>(id)};
    // Strictly greater, in id order: ties keep the lowest id.
    if (logit > candidates_[best_].logit)
      best_ = count;
    ++count;
  }

  // Leave the per-token scratch all zero for the next call.
  for (std::size_t i = 0; i < n_banned; ++i) {
    if (banned[i] < vocab_size_)
      banned_[banned[i]] = 0;
  }
  if (penalize) {
    for (std::size_t i = 0; i < window; ++i) {
      if (window_begin[i] < vocab_size_)
        counts_[window_begin[i]] = 0;
    }
  }
  return count;
}

TokenId Sampler::draw(std::size_t count, const SamplingParams& params, float uniform) {
  // candidates_[0, count) is in id order here. Every sum below runs either in id order or over a
  // sorted prefix, both fixed by the input alone, so no floating-point result depends on how a
  // partial sort happened to arrange the unsorted rest.
  sorted_ = 0;
  const float max_logit = candidates_[best_].logit;
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < count) {
    extend_sorted(static_cast<std::size_t>(params.top_k), count);
    count = static_cast<std::size_t>(params.top_k);
  }
  if (params.top_p < 1.0f)
    count = nucleus_size(count, max_logit, params.top_p);
  if (params.min_p > 0.0f)
    count = keep_at_least(count, max_logit + std::log(params.min_p));

  const float inverse_temperature = 1.0f / params.temperature;
  double mass = 0.0;
  for (std::size_t i = 0; i < count; ++i)
    mass += std::exp((candidates_[i].logit - max_logit) * inverse_temperature);
  const double target = static_cast<double>(uniform) * mass;

  double cumulative = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    if (i == sorted_)
      extend_sorted(std::max(kFirstSortedChunk, 2 * sorted_), count);
    cumulative += std::exp((candidates_[i].logit - max_logit) * inverse_temperature);
    if (target < cumulative)
      return candidates_[i].id;
  }
  // Rounding can leave the target just past the last cumulative sum: the least likely token.
  return candidates_[count - 1].id;
}

std::size_t Sampler::nucleus_size(std::size_t count, float max_logit, float top_p) {
  double mass = 0.0;
  for (std::size_t i = 0; i < count; ++i)
    mass += std::exp(candidates_[i].logit - max_logit);
  const double nucleus_mass = static_cast<double>(top_p) * mass;

  double cumulative = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    if (i == sorted_)
      extend_sorted(std::max(kFirstSortedChunk, 2 * sorted_), count);
    cumulative += std::exp(candidates_[i].logit - max_logit);
    if (cumulative >= nucleus_mass)
      return i + 1;
  }
  return count;
}

std::size_t Sampler::keep_at_least(std::size_t count, float min_logit) {
  // A stable compaction: an id-ordered range stays id-ordered and a sorted prefix stays a sorted
  // prefix (what it drops from the prefix, it drops from the smaller rest as well).
  std::size_t kept = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (candidates_[i].logit >= min_logit)
      candidates_[kept++] = candidates_[i];
  }
  sorted_ = std::min(sorted_, kept);
  return kept;
}

void Sampler::extend_sorted(std::size_t wanted, std::size_t count) {
  wanted = std::min(wanted, count);
  if (wanted <= sorted_)
    return;
  // A strict total order (ids are unique), so the sorted prefix is the same on every platform.
  const auto more_likely = [](const Candidate& a, const Candidate& b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
  };
  const auto first = candidates_.begin() + static_cast<std::ptrdiff_t>(sorted_);
  const auto middle = candidates_.begin() + static_cast<std::ptrdiff_t>(wanted);
  const auto last = candidates_.begin() + static_cast<std::ptrdiff_t>(count);
  if (middle < last)
    std::nth_element(first, middle, last, more_likely);
  std::sort(first, middle, more_likely);
  sorted_ = wanted;
}

void Sampler::fill_top_logprobs(const float* logits, float log_normalizer, std::uint32_t k,
                                TokenLogprob* out) const {
  const std::size_t wanted = std::min<std::size_t>(k, vocab_size_);
  // Insertion into a short sorted list (k <= 20): one pass over the vocabulary, no scratch.
  // Entries hold raw logits until the end. Ids arrive ascending, so a strict comparison keeps
  // the lower id first on ties.
  std::size_t filled = 0;
  for (std::size_t id = 0; id < vocab_size_; ++id) {
    const float logit = sanitized(logits[id]);
    if (filled == wanted && !(logit > out[wanted - 1].logprob))
      continue;
    std::size_t position = filled < wanted ? filled++ : wanted - 1;
    while (position > 0 && logit > out[position - 1].logprob) {
      out[position] = out[position - 1];
      --position;
    }
    out[position] = {static_cast<TokenId>(id), logit};
  }
  for (std::size_t i = 0; i < filled; ++i)
    out[i].logprob -= log_normalizer;
}

} // namespace caflm

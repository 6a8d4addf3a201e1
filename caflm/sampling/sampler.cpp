#include "caflm/sampling/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>

#include "caflm/sampling/logit_kernels.hpp"

namespace caflm {

namespace {

constexpr float kNegativeInfinity = -std::numeric_limits<float>::infinity();
constexpr float kInfinity = std::numeric_limits<float>::infinity();

/// The walks over the sorted order first sort this many candidates; each later step doubles the
/// sorted prefix. LLM distributions are peaked, so top_p and the draw rarely need more.
constexpr std::size_t kFirstSortedChunk = 64;

/// add_band() sizes its bands from evenly spaced logits of the row (at most
/// kSampleSize of them), so that one band costs one vector pass over the row plus a sort of
/// about what was asked for.
constexpr std::size_t kSampleSize = 256;

/// NaN would break the strict weak ordering the sorts need; it means "impossible" here.
float sanitized(float logit) {
  return std::isnan(logit) ? kNegativeInfinity : logit;
}

/// llama.cpp's penalties: repetition scales the logit towards "less likely" whatever its sign;
/// frequency and presence subtract as OpenAI defines them.
float penalized(float logit, std::uint32_t count, const SamplingParams& params) {
  logit = logit > 0.0f ? logit / params.repetition_penalty : logit * params.repetition_penalty;
  return logit - static_cast<float>(count) * params.frequency_penalty - params.presence_penalty;
}

/// The sampler's one order: logit descending, then id ascending. Strict and total (ids are
/// unique), so a sorted prefix is the same on every platform.
bool more_likely(float logit_a, TokenId id_a, float logit_b, TokenId id_b) {
  return logit_a > logit_b || (logit_a == logit_b && id_a < id_b);
}

} // namespace

Sampler::Sampler(std::size_t vocab_size)
  : vocab_size_(vocab_size)
  , sorted_logits_(vocab_size)
  , sorted_ids_(vocab_size)
  , probabilities_(vocab_size)
  , band_ids_(vocab_size)
  , band_keys_(vocab_size)
  , radix_scratch_(vocab_size)
  , penalized_(vocab_size)
  , sample_(std::min(vocab_size, kSampleSize))
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
  if (vocab_size_ == 0)
    throw std::invalid_argument("Sampler::sample: every token is banned");
  // The max pass also counts NaNs, which every call reports. log(sum(exp(logits))) is one more
  // pass, taken only for log-probabilities. Its exponentials are glibc's even here, where nothing
  // is decided: an approximate one moves the sum by ~1e-7, enough to round the float
  // log-normalizer to its neighbour in one row of a few.
  const LogitRowMax raw = logit_row_max(logits, vocab_size_);
  const bool with_logprobs = wants_logprobs(params);
  double raw_mass = -1.0; // negative: not taken
  float log_normalizer = 0.0f;
  if (with_logprobs) {
    raw_mass = exp_sum(logits, vocab_size_, raw.max, 1.0f, kNegativeInfinity);
    log_normalizer = raw.max + static_cast<float>(std::log(raw_mass));
  }
  if (params.top_logprobs > 0 && top_logprobs_out != nullptr)
    fill_top_logprobs(logits, log_normalizer, params.top_logprobs, top_logprobs_out);

  const std::size_t window_len =
      params.penalty_last_n < 0
          ? history_len
          : std::min(history_len, static_cast<std::size_t>(params.penalty_last_n));
  const bool penalize =
      window_len > 0 && (params.repetition_penalty != 1.0f || params.presence_penalty != 0.0f ||
                         params.frequency_penalty != 0.0f);
  const TokenId* window = penalize ? history + (history_len - window_len) : nullptr;
  const std::size_t penalized_len = penalize ? window_len : 0;
  const std::size_t allowed = mark_bans_and_penalties(window, penalized_len, banned, n_banned);

  TokenId token = 0;
  if (allowed > 0) {
    const bool greedy = params.temperature <= kGreedyTemperature;
    // Without bans or penalties the row is the logits themselves.
    const float* row = logits;
    Best best{static_cast<TokenId>(raw.first), raw.max};
    if (allowed < vocab_size_ || penalized_len > 0) {
      if (greedy && banned_[raw.first] == 0 && counts_[raw.first] == 0) {
        // The raw argmax stands for every token the call leaves alone; only a penalized one can
        // beat it.
        for (std::size_t i = 0; i < penalized_len; ++i) {
          const TokenId id = window[i];
          if (id >= vocab_size_ || banned_[id] != 0)
            continue;
          const float logit = penalized(sanitized(logits[id]), counts_[id], params);
          if (more_likely(logit, id, best.logit, best.id))
            best = {id, logit};
        }
      } else {
        build_penalized_row(logits, params, window, penalized_len, banned, n_banned);
        row = penalized_.data();
        best = allowed_best(row);
      }
    }
    // An infinite top logit leaves no finite distribution to draw from; the argmax is the answer.
    if (greedy || !std::isfinite(best.logit)) {
      token = best.id;
    } else {
      row_ = row;
      // Without bans and penalties, the draw's sums at temperature 1 over every token are the
      // one taken for the log-probabilities, term for term, when it was taken.
      token = draw(allowed, best.logit, params, uniform, row == logits ? raw_mass : -1.0);
    }
  }

  // Leave the per-token scratch all zero for the next call.
  for (std::size_t i = 0; i < n_banned; ++i) {
    if (banned[i] < vocab_size_)
      banned_[banned[i]] = 0;
  }
  for (std::size_t i = 0; i < penalized_len; ++i) {
    if (window[i] < vocab_size_)
      counts_[window[i]] = 0;
  }
  if (allowed == 0)
    throw std::invalid_argument("Sampler::sample: every token is banned");
  const float logprob = with_logprobs ? sanitized(logits[token]) - log_normalizer : 0.0f;
  return {token, logprob, raw.nan_count};
}

std::size_t Sampler::mark_bans_and_penalties(const TokenId* window, std::size_t window_len,
                                             const TokenId* banned, std::size_t n_banned) {
  std::size_t allowed = vocab_size_;
  for (std::size_t i = 0; i < n_banned; ++i) {
    if (banned[i] < vocab_size_ && banned_[banned[i]] == 0) {
      banned_[banned[i]] = 1;
      --allowed;
    }
  }
  for (std::size_t i = 0; i < window_len; ++i) {
    if (window[i] < vocab_size_)
      ++counts_[window[i]];
  }
  return allowed;
}

void Sampler::build_penalized_row(const float* logits, const SamplingParams& params,
                                  const TokenId* window, std::size_t window_len,
                                  const TokenId* banned, std::size_t n_banned) {
  std::memcpy(penalized_.data(), logits, vocab_size_ * sizeof(float));
  for (std::size_t i = 0; i < window_len; ++i) {
    const TokenId id = window[i];
    if (id < vocab_size_)
      penalized_[id] = penalized(sanitized(logits[id]), counts_[id], params);
  }
  // Banned last: -infinity adds nothing to a sum of exponentials and falls below every band.
  for (std::size_t i = 0; i < n_banned; ++i) {
    if (banned[i] < vocab_size_)
      penalized_[banned[i]] = kNegativeInfinity;
  }
}

Sampler::Best Sampler::allowed_best(const float* row) const {
  const LogitRowMax max = logit_row_max(row, vocab_size_);
  if (max.max != kNegativeInfinity)
    return {static_cast<TokenId>(max.first), max.max}; // banned ones are -infinity
  // Every allowed logit is -infinity (or NaN): the lowest allowed id.
  std::size_t id = 0;
  while (banned_[id] != 0)
    ++id;
  return {static_cast<TokenId>(id), kNegativeInfinity};
}

TokenId Sampler::draw(std::size_t count, float max_logit, const SamplingParams& params,
                      float uniform, double row_mass) {
  const auto mass_over_row = [&](float scale, float floor) {
    return row_mass >= 0.0 && scale == 1.0f && floor == kNegativeInfinity
               ? row_mass
               : exp_sum(row_, vocab_size_, max_logit, scale, floor);
  };
  // The kept tokens are, until a filter cuts them to a prefix of the sorted order, every allowed
  // token in id order; afterwards the sorted prefix [0, count). Every sum below runs either in id
  // order (vectorised over the row in a fixed lane order) or serially over the sorted prefix,
  // both fixed by the input alone, and takes its exponentials as glibc's expf to the bit.
  sorted_ = 0;
  band_low_ = kInfinity;
  sample_size_ = 0;
  bool kept_sorted = false;
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < count) {
    count = static_cast<std::size_t>(params.top_k);
    extend_sorted(count, count);
    kept_sorted = true;
  }
  if (params.top_p < 1.0f) {
    double mass = 0.0;
    std::size_t computed = 0; // probabilities_[0, computed) are at temperature 1
    if (kept_sorted) {
      computed = compute_probabilities(0, count, max_logit, 1.0f);
      for (std::size_t i = 0; i < count; ++i)
        mass += static_cast<double>(probabilities_[i]);
    } else {
      mass = mass_over_row(1.0f, kNegativeInfinity);
    }
    const double nucleus_mass = static_cast<double>(params.top_p) * mass;
    double cumulative = 0.0;
    for (std::size_t i = 0; i < count; ++i) {
      if (i == computed) {
        extend_sorted(std::max(kFirstSortedChunk, 2 * sorted_), count);
        computed = compute_probabilities(computed, sorted_, max_logit, 1.0f);
      }
      cumulative += static_cast<double>(probabilities_[i]);
      if (cumulative >= nucleus_mass) {
        count = i + 1;
        break;
      }
    }
    kept_sorted = true;
  }
  float floor = kNegativeInfinity;
  if (params.min_p > 0.0f) {
    const float min_logit = max_logit + std::log(params.min_p);
    if (kept_sorted) {
      // The kept tokens at or above min_logit are a prefix of the sorted ones.
      std::size_t kept = 0;
      while (kept < count && sorted_logits_[kept] >= min_logit)
        ++kept;
      count = kept;
    } else {
      // min_logit is finite, so banned tokens (-infinity in the row) fall below it.
      floor = min_logit;
      count = collect_in_range(row_, vocab_size_, min_logit, kInfinity, band_ids_.data());
    }
  }

  const float inverse_temperature = 1.0f / params.temperature;
  double mass = 0.0;
  std::size_t computed = 0; // probabilities_[0, computed) are at the temperature
  if (kept_sorted) {
    computed = compute_probabilities(0, count, max_logit, inverse_temperature);
    for (std::size_t i = 0; i < count; ++i)
      mass += static_cast<double>(probabilities_[i]);
  } else {
    mass = mass_over_row(inverse_temperature, floor);
  }
  const double target = static_cast<double>(uniform) * mass;

  double cumulative = 0.0;
  for (std::size_t i = 0; i < count; ++i) {
    if (i == computed) {
      extend_sorted(std::max(kFirstSortedChunk, 2 * sorted_), count);
      computed =
          compute_probabilities(computed, std::min(sorted_, count), max_logit, inverse_temperature);
    }
    cumulative += static_cast<double>(probabilities_[i]);
    if (target < cumulative)
      return sorted_ids_[i];
  }
  // Rounding can leave the target just past the last cumulative sum: the least likely token.
  extend_sorted(count, count);
  return sorted_ids_[count - 1];
}

std::size_t Sampler::compute_probabilities(std::size_t begin, std::size_t end, float max_logit,
                                           float scale) {
  float* __restrict__ scaled = probabilities_.data();
  const float* __restrict__ logits = sorted_logits_.data();
  for (std::size_t i = begin; i < end; ++i)
    scaled[i] = (logits[i] - max_logit) * scale;
  expf_like_libm(scaled + begin, scaled + begin, end - begin);
  return end;
}

void Sampler::extend_sorted(std::size_t wanted, std::size_t limit) {
  wanted = std::min(wanted, limit);
  while (sorted_ < wanted)
    add_band(wanted);
}

void Sampler::add_band(std::size_t wanted) {
  const std::size_t stride = std::max<std::size_t>(1, vocab_size_ / kSampleSize);
  if (sample_size_ == 0) {
    for (std::size_t id = 0; id < vocab_size_ && sample_size_ < sample_.size(); id += stride) {
      const float logit = sanitized(row_[id]);
      if (logit != kNegativeInfinity)
        sample_[sample_size_++] = logit;
    }
  }
  // A band low enough that about `wanted` tokens lie at or above it, judged from the sample; it
  // starts below band_low_ so that each band holds at least one token.
  float low = kNegativeInfinity;
  const std::size_t rank = (wanted + stride - 1) / stride + 1;
  const auto sample_end = sample_.begin() + static_cast<std::ptrdiff_t>(sample_size_);
  if (rank < sample_size_) {
    const auto nth = sample_.begin() + static_cast<std::ptrdiff_t>(rank);
    std::nth_element(sample_.begin(), nth, sample_end, std::greater<float>());
    low = *nth;
  }
  if (!(low < band_low_)) {
    low = kNegativeInfinity;
    for (auto it = sample_.begin(); it != sample_end; ++it) {
      if (*it<band_low_&& * it> low)
        low = *it;
    }
  }

  std::size_t found = 0;
  if (low != kNegativeInfinity) {
    found = collect_in_range(row_, vocab_size_, low, band_low_, band_ids_.data());
  } else {
    // The last band: every allowed token left, those at -infinity (or NaN) included.
    for (std::size_t id = 0; id < vocab_size_; ++id) {
      if (sanitized(row_[id]) < band_low_ && banned_[id] == 0)
        band_ids_[found++] = static_cast<std::uint32_t>(id);
    }
  }
  band_low_ = low;

  // Sort the band by (logit descending, id ascending) as one 64-bit key: the logit's bits mapped
  // to an order-reversing unsigned integer above the id.
  std::uint64_t* keys = band_keys_.data();
  for (std::size_t i = 0; i < found; ++i) {
    const std::uint32_t id = band_ids_[i];
    float logit = sanitized(row_[id]);
    logit = logit == 0.0f ? 0.0f : logit; // -0 ties with +0, as the comparisons have it
    std::uint32_t bits;
    std::memcpy(&bits, &logit, sizeof bits);
    const std::uint32_t ascending = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
    keys[i] = (static_cast<std::uint64_t>(~ascending) << 32) | id;
  }
  sort_keys(found);
  for (std::size_t i = 0; i < found; ++i) {
    const auto id = static_cast<TokenId>(keys[i] & 0xffffffffu);
    sorted_ids_[sorted_ + i] = id;
    sorted_logits_[sorted_ + i] = sanitized(row_[id]);
  }
  sorted_ += found;
}

void Sampler::sort_keys(std::size_t count) {
  std::uint64_t* keys = band_keys_.data();
  // Small bands: a comparison sort. Large ones (a flat distribution's): a stable radix sort on the
  // logit half of the keys, in bytes, skipping the bytes every key shares; the ids arrive
  // ascending, so stability orders ties by id.
  constexpr std::size_t kRadixFrom = 512;
  if (count < kRadixFrom) {
    std::sort(keys, keys + count);
    return;
  }
  std::uint64_t* from = keys;
  std::uint64_t* to = radix_scratch_.data();
  for (int shift = 32; shift < 64; shift += 8) {
    std::size_t histogram[257] = {};
    for (std::size_t i = 0; i < count; ++i)
      ++histogram[((from[i] >> shift) & 0xffu) + 1];
    if (histogram[((from[0] >> shift) & 0xffu) + 1] == count)
      continue;
    for (int digit = 0; digit < 256; ++digit)
      histogram[digit + 1] += histogram[digit];
    for (std::size_t i = 0; i < count; ++i)
      to[histogram[(from[i] >> shift) & 0xffu]++] = from[i];
    std::swap(from, to);
  }
  if (from != keys)
    std::memcpy(keys, from, count * sizeof *keys);
}

void Sampler::fill_top_logprobs(const float* logits, float log_normalizer, std::uint32_t k,
                                TokenLogprob* out) const {
  const std::size_t wanted = std::min<std::size_t>(k, vocab_size_);
  // Insertion into a short sorted list (k <= 20), no scratch. Entries hold raw logits until the
  // end. Ids arrive ascending, so a strict comparison keeps the lower id first on ties. Once the
  // list is full, a vector scan skips to the next logit that beats its last entry.
  std::size_t filled = 0;
  const auto insert = [&](std::size_t id, float logit) {
    std::size_t position = filled < wanted ? filled++ : wanted - 1;
    while (position > 0 && logit > out[position - 1].logprob) {
      out[position] = out[position - 1];
      --position;
    }
    out[position] = {static_cast<TokenId>(id), logit};
  };
  std::size_t id = 0;
  for (; id < vocab_size_ && filled < wanted; ++id)
    insert(id, sanitized(logits[id]));
  while ((id = find_greater(logits, id, vocab_size_, out[wanted - 1].logprob)) < vocab_size_) {
    insert(id, logits[id]);
    ++id;
  }
  for (std::size_t i = 0; i < filled; ++i)
    out[i].logprob -= log_normalizer;
}

} // namespace caflm

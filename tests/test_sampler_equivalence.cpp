// The Sampler against an oracle: the sampler as it was before its passes were vectorised and its
// full-vocabulary sorts replaced by bands (a copy of the old caflm/sampling/sampler.cpp below),
// over many random rows and every mix of parameters. The new one must choose the same token,
// report the same log-probability to within float rounding of the log-normalizer (its exp-sums
// add in lanes instead of in id order), the same NaN count and the same top-logprob ids.
#include "caflm/sampling/logit_kernels.hpp"
#include "caflm/sampling/sampler.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

using namespace caflm;

namespace reference {

/// The sampler as it was before its passes were vectorised and its sorts made partial
/// (caflm/sampling/sampler.cpp at b6232ed), kept verbatim as the oracle of the documented
/// semantics: a log-softmax with scalar std::exp in id order, candidates built for every call.
class ReferenceSampler {
 public:
  explicit ReferenceSampler(std::size_t vocab_size);

  SampleResult sample_with_uniform(const float* logits, const SamplingParams& params,
                                   const TokenId* history, std::size_t history_len, float uniform,
                                   const TokenId* banned, std::size_t n_banned,
                                   TokenLogprob* top_logprobs_out);

 private:
  struct Candidate {
    float logit;
    TokenId id;
  };
  std::size_t build_candidates(const float* logits, const SamplingParams& params,
                               const TokenId* history, std::size_t history_len,
                               const TokenId* banned, std::size_t n_banned);
  TokenId draw(std::size_t count, const SamplingParams& params, float uniform);
  std::size_t nucleus_size(std::size_t count, float max_logit, float top_p);
  std::size_t keep_at_least(std::size_t count, float min_logit);
  void extend_sorted(std::size_t wanted, std::size_t count);
  void fill_top_logprobs(const float* logits, float log_normalizer, std::uint32_t k,
                         TokenLogprob* out) const;

  std::size_t vocab_size_;
  std::vector<Candidate> candidates_;
  std::vector<std::uint32_t> counts_;
  std::vector<std::uint8_t> banned_;
  std::size_t best_ = 0;
  std::size_t sorted_ = 0;
};

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

ReferenceSampler::ReferenceSampler(std::size_t vocab_size)
  : vocab_size_(vocab_size)
  , candidates_(vocab_size)
  , counts_(vocab_size, 0)
  , banned_(vocab_size, 0) {}

SampleResult ReferenceSampler::sample_with_uniform(const float* logits,
                                                   const SamplingParams& params,
                                                   const TokenId* history, std::size_t history_len,
                                                   float uniform, const TokenId* banned,
                                                   std::size_t n_banned,
                                                   TokenLogprob* top_logprobs_out) {
  std::uint32_t nan_logits = 0;
  const float log_normalizer = log_sum_exp(logits, vocab_size_, nan_logits);
  if (params.top_logprobs > 0 && top_logprobs_out != nullptr)
    fill_top_logprobs(logits, log_normalizer, params.top_logprobs, top_logprobs_out);

  const std::size_t count =
      build_candidates(logits, params, history, history_len, banned, n_banned);
  if (count == 0)
    throw std::invalid_argument("Sampler::sample: every token is banned");
  const bool greedy = params.temperature <= Sampler::kGreedyTemperature;
  // An infinite top logit leaves no finite distribution to draw from; the argmax is the answer.
  const TokenId token = greedy || !std::isfinite(candidates_[best_].logit)
                            ? candidates_[best_].id
                            : draw(count, params, uniform);
  return {token, sanitized(logits[token]) - log_normalizer, nan_logits};
}

std::size_t ReferenceSampler::build_candidates(const float* logits, const SamplingParams& params,
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

TokenId ReferenceSampler::draw(std::size_t count, const SamplingParams& params, float uniform) {
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

std::size_t ReferenceSampler::nucleus_size(std::size_t count, float max_logit, float top_p) {
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

std::size_t ReferenceSampler::keep_at_least(std::size_t count, float min_logit) {
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

void ReferenceSampler::extend_sorted(std::size_t wanted, std::size_t count) {
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

void ReferenceSampler::fill_top_logprobs(const float* logits, float log_normalizer, std::uint32_t k,
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

} // namespace reference

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

/// The kinds of rows a model (working or broken) can produce.
enum class RowKind {
  normal,     // a broad bulk, spread drawn per row
  peaked,     // a few tokens far above the bulk
  ties,       // values on a coarse grid: many exact ties
  holes,      // some NaN and -infinity among normal values
  sparse,     // -infinity except a few
  constant,   // one value everywhere
  impossible, // -infinity and NaN only
  infinite,   // a +infinity among normal values
};
constexpr int kRowKinds = 8;

std::vector<float> random_row(std::size_t vocab, RowKind kind, std::mt19937& rng) {
  std::vector<float> row(vocab);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<std::size_t> any(0, vocab - 1);
  const float spreads[] = {0.05f, 0.5f, 1.0f, 3.0f, 10.0f};
  std::normal_distribution<float> bulk(unit(rng) * 4.0f - 2.0f,
                                       spreads[std::uniform_int_distribution<int>(0, 4)(rng)]);
  for (float& x : row)
    x = bulk(rng);
  switch (kind) {
  case RowKind::normal:
    break;
  case RowKind::peaked:
    for (int k = 0; k < 6; ++k)
      row[any(rng)] = 12.0f + 4.0f * unit(rng);
    break;
  case RowKind::ties:
    for (float& x : row)
      x = std::round(x * 2.0f) / 2.0f;
    break;
  case RowKind::holes:
    for (float& x : row) {
      const float u = unit(rng);
      if (u < 0.02f)
        x = std::numeric_limits<float>::quiet_NaN();
      else if (u < 0.1f)
        x = -kInf;
    }
    break;
  case RowKind::sparse:
    for (float& x : row)
      x = -kInf;
    for (int k = 0; k < 3; ++k)
      row[any(rng)] = bulk(rng);
    break;
  case RowKind::constant:
    std::fill(row.begin(), row.end(), bulk(rng));
    break;
  case RowKind::impossible:
    for (float& x : row)
      x = unit(rng) < 0.3f ? std::numeric_limits<float>::quiet_NaN() : -kInf;
    break;
  case RowKind::infinite:
    row[any(rng)] = kInf;
    break;
  }
  return row;
}

SamplingParams random_params(std::size_t vocab, std::mt19937& rng) {
  const auto pick = [&rng](auto const& options) {
    return options[std::uniform_int_distribution<std::size_t>(0, std::size(options) - 1)(rng)];
  };
  SamplingParams params;
  const float temperatures[] = {0.0f, 1e-7f, 0.05f, 0.3f, 0.8f, 1.0f, 1.7f};
  params.temperature = pick(temperatures);
  const std::int32_t top_ks[] = {0, 0, 1, 2, 5, 40, 1000, static_cast<std::int32_t>(vocab) + 3};
  params.top_k = pick(top_ks);
  const float top_ps[] = {1.0f, 1.0f, 0.95f, 0.9f, 0.5f, 0.05f, 1e-6f};
  params.top_p = pick(top_ps);
  const float min_ps[] = {0.0f, 0.0f, 1e-6f, 0.05f, 0.3f, 1.0f};
  params.min_p = pick(min_ps);
  const float repetitions[] = {1.0f, 1.0f, 1.1f, 0.8f, 2.0f};
  params.repetition_penalty = pick(repetitions);
  const float presences[] = {0.0f, 0.0f, 0.5f, -1.0f};
  params.presence_penalty = pick(presences);
  const float frequencies[] = {0.0f, 0.0f, 0.3f, -0.5f};
  params.frequency_penalty = pick(frequencies);
  const std::int32_t windows[] = {64, 64, 0, 5, -1};
  params.penalty_last_n = pick(windows);
  const std::uint32_t top_logprobs[] = {0u, 0u, 1u, 5u, 20u};
  params.top_logprobs = pick(top_logprobs);
  const bool logprobs[] = {false, true};
  params.logprobs = pick(logprobs);
  return params;
}

float random_uniform(std::mt19937& rng, std::uint64_t step) {
  switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
  case 0:
    return 0.0f;
  case 1:
    return 0x1.fffffep-1f; // the largest uniform below 1
  default:
    return counter_uniform(rng(), step);
  }
}

bool logprob_close(float got, float expected) {
  if (std::isnan(expected) || std::isnan(got))
    return std::isnan(expected) && std::isnan(got);
  if (std::isinf(expected) || std::isinf(got))
    return got == expected;
  return std::abs(got - expected) <= 1e-6f * std::max(1.0f, std::abs(expected));
}

/// One call of both samplers on the same input; they must agree.
void check_same(Sampler& sampler, reference::ReferenceSampler& oracle,
                const std::vector<float>& row, const SamplingParams& params,
                const std::vector<TokenId>& history, const std::vector<TokenId>& banned,
                float uniform) {
  std::vector<TokenLogprob> top(kMaxTopLogprobs), top_expected(kMaxTopLogprobs);
  bool threw = false;
  SampleResult expected{};
  try {
    // The oracle always computes the logprob; the sampler only when asked, choosing the same.
    expected =
        oracle.sample_with_uniform(row.data(), params, history.data(), history.size(), uniform,
                                   banned.data(), banned.size(), top_expected.data());
    if (!wants_logprobs(params))
      expected.logprob = 0.0f;
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  INFO("temperature " << params.temperature << " top_k " << params.top_k << " top_p "
                      << params.top_p << " min_p " << params.min_p << " repetition "
                      << params.repetition_penalty << " presence " << params.presence_penalty
                      << " frequency " << params.frequency_penalty << " window "
                      << params.penalty_last_n << " uniform " << uniform << " banned "
                      << banned.size() << " vocab " << row.size() << " logprobs " << params.logprobs
                      << " top_logprobs " << params.top_logprobs);
  if (threw) {
    CHECK_THROWS_AS(sampler.sample_with_uniform(row.data(), params, history.data(), history.size(),
                                                uniform, banned.data(), banned.size(), top.data()),
                    std::invalid_argument);
    return;
  }
  const SampleResult got =
      sampler.sample_with_uniform(row.data(), params, history.data(), history.size(), uniform,
                                  banned.data(), banned.size(), top.data());
  REQUIRE(got.token == expected.token);
  CHECK(logprob_close(got.logprob, expected.logprob));
  CHECK(got.nan_logits == expected.nan_logits);
  const std::size_t listed = std::min<std::size_t>(params.top_logprobs, row.size());
  for (std::size_t i = 0; i < listed; ++i) {
    REQUIRE(top[i].token == top_expected[i].token);
    CHECK(logprob_close(top[i].logprob, top_expected[i].logprob));
  }
}

/// `cases` random calls on a vocabulary of `vocab` tokens.
void compare_over_random_rows(std::size_t vocab, int cases, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Sampler sampler(vocab);
  reference::ReferenceSampler oracle(vocab);
  std::uniform_int_distribution<std::size_t> any(0, vocab - 1);
  for (int c = 0; c < cases; ++c) {
    const auto kind =
        static_cast<RowKind>(std::uniform_int_distribution<int>(0, kRowKinds - 1)(rng));
    const std::vector<float> row = random_row(vocab, kind, rng);
    const SamplingParams params = random_params(vocab, rng);
    // History: repeats, the top tokens (so penalties reach the argmax) and ids outside the
    // vocabulary.
    std::vector<TokenId> history(std::uniform_int_distribution<std::size_t>(0, 80)(rng));
    for (TokenId& id : history) {
      const int what = std::uniform_int_distribution<int>(0, 9)(rng);
      id = what == 0 ? static_cast<TokenId>(vocab + 7)
                     : static_cast<TokenId>(what < 4 ? any(rng) % 8 : any(rng));
    }
    if (!history.empty() && std::uniform_int_distribution<int>(0, 2)(rng) == 0) {
      const auto top = std::max_element(row.begin(), row.end());
      history.back() = static_cast<TokenId>(top - row.begin());
    }
    std::vector<TokenId> banned;
    switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
    case 0:
      banned = {static_cast<TokenId>(any(rng)), static_cast<TokenId>(vocab + 1)};
      break;
    case 1: {
      // The argmax, twice: bans may repeat.
      const auto top = static_cast<TokenId>(std::max_element(row.begin(), row.end()) - row.begin());
      banned = {top, top};
      break;
    }
    case 2:
      // Most of a small vocabulary, sometimes all of it.
      for (std::size_t id = 0; id < vocab; ++id) {
        if (vocab <= 64 && (id % 3 != 0 || std::uniform_int_distribution<int>(0, 9)(rng) == 0))
          banned.push_back(static_cast<TokenId>(id));
      }
      break;
    default:
      break;
    }
    check_same(sampler, oracle, row, params, history, banned, random_uniform(rng, c));
  }
}

} // namespace

TEST_CASE("expf_like_libm equals std::exp bit for bit", "[sampler_equivalence]") {
  // Every float in [-110, 0] would take seconds; a spread of them, plus the edges of glibc's
  // special cases, catches a wrong constant or a fused multiply-add where glibc has none.
  std::vector<float> x;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-110.0f, 90.0f);
  std::uniform_real_distribution<float> narrow(-1.0f, 0.0f);
  for (int i = 0; i < 1 << 20; ++i)
    x.push_back(i % 2 == 0 ? wide(rng) : narrow(rng));
  for (std::uint32_t bits = 0x80000000u; bits < 0x80000000u + 4096; ++bits) {
    float value;
    std::memcpy(&value, &bits, sizeof value);
    x.push_back(value); // -0 and the negative subnormals
  }
  for (const float edge :
       {-0x1.9fe368p6f, std::nextafter(-0x1.9fe368p6f, -kInf), std::nextafter(-0x1.9fe368p6f, 0.0f),
        -88.0f, 88.0f, 0x1.62e42ep6f, std::nextafter(0x1.62e42ep6f, kInf), -0x1.9d1d9ep6f, -103.0f,
        -87.5f, -kInf, kInf, std::numeric_limits<float>::quiet_NaN(), 0.0f, 1.0f})
    x.push_back(edge);
  std::vector<float> got(x.size());
  expf_like_libm(x.data(), got.data(), x.size());
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float expected = std::exp(x[i]);
    const bool same = std::isnan(expected) ? std::isnan(got[i])
                                           : std::memcmp(&expected, &got[i], sizeof expected) == 0;
    if (!same && ++mismatches <= 5)
      WARN("expf(" << x[i] << "): libm " << expected << ", kernel " << got[i]);
  }
  CHECK(mismatches == 0);
}

TEST_CASE("exp_sum and logit_row_max read NaN as -infinity", "[sampler_equivalence]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> row(37, -kInf);
  row[3] = nan;
  row[20] = 1.5f;
  row[29] = 1.5f;
  row[35] = nan;
  const LogitRowMax max = logit_row_max(row.data(), row.size());
  CHECK(max.max == 1.5f);
  CHECK(max.first == 20);
  CHECK(max.nan_count == 2);
  CHECK(exp_sum(row.data(), row.size(), 1.5f, 1.0f, -kInf) == 2.0);
  // The floor leaves out what lies below it.
  row[0] = 0.5f;
  CHECK(exp_sum(row.data(), row.size(), 1.5f, 1.0f, 1.0f) == 2.0);
  CHECK(exp_sum(row.data(), row.size(), 1.5f, 1.0f, -kInf) ==
        2.0 + static_cast<double>(std::exp(-1.0f)));
  std::vector<std::uint32_t> ids(row.size());
  REQUIRE(collect_in_range(row.data(), row.size(), 0.5f, 1.5f, ids.data()) == 1);
  CHECK(ids[0] == 0);
  CHECK(find_greater(row.data(), 21, row.size(), 1.0f) == 29);
  CHECK(find_greater(row.data(), 30, row.size(), 1.0f) == row.size());
}

TEST_CASE("the sampler matches the reference on a 32000-token vocabulary",
          "[sampler_equivalence]") {
  compare_over_random_rows(32000, 600, 11);
}

TEST_CASE("the sampler matches the reference on small vocabularies", "[sampler_equivalence]") {
  for (const std::size_t vocab : {1, 2, 3, 7, 8, 9, 17, 64, 100, 257, 1000, 4099})
    compare_over_random_rows(vocab, 1500, static_cast<std::uint32_t>(vocab));
}

TEST_CASE("the sampler matches the reference over many steps of one request",
          "[sampler_equivalence]") {
  // The draw path under each filter alone, step after step (the uniforms of one seed), on rows
  // where the walk goes deep into the sorted order (flat) and where it stops early (peaked).
  const std::size_t vocab = 32000;
  std::mt19937 rng(5);
  Sampler sampler(vocab);
  reference::ReferenceSampler oracle(vocab);
  for (const RowKind kind : {RowKind::normal, RowKind::peaked, RowKind::ties}) {
    for (int mode = 0; mode < 5; ++mode) {
      SamplingParams params;
      params.temperature = mode == 4 ? 1.0f : 0.7f;
      params.top_k = mode == 1 ? 40 : 0;
      params.top_p = mode == 2 ? 0.9f : 1.0f;
      params.min_p = mode == 3 ? 0.05f : 0.0f;
      params.seed = 1234;
      for (std::uint64_t step = 0; step < 40; ++step) {
        const std::vector<float> row = random_row(vocab, kind, rng);
        check_same(sampler, oracle, row, params, {}, {}, counter_uniform(*params.seed, step));
      }
    }
  }
}

TEST_CASE("the sampler matches the reference where the sorted walk reaches -infinity and ties",
          "[sampler_equivalence]") {
  // Rows built so that the partial sorts' edges matter: top_k past the finite tokens (the last
  // band, which must skip banned ones), +0 tying with -0 (the radix keys), and one value shared
  // by every token (a band that is the whole row).
  const std::size_t vocab = 32000;
  Sampler sampler(vocab);
  reference::ReferenceSampler oracle(vocab);
  std::mt19937 rng(9);
  std::uniform_int_distribution<std::size_t> any(0, vocab - 1);
  for (int c = 0; c < 60; ++c) {
    std::vector<float> row(vocab, -kInf);
    for (int k = 0; k < 10; ++k)
      row[any(rng)] = static_cast<float>(k % 3);
    std::vector<float> zeros(vocab);
    for (std::size_t id = 0; id < vocab; ++id)
      zeros[id] = id % 2 == 0 ? 0.0f : -0.0f;
    const std::vector<float> flat(vocab, 0.25f);
    std::vector<TokenId> banned;
    for (int k = 0; k < 50; ++k)
      banned.push_back(static_cast<TokenId>(any(rng)));
    const std::vector<float>* rows[] = {&row, &zeros, &flat};
    for (const std::vector<float>* r : rows) {
      SamplingParams params;
      params.temperature = 0.9f;
      params.top_k = c % 2 == 0 ? 100 : 0;
      params.top_p = c % 3 == 0 ? 0.999f : 1.0f;
      check_same(sampler, oracle, *r, params, {}, banned, counter_uniform(77, c));
      check_same(sampler, oracle, *r, params, {}, {}, 0x1.fffffep-1f);
    }
  }
}

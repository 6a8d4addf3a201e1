#include "caflm/sampling/sampler.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <new>
#include <random>
#include <set>
#include <stdexcept>
#include <utility>
#include <vector>

// Counts every heap allocation of the process, to prove sample() makes none.
#include "tests/support/allocation_counter.hpp"

using caflm::test::heap_allocations;

namespace {

using caflm::counter_uniform;
using caflm::Sampler;
using caflm::SampleResult;
using caflm::SamplingParams;
using caflm::TokenId;
using caflm::TokenLogprob;

/// Samples with no history, no bans and no top logprobs.
TokenId sample_plain(Sampler& sampler, const std::vector<float>& logits,
                     const SamplingParams& params, std::uint64_t step) {
  REQUIRE(logits.size() == sampler.vocab_size());
  return sampler.sample(logits.data(), params, nullptr, 0, step, nullptr, 0, nullptr).token;
}

std::vector<float> logits_of(const std::vector<double>& probabilities) {
  std::vector<float> logits;
  for (double p : probabilities)
    logits.push_back(static_cast<float>(std::log(p)));
  return logits;
}

/// Distinct tokens drawn over steps [0, n_steps).
std::set<TokenId> tokens_drawn(const std::vector<float>& logits, const SamplingParams& params,
                               std::uint64_t n_steps) {
  Sampler sampler(logits.size());
  std::set<TokenId> seen;
  for (std::uint64_t step = 0; step < n_steps; ++step)
    seen.insert(sample_plain(sampler, logits, params, step));
  return seen;
}

/// Pearson's chi-square statistic of token counts over steps [0, n_steps) against `expected`
/// probabilities.
double chi_square(const std::vector<float>& logits, const SamplingParams& params,
                  const std::vector<double>& expected, std::uint64_t n_steps) {
  Sampler sampler(logits.size());
  std::vector<std::uint64_t> counts(logits.size(), 0);
  for (std::uint64_t step = 0; step < n_steps; ++step)
    ++counts[sample_plain(sampler, logits, params, step)];
  double statistic = 0.0;
  for (std::size_t id = 0; id < logits.size(); ++id) {
    if (expected[id] == 0.0) {
      REQUIRE(counts[id] == 0);
      continue;
    }
    const double mean = expected[id] * static_cast<double>(n_steps);
    statistic +=
        (static_cast<double>(counts[id]) - mean) * (static_cast<double>(counts[id]) - mean) / mean;
  }
  return statistic;
}

/// Log-softmax in double precision, the reference for reported logprobs.
std::vector<double> log_softmax(const std::vector<float>& logits) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float logit : logits)
    sum += std::exp(logit - max_logit);
  std::vector<double> result;
  for (float logit : logits)
    result.push_back(logit - max_logit - std::log(sum));
  return result;
}

/// The sampling chain written out naively: full sort, then top_k, top_p, min_p, temperature and
/// an inverse-CDF draw with counter_uniform(seed, step). No penalties or bans.
TokenId reference_draw(const std::vector<float>& logits, const SamplingParams& params,
                       std::uint64_t step) {
  std::vector<std::pair<float, TokenId>> kept;
  for (std::size_t id = 0; id < logits.size(); ++id)
    kept.emplace_back(logits[id], static_cast<TokenId>(id));
  std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < kept.size())
    kept.resize(static_cast<std::size_t>(params.top_k));
  const float max_logit = kept.front().first;
  if (params.top_p < 1.0f) {
    double total = 0.0;
    for (const auto& candidate : kept)
      total += std::exp(candidate.first - max_logit);
    double cumulative = 0.0;
    for (std::size_t i = 0; i < kept.size(); ++i) {
      cumulative += std::exp(kept[i].first - max_logit);
      if (cumulative >= static_cast<double>(params.top_p) * total) {
        kept.resize(i + 1);
        break;
      }
    }
  }
  if (params.min_p > 0.0f) {
    const float min_logit = max_logit + std::log(params.min_p);
    kept.erase(std::remove_if(kept.begin(), kept.end(),
                              [&](const auto& candidate) { return candidate.first < min_logit; }),
               kept.end());
  }
  const float inverse_temperature = 1.0f / params.temperature;
  double total = 0.0;
  for (const auto& candidate : kept)
    total += std::exp((candidate.first - max_logit) * inverse_temperature);
  const double target = static_cast<double>(counter_uniform(params.seed.value_or(0), step)) * total;
  double cumulative = 0.0;
  for (const auto& candidate : kept) {
    cumulative += std::exp((candidate.first - max_logit) * inverse_temperature);
    if (target < cumulative)
      return candidate.second;
  }
  return kept.back().second;
}

/// Checks that token 0, seen in `history`, ends up with logit `expected` after penalties: greedy
/// picks it over a rival just below `expected` and not over one just above.
void check_penalized_logit(float raw, const std::vector<TokenId>& history,
                           const SamplingParams& penalties, float expected) {
  SamplingParams params = penalties;
  params.temperature = 0.0f;
  Sampler sampler(3);
  // Token 2 is filler history that never competes.
  for (float offset : {-0.01f, 0.01f}) {
    const std::vector<float> logits{raw, expected + offset, -30.0f};
    const TokenId chosen =
        sampler
            .sample(logits.data(), params, history.data(), history.size(), 0, nullptr, 0, nullptr)
            .token;
    CHECK(chosen == (offset < 0.0f ? 0u : 1u));
  }
}

} // namespace

TEST_CASE("philox4x32_10 matches the Random123 known-answer vectors") {
  using Words = std::array<std::uint32_t, 4>;
  CHECK(caflm::philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
        Words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(caflm::philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
                             {0xffffffff, 0xffffffff}) ==
        Words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(caflm::philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                             {0xa4093822, 0x299f31d0}) ==
        Words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("counter_uniform is a deterministic uniform in [0, 1) of seed, step and lane") {
  CHECK(counter_uniform(7, 3) == counter_uniform(7, 3));
  CHECK(counter_uniform(7, 3) != counter_uniform(7, 4));
  CHECK(counter_uniform(7, 3) != counter_uniform(8, 3));
  CHECK(counter_uniform(7, 3, 0) != counter_uniform(7, 3, 1));
  // The high halves of seed and step matter too.
  CHECK(counter_uniform(7, 3) != counter_uniform(7 + (std::uint64_t{1} << 32), 3));
  CHECK(counter_uniform(7, 3) != counter_uniform(7, 3 + (std::uint64_t{1} << 32)));

  constexpr int kBins = 16;
  constexpr std::uint64_t kDraws = 160000;
  std::vector<double> counts(kBins, 0.0);
  for (std::uint64_t step = 0; step < kDraws; ++step) {
    const float u = counter_uniform(12345, step);
    REQUIRE(u >= 0.0f);
    REQUIRE(u < 1.0f);
    ++counts[static_cast<std::size_t>(u * kBins)];
  }
  const double mean = static_cast<double>(kDraws) / kBins;
  double statistic = 0.0;
  for (double count : counts)
    statistic += (count - mean) * (count - mean) / mean;
  // 15 degrees of freedom; P(chi2 > 50) is about 1e-5.
  CHECK(statistic < 50.0);
}

TEST_CASE("greedy picks the argmax, the lowest id on ties, whatever the seed and step") {
  Sampler sampler(6);
  const std::vector<float> logits{0.5f, 2.0f, -1.0f, 2.0f, 1.9f, 0.0f};
  SamplingParams params;
  params.temperature = 0.0f;
  for (std::uint64_t step = 0; step < 50; ++step) {
    params.seed = step * 31;
    CHECK(sample_plain(sampler, logits, params, step) == 1);
  }
  params.temperature = 1e-7f;
  CHECK(sample_plain(sampler, logits, params, 0) == 1);
}

TEST_CASE("top_k = 1 equals greedy") {
  std::mt19937 generator(7);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  Sampler sampler(300);
  std::vector<float> logits(300);
  SamplingParams params;
  params.top_k = 1;
  params.temperature = 1.5f;
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  for (std::uint64_t step = 0; step < 100; ++step) {
    for (float& logit : logits)
      logit = normal(generator);
    CHECK(sample_plain(sampler, logits, params, step) ==
          sample_plain(sampler, logits, greedy, step));
  }
}

TEST_CASE("each filter keeps the tokens it should") {
  // Token probabilities 0.05, 0.5, 0.15, 0.3: sorted, 1 > 3 > 2 > 0.
  const std::vector<float> logits = logits_of({0.05, 0.5, 0.15, 0.3});
  SamplingParams params;
  params.seed = 99;

  SECTION("unfiltered draws reach every token") {
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{0, 1, 2, 3});
  }
  SECTION("top_k keeps the k most likely") {
    params.top_k = 2;
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1, 3});
    params.top_k = 3;
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1, 2, 3});
    params.top_k = 4;
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{0, 1, 2, 3});
  }
  SECTION("top_p keeps the minimal nucleus") {
    params.top_p = 0.45f; // 0.5 alone reaches it
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1});
    params.top_p = 0.75f; // 0.5 + 0.3
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1, 3});
    params.top_p = 0.85f; // 0.5 + 0.3 + 0.15
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1, 2, 3});
    params.top_p = 0.97f;
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{0, 1, 2, 3});
  }
  SECTION("min_p keeps tokens at least min_p times as likely as the top one") {
    params.min_p = 0.25f; // threshold 0.125
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1, 2, 3});
    params.min_p = 0.5f; // threshold 0.25
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1, 3});
    params.min_p = 0.9f;
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1});
  }
  SECTION("top_p sees what top_k kept, renormalized") {
    params.top_k = 2;    // 0.5 and 0.3 renormalize to 0.625 and 0.375
    params.top_p = 0.6f; // reached by 0.625 alone
    CHECK(tokens_drawn(logits, params, 2000) == std::set<TokenId>{1});
  }
}

TEST_CASE("draw frequencies match the distribution") {
  const std::vector<double> probabilities{0.3, 0.02, 0.2, 0.1, 0.15, 0.05, 0.08, 0.1};
  const std::vector<float> logits = logits_of(probabilities);
  SamplingParams params;
  params.seed = 2024;
  constexpr std::uint64_t kSteps = 20000;
  // Thresholds sit far in the tail (P < 1e-5 for 7 degrees of freedom); a wrong distribution,
  // e.g. the one at temperature 1 when sampling at 0.6, scores in the hundreds.

  SECTION("at temperature 1") {
    CHECK(chi_square(logits, params, probabilities, kSteps) < 45.0);
  }
  SECTION("at another temperature, p^(1/T) renormalized") {
    params.temperature = 0.6f;
    std::vector<double> expected;
    double total = 0.0;
    for (double p : probabilities)
      total += std::pow(p, 1.0 / 0.6);
    for (double p : probabilities)
      expected.push_back(std::pow(p, 1.0 / 0.6) / total);
    CHECK(chi_square(logits, params, expected, kSteps) < 45.0);
    CHECK(chi_square(logits, params, probabilities, kSteps) > 100.0);
  }
  SECTION("after top_k, renormalized over the kept tokens") {
    params.top_k = 3; // tokens 0, 2, 4: 0.3, 0.2, 0.15
    const std::vector<double> expected{0.3 / 0.65, 0, 0.2 / 0.65, 0, 0.15 / 0.65, 0, 0, 0};
    CHECK(chi_square(logits, params, expected, kSteps) < 30.0);
  }
}

TEST_CASE("the draw is the inverse CDF over candidates sorted by probability") {
  // A large, fairly flat vocabulary with many tied logits walks deep into the sorted order and
  // exercises the partial sorts and the tie order.
  std::mt19937 generator(11);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> logits(4096);
  for (float& logit : logits)
    logit = std::round(normal(generator) * 4.0f) / 4.0f;

  SamplingParams params;
  params.seed = 5;
  const auto configure = GENERATE(
      as<std::function<void(SamplingParams&)>>{}, [](SamplingParams&) {},
      [](SamplingParams& p) {
        p.temperature = 0.7f;
        p.top_k = 50;
      },
      [](SamplingParams& p) {
        p.temperature = 1.3f;
        p.top_p = 0.9f;
      },
      [](SamplingParams& p) { p.top_p = 0.999f; }, [](SamplingParams& p) { p.min_p = 0.05f; },
      [](SamplingParams& p) {
        p.temperature = 0.9f;
        p.top_k = 700;
        p.top_p = 0.95f;
        p.min_p = 0.01f;
      });
  configure(params);
  Sampler sampler(logits.size());
  for (std::uint64_t step = 0; step < 300; ++step)
    REQUIRE(sample_plain(sampler, logits, params, step) == reference_draw(logits, params, step));
}

TEST_CASE("penalties change the logits of tokens in the window as llama.cpp and OpenAI define") {
  SamplingParams params;
  SECTION("repetition divides positive logits and multiplies negative ones") {
    params.repetition_penalty = 2.0f;
    check_penalized_logit(3.0f, {0}, params, 1.5f);
    check_penalized_logit(-1.0f, {0}, params, -2.0f);
    // Below 1 it rewards repetition; the count does not matter.
    params.repetition_penalty = 0.5f;
    check_penalized_logit(3.0f, {0, 0, 0}, params, 6.0f);
  }
  SECTION("presence subtracts once, frequency once per occurrence") {
    params.presence_penalty = 0.5f;
    check_penalized_logit(1.0f, {0, 0, 0}, params, 0.5f);
    params.presence_penalty = 0.0f;
    params.frequency_penalty = 0.25f;
    check_penalized_logit(1.0f, {0, 0, 0}, params, 0.25f);
    params.frequency_penalty = -0.5f;
    check_penalized_logit(1.0f, {0, 0}, params, 2.0f);
  }
  SECTION("repetition first, then frequency and presence") {
    params.repetition_penalty = 1.5f;
    params.frequency_penalty = 0.2f;
    params.presence_penalty = 0.3f;
    check_penalized_logit(3.0f, {0, 2, 0}, params, 3.0f / 1.5f - 2 * 0.2f - 0.3f);
  }
  SECTION("only the last penalty_last_n tokens count") {
    params.frequency_penalty = 1.0f;
    const std::vector<TokenId> history{0, 0, 2, 2, 2};
    params.penalty_last_n = 3;
    check_penalized_logit(5.0f, history, params, 5.0f);
    params.penalty_last_n = 4;
    check_penalized_logit(5.0f, history, params, 4.0f);
    params.penalty_last_n = 100;
    check_penalized_logit(5.0f, history, params, 3.0f);
    params.penalty_last_n = -1;
    check_penalized_logit(5.0f, history, params, 3.0f);
    params.penalty_last_n = 0;
    check_penalized_logit(5.0f, history, params, 5.0f);
  }
  SECTION("the penalty scratch does not leak into the next call") {
    params.frequency_penalty = 1.0f;
    check_penalized_logit(5.0f, {0, 0}, params, 3.0f);
    check_penalized_logit(5.0f, {2}, params, 5.0f);
  }
}

TEST_CASE("a banned token is never chosen but keeps its logprob") {
  Sampler sampler(4);
  const std::vector<float> logits{1.0f, 6.0f, 0.5f, 5.0f};
  const TokenId banned = 1;
  SamplingParams params;
  params.top_logprobs = 2;
  std::array<TokenLogprob, 2> top{};

  params.temperature = 0.0f;
  const SampleResult greedy =
      sampler.sample(logits.data(), params, nullptr, 0, 0, &banned, 1, top.data());
  CHECK(greedy.token == 3);
  CHECK(top[0].token == 1);
  CHECK(top[1].token == 3);

  params.temperature = 1.0f;
  for (std::uint64_t step = 0; step < 500; ++step)
    REQUIRE(sampler.sample(logits.data(), params, nullptr, 0, step, &banned, 1, nullptr).token !=
            1);

  const std::vector<TokenId> all{0, 1, 2, 3};
  CHECK_THROWS_AS(
      sampler.sample(logits.data(), params, nullptr, 0, 0, all.data(), all.size(), nullptr),
      std::invalid_argument);
}

TEST_CASE("the chosen token's logprob is computed only when asked, and asking changes no choice") {
  std::vector<float> logits(1000);
  for (std::size_t i = 0; i < logits.size(); ++i)
    logits[i] = std::sin(static_cast<float>(i) * 0.37f) * 6.0f;
  const std::vector<double> reference = log_softmax(logits);
  Sampler sampler(logits.size());
  const std::vector<TokenId> history{3, 5, 5, 900};
  for (const float temperature : {0.0f, 0.7f, 1.0f, 1.6f}) {
    for (const float top_p : {1.0f, 0.9f}) {
      for (std::uint64_t step = 0; step < 16; ++step) {
        SamplingParams params;
        params.temperature = temperature;
        params.top_p = top_p;
        params.seed = 11;
        params.presence_penalty = step % 2 == 0 ? 0.0f : 0.5f;
        INFO("temperature " << temperature << " top_p " << top_p << " step " << step);
        const SampleResult unasked = sampler.sample(logits.data(), params, history.data(),
                                                    history.size(), step, nullptr, 0, nullptr);
        CHECK(unasked.logprob == 0.0f);
        params.logprobs = true;
        const SampleResult asked = sampler.sample(logits.data(), params, history.data(),
                                                  history.size(), step, nullptr, 0, nullptr);
        CHECK(asked.token == unasked.token);
        CHECK(asked.logprob == Approx(reference[asked.token]).margin(1e-5));
      }
    }
  }
}

TEST_CASE("top_logprobs are the sorted log-softmax of the raw logits") {
  const std::vector<float> logits{0.1f, 2.5f, -3.0f, 2.5f, 1.0f, 0.1f, 4.0f, -0.5f};
  const std::vector<double> reference = log_softmax(logits);
  Sampler sampler(logits.size());
  SamplingParams params;
  // Penalties, temperature and filters must not touch the reported logprobs.
  params.temperature = 0.5f;
  params.top_k = 2;
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 1.0f;
  const std::vector<TokenId> history{6, 1, 1};

  params.top_logprobs = 5;
  std::array<TokenLogprob, 5> top{};
  const SampleResult result = sampler.sample(logits.data(), params, history.data(), history.size(),
                                             3, nullptr, 0, top.data());
  const std::array<TokenId, 5> expected_order{6, 1, 3, 4, 0};
  for (std::size_t i = 0; i < top.size(); ++i) {
    CHECK(top[i].token == expected_order[i]);
    CHECK(top[i].logprob == Approx(reference[top[i].token]).margin(1e-5));
  }
  CHECK(result.logprob == Approx(reference[result.token]).margin(1e-5));

  SECTION("asking for more than the vocabulary fills the whole vocabulary") {
    Sampler small(3);
    params.top_logprobs = 20;
    std::array<TokenLogprob, 20> all{};
    const std::vector<float> three{1.0f, 3.0f, 2.0f};
    small.sample(three.data(), params, nullptr, 0, 0, nullptr, 0, all.data());
    CHECK(all[0].token == 1);
    CHECK(all[1].token == 2);
    CHECK(all[2].token == 0);
  }
}

TEST_CASE("the same seed and step give the same token anywhere; other seeds and steps differ") {
  const std::vector<float> logits(8, 0.0f); // uniform over 8 tokens
  SamplingParams params;
  params.seed = 77;
  Sampler first(8);
  Sampler second(8);
  std::vector<TokenId> run;
  for (std::uint64_t step = 0; step < 400; ++step) {
    run.push_back(sample_plain(first, logits, params, step));
    // A different instance, asked for the steps in reverse, agrees.
    CHECK(sample_plain(second, logits, params, 399 - step) ==
          sample_plain(first, logits, params, 399 - step));
  }
  CHECK(std::set<TokenId>(run.begin(), run.end()).size() == 8);

  params.seed = 78;
  std::vector<TokenId> other_seed;
  for (std::uint64_t step = 0; step < 400; ++step)
    other_seed.push_back(sample_plain(first, logits, params, step));
  CHECK(other_seed != run);
}

TEST_CASE("a request resumed from step k in a fresh sampler continues identically") {
  // A toy model: the next logits depend on the last token.
  constexpr std::size_t kVocab = 50;
  const auto model = [](TokenId last) {
    std::vector<float> logits(kVocab);
    for (std::size_t id = 0; id < kVocab; ++id)
      logits[id] = 3.0f * std::sin(static_cast<float>(id) * 1.3f + static_cast<float>(last) * 0.7f);
    return logits;
  };
  SamplingParams params;
  params.seed = 42;
  params.temperature = 0.8f;
  params.top_k = 20;
  params.top_p = 0.9f;
  params.repetition_penalty = 1.2f;
  params.presence_penalty = 0.3f;
  params.frequency_penalty = 0.1f;
  params.penalty_last_n = 8;
  const std::vector<TokenId> prompt{1, 2, 3};
  constexpr std::uint64_t kSteps = 40;

  const auto generate = [&](Sampler& sampler, std::vector<TokenId>& history, std::uint64_t from) {
    for (std::uint64_t step = from; step < kSteps; ++step) {
      const std::vector<float> logits = model(history.back());
      history.push_back(sampler
                            .sample(logits.data(), params, history.data(), history.size(), step,
                                    nullptr, 0, nullptr)
                            .token);
    }
  };
  Sampler whole(kVocab);
  std::vector<TokenId> uninterrupted = prompt;
  generate(whole, uninterrupted, 0);
  REQUIRE(std::set<TokenId>(uninterrupted.begin() + 3, uninterrupted.end()).size() > 5);

  for (std::uint64_t resume_at : {1u, 17u, 39u}) {
    Sampler fresh(kVocab);
    std::vector<TokenId> resumed(uninterrupted.begin(),
                                 uninterrupted.begin() +
                                     static_cast<std::ptrdiff_t>(prompt.size() + resume_at));
    generate(fresh, resumed, resume_at);
    CHECK(resumed == uninterrupted);
  }
}

TEST_CASE("validate accepts sensible parameters and rejects each absurd value") {
  const SamplingParams defaults;
  CHECK_FALSE(caflm::validate(defaults).has_value());

  SamplingParams edges;
  edges.temperature = 0.0f;
  edges.top_k = -1;
  edges.min_p = 1.0f;
  edges.repetition_penalty = 0.5f;
  edges.presence_penalty = -2.0f;
  edges.frequency_penalty = 2.0f;
  edges.penalty_last_n = -1;
  edges.top_logprobs = 20;
  edges.stop = {"\n\n"};
  CHECK_FALSE(caflm::validate(edges).has_value());

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float infinity = std::numeric_limits<float>::infinity();
  const std::vector<std::function<void(SamplingParams&)>> absurd{
      [](SamplingParams& p) { p.max_tokens = 0; },
      [](SamplingParams& p) { p.temperature = -0.1f; },
      [](SamplingParams& p) { p.temperature = 100.5f; },
      [&](SamplingParams& p) { p.temperature = nan; },
      [](SamplingParams& p) { p.top_k = -2; },
      [](SamplingParams& p) { p.top_p = 0.0f; },
      [](SamplingParams& p) { p.top_p = 1.01f; },
      [&](SamplingParams& p) { p.top_p = nan; },
      [](SamplingParams& p) { p.min_p = -0.1f; },
      [](SamplingParams& p) { p.min_p = 1.5f; },
      [&](SamplingParams& p) { p.min_p = nan; },
      [](SamplingParams& p) { p.repetition_penalty = 0.0f; },
      [](SamplingParams& p) { p.repetition_penalty = -1.0f; },
      [&](SamplingParams& p) { p.repetition_penalty = nan; },
      [&](SamplingParams& p) { p.repetition_penalty = infinity; },
      [](SamplingParams& p) { p.presence_penalty = 2.5f; },
      [&](SamplingParams& p) { p.presence_penalty = nan; },
      [](SamplingParams& p) { p.frequency_penalty = -2.5f; },
      [&](SamplingParams& p) { p.frequency_penalty = nan; },
      [](SamplingParams& p) { p.penalty_last_n = -2; },
      [](SamplingParams& p) { p.top_logprobs = 21; },
      [](SamplingParams& p) {
        p.stop = {"end", ""};
      },
  };
  for (std::size_t i = 0; i < absurd.size(); ++i) {
    SamplingParams params;
    absurd[i](params);
    INFO("absurd case " << i);
    const auto error = caflm::validate(params);
    REQUIRE(error.has_value());
    CHECK_FALSE(error->empty());
  }
}

TEST_CASE("sample allocates nothing") {
  constexpr std::size_t kVocab = 5000;
  std::mt19937 generator(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> logits(kVocab);
  for (float& logit : logits)
    logit = normal(generator);
  std::vector<TokenId> history(300);
  for (std::size_t i = 0; i < history.size(); ++i)
    history[i] = static_cast<TokenId>((i * 7919) % kVocab);
  const TokenId banned = 17;
  std::array<TokenLogprob, caflm::kMaxTopLogprobs> top{};

  std::vector<SamplingParams> settings(4);
  settings[0].temperature = 0.0f;
  settings[1].top_p = 0.99f;
  settings[1].min_p = 0.001f;
  settings[2].top_k = 40;
  settings[2].repetition_penalty = 1.1f;
  settings[2].penalty_last_n = -1;
  settings[3].frequency_penalty = 0.5f;
  settings[3].presence_penalty = 0.5f;
  for (SamplingParams& params : settings)
    params.top_logprobs = caflm::kMaxTopLogprobs;

  Sampler sampler(kVocab);
  std::vector<TokenId> chosen(settings.size() * 25);
  const std::size_t before = heap_allocations.load();
  for (std::size_t i = 0; i < chosen.size(); ++i)
    chosen[i] = sampler
                    .sample(logits.data(), settings[i % settings.size()], history.data(),
                            history.size(), i, &banned, 1, top.data())
                    .token;
  if (caflm::test::counts_allocations)
    CHECK(heap_allocations.load() == before);
  else
    WARN("allocations not counted under ThreadSanitizer");
  CHECK(std::find(chosen.begin(), chosen.end(), banned) == chosen.end());
}

TEST_CASE("the sampler counts NaN logits and never picks one; rows without NaN count none") {
  Sampler sampler(8);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  SamplingParams drawn;
  drawn.seed = 3;
  struct Row {
    std::vector<float> logits;
    std::uint32_t nans;
  };
  for (const Row& row : {Row{{0.1f, nan, 2.0f, nan, 0.3f, -1.0f, 0.0f, 1.0f}, 2},
                         Row{{nan, nan, nan, nan, nan, nan, nan, 0.5f}, 7},
                         Row{{0.1f, 0.2f, 2.0f, -inf, 0.3f, -1.0f, 0.0f, 1.0f}, 0},
                         Row{{0.1f, 0.2f, inf, 0.4f, 0.3f, -1.0f, 0.0f, 1.0f}, 0}}) {
    for (const SamplingParams& params : {greedy, drawn}) {
      SampleResult r =
          sampler.sample(row.logits.data(), params, nullptr, 0, 0, nullptr, 0, nullptr);
      CHECK(r.nan_logits == row.nans);
      CHECK_FALSE(std::isnan(row.logits[r.token]));
    }
  }
}

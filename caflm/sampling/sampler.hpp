#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "caflm/sampling/philox.hpp"
#include "caflm/sampling/sampling_params.hpp"

namespace caflm {

/// One entry of a top-logprobs list.
struct TokenLogprob {
  TokenId token;
  float logprob;
};

/// The chosen token and its log-probability under the log-softmax of the raw logits (before
/// penalties, bans, filters and temperature), as OpenAI reports it.
struct SampleResult {
  TokenId token;
  float logprob;
  /// Logits of the row that were NaN (sampled around as -infinity). A
  /// working model produces none: callers treat any as a broken model.
  std::uint32_t nan_logits = 0;
};

/// Chooses the next token from a row of logits. The chain follows llama.cpp's order:
///   penalties (repetition, presence, frequency) and bans -> top_k -> top_p -> min_p ->
///   temperature -> draw.
/// top_p and min_p therefore see probabilities at temperature 1, and each filter renormalizes over
/// what the previous one kept. The draw takes one uniform u = counter_uniform(seed, step) and walks
/// the kept tokens sorted by probability descending (ties: lower id first) until the cumulative
/// probability exceeds u, so a result depends only on (logits, params, history, step) and not on
/// the platform's sort, on earlier calls, or on the sampler instance.
///
/// Allocation-free after construction: every scratch buffer is sized to the vocabulary once. Not
/// thread-safe; use one sampler per thread.
class Sampler {
 public:
  explicit Sampler(std::size_t vocab_size);

  std::size_t vocab_size() const { return vocab_size_; }

  /// Samples one token.
  /// - logits: [vocab_size] raw logits, not modified. NaN counts as -infinity, and the result
  ///   says how many there were.
  /// - history: [history_len] prompt + generated tokens so far, read for penalties. Ids outside
  ///   the vocabulary are ignored here and in `banned`.
  /// - step: index of the token being generated (0 for the first one), the RNG position.
  /// - banned: [n_banned] tokens never chosen (eos under ignore_eos); at least one token must stay
  ///   allowed, otherwise std::invalid_argument.
  /// - top_logprobs_out: when params.top_logprobs > 0, receives the min(top_logprobs, vocab_size)
  ///   most likely tokens of the log-softmax of the raw logits (banned ones included), sorted
  ///   descending, ties by lower id. May be null when params.top_logprobs == 0.
  /// Temperature <= kGreedyTemperature picks the argmax after penalties and bans (ties: lowest id)
  /// without drawing.
  SampleResult sample(const float* logits, const SamplingParams& params, const TokenId* history,
                      std::size_t history_len, std::uint64_t step, const TokenId* banned,
                      std::size_t n_banned, TokenLogprob* top_logprobs_out);

  /// As sample(), with the draw's uniform number given instead of computed
  /// from (params.seed, step): what a backend that samples on its device
  /// receives (RaggedSampleSpec::uniform), so both draw alike.
  SampleResult sample_with_uniform(const float* logits, const SamplingParams& params,
                                   const TokenId* history, std::size_t history_len, float uniform,
                                   const TokenId* banned, std::size_t n_banned,
                                   TokenLogprob* top_logprobs_out);

  /// Temperatures at or below this are greedy.
  static constexpr float kGreedyTemperature = 1e-6f;

 private:
  struct Candidate {
    float logit;
    TokenId id;
  };

  /// Fills candidates_[0, returned) with the allowed tokens in id order and their penalized logits;
  /// best_ receives the index of the largest (lowest id on ties).
  std::size_t build_candidates(const float* logits, const SamplingParams& params,
                               const TokenId* history, std::size_t history_len,
                               const TokenId* banned, std::size_t n_banned);
  /// Top-k, top-p, min-p, temperature and the draw over candidates_[0, count).
  TokenId draw(std::size_t count, const SamplingParams& params, float uniform);
  /// Returns the size of the smallest most-likely prefix of candidates_[0, count) whose mass
  /// reaches top_p of the whole.
  std::size_t nucleus_size(std::size_t count, float max_logit, float top_p);
  /// Keeps, in order, the candidates whose logit is at least min_logit; returns how many.
  std::size_t keep_at_least(std::size_t count, float min_logit);
  /// Grows the sorted prefix of candidates_[0, count) to at least `wanted` entries, sorting only
  /// that far (nth_element, then sort the new part).
  void extend_sorted(std::size_t wanted, std::size_t count);
  void fill_top_logprobs(const float* logits, float log_normalizer, std::uint32_t k,
                         TokenLogprob* out) const;

  std::size_t vocab_size_;
  std::vector<Candidate> candidates_; // [vocab_size]
  std::vector<std::uint32_t>
      counts_; // [vocab_size] occurrences in the penalty window; 0 between calls
  std::vector<std::uint8_t> banned_; // [vocab_size] 1 = banned this call; 0 between calls
  std::size_t best_ = 0;             // index in candidates_ of the largest penalized logit
  std::size_t sorted_ = 0;           // candidates_[0, sorted_) are the largest, in descending order
};

} // namespace caflm

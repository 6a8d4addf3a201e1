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
  /// 0 unless the params asked for log-probabilities (wants_logprobs).
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
/// Cost: one max pass over the row (vectorised: logit_kernels.hpp), which is all a greedy call
/// takes besides its penalized and banned tokens; log-probabilities, when asked for, add one
/// exp-sum pass. A draw adds at most one more exp-sum pass per filter and sorts only the prefix of
/// the sorted order that its walks reach, one band of logits at a time, so its cost follows how
/// flat the distribution is rather than the vocabulary size.
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
  /// The most likely allowed token and its penalized logit.
  struct Best {
    TokenId id;
    float logit;
  };

  /// Marks banned_ and counts_ for this call; returns how many tokens stay allowed.
  std::size_t mark_bans_and_penalties(const TokenId* window, std::size_t window_len,
                                      const TokenId* banned, std::size_t n_banned);
  /// Writes penalized_ = the row with penalties applied and banned tokens at -infinity.
  void build_penalized_row(const float* logits, const SamplingParams& params, const TokenId* window,
                           std::size_t window_len, const TokenId* banned, std::size_t n_banned);
  /// The allowed token of the largest logit of row (penalized_, or the logits when the call has
  /// no bans and no penalties), lowest id on ties.
  Best allowed_best(const float* row) const;
  /// Top-k, top-p, min-p, temperature and the draw over the `count` allowed tokens of row_.
  /// row_mass: exp_sum(row_, vocab_size, max_logit, 1, -infinity) when known, else negative.
  TokenId draw(std::size_t count, float max_logit, const SamplingParams& params, float uniform,
               double row_mass);
  /// probabilities_[i] = std::exp((sorted_logits_[i] - max_logit) * scale) for i in
  /// [begin, end); returns end.
  std::size_t compute_probabilities(std::size_t begin, std::size_t end, float max_logit,
                                    float scale);
  /// Grows the sorted prefix of the allowed tokens (logit descending, ids ascending on ties) to
  /// at least min(wanted, limit) entries.
  void extend_sorted(std::size_t wanted, std::size_t limit);
  /// Appends to the sorted prefix the allowed tokens of the next band of logits below
  /// band_low_, sorted, the band sized from a sample of the row to bring the prefix to about
  /// `wanted` entries.
  void add_band(std::size_t wanted);
  /// Sorts band_keys_[0, count) ascending.
  void sort_keys(std::size_t count);
  void fill_top_logprobs(const float* logits, float log_normalizer, std::uint32_t k,
                         TokenLogprob* out) const;

  std::size_t vocab_size_;
  // Scratch, sized to the vocabulary once.
  std::vector<float> sorted_logits_;         // [vocab_size] see draw()
  std::vector<TokenId> sorted_ids_;          // [vocab_size]
  std::vector<float> probabilities_;         // [vocab_size] see compute_probabilities()
  std::vector<std::uint32_t> band_ids_;      // [vocab_size] the ids of one band, ascending
  std::vector<std::uint64_t> band_keys_;     // [vocab_size] see add_band()
  std::vector<std::uint64_t> radix_scratch_; // [vocab_size]
  std::vector<float> penalized_;             // [vocab_size] see build_penalized_row()
  std::vector<float> sample_;                // [min(vocab_size, 256)] see add_band()
  std::vector<std::uint32_t>
      counts_; // [vocab_size] occurrences in the penalty window; 0 between calls
  std::vector<std::uint8_t> banned_; // [vocab_size] 1 = banned this call; 0 between calls

  // The state of one draw over row_: sorted_logits_/sorted_ids_[0, sorted_) are the most likely
  // allowed tokens in order, down to band_low_ included; the rest lie below it.
  const float* row_ = nullptr; // [vocab_size]
  std::size_t sorted_ = 0;
  float band_low_ = 0.0f;
  std::size_t sample_size_ = 0; // 0 = not taken yet this draw
};

} // namespace caflm

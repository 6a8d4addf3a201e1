#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace caflm {

/// A token id of the model's vocabulary. The layers beside this one (kv/, text/) declare the same
/// alias; redeclaring an identical alias is legal C++, so their headers mix in any order.
using TokenId = std::uint32_t;

/// How one request chooses its tokens. Defaults are OpenAI's, except max_tokens.
struct SamplingParams {
  std::uint32_t max_tokens = 16;
  /// 0 (or anything <= 1e-6) = greedy argmax.
  float temperature = 1.0f;
  /// 0 or negative = disabled.
  std::int32_t top_k = 0;
  float top_p = 1.0f;
  /// Keeps tokens whose probability is at least min_p times the most likely token's.
  float min_p = 0.0f;
  /// llama.cpp semantics: a seen token's logit becomes logit / p when positive, logit * p
  /// otherwise.
  float repetition_penalty = 1.0f;
  /// OpenAI semantics: subtracted once from a seen token's logit.
  float presence_penalty = 0.0f;
  /// OpenAI semantics: subtracted once per occurrence from a seen token's logit.
  float frequency_penalty = 0.0f;
  /// Penalty window over prompt + generated tokens: the last n; -1 = whole context, 0 = disabled.
  std::int32_t penalty_last_n = 64;
  /// The draws' seed. Unset: a random one is drawn (random_seed) and
  /// recorded in the request before the first token, so that a request
  /// resumed elsewhere after a failure continues with the same draws.
  std::optional<std::uint64_t> seed;
  /// Stop strings; the engine matches them on detokenized text.
  std::vector<std::string> stop;
  /// Keep generating past end-of-sequence: the engine then bans eos in the sampler.
  bool ignore_eos = false;
  /// Whether each chosen token's log-probability is computed and reported (OpenAI's `logprobs`).
  /// Without it a greedy step costs one pass over the logits, not three, and the token's
  /// reported logprob is 0. top_logprobs > 0 implies it.
  bool logprobs = false;
  /// Number of most likely tokens to report with each chosen one, 0..20.
  std::uint32_t top_logprobs = 0;
};

/// Whether `params` asks for log-probabilities: its chosen tokens' or the top ones.
inline bool wants_logprobs(const SamplingParams& params) {
  return params.logprobs || params.top_logprobs > 0;
}

/// The upper bound of SamplingParams::top_logprobs (OpenAI's).
inline constexpr std::uint32_t kMaxTopLogprobs = 20;

/// A seed from the operating system's entropy source, for requests that
/// set none.
std::uint64_t random_seed();

/// Returns why `params` is unusable (out-of-range or NaN values), or std::nullopt when valid.
std::optional<std::string> validate(const SamplingParams& params);

} // namespace caflm

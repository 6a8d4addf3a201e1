#include "caflm/sampling/sampling_params.hpp"

#include <cmath>
#include <random>

namespace caflm {

std::uint64_t random_seed() {
  // The operating system's entropy once per thread, then a fast generator:
  // a std::random_device per request cost 13% of a null-backend engine's
  // time. Seeds must differ between requests, runs and processes; they need
  // not be secret.
  thread_local std::mt19937_64 generator{[] {
    std::random_device entropy;
    return (std::uint64_t{entropy()} << 32) | entropy();
  }()};
  return generator();
}

std::optional<std::string> validate(const SamplingParams& params) {
  // Comparisons are written so that NaN fails them: !(x >= lo) is true for NaN.
  if (params.max_tokens == 0)
    return "max_tokens must be at least 1";
  if (!(params.temperature >= 0.0f && params.temperature <= 100.0f))
    return "temperature must be in [0, 100]";
  if (params.top_k < -1)
    return "top_k must be -1 or 0 (disabled) or positive";
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f))
    return "top_p must be in (0, 1]";
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f))
    return "min_p must be in [0, 1]";
  if (!(params.repetition_penalty > 0.0f && std::isfinite(params.repetition_penalty)))
    return "repetition_penalty must be positive and finite";
  // OpenAI's range for both.
  if (!(params.presence_penalty >= -2.0f && params.presence_penalty <= 2.0f))
    return "presence_penalty must be in [-2, 2]";
  if (!(params.frequency_penalty >= -2.0f && params.frequency_penalty <= 2.0f))
    return "frequency_penalty must be in [-2, 2]";
  if (params.penalty_last_n < -1)
    return "penalty_last_n must be -1 (whole context), 0 (disabled) or positive";
  if (params.top_logprobs > kMaxTopLogprobs)
    return "top_logprobs must be at most " + std::to_string(kMaxTopLogprobs);
  for (const std::string& stop : params.stop) {
    // An empty stop string would match before the first token.
    if (stop.empty())
      return "stop strings must not be empty";
  }
  return std::nullopt;
}

} // namespace caflm

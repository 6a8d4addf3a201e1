#include "caflm/engine/request_limits.hpp"

#include <algorithm>

namespace caflm {

std::optional<std::string> validate(const RequestLimits& limits) {
  // Zero would refuse every text prompt: no operator means that.
  if (limits.max_prompt_bytes == 0)
    return "the request limit on prompt bytes must be at least 1";
  if (limits.max_lifetime.count() < 0)
    return "the request lifetime cannot be negative (0: unbounded)";
  return std::nullopt;
}

std::uint32_t max_tokens_bound(const RequestLimits& limits, std::uint32_t max_context) {
  return limits.max_tokens == 0 ? max_context : std::min(limits.max_tokens, max_context);
}

std::optional<std::string> check_prompt_bytes(const RequestLimits& limits, std::uint64_t bytes) {
  if (bytes > limits.max_prompt_bytes)
    return "the prompt holds " + std::to_string(bytes) + " bytes; at most " +
           std::to_string(limits.max_prompt_bytes);
  return std::nullopt;
}

std::optional<std::string> check_params(const RequestLimits& limits, const SamplingParams& params,
                                        std::uint32_t max_context) {
  if (params.stop.size() > limits.max_stop_strings)
    return "stop holds " + std::to_string(params.stop.size()) + " strings; at most " +
           std::to_string(limits.max_stop_strings);
  for (std::size_t i = 0; i < params.stop.size(); ++i)
    if (params.stop[i].size() > limits.max_stop_bytes)
      return "stop[" + std::to_string(i) + "] holds " + std::to_string(params.stop[i].size()) +
             " bytes; at most " + std::to_string(limits.max_stop_bytes);
  const std::uint32_t bound = max_tokens_bound(limits, max_context);
  if (params.max_tokens != kMaxTokensUntilContextFull && params.max_tokens > bound)
    return "max_tokens is " + std::to_string(params.max_tokens) + "; at most " +
           std::to_string(bound) +
           (bound == max_context ? " (the engine's context)" : std::string());
  return std::nullopt;
}

std::optional<std::string> check_prompt_tokens(const RequestLimits& limits,
                                               std::size_t prompt_tokens,
                                               std::size_t generated_tokens) {
  if (limits.max_prompt_tokens == 0)
    return std::nullopt;
  const std::size_t length = prompt_tokens + generated_tokens;
  if (length <= limits.max_prompt_tokens)
    return std::nullopt;
  return (generated_tokens == 0
              ? "the prompt holds " + std::to_string(length)
              : "the prompt and the tokens already generated hold " + std::to_string(length)) +
         " tokens; at most " + std::to_string(limits.max_prompt_tokens);
}

std::string lifetime_exceeded_message(const RequestLimits& limits) {
  return "the request outlived the engine's request lifetime of " +
         std::to_string(limits.max_lifetime.count()) + " s";
}

} // namespace caflm

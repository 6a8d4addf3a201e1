#pragma once

// What one request may ask of an engine. Every request that enters an
// engine is held to these bounds, whoever sent it: a user through the HTTP
// server or a request file, or a peer node over the network. The server and
// the request file reader check the same constants early, for errors in
// their own formats; the engine core checks them all at admission, with
// messages that name the limit, and the engine itself enforces those on
// parameters and tokens in InferenceEngine::add and the lifetime in every
// step.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "caflm/sampling/sampling_params.hpp"

namespace caflm {

/// Default bound of a text prompt, in bytes (before tokenization): 4 MiB,
/// about a million tokens of English, more than any context holds.
inline constexpr std::uint64_t kDefaultMaxPromptBytes = std::uint64_t{4} << 20;

/// Default bound of the number of stop strings of one request.
inline constexpr std::uint32_t kDefaultMaxStopStrings = 16;

/// Default bound of one stop string, in bytes.
inline constexpr std::uint32_t kDefaultMaxStopBytes = 256;

/// Default lifetime of a request: an hour from its arrival at the engine.
inline constexpr std::chrono::seconds kDefaultMaxLifetime{3600};

/// SamplingParams::max_tokens of a request that generates until the context
/// is full (OpenAI's chat default when max_tokens is absent). Every engine
/// accepts it whatever its max_tokens limit, since the context bounds it.
inline constexpr std::uint32_t kMaxTokensUntilContextFull = 0xFFFFFFFFu;

/// Bounds on one request; an engine refuses a request beyond them (and ends
/// one that outlives `max_lifetime`) with an error that names the bound.
/// Zero means "no bound of its own" where a field says so.
struct RequestLimits {
  /// Bytes of a text prompt, checked before it is tokenized.
  std::uint64_t max_prompt_bytes = kDefaultMaxPromptBytes;
  /// Tokens of a prompt (with the tokens a resumed request already
  /// generated); 0: only the engine's context bounds it. The context always
  /// does: a sequence must leave room for one more token.
  std::uint32_t max_prompt_tokens = 0;
  /// SamplingParams::max_tokens; 0: the engine's context. Never more than
  /// the context, except kMaxTokensUntilContextFull.
  std::uint32_t max_tokens = 0;
  /// Stop strings of one request, and bytes of each.
  std::uint32_t max_stop_strings = kDefaultMaxStopStrings;
  std::uint32_t max_stop_bytes = kDefaultMaxStopBytes;
  /// Time from a request's arrival (GenerationRequest::arrival) after which
  /// the engine ends it with EngineFault::LifetimeExceeded; 0: unbounded.
  /// A request resumed on another engine starts a new lifetime there.
  std::chrono::seconds max_lifetime = kDefaultMaxLifetime;
};

/// Why `limits` cannot work (a zero that refuses every text prompt, a
/// negative lifetime), or nullopt.
std::optional<std::string> validate(const RequestLimits& limits);

/// The greatest max_tokens an engine with `max_context` accepts (besides
/// kMaxTokensUntilContextFull).
std::uint32_t max_tokens_bound(const RequestLimits& limits, std::uint32_t max_context);

/// Why a text prompt of `bytes` exceeds `limits`, or nullopt.
std::optional<std::string> check_prompt_bytes(const RequestLimits& limits, std::uint64_t bytes);

/// Why `params` exceed `limits` on an engine with `max_context` (stop
/// strings, max_tokens), or nullopt. Ranges of single values are
/// validate(SamplingParams)'s to check.
std::optional<std::string> check_params(const RequestLimits& limits, const SamplingParams& params,
                                        std::uint32_t max_context);

/// Why a prompt of `prompt_tokens` tokens followed by `generated_tokens`
/// already generated exceeds the limit of `limits` on prompt tokens, or
/// nullopt. The context's own bound is the caller's to check (a different
/// error: the prompt does not fit).
std::optional<std::string> check_prompt_tokens(const RequestLimits& limits,
                                               std::size_t prompt_tokens,
                                               std::size_t generated_tokens);

/// The message of a request that outlived `limits.max_lifetime`.
std::string lifetime_exceeded_message(const RequestLimits& limits);

} // namespace caflm

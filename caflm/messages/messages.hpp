#pragma once

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "caflm/engine/inference_engine.hpp"
#include "caflm/sampling/sampling_params.hpp"

// Request identity
// ----------------
// A request is named by three things together: its sink (the actor its
// tokens go to), the id the sink's owner gave it, and its attempt. Whoever
// owns a sink chooses its ids, and they need only be unique among that
// sink's requests: engines key requests by (sink, id, attempt) and never
// compare ids of different sinks. So two clients (actors of one process,
// two processes, two nodes) never collide, however they number their
// requests, because their sinks differ; and a request that is resubmitted
// (after an admission timeout, a failover or backpressure) is a new attempt,
// which never collides with an earlier attempt that an engine still holds or
// is still cancelling.
//
// A RequestActor is the sink of its request for every engine it tries, and
// numbers the attempts; a RemoteEngineCoreActor proxy is the sink of every
// request it forwards and gives each one an id of its own on the remote
// engine. Every chunk and error names its request's id and attempt, and the
// index of its first token, so a receiver drops what is stale or repeated.

namespace caflm {

/// Why a request failed. Crosses the network, so codes are stable numbers.
enum class InferenceErrorCode : std::uint8_t {
  /// The engine's waiting queue is full; try again later or elsewhere.
  backpressure = 1,
  /// The request is malformed (empty prompt, absurd sampling values, ...).
  bad_request = 2,
  /// The prompt does not fit in the engine's context or KV cache.
  context_length_exceeded = 3,
  /// The request was cancelled.
  cancelled = 4,
  /// No engine can serve the request now (none known, or it was lost).
  engine_unavailable = 5,
  /// A fault that another engine would meet too (a model that produces NaN).
  internal = 6,
  /// The engine failed while serving the request (a failed step, a device
  /// error): another engine can serve it.
  engine_fault = 7,
  /// The request's deadline passed before it finished.
  deadline_exceeded = 8,
};

const char* to_string(InferenceErrorCode code);

/// Whether a request that failed with `code` may succeed elsewhere or later:
/// backpressure, engine_unavailable and engine_fault. The others are final:
/// the request's own fault, or its client's decision.
bool retryable(InferenceErrorCode code);

/// A failed request, sent to its token sink or returned in an admission.
struct InferenceError {
  std::uint64_t request_id = 0;
  std::uint32_t attempt = 0;
  InferenceErrorCode code = InferenceErrorCode::internal;
  std::string message;
};

/// A generation request as it travels between actors.
struct GenerateRequest {
  /// The request's id for its sink (see "Request identity" above).
  std::uint64_t id = 0;
  /// Which submission of the request this is, 0 first.
  std::uint32_t attempt = 0;
  /// The prompt as text (tokenized by the engine, BOS as the model says)...
  std::string prompt;
  /// ... or as token ids, used when not empty.
  std::vector<TokenId> prompt_tokens;
  SamplingParams params;
  /// Higher runs first; equal priorities run in arrival order.
  std::int32_t priority = 0;
  /// Tokens already generated (and streamed) by an engine that failed; the
  /// next engine continues after them.
  std::vector<TokenId> generated;
  /// Nonzero for the parallel samples of one prompt (an API request's `n`
  /// choices): an engine computes their shared prompt once and forks it
  /// copy-on-write, and a coordinator sends them to one engine.
  std::uint64_t prefill_group = 0;
};

/// Token counts reported with a request's last chunk.
struct Usage {
  std::uint32_t prompt_tokens = 0;
  std::uint32_t completion_tokens = 0;
  std::uint32_t cached_prompt_tokens = 0;
};

/// Tokens of one request produced in one step.
struct TokenChunk {
  std::uint64_t request_id = 0;
  std::uint32_t attempt = 0;
  /// Index of `tokens[0]` among all the request's generated tokens, those
  /// of earlier attempts included: a receiver that already holds it drops it.
  std::uint32_t first_token = 0;
  /// The prompt's token ids, on a request's first chunk from an engine.
  std::vector<TokenId> prompt_tokens;
  std::vector<TokenId> tokens;
  /// Text completed by these tokens (whole UTF-8 characters, stop text held).
  std::string text;
  /// Log-probability of each token when the request asked for them
  /// (wants_logprobs), else empty.
  std::vector<float> logprobs;
  /// For each token, the most likely alternatives, when asked for.
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  /// None until the last chunk.
  FinishReason finish = FinishReason::None;
  Usage usage;
  /// On a request's first chunk from an engine: seconds it waited there
  /// before its first step; negative on the others.
  float queue_seconds = -1.0f;
  /// Set by the request actor on the chunks it forwards to its user: the id
  /// of the engine actor, in the request actor's process, that produced
  /// them (the local proxy for a remote worker); 0 before that.
  std::uint64_t engine_actor_id = 0;
};

/// Every chunk one step produced for one destination: a request's sink, or
/// a remote proxy that fans the chunks out on its own node.
struct TokenBatch {
  std::vector<TokenChunk> chunks;
};

/// The answer to `add`: accepted, or refused with a reason.
struct Admission {
  std::uint64_t request_id = 0;
  std::uint32_t attempt = 0;
  bool accepted = false;
  InferenceError error;

  /// Request `id`'s `attempt` is taken.
  static Admission accept(std::uint64_t id, std::uint32_t attempt) {
    return Admission{id, attempt, true, InferenceError{}};
  }
  /// Request `id`'s `attempt` is refused with `code`, saying why.
  static Admission refuse(std::uint64_t id, std::uint32_t attempt, InferenceErrorCode code,
                          std::string message) {
    return Admission{id, attempt, false, InferenceError{id, attempt, code, std::move(message)}};
  }
};

// -- serialization (CAF 0.17 inspect) ----------------------------------------

// Floating-point fields travel as their IEEE-754 bit patterns. CAF 0.17 writes
// float and double through detail::pack754, whose normalising loop never ends
// for an infinity (it halves it forever): an actor saving a -inf logprob, or
// a value a peer sent that loads as infinity, would hang. The bit pattern is
// exact for every value, NaN and subnormals included. Printing (CAF's
// stringification, whose result is void) still shows the number.

/// A float or double field, inspected as its bit pattern.
template <class Float>
struct FloatBits {
  Float& value;
};

/// A vector of float or double, inspected as a vector of bit patterns.
template <class Float>
struct FloatVectorBits {
  std::vector<Float>& values;
};

template <class Float>
FloatBits<Float> float_bits(Float& value) {
  return {value};
}

template <class Float>
FloatVectorBits<Float> float_bits(std::vector<Float>& values) {
  return {values};
}

/// The unsigned integer of a float's size.
template <class Float>
using FloatBitsOf = std::conditional_t<sizeof(Float) == 4, std::uint32_t, std::uint64_t>;

template <class Inspector, class Float>
typename Inspector::result_type inspect(Inspector& f, FloatBits<Float>& x) {
  if constexpr (std::is_void_v<typename Inspector::result_type>) {
    return f(x.value);
  } else {
    static_assert(sizeof(FloatBitsOf<Float>) == sizeof(Float));
    FloatBitsOf<Float> bits;
    std::memcpy(&bits, &x.value, sizeof bits);
    auto restore = caf::meta::load_callback([&x, &bits]() -> caf::error {
      std::memcpy(&x.value, &bits, sizeof bits);
      return caf::none;
    });
    return f(bits, restore);
  }
}

template <class Inspector, class Float>
typename Inspector::result_type inspect(Inspector& f, FloatVectorBits<Float>& x) {
  if constexpr (std::is_void_v<typename Inspector::result_type>) {
    return f(x.values);
  } else {
    std::vector<FloatBitsOf<Float>> bits(x.values.size());
    if (!bits.empty()) {
      std::memcpy(bits.data(), x.values.data(), bits.size() * sizeof(Float));
    }
    auto restore = caf::meta::load_callback([&x, &bits]() -> caf::error {
      x.values.resize(bits.size());
      if (!bits.empty()) {
        std::memcpy(x.values.data(), bits.data(), bits.size() * sizeof(Float));
      }
      return caf::none;
    });
    return f(bits, restore);
  }
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SamplingParams& x) {
  // CAF 0.17 cannot serialize std::optional: the seed travels as a flag and
  // a value, put back together after loading.
  bool seeded = x.seed.has_value();
  std::uint64_t seed = x.seed.value_or(0);
  auto restore_seed = caf::meta::load_callback([&x, &seeded, &seed]() -> caf::error {
    x.seed = seeded ? std::optional<std::uint64_t>(seed) : std::nullopt;
    return caf::none;
  });
  return f(caf::meta::type_name("caflm::SamplingParams"), x.max_tokens, float_bits(x.temperature),
           x.top_k, float_bits(x.top_p), float_bits(x.min_p), float_bits(x.repetition_penalty),
           float_bits(x.presence_penalty), float_bits(x.frequency_penalty), x.penalty_last_n,
           seeded, seed, x.stop, x.ignore_eos, x.logprobs, x.top_logprobs, restore_seed);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TokenLogprob& x) {
  return f(caf::meta::type_name("caflm::TokenLogprob"), x.token, float_bits(x.logprob));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, InferenceError& x) {
  return f(caf::meta::type_name("caflm::InferenceError"), x.request_id, x.attempt, x.code,
           x.message);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, GenerateRequest& x) {
  return f(caf::meta::type_name("caflm::GenerateRequest"), x.id, x.attempt, x.prompt,
           x.prompt_tokens, x.params, x.priority, x.generated, x.prefill_group);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Usage& x) {
  return f(caf::meta::type_name("caflm::Usage"), x.prompt_tokens, x.completion_tokens,
           x.cached_prompt_tokens);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TokenChunk& x) {
  return f(caf::meta::type_name("caflm::TokenChunk"), x.request_id, x.attempt, x.first_token,
           x.prompt_tokens, x.tokens, x.text, float_bits(x.logprobs), x.top_logprobs, x.finish,
           x.usage, float_bits(x.queue_seconds), x.engine_actor_id);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TokenBatch& x) {
  return f(caf::meta::type_name("caflm::TokenBatch"), x.chunks);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Admission& x) {
  return f(caf::meta::type_name("caflm::Admission"), x.request_id, x.attempt, x.accepted, x.error);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LoadReport& x) {
  return f(caf::meta::type_name("caflm::LoadReport"), x.running, x.waiting, x.free_blocks,
           x.total_blocks, x.cached_blocks, float_bits(x.prefix_hit_rate), float_bits(x.score),
           x.preemptions, x.prompt_tokens, x.generated_tokens, x.prefix_queried_tokens,
           x.prefix_hit_tokens, x.computed_tokens);
}

} // namespace caflm

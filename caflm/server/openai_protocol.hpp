#pragma once

// The OpenAI wire format of `caflm serve`: request parsing and validation,
// response and stream-chunk JSON, SSE framing and error bodies. Pure
// functions over nlohmann::json; no transport, no actors, so that the rules
// are tested without a server.

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "caflm/engine/inference_engine.hpp"
#include "caflm/engine/request_limits.hpp"
#include "caflm/sampling/sampling_params.hpp"
#include "caflm/text/chat_template.hpp"

namespace caflm::server {

// -- errors -------------------------------------------------------------------

/// A request the API refuses, as OpenAI reports it: an HTTP status and the
/// body {"error": {"message", "type", "param", "code"}} (see error_body).
struct ApiError : std::exception {
  ApiError(int status, std::string message, std::string type = "invalid_request_error",
           std::string param = {}, std::string code = {});

  const char* what() const noexcept override { return message.c_str(); }

  int status;
  std::string message;
  std::string type;
  /// The request field at fault ("temperature", "messages[1].content"); empty: null.
  std::string param;
  /// A machine-readable reason ("invalid_api_key"); empty: null.
  std::string code;
};

/// 400 invalid_request_error, naming the field at fault.
ApiError invalid_request(std::string message, std::string param = {}, std::string code = {});

/// 400 invalid_request_error with code "context_length_exceeded": the prompt
/// (plus the tokens it asks for, if the caller counts them) does not fit.
/// `param` is "messages" or "prompt".
ApiError context_length_exceeded(std::uint64_t prompt_tokens, std::uint64_t context_length,
                                 std::string param);

/// 401 authentication_error, code "invalid_api_key".
ApiError invalid_api_key();

/// 404 not_found_error, code "model_not_found".
ApiError model_not_found(std::string_view model);

/// 404 not_found_error for an unknown path or method.
ApiError path_not_found(std::string_view method, std::string_view path);

/// 429 rate_limit_error, code "rate_limit_exceeded" (every engine's queue is
/// full); the caller adds the Retry-After header.
ApiError rate_limit_exceeded(std::string message = "The server is at capacity; retry later.");

/// 503 service_unavailable_error, code "overloaded" (no engine available).
ApiError service_unavailable(std::string message = "No engine is available to serve the request.");

/// 500 server_error, code "internal_error" (the engine failed mid-request).
ApiError internal_error(std::string message);

/// {"error": {"message", "type", "param", "code"}}; empty param and code are null.
nlohmann::ordered_json error_body(const ApiError& error);

// -- requests -----------------------------------------------------------------

/// The greatest `n` a request may ask for.
inline constexpr std::uint32_t kMaxChoices = 128;

/// The greatest number of stop strings (OpenAI's limit, stricter than an
/// engine's).
inline constexpr std::size_t kMaxStopStrings = 4;
static_assert(kMaxStopStrings <= kDefaultMaxStopStrings,
              "the API must not accept more stop strings than an engine");

/// The greatest length of one stop string, in bytes: an engine's.
inline constexpr std::size_t kMaxStopBytes = kDefaultMaxStopBytes;

/// The greatest prompt, in bytes: an engine's. A completion's text prompt
/// is held to it, and so is a chat's message content, all messages together
/// (its rendered prompt is longer still, and the engine checks that).
inline constexpr std::uint64_t kMaxPromptBytes = kDefaultMaxPromptBytes;

/// The greatest `logprobs` of /v1/completions (OpenAI's limit).
inline constexpr std::uint32_t kMaxCompletionLogprobs = 5;

/// The greatest repetition_penalty accepted: beyond it every seen token is
/// effectively banned, which no caller means.
inline constexpr float kMaxRepetitionPenalty = 10.0f;

/// SamplingParams::max_tokens of a request that set none where the default is
/// "until the context is full": the engine ends it with "length" then.
inline constexpr std::uint32_t kUnboundedMaxTokens = kMaxTokensUntilContextFull;

/// /v1/completions' default max_tokens (OpenAI's documented default).
inline constexpr std::uint32_t kDefaultCompletionMaxTokens = 16;

/// The fields both endpoints share.
struct ParsedCommon {
  /// `model`; empty when the client gave none.
  std::string model;
  /// Everything that steers sampling, validated with caflm::validate. Defaults
  /// are OpenAI's (temperature 1, top_p 1); max_tokens: see max_tokens_given.
  SamplingParams sampling;
  /// Whether the client set max_tokens (or max_completion_tokens). When not,
  /// sampling.max_tokens holds the endpoint's default: kUnboundedMaxTokens for
  /// chat (OpenAI: until the context is full), kDefaultCompletionMaxTokens for
  /// completions.
  bool max_tokens_given = false;
  /// Choices per prompt, 1..kMaxChoices.
  std::uint32_t n = 1;
  bool stream = false;
  /// stream_options.include_usage (only with stream).
  bool include_usage = false;
  /// Whether each choice reports logprobs; sampling.top_logprobs holds how
  /// many alternatives per token.
  bool logprobs = false;
  /// `user`, for logs.
  std::string user;
  /// `priority` (vLLM's extension): lower is served first; 0 when absent.
  std::int32_t priority = 0;
};

/// A POST /v1/chat/completions body.
struct ParsedChatRequest : ParsedCommon {
  /// The conversation, in order. Content given as text parts is joined with
  /// "\n"; an assistant message with null content (tool calls) has "";
  /// role "developer" becomes "system" (templates know the latter).
  std::vector<ChatMessage> messages;
};

/// One prompt of a /v1/completions body: text, or token ids.
struct CompletionPrompt {
  /// Set when the client sent a string.
  std::string text;
  /// Set when the client sent token ids (then `text` is empty and unused).
  std::vector<TokenId> tokens;
  bool is_tokens = false;
};

/// A POST /v1/completions body.
struct ParsedCompletionRequest : ParsedCommon {
  /// One or more prompts; each gets `n` choices, indexed prompt * n + choice.
  std::vector<CompletionPrompt> prompts;
  /// `echo`: the prompt text precedes each choice's text.
  bool echo = false;
};

/// Parses and validates a chat completion body. Throws ApiError (400) naming
/// the field at fault for invalid JSON, a body that is no object, missing or
/// ill-typed required fields, and wrong types or out-of-range values of the
/// fields it knows. Unknown fields are ignored; null means absent.
ParsedChatRequest parse_chat_request(const std::string& body);

/// Parses and validates a (legacy) completion body; as parse_chat_request.
ParsedCompletionRequest parse_completion_request(const std::string& body);

// -- responses ----------------------------------------------------------------

/// One of the most likely tokens at a step.
struct TopLogprob {
  /// The token's text: raw bytes, possibly a partial UTF-8 sequence.
  std::string text;
  float logprob = 0.0f;
};

/// A generated token as the logprobs of both endpoints report it.
struct TokenInfo {
  /// The token's text: raw bytes, possibly a partial UTF-8 sequence.
  std::string text;
  float logprob = 0.0f;
  /// The most likely tokens at this step, most likely first.
  std::vector<TopLogprob> top;
};

/// Token counts of one request (all its choices).
struct Usage {
  std::uint64_t prompt_tokens = 0;
  std::uint64_t completion_tokens = 0;
  /// Prompt tokens served from the prefix cache.
  std::uint64_t cached_tokens = 0;
};

/// What every response object and chunk of one request repeats.
struct ResponseMeta {
  /// "chatcmpl-..." or "cmpl-..." (see new_response_id); one per request.
  std::string id;
  /// Unix seconds at the request's start.
  std::int64_t created = 0;
  std::string model;
  /// Omitted when empty.
  std::string system_fingerprint;
  /// Streaming only: every chunk then carries "usage": null, as OpenAI's do
  /// when stream_options.include_usage is set, and the last one the usage.
  bool include_usage = false;
};

/// One finished choice of a non-streamed response.
struct ChoiceResult {
  std::uint32_t index = 0;
  std::string text;
  FinishReason finish = FinishReason::Stop;
  /// Per generated token; reported only when the request asked for logprobs.
  std::vector<TokenInfo> tokens;
};

/// `prefix` followed by 24 random alphanumerics ("chatcmpl-", "cmpl-").
std::string new_response_id(std::string_view prefix);

/// The number of Unicode code points in `text` (bytes that are no UTF-8
/// continuation byte): completions' text_offset unit.
std::uint64_t utf8_length(std::string_view text);

/// Unix seconds now.
std::int64_t unix_time_now();

/// OpenAI's finish_reason: null for FinishReason::None, else to_string.
nlohmann::ordered_json finish_reason_json(FinishReason finish);

/// {"prompt_tokens", "completion_tokens", "total_tokens",
///  "prompt_tokens_details": {"cached_tokens"}}.
nlohmann::ordered_json usage_json(const Usage& usage);

/// Chat's logprobs object: {"content": [{"token", "logprob", "bytes",
/// "top_logprobs": [{"token", "logprob", "bytes"}]}]}.
nlohmann::ordered_json chat_logprobs_json(const std::vector<TokenInfo>& tokens);

/// Completions' logprobs object: {"tokens", "token_logprobs", "top_logprobs"
/// ([{text: logprob}] or null without alternatives), "text_offset"}.
/// Offsets count Unicode code points from `text_offset_base` (the length of
/// the text before these tokens: the echoed prompt, earlier chunks).
nlohmann::ordered_json completion_logprobs_json(const std::vector<TokenInfo>& tokens, bool with_top,
                                                std::uint64_t text_offset_base = 0);

/// A non-streamed `chat.completion`; `with_logprobs`: each choice's
/// "logprobs" is chat_logprobs_json of its tokens, else null.
nlohmann::ordered_json chat_completion_response(const ResponseMeta& meta,
                                                const std::vector<ChoiceResult>& choices,
                                                const Usage& usage, bool with_logprobs);

/// A non-streamed `text_completion`; `top_logprobs`: the request's count,
/// logprobs: completion_logprobs_json (offsets from 0; an echoed prompt is
/// the caller's to count in via `text_offset_base`).
nlohmann::ordered_json text_completion_response(const ResponseMeta& meta,
                                                const std::vector<ChoiceResult>& choices,
                                                const Usage& usage, bool with_logprobs,
                                                bool with_top, std::uint64_t text_offset_base = 0);

/// The first `chat.completion.chunk` of choice `index`: delta {"role":
/// "assistant", "content": ""}.
nlohmann::ordered_json chat_role_chunk(const ResponseMeta& meta, std::uint32_t index);

/// A `chat.completion.chunk` with delta {"content": text}; `logprobs` null:
/// "logprobs": null, else chat_logprobs_json of the tokens behind the text.
/// `finish` other than None closes the choice in the same chunk.
nlohmann::ordered_json chat_content_chunk(const ResponseMeta& meta, std::uint32_t index,
                                          std::string_view text,
                                          const std::vector<TokenInfo>* logprobs,
                                          FinishReason finish = FinishReason::None);

/// The closing `chat.completion.chunk` of choice `index`: empty delta, finish_reason set.
nlohmann::ordered_json chat_finish_chunk(const ResponseMeta& meta, std::uint32_t index,
                                         FinishReason finish);

/// A `text_completion` chunk of choice `index`: its new text, its tokens'
/// logprobs (null pointer: null) with offsets from `text_offset_base`, and
/// finish_reason (null for None).
nlohmann::ordered_json completion_chunk(const ResponseMeta& meta, std::uint32_t index,
                                        std::string_view text,
                                        const std::vector<TokenInfo>* logprobs, bool with_top,
                                        std::uint64_t text_offset_base = 0,
                                        FinishReason finish = FinishReason::None);

/// The final usage chunk of a stream ("choices": [], "usage" set), of
/// `object` "chat.completion.chunk" or "text_completion".
nlohmann::ordered_json usage_chunk(const ResponseMeta& meta, std::string_view object,
                                   const Usage& usage);

/// GET /v1/models: {"object": "list", "data": [{"id", "object": "model",
/// "created", "owned_by"}]}.
nlohmann::ordered_json models_list(const std::vector<std::string>& names, std::int64_t created,
                                   std::string_view owned_by = "caflm");

// -- serialization ------------------------------------------------------------

/// Compact JSON that never throws: invalid UTF-8 in strings becomes U+FFFD.
std::string dump_json(const nlohmann::ordered_json& value);

/// One Server-Sent Event: "data: <json>\n\n".
std::string sse_event(const nlohmann::ordered_json& value);

/// The stream's end: "data: [DONE]\n\n".
std::string sse_done();

} // namespace caflm::server

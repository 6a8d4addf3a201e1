#include "caflm/server/openai_protocol.hpp"

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <utility>

namespace caflm::server {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// -- reading fields -----------------------------------------------------------

/// JSON's name for the type of `value`, for messages ("expected a number, got a string").
const char* type_name(const json& value) {
  switch (value.type()) {
  case json::value_t::null:
    return "null";
  case json::value_t::boolean:
    return "a boolean";
  case json::value_t::number_integer:
  case json::value_t::number_unsigned:
    return "an integer";
  case json::value_t::number_float:
    return "a number";
  case json::value_t::string:
    return "a string";
  case json::value_t::array:
    return "an array";
  case json::value_t::object:
    return "an object";
  default:
    return "an unknown value";
  }
}

ApiError wrong_type(const std::string& param, const char* expected, const json& value) {
  return invalid_request(param + " must be " + expected + ", got " + type_name(value), param);
}

/// The field `name` of `body`, or null when absent or null (OpenAI: the same).
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null())
    return nullptr;
  return &*it;
}

std::optional<bool> read_bool(const json& body, const char* name) {
  const json* value = field(body, name);
  if (value == nullptr)
    return std::nullopt;
  if (!value->is_boolean())
    throw wrong_type(name, "a boolean", *value);
  return value->get<bool>();
}

std::optional<std::string> read_string(const json& body, const char* name) {
  const json* value = field(body, name);
  if (value == nullptr)
    return std::nullopt;
  if (!value->is_string())
    throw wrong_type(name, "a string", *value);
  return value->get<std::string>();
}

/// A number, integers included.
std::optional<double> read_number(const json& body, const char* name) {
  const json* value = field(body, name);
  if (value == nullptr)
    return std::nullopt;
  if (!value->is_number())
    throw wrong_type(name, "a number", *value);
  return value->get<double>();
}

/// An integer; a float with an integral value (16.0) counts, as Python's and
/// JavaScript's clients may send one. Values beyond int64 are refused.
std::optional<std::int64_t> read_integer(const json& body, const char* name) {
  const json* value = field(body, name);
  if (value == nullptr)
    return std::nullopt;
  if (value->is_number_unsigned()) {
    auto unsigned_value = value->get<std::uint64_t>();
    if (unsigned_value > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      throw invalid_request(std::string{name} + " is out of range", name);
    return static_cast<std::int64_t>(unsigned_value);
  }
  if (value->is_number_integer())
    return value->get<std::int64_t>();
  if (value->is_number_float()) {
    double number = value->get<double>();
    // 2^63 is exactly representable; anything at or beyond it is not an int64.
    if (std::nearbyint(number) == number && number >= -9.2233720368547758e18 &&
        number < 9.2233720368547758e18)
      return static_cast<std::int64_t>(number);
  }
  throw wrong_type(name, "an integer", *value);
}

/// "[lo, hi]" spelled with the value the client sent, for range messages.
ApiError out_of_range(const char* name, const std::string& range, const json& body) {
  return invalid_request(std::string{name} + " must be " + range + ", got " + body.at(name).dump(),
                         name);
}

std::optional<double> read_number_in(const json& body, const char* name, double lo, double hi,
                                     bool lo_open = false) {
  auto number = read_number(body, name);
  if (!number)
    return std::nullopt;
  bool above_lo = lo_open ? *number > lo : *number >= lo;
  if (!(above_lo && *number <= hi)) {
    char range[96];
    std::snprintf(range, sizeof range, "%s%g, %g]", lo_open ? "in (" : "in [", lo, hi);
    throw out_of_range(name, range, body);
  }
  return number;
}

std::optional<std::int64_t> read_integer_in(const json& body, const char* name, std::int64_t lo,
                                            std::int64_t hi) {
  auto number = read_integer(body, name);
  if (!number)
    return std::nullopt;
  if (*number < lo || *number > hi)
    throw out_of_range(
        name, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", body);
  return number;
}

// -- the fields both endpoints share --------------------------------------------

std::vector<std::string> read_stop(const json& body) {
  const json* value = field(body, "stop");
  if (value == nullptr)
    return {};
  if (value->is_string()) {
    // An empty string stops nothing; clients send it for "none".
    if (value->get_ref<const std::string&>().empty())
      return {};
    if (value->get_ref<const std::string&>().size() > kMaxStopBytes)
      throw invalid_request("stop may hold at most " + std::to_string(kMaxStopBytes) +
                                " bytes, got " +
                                std::to_string(value->get_ref<const std::string&>().size()),
                            "stop");
    return {value->get<std::string>()};
  }
  if (!value->is_array())
    throw wrong_type("stop", "a string or an array of strings", *value);
  if (value->size() > kMaxStopStrings)
    throw invalid_request("stop may hold at most " + std::to_string(kMaxStopStrings) +
                              " strings, got " + std::to_string(value->size()),
                          "stop");
  std::vector<std::string> stops;
  for (std::size_t i = 0; i < value->size(); ++i) {
    const json& stop = (*value)[i];
    std::string param = "stop[" + std::to_string(i) + "]";
    if (!stop.is_string())
      throw wrong_type(param, "a string", stop);
    if (stop.get_ref<const std::string&>().empty())
      throw invalid_request(param + " must not be empty", param);
    if (stop.get_ref<const std::string&>().size() > kMaxStopBytes)
      throw invalid_request(param + " may hold at most " + std::to_string(kMaxStopBytes) +
                                " bytes, got " +
                                std::to_string(stop.get_ref<const std::string&>().size()),
                            param);
    stops.push_back(stop.get<std::string>());
  }
  return stops;
}

/// OpenAI's seed is any int64; caflm's draws take a uint64: negative seeds
/// map by two's complement (-1 -> 2^64 - 1), so distinct seeds stay distinct.
std::optional<std::uint64_t> read_seed(const json& body) {
  const json* value = field(body, "seed");
  if (value == nullptr)
    return std::nullopt;
  if (value->is_number_unsigned())
    return value->get<std::uint64_t>();
  return static_cast<std::uint64_t>(*read_integer(body, "seed"));
}

void read_stream(const json& body, ParsedCommon& out) {
  out.stream = read_bool(body, "stream").value_or(false);
  const json* options = field(body, "stream_options");
  if (options == nullptr)
    return;
  if (!out.stream)
    throw invalid_request("stream_options is only allowed when stream is true", "stream_options");
  if (!options->is_object())
    throw wrong_type("stream_options", "an object", *options);
  const json* include_usage = field(*options, "include_usage");
  if (include_usage != nullptr) {
    if (!include_usage->is_boolean())
      throw wrong_type("stream_options.include_usage", "a boolean", *include_usage);
    out.include_usage = include_usage->get<bool>();
  }
}

/// Everything but the prompt, max_tokens and logprobs, which differ by endpoint.
void read_common(const json& body, ParsedCommon& out) {
  out.model = read_string(body, "model").value_or("");
  SamplingParams& sampling = out.sampling;
  if (auto value = read_number_in(body, "temperature", 0.0, 2.0))
    sampling.temperature = static_cast<float>(*value);
  if (auto value = read_number_in(body, "top_p", 0.0, 1.0, /*lo_open=*/true))
    sampling.top_p = static_cast<float>(*value);
  if (auto value = read_integer_in(body, "n", 1, kMaxChoices))
    out.n = static_cast<std::uint32_t>(*value);
  sampling.stop = read_stop(body);
  sampling.seed = read_seed(body);
  read_stream(body, out);
  if (auto value = read_number_in(body, "presence_penalty", -2.0, 2.0))
    sampling.presence_penalty = static_cast<float>(*value);
  if (auto value = read_number_in(body, "frequency_penalty", -2.0, 2.0))
    sampling.frequency_penalty = static_cast<float>(*value);
  // Extensions (vLLM's and llama.cpp's names).
  if (auto value = read_integer_in(body, "top_k", -1, std::numeric_limits<std::int32_t>::max()))
    sampling.top_k = static_cast<std::int32_t>(*value);
  if (auto value = read_number_in(body, "min_p", 0.0, 1.0))
    sampling.min_p = static_cast<float>(*value);
  if (auto value = read_number_in(body, "repetition_penalty", 0.0, kMaxRepetitionPenalty,
                                  /*lo_open=*/true))
    sampling.repetition_penalty = static_cast<float>(*value);
  sampling.ignore_eos = read_bool(body, "ignore_eos").value_or(false);
  if (auto value = read_integer_in(body, "priority", std::numeric_limits<std::int32_t>::min(),
                                   std::numeric_limits<std::int32_t>::max()))
    out.priority = static_cast<std::int32_t>(*value);
  out.user = read_string(body, "user").value_or("");
}

std::optional<std::uint32_t> read_max_tokens(const json& body, const char* name) {
  auto value = read_integer(body, name);
  if (!value)
    return std::nullopt;
  if (*value < 1 || *value > std::numeric_limits<std::uint32_t>::max())
    throw out_of_range(name, "a positive integer", body);
  return static_cast<std::uint32_t>(*value);
}

/// The body as a JSON object, or 400.
json parse_object(const std::string& body) {
  json parsed = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded())
    throw invalid_request("The request body is not valid JSON");
  if (!parsed.is_object())
    throw invalid_request(std::string{"The request body must be a JSON object, got "} +
                          type_name(parsed));
  return parsed;
}

/// The last check: caflm's own rules, which the ones above imply.
void check_sampling(const SamplingParams& sampling) {
  if (auto reason = validate(sampling))
    throw invalid_request(*reason);
}

// -- messages and prompts --------------------------------------------------------

std::string read_content(const json& message, const std::string& param, const std::string& role) {
  auto it = message.find("content");
  if (it == message.end() || it->is_null()) {
    // An assistant turn that only called tools has no content.
    if (role == "assistant")
      return {};
    throw invalid_request(param + ".content is required for role " + role, param + ".content");
  }
  if (it->is_string())
    return it->get<std::string>();
  if (!it->is_array())
    throw wrong_type(param + ".content", "a string or an array of content parts", *it);
  std::string text;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& part = (*it)[i];
    std::string part_param = param + ".content[" + std::to_string(i) + "]";
    if (!part.is_object())
      throw wrong_type(part_param, "an object", part);
    const json* type = field(part, "type");
    if (type == nullptr || !type->is_string())
      throw invalid_request(part_param + ".type must be a string", part_param + ".type");
    if (type->get_ref<const std::string&>() != "text")
      throw invalid_request(part_param + ".type " + type->dump() +
                                " is not supported; only text content parts are",
                            part_param + ".type");
    const json* part_text = field(part, "text");
    if (part_text == nullptr || !part_text->is_string())
      throw invalid_request(part_param + ".text must be a string", part_param + ".text");
    // vLLM joins text parts with newlines; a template sees one string.
    if (i > 0)
      text += '\n';
    text += part_text->get_ref<const std::string&>();
  }
  return text;
}

std::vector<ChatMessage> read_messages(const json& body) {
  const json* messages = field(body, "messages");
  if (messages == nullptr)
    throw invalid_request("messages is required", "messages");
  if (!messages->is_array())
    throw wrong_type("messages", "an array", *messages);
  if (messages->empty())
    throw invalid_request("messages must not be empty", "messages");
  std::vector<ChatMessage> out;
  out.reserve(messages->size());
  std::uint64_t content_bytes = 0;
  for (std::size_t i = 0; i < messages->size(); ++i) {
    const json& message = (*messages)[i];
    std::string param = "messages[" + std::to_string(i) + "]";
    if (!message.is_object())
      throw wrong_type(param, "an object", message);
    const json* role = field(message, "role");
    if (role == nullptr || !role->is_string())
      throw invalid_request(param + ".role must be a string", param + ".role");
    std::string role_name = role->get<std::string>();
    if (role_name != "system" && role_name != "user" && role_name != "assistant" &&
        role_name != "tool" && role_name != "developer")
      throw invalid_request(param + ".role " + role->dump() +
                                " is not one of system, developer, user, assistant, tool",
                            param + ".role");
    std::string content = read_content(message, param, role_name);
    content_bytes += content.size();
    if (content_bytes > kMaxPromptBytes)
      throw invalid_request("messages may hold at most " + std::to_string(kMaxPromptBytes) +
                                " bytes of content, got " + std::to_string(content_bytes) + " by " +
                                param,
                            "messages");
    // OpenAI's "developer" is the system prompt of newer models; chat
    // templates know only "system".
    if (role_name == "developer")
      role_name = "system";
    out.push_back(ChatMessage{std::move(role_name), std::move(content)});
  }
  return out;
}

std::vector<TokenId> read_token_ids(const json& array, const std::string& param) {
  if (array.empty())
    throw invalid_request(param + " must not be empty", param);
  std::vector<TokenId> tokens;
  tokens.reserve(array.size());
  for (std::size_t i = 0; i < array.size(); ++i) {
    const json& token = array[i];
    if (!token.is_number_integer() ||
        (!token.is_number_unsigned() && token.get<std::int64_t>() < 0) ||
        (token.is_number_unsigned() &&
         token.get<std::uint64_t>() > std::numeric_limits<TokenId>::max()))
      throw invalid_request(
          param + "[" + std::to_string(i) + "] must be a token id (an integer >= 0)", param);
    tokens.push_back(static_cast<TokenId>(token.get<std::uint64_t>()));
  }
  return tokens;
}

/// A text prompt, at most kMaxPromptBytes.
CompletionPrompt read_text_prompt(const json& text, const std::string& param) {
  const std::string& value = text.get_ref<const std::string&>();
  if (value.size() > kMaxPromptBytes)
    throw invalid_request(param + " may hold at most " + std::to_string(kMaxPromptBytes) +
                              " bytes, got " + std::to_string(value.size()),
                          param);
  return CompletionPrompt{value, {}, false};
}

std::vector<CompletionPrompt> read_prompts(const json& body) {
  const json* prompt = field(body, "prompt");
  if (prompt == nullptr)
    throw invalid_request("prompt is required", "prompt");
  if (prompt->is_string())
    return {read_text_prompt(*prompt, "prompt")};
  const char* expected =
      "a string, an array of strings, an array of token ids or an array of arrays of token ids";
  if (!prompt->is_array())
    throw wrong_type("prompt", expected, *prompt);
  if (prompt->empty())
    throw invalid_request("prompt must not be an empty array", "prompt");
  const json& first = prompt->front();
  if (first.is_number())
    return {CompletionPrompt{{}, read_token_ids(*prompt, "prompt"), true}};
  std::vector<CompletionPrompt> prompts;
  prompts.reserve(prompt->size());
  for (std::size_t i = 0; i < prompt->size(); ++i) {
    const json& item = (*prompt)[i];
    std::string param = "prompt[" + std::to_string(i) + "]";
    // One array holds one kind: strings, or token-id lists.
    if (first.is_string() && item.is_string())
      prompts.push_back(read_text_prompt(item, param));
    else if (first.is_array() && item.is_array())
      prompts.push_back(CompletionPrompt{{}, read_token_ids(item, param), true});
    else
      throw wrong_type("prompt", expected, *prompt);
  }
  return prompts;
}

// -- building responses ------------------------------------------------------------

/// A float as JSON with its shortest decimal spelling (-0.25, not
/// -0.25000000372529). OpenAI reports -9999 for a probability that rounds to 0.
ojson logprob_json(float logprob) {
  if (!std::isfinite(logprob))
    return -9999.0;
  char digits[32];
  auto result = std::to_chars(digits, digits + sizeof digits, logprob);
  *result.ptr = '\0';
  return std::strtod(digits, nullptr);
}

ojson bytes_json(const std::string& text) {
  ojson bytes = ojson::array();
  for (char c : text)
    bytes.push_back(static_cast<unsigned char>(c));
  return bytes;
}

ojson header(const ResponseMeta& meta, std::string_view object) {
  ojson out = ojson::object();
  out["id"] = meta.id;
  out["object"] = object;
  out["created"] = meta.created;
  out["model"] = meta.model;
  if (!meta.system_fingerprint.empty())
    out["system_fingerprint"] = meta.system_fingerprint;
  return out;
}

/// A chunk of one choice; streams with include_usage repeat "usage": null.
ojson chunk(const ResponseMeta& meta, std::string_view object, ojson choice) {
  ojson out = header(meta, object);
  out["choices"] = ojson::array({std::move(choice)});
  if (meta.include_usage)
    out["usage"] = nullptr;
  return out;
}

} // namespace

// -- errors -------------------------------------------------------------------

ApiError::ApiError(int status, std::string message, std::string type, std::string param,
                   std::string code)
  : status(status)
  , message(std::move(message))
  , type(std::move(type))
  , param(std::move(param))
  , code(std::move(code)) {}

ApiError invalid_request(std::string message, std::string param, std::string code) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param),
                  std::move(code)};
}

ApiError context_length_exceeded(std::uint64_t prompt_tokens, std::uint64_t context_length,
                                 std::string param) {
  return invalid_request("This model's maximum context length is " +
                             std::to_string(context_length) +
                             " tokens. However, your request has " + std::to_string(prompt_tokens) +
                             " tokens. Please reduce the length of the " + param + ".",
                         param, "context_length_exceeded");
}

ApiError invalid_api_key() {
  return ApiError{
      401, "Incorrect or missing API key.", "authentication_error", {}, "invalid_api_key"};
}

ApiError model_not_found(std::string_view model) {
  return ApiError{404, "The model '" + std::string{model} + "' does not exist.", "not_found_error",
                  "model", "model_not_found"};
}

ApiError path_not_found(std::string_view method, std::string_view path) {
  return ApiError{404, "No route for " + std::string{method} + " " + std::string{path} + ".",
                  "not_found_error"};
}

ApiError rate_limit_exceeded(std::string message) {
  return ApiError{429, std::move(message), "rate_limit_error", {}, "rate_limit_exceeded"};
}

ApiError service_unavailable(std::string message) {
  return ApiError{503, std::move(message), "service_unavailable_error", {}, "overloaded"};
}

ApiError internal_error(std::string message) {
  return ApiError{500, std::move(message), "server_error", {}, "internal_error"};
}

ojson error_body(const ApiError& error) {
  ojson inner = ojson::object();
  inner["message"] = error.message;
  inner["type"] = error.type;
  inner["param"] = error.param.empty() ? ojson() : ojson(error.param);
  inner["code"] = error.code.empty() ? ojson() : ojson(error.code);
  ojson out = ojson::object();
  out["error"] = std::move(inner);
  return out;
}

// -- requests -----------------------------------------------------------------

ParsedChatRequest parse_chat_request(const std::string& body) {
  json request = parse_object(body);
  ParsedChatRequest out;
  out.messages = read_messages(request);
  read_common(request, out);
  // max_completion_tokens replaced max_tokens in OpenAI's chat API; it wins.
  auto max_tokens = read_max_tokens(request, "max_tokens");
  auto max_completion_tokens = read_max_tokens(request, "max_completion_tokens");
  if (max_completion_tokens)
    max_tokens = max_completion_tokens;
  out.max_tokens_given = max_tokens.has_value();
  out.sampling.max_tokens = max_tokens.value_or(kUnboundedMaxTokens);
  out.logprobs = read_bool(request, "logprobs").value_or(false);
  out.sampling.logprobs = out.logprobs;
  if (auto top = read_integer_in(request, "top_logprobs", 0, kMaxTopLogprobs)) {
    if (*top > 0 && !out.logprobs)
      throw invalid_request("top_logprobs requires logprobs to be true", "top_logprobs");
    out.sampling.top_logprobs = static_cast<std::uint32_t>(*top);
  }
  check_sampling(out.sampling);
  return out;
}

ParsedCompletionRequest parse_completion_request(const std::string& body) {
  json request = parse_object(body);
  ParsedCompletionRequest out;
  out.prompts = read_prompts(request);
  read_common(request, out);
  auto max_tokens = read_max_tokens(request, "max_tokens");
  out.max_tokens_given = max_tokens.has_value();
  out.sampling.max_tokens = max_tokens.value_or(kDefaultCompletionMaxTokens);
  if (auto count = read_integer_in(request, "logprobs", 0, kMaxCompletionLogprobs)) {
    out.logprobs = true;
    out.sampling.logprobs = true;
    out.sampling.top_logprobs = static_cast<std::uint32_t>(*count);
  }
  out.echo = read_bool(request, "echo").value_or(false);
  // best_of > n would return the best of several candidates; caflm returns
  // every choice it generates, so only best_of == n means what it says.
  if (auto best_of = read_integer(request, "best_of"); best_of && *best_of != out.n)
    throw invalid_request("best_of is not supported unless equal to n", "best_of");
  check_sampling(out.sampling);
  return out;
}

// -- responses ----------------------------------------------------------------

std::string new_response_id(std::string_view prefix) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  // 62^10 < 2^64: ten characters from each 64 random bits, fresh bits for
  // every ten.
  std::string id{prefix};
  std::uint64_t bits = 0;
  for (int i = 0; i < 24; ++i) {
    if (i % 10 == 0)
      bits = random_seed();
    id += kAlphabet[bits % 62];
    bits /= 62;
  }
  return id;
}

std::int64_t unix_time_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

ojson finish_reason_json(FinishReason finish) {
  if (finish == FinishReason::None)
    return nullptr;
  return to_string(finish);
}

ojson usage_json(const Usage& usage) {
  ojson out = ojson::object();
  out["prompt_tokens"] = usage.prompt_tokens;
  out["completion_tokens"] = usage.completion_tokens;
  out["total_tokens"] = usage.prompt_tokens + usage.completion_tokens;
  out["prompt_tokens_details"] = ojson{{"cached_tokens", usage.cached_tokens}};
  return out;
}

ojson chat_logprobs_json(const std::vector<TokenInfo>& tokens) {
  ojson content = ojson::array();
  for (const TokenInfo& token : tokens) {
    ojson entry = ojson::object();
    entry["token"] = token.text;
    entry["logprob"] = logprob_json(token.logprob);
    entry["bytes"] = bytes_json(token.text);
    ojson top = ojson::array();
    for (const TopLogprob& alternative : token.top) {
      ojson item = ojson::object();
      item["token"] = alternative.text;
      item["logprob"] = logprob_json(alternative.logprob);
      item["bytes"] = bytes_json(alternative.text);
      top.push_back(std::move(item));
    }
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  ojson out = ojson::object();
  out["content"] = std::move(content);
  return out;
}

std::uint64_t utf8_length(std::string_view text) {
  std::uint64_t count = 0;
  for (char c : text) {
    // Every byte but a continuation byte (10xxxxxx) starts a code point.
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80)
      ++count;
  }
  return count;
}

ojson completion_logprobs_json(const std::vector<TokenInfo>& tokens, bool with_top,
                               std::uint64_t text_offset_base) {
  ojson texts = ojson::array();
  ojson logprobs = ojson::array();
  ojson tops = with_top ? ojson::array() : ojson();
  ojson offsets = ojson::array();
  std::uint64_t offset = text_offset_base;
  for (const TokenInfo& token : tokens) {
    texts.push_back(token.text);
    logprobs.push_back(logprob_json(token.logprob));
    if (with_top) {
      ojson top = ojson::object();
      // Two tokens may spell the same text; the likelier (first) one stays.
      for (const TopLogprob& alternative : token.top) {
        if (!top.contains(alternative.text))
          top[alternative.text] = logprob_json(alternative.logprob);
      }
      tops.push_back(std::move(top));
    }
    offsets.push_back(offset);
    offset += utf8_length(token.text);
  }
  ojson out = ojson::object();
  out["tokens"] = std::move(texts);
  out["token_logprobs"] = std::move(logprobs);
  out["top_logprobs"] = std::move(tops);
  out["text_offset"] = std::move(offsets);
  return out;
}

ojson chat_completion_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                               const Usage& usage, bool with_logprobs) {
  ojson out = header(meta, "chat.completion");
  ojson list = ojson::array();
  for (const ChoiceResult& choice : choices) {
    ojson item = ojson::object();
    item["index"] = choice.index;
    ojson message = ojson::object();
    message["role"] = "assistant";
    message["content"] = choice.text;
    item["message"] = std::move(message);
    item["logprobs"] = with_logprobs ? chat_logprobs_json(choice.tokens) : ojson();
    item["finish_reason"] = finish_reason_json(choice.finish);
    list.push_back(std::move(item));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

ojson text_completion_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                               const Usage& usage, bool with_logprobs, bool with_top,
                               std::uint64_t text_offset_base) {
  ojson out = header(meta, "text_completion");
  ojson list = ojson::array();
  for (const ChoiceResult& choice : choices) {
    ojson item = ojson::object();
    item["index"] = choice.index;
    item["text"] = choice.text;
    item["logprobs"] = with_logprobs
                           ? completion_logprobs_json(choice.tokens, with_top, text_offset_base)
                           : ojson();
    item["finish_reason"] = finish_reason_json(choice.finish);
    list.push_back(std::move(item));
  }
  out["choices"] = std::move(list);
  out["usage"] = usage_json(usage);
  return out;
}

ojson chat_role_chunk(const ResponseMeta& meta, std::uint32_t index) {
  ojson choice = ojson::object();
  choice["index"] = index;
  choice["delta"] = ojson{{"role", "assistant"}, {"content", ""}};
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = nullptr;
  return chunk(meta, "chat.completion.chunk", std::move(choice));
}

ojson chat_content_chunk(const ResponseMeta& meta, std::uint32_t index, std::string_view text,
                         const std::vector<TokenInfo>* logprobs, FinishReason finish) {
  ojson choice = ojson::object();
  choice["index"] = index;
  choice["delta"] = ojson{{"content", text}};
  choice["logprobs"] = logprobs != nullptr ? chat_logprobs_json(*logprobs) : ojson();
  choice["finish_reason"] = finish_reason_json(finish);
  return chunk(meta, "chat.completion.chunk", std::move(choice));
}

ojson chat_finish_chunk(const ResponseMeta& meta, std::uint32_t index, FinishReason finish) {
  ojson choice = ojson::object();
  choice["index"] = index;
  choice["delta"] = ojson::object();
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason_json(finish);
  return chunk(meta, "chat.completion.chunk", std::move(choice));
}

ojson completion_chunk(const ResponseMeta& meta, std::uint32_t index, std::string_view text,
                       const std::vector<TokenInfo>* logprobs, bool with_top,
                       std::uint64_t text_offset_base, FinishReason finish) {
  ojson choice = ojson::object();
  choice["index"] = index;
  choice["text"] = text;
  choice["logprobs"] = logprobs != nullptr
                           ? completion_logprobs_json(*logprobs, with_top, text_offset_base)
                           : ojson();
  choice["finish_reason"] = finish_reason_json(finish);
  return chunk(meta, "text_completion", std::move(choice));
}

ojson usage_chunk(const ResponseMeta& meta, std::string_view object, const Usage& usage) {
  ojson out = header(meta, object);
  out["choices"] = ojson::array();
  out["usage"] = usage_json(usage);
  return out;
}

ojson models_list(const std::vector<std::string>& names, std::int64_t created,
                  std::string_view owned_by) {
  ojson data = ojson::array();
  for (const std::string& name : names) {
    ojson model = ojson::object();
    model["id"] = name;
    model["object"] = "model";
    model["created"] = created;
    model["owned_by"] = owned_by;
    data.push_back(std::move(model));
  }
  ojson out = ojson::object();
  out["object"] = "list";
  out["data"] = std::move(data);
  return out;
}

// -- serialization ------------------------------------------------------------

std::string dump_json(const ojson& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, ojson::error_handler_t::replace);
}

std::string sse_event(const ojson& value) {
  return "data: " + dump_json(value) + "\n\n";
}

std::string sse_done() {
  return "data: [DONE]\n\n";
}

} // namespace caflm::server

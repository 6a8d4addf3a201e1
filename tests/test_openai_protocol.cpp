#include <catch2/catch.hpp>

#include <cctype>
#include <cmath>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "caflm/server/openai_protocol.hpp"

using namespace caflm;
using namespace caflm::server;
using json = nlohmann::json;

namespace {

/// The ApiError `parse` throws for `body`; fails the test when it throws none.
template <class Parse>
ApiError error_of(Parse parse, const std::string& body) {
  try {
    parse(body);
  } catch (const ApiError& error) {
    return error;
  }
  FAIL("no ApiError for " << body);
  return ApiError{0, ""};
}

ApiError chat_error(const std::string& body) {
  return error_of([](const std::string& text) { return parse_chat_request(text); }, body);
}

ApiError completion_error(const std::string& body) {
  return error_of([](const std::string& text) { return parse_completion_request(text); }, body);
}

/// A valid chat body with `extra` fields ("" for none) added.
std::string chat_body(const std::string& extra) {
  std::string body = R"({"model":"m","messages":[{"role":"user","content":"hi"}])";
  if (!extra.empty())
    body += "," + extra;
  return body + "}";
}

std::string completion_body(const std::string& extra) {
  std::string body = R"({"model":"m","prompt":"hi")";
  if (!extra.empty())
    body += "," + extra;
  return body + "}";
}

ResponseMeta meta_for(std::string id) {
  ResponseMeta meta;
  meta.id = std::move(id);
  meta.created = 1700000000;
  meta.model = "tiny";
  return meta;
}

/// Parses an SSE frame "data: <json>\n\n" back.
json parse_event(const std::string& frame) {
  REQUIRE(frame.rfind("data: ", 0) == 0);
  REQUIRE(frame.size() >= 8);
  REQUIRE(frame.substr(frame.size() - 2) == "\n\n");
  return json::parse(frame.substr(6, frame.size() - 8));
}

} // namespace

TEST_CASE("a minimal chat request gets OpenAI's defaults", "[openai_protocol]") {
  ParsedChatRequest request =
      parse_chat_request(R"({"messages":[{"role":"user","content":"hi"}]})");
  CHECK(request.model.empty());
  REQUIRE(request.messages.size() == 1);
  CHECK(request.messages[0].role == "user");
  CHECK(request.messages[0].content == "hi");
  CHECK(request.sampling.temperature == 1.0f);
  CHECK(request.sampling.top_p == 1.0f);
  CHECK(request.sampling.top_k == 0);
  CHECK(request.sampling.min_p == 0.0f);
  CHECK(request.sampling.repetition_penalty == 1.0f);
  CHECK(request.sampling.presence_penalty == 0.0f);
  CHECK(request.sampling.frequency_penalty == 0.0f);
  CHECK_FALSE(request.sampling.seed.has_value());
  CHECK(request.sampling.stop.empty());
  CHECK_FALSE(request.sampling.ignore_eos);
  CHECK(request.sampling.top_logprobs == 0u);
  CHECK_FALSE(request.max_tokens_given);
  CHECK(request.sampling.max_tokens == kUnboundedMaxTokens);
  CHECK(request.n == 1u);
  CHECK_FALSE(request.stream);
  CHECK_FALSE(request.include_usage);
  CHECK_FALSE(request.logprobs);
  CHECK_FALSE(request.sampling.logprobs);
  CHECK(request.priority == 0);
  CHECK_FALSE(validate(request.sampling).has_value());
}

TEST_CASE("a minimal completion request gets OpenAI's defaults", "[openai_protocol]") {
  ParsedCompletionRequest request = parse_completion_request(R"({"prompt":"Once"})");
  REQUIRE(request.prompts.size() == 1);
  CHECK_FALSE(request.prompts[0].is_tokens);
  CHECK(request.prompts[0].text == "Once");
  CHECK_FALSE(request.max_tokens_given);
  CHECK(request.sampling.max_tokens == kDefaultCompletionMaxTokens);
  CHECK(request.sampling.temperature == 1.0f);
  CHECK_FALSE(request.logprobs);
  CHECK_FALSE(request.echo);
}

TEST_CASE("every known chat field is read", "[openai_protocol]") {
  ParsedChatRequest request = parse_chat_request(R"({
    "model": "tiny", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": []},
      {"role": "tool", "content": "42", "tool_call_id": "x"}],
    "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "n": 3, "stop": ["a", "bc"],
    "seed": 11, "stream": true, "stream_options": {"include_usage": true},
    "logprobs": true, "top_logprobs": 5, "presence_penalty": 1.5, "frequency_penalty": -0.5,
    "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1, "ignore_eos": true, "priority": -3,
    "user": "u1", "some_future_field": {"x": 1}})");
  CHECK(request.model == "tiny");
  REQUIRE(request.messages.size() == 4);
  CHECK(request.messages[0].role == "system");
  CHECK(request.messages[0].content == "be brief");
  CHECK(request.messages[1].content == "a\nb");
  CHECK(request.messages[2].role == "assistant");
  CHECK(request.messages[2].content.empty());
  CHECK(request.messages[3].role == "tool");
  CHECK(request.max_tokens_given);
  CHECK(request.sampling.max_tokens == 7u);
  CHECK(request.sampling.temperature == 0.5f);
  CHECK(request.sampling.top_p == 0.9f);
  CHECK(request.n == 3u);
  CHECK(request.sampling.stop == std::vector<std::string>{"a", "bc"});
  CHECK(request.sampling.seed == std::optional<std::uint64_t>{11});
  CHECK(request.stream);
  CHECK(request.include_usage);
  CHECK(request.logprobs);
  CHECK(request.sampling.top_logprobs == 5u);
  CHECK(request.sampling.presence_penalty == 1.5f);
  CHECK(request.sampling.frequency_penalty == -0.5f);
  CHECK(request.sampling.top_k == 40);
  CHECK(request.sampling.min_p == 0.05f);
  CHECK(request.sampling.repetition_penalty == 1.1f);
  CHECK(request.sampling.ignore_eos);
  CHECK(request.priority == -3);
  CHECK(request.user == "u1");
}

TEST_CASE("max_completion_tokens wins over max_tokens", "[openai_protocol]") {
  CHECK(parse_chat_request(chat_body(R"("max_tokens":5,"max_completion_tokens":9)"))
            .sampling.max_tokens == 9u);
  CHECK(parse_chat_request(chat_body(R"("max_completion_tokens":9,"max_tokens":5)"))
            .sampling.max_tokens == 9u);
  CHECK(parse_chat_request(chat_body(R"("max_tokens":5,"max_completion_tokens":null)"))
            .sampling.max_tokens == 5u);
  // An integral float counts as an integer.
  CHECK(parse_chat_request(chat_body(R"("max_tokens":12.0)")).sampling.max_tokens == 12u);
  // Completions know only max_tokens.
  CHECK(parse_completion_request(completion_body(R"("max_tokens":3,"max_completion_tokens":9)"))
            .sampling.max_tokens == 3u);
}

TEST_CASE("null means absent", "[openai_protocol]") {
  ParsedChatRequest request = parse_chat_request(
      chat_body(R"("model":null,"temperature":null,"top_p":null,"n":null,"stop":null,"seed":null,)"
                R"("stream":null,"stream_options":null,"logprobs":null,"top_logprobs":null,)"
                R"("max_tokens":null,"top_k":null,"user":null)"));
  CHECK(request.sampling.temperature == 1.0f);
  CHECK(request.n == 1u);
  CHECK_FALSE(request.sampling.seed.has_value());
  CHECK_FALSE(request.max_tokens_given);
  CHECK_FALSE(request.stream);
}

TEST_CASE("stop takes a string, an array, or nothing", "[openai_protocol]") {
  auto stops = [](const std::string& value) {
    return parse_chat_request(chat_body("\"stop\":" + value)).sampling.stop;
  };
  CHECK(stops(R"("\n")") == std::vector<std::string>{"\n"});
  CHECK(stops(R"("")").empty());
  CHECK(stops("[]").empty());
  CHECK(stops("null").empty());
  CHECK(stops(R"(["a","b","c","d"])").size() == 4);
  CHECK(completion_error(completion_body(R"("stop":["a","b","c","d","e"])")).param == "stop");
  CHECK(chat_error(chat_body(R"("stop":["a",""])")).param == "stop[1]");
  CHECK(chat_error(chat_body(R"("stop":["a",1])")).param == "stop[1]");
  CHECK(chat_error(chat_body(R"("stop":5)")).param == "stop");
  CHECK(chat_error(chat_body(R"("stop":{"a":1})")).param == "stop");
}

TEST_CASE("seed takes any int64 and large unsigned values", "[openai_protocol]") {
  auto seed = [](const std::string& value) {
    return *parse_chat_request(chat_body("\"seed\":" + value)).sampling.seed;
  };
  CHECK(seed("0") == 0u);
  CHECK(seed("-1") == 0xFFFFFFFFFFFFFFFFull);
  CHECK(seed("-2") == 0xFFFFFFFFFFFFFFFEull);
  CHECK(seed("-9223372036854775808") == 0x8000000000000000ull);
  CHECK(seed("18446744073709551615") == 0xFFFFFFFFFFFFFFFFull);
  CHECK(seed("42.0") == 42u);
  CHECK(chat_error(chat_body(R"("seed":1.5)")).param == "seed");
  CHECK(chat_error(chat_body(R"("seed":"1")")).param == "seed");
}

TEST_CASE("n, stream and stream_options", "[openai_protocol]") {
  CHECK(parse_chat_request(chat_body(R"("n":128)")).n == 128u);
  CHECK(parse_completion_request(completion_body(R"("n":4)")).n == 4u);
  ParsedChatRequest no_usage =
      parse_chat_request(chat_body(R"("stream":true,"stream_options":{"include_usage":false})"));
  CHECK(no_usage.stream);
  CHECK_FALSE(no_usage.include_usage);
  CHECK(parse_chat_request(chat_body(R"("stream":true,"stream_options":{})")).stream);

  ApiError without_stream = chat_error(chat_body(R"("stream_options":{"include_usage":true})"));
  CHECK(without_stream.status == 400);
  CHECK(without_stream.param == "stream_options");
  CHECK(completion_error(completion_body(R"("stream":false,"stream_options":{})")).param ==
        "stream_options");
  CHECK(chat_error(chat_body(R"("stream":true,"stream_options":true)")).param == "stream_options");
  CHECK(chat_error(chat_body(R"("stream":true,"stream_options":{"include_usage":1})")).param ==
        "stream_options.include_usage");
}

TEST_CASE("chat logprobs and top_logprobs", "[openai_protocol]") {
  ParsedChatRequest request = parse_chat_request(chat_body(R"("logprobs":true)"));
  CHECK(request.logprobs);
  CHECK(request.sampling.logprobs);
  CHECK(request.sampling.top_logprobs == 0u);
  CHECK(
      parse_chat_request(chat_body(R"("logprobs":true,"top_logprobs":20)")).sampling.top_logprobs ==
      20u);
  // top_logprobs 0 without logprobs asks for nothing and is harmless.
  CHECK_FALSE(parse_chat_request(chat_body(R"("top_logprobs":0)")).logprobs);
  CHECK(chat_error(chat_body(R"("top_logprobs":2)")).param == "top_logprobs");
  CHECK(chat_error(chat_body(R"("logprobs":false,"top_logprobs":2)")).param == "top_logprobs");
  CHECK(chat_error(chat_body(R"("logprobs":true,"top_logprobs":21)")).param == "top_logprobs");
  CHECK(chat_error(chat_body(R"("logprobs":true,"top_logprobs":-1)")).param == "top_logprobs");
  CHECK(chat_error(chat_body(R"("logprobs":1)")).param == "logprobs");
}

TEST_CASE("completion logprobs is a count", "[openai_protocol]") {
  ParsedCompletionRequest none = parse_completion_request(completion_body(R"("logprobs":null)"));
  CHECK_FALSE(none.logprobs);
  CHECK_FALSE(none.sampling.logprobs);
  ParsedCompletionRequest zero = parse_completion_request(completion_body(R"("logprobs":0)"));
  CHECK(zero.logprobs);
  CHECK(zero.sampling.logprobs);
  CHECK(zero.sampling.top_logprobs == 0u);
  ParsedCompletionRequest five = parse_completion_request(completion_body(R"("logprobs":5)"));
  CHECK(five.logprobs);
  CHECK(five.sampling.top_logprobs == 5u);
  CHECK(completion_error(completion_body(R"("logprobs":6)")).param == "logprobs");
  CHECK(completion_error(completion_body(R"("logprobs":-1)")).param == "logprobs");
  CHECK(completion_error(completion_body(R"("logprobs":true)")).param == "logprobs");
  CHECK(parse_completion_request(completion_body(R"("echo":true)")).echo);
  CHECK(completion_error(completion_body(R"("echo":"yes")")).param == "echo");
  CHECK(parse_completion_request(completion_body(R"("n":2,"best_of":2)")).n == 2u);
  CHECK(completion_error(completion_body(R"("n":2,"best_of":3)")).param == "best_of");
}

TEST_CASE("completion prompts in all four forms", "[openai_protocol]") {
  auto prompts = [](const std::string& value) {
    return parse_completion_request("{\"prompt\":" + value + "}").prompts;
  };
  auto text = prompts(R"("")");
  REQUIRE(text.size() == 1);
  CHECK(text[0].text.empty());

  auto texts = prompts(R"(["a","b"])");
  REQUIRE(texts.size() == 2);
  CHECK(texts[1].text == "b");
  CHECK_FALSE(texts[1].is_tokens);

  auto tokens = prompts("[1, 2, 4294967295]");
  REQUIRE(tokens.size() == 1);
  CHECK(tokens[0].is_tokens);
  CHECK(tokens[0].tokens == std::vector<TokenId>{1, 2, 4294967295u});

  auto token_lists = prompts("[[1,2],[3]]");
  REQUIRE(token_lists.size() == 2);
  CHECK(token_lists[1].is_tokens);
  CHECK(token_lists[1].tokens == std::vector<TokenId>{3});

  CHECK(completion_error(R"({"model":"m"})").param == "prompt");
  CHECK(completion_error(R"({"prompt":5})").param == "prompt");
  CHECK(completion_error(R"({"prompt":[]})").param == "prompt");
  CHECK(completion_error(R"({"prompt":["a",1]})").param == "prompt");
  CHECK(completion_error(R"({"prompt":[1,"a"]})").param == "prompt");
  CHECK(completion_error(R"({"prompt":[1,-2]})").param == "prompt");
  CHECK(completion_error(R"({"prompt":[1,2.5]})").param == "prompt");
  CHECK(completion_error(R"({"prompt":[4294967296]})").param == "prompt");
  CHECK(completion_error(R"({"prompt":[[1],[]]})").param == "prompt[1]");
  CHECK(completion_error(R"({"prompt":[[1],["a"]]})").param == "prompt[1]");
  CHECK(completion_error(R"({"prompt":[[1],2]})").param == "prompt");
  CHECK(completion_error(R"({"prompt":{"text":"a"}})").param == "prompt");
}

TEST_CASE("malformed bodies are a 400", "[openai_protocol]") {
  for (const char* body :
       {"", "{", "not json", "{\"messages\": [}", "[1,2]", "\"text\"", "null", "3"}) {
    ApiError error = chat_error(body);
    CHECK(error.status == 400);
    CHECK(error.type == "invalid_request_error");
    CHECK(error.param.empty());
    CHECK(completion_error(body).status == 400);
  }
}

TEST_CASE("deeply nested and odd bodies are refused, not crashed on", "[openai_protocol]") {
  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CHECK(chat_error(deep).status == 400);
  CHECK(chat_error("{\"messages\":" + deep + "}").param == "messages[0]");
  CHECK(completion_error("{\"prompt\":" + deep + "}").param == "prompt[0]");
  // Invalid UTF-8 inside a JSON string makes the body invalid JSON.
  CHECK(chat_error("{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\"}]}").status == 400);
  // Trailing garbage after the object.
  CHECK(chat_error(chat_body("") + "x").status == 400);
}

TEST_CASE("messages are checked one by one", "[openai_protocol]") {
  struct Case {
    const char* messages;
    const char* param;
  };
  const Case cases[] = {
      {"", "messages"}, // absent
      {R"("messages":null)", "messages"},
      {R"("messages":"hi")", "messages"},
      {R"("messages":[])", "messages"},
      {R"("messages":["hi"])", "messages[0]"},
      {R"("messages":[{"content":"hi"}])", "messages[0].role"},
      {R"("messages":[{"role":5,"content":"hi"}])", "messages[0].role"},
      {R"("messages":[{"role":"user","content":"a"},{"role":"robot","content":"hi"}])",
       "messages[1].role"},
      {R"("messages":[{"role":"function","content":"hi"}])", "messages[0].role"},
      {R"("messages":[{"role":"user"}])", "messages[0].content"},
      {R"("messages":[{"role":"user","content":null}])", "messages[0].content"},
      {R"("messages":[{"role":"system","content":null}])", "messages[0].content"},
      {R"("messages":[{"role":"user","content":7}])", "messages[0].content"},
      {R"("messages":[{"role":"user","content":["a"]}])", "messages[0].content[0]"},
      {R"("messages":[{"role":"user","content":[{"text":"a"}]}])", "messages[0].content[0].type"},
      {R"("messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}])",
       "messages[0].content[0].type"},
      {R"("messages":[{"role":"user","content":[{"type":"text"}]}])",
       "messages[0].content[0].text"},
      {R"("messages":[{"role":"user","content":[{"type":"text","text":3}]}])",
       "messages[0].content[0].text"},
  };
  for (const Case& c : cases) {
    std::string body = std::string{"{"} + c.messages + "}";
    INFO(body);
    ApiError error = chat_error(body);
    CHECK(error.status == 400);
    CHECK(error.type == "invalid_request_error");
    CHECK(error.param == c.param);
  }
  // An empty part list is an empty message.
  CHECK(parse_chat_request(R"({"messages":[{"role":"user","content":[]}]})").messages[0].content ==
        "");
}

TEST_CASE("wrong types and out-of-range values are a 400 naming the field", "[openai_protocol]") {
  struct Case {
    const char* field;
    const char* param;
  };
  // Shared by both endpoints.
  const Case shared[] = {
      {R"("model":5)", "model"},
      {R"("max_tokens":0)", "max_tokens"},
      {R"("max_tokens":-3)", "max_tokens"},
      {R"("max_tokens":4294967296)", "max_tokens"},
      {R"("max_tokens":"10")", "max_tokens"},
      {R"("max_tokens":1.5)", "max_tokens"},
      {R"("temperature":-0.1)", "temperature"},
      {R"("temperature":2.01)", "temperature"},
      {R"("temperature":"hot")", "temperature"},
      {R"("temperature":true)", "temperature"},
      {R"("top_p":0)", "top_p"},
      {R"("top_p":1.5)", "top_p"},
      {R"("top_p":-1)", "top_p"},
      {R"("n":0)", "n"},
      {R"("n":129)", "n"},
      {R"("n":1.5)", "n"},
      {R"("n":"2")", "n"},
      {R"("seed":true)", "seed"},
      {R"("seed":1e30)", "seed"},
      {R"("stream":"true")", "stream"},
      {R"("stream":1)", "stream"},
      {R"("presence_penalty":2.5)", "presence_penalty"},
      {R"("presence_penalty":-2.5)", "presence_penalty"},
      {R"("frequency_penalty":3)", "frequency_penalty"},
      {R"("frequency_penalty":-3)", "frequency_penalty"},
      {R"("frequency_penalty":[])", "frequency_penalty"},
      {R"("top_k":-2)", "top_k"},
      {R"("top_k":0.5)", "top_k"},
      {R"("top_k":4294967296)", "top_k"},
      {R"("min_p":-0.1)", "min_p"},
      {R"("min_p":1.1)", "min_p"},
      {R"("repetition_penalty":0)", "repetition_penalty"},
      {R"("repetition_penalty":-1)", "repetition_penalty"},
      {R"("repetition_penalty":11)", "repetition_penalty"},
      {R"("ignore_eos":"no")", "ignore_eos"},
      {R"("priority":"high")", "priority"},
      {R"("priority":3000000000)", "priority"},
      {R"("user":1)", "user"},
  };
  for (const Case& c : shared) {
    INFO(c.field);
    ApiError chat = chat_error(chat_body(c.field));
    CHECK(chat.status == 400);
    CHECK(chat.type == "invalid_request_error");
    CHECK(chat.param == c.param);
    CHECK_FALSE(chat.message.empty());
    ApiError completion = completion_error(completion_body(c.field));
    CHECK(completion.status == 400);
    CHECK(completion.param == c.param);
  }
  CHECK(chat_error(chat_body(R"("max_completion_tokens":0)")).param == "max_completion_tokens");
  CHECK(chat_error(chat_body(R"("max_completion_tokens":"5")")).param == "max_completion_tokens");
  // An invalid max_tokens is refused even when max_completion_tokens overrides it.
  CHECK(chat_error(chat_body(R"("max_tokens":0,"max_completion_tokens":5)")).param == "max_tokens");
}

TEST_CASE("range bounds are inclusive where OpenAI's are", "[openai_protocol]") {
  ParsedChatRequest low = parse_chat_request(chat_body(
      R"("temperature":0,"top_p":1,"presence_penalty":-2,"frequency_penalty":2,"top_k":-1,)"
      R"("min_p":1,"repetition_penalty":10,"n":1,"max_tokens":1)"));
  CHECK(low.sampling.temperature == 0.0f);
  CHECK(low.sampling.top_k == -1);
  CHECK(low.sampling.repetition_penalty == 10.0f);
  CHECK(parse_chat_request(chat_body(R"("temperature":2)")).sampling.temperature == 2.0f);
  CHECK(parse_chat_request(chat_body(R"("max_tokens":4294967295)")).sampling.max_tokens ==
        4294967295u);
}

TEST_CASE("error bodies and the common statuses", "[openai_protocol]") {
  ApiError bad = invalid_request("temperature must be in [0, 2]", "temperature");
  nlohmann::ordered_json body = error_body(bad);
  CHECK(body.dump() ==
        R"({"error":{"message":"temperature must be in [0, 2]","type":"invalid_request_error",)"
        R"("param":"temperature","code":null}})");
  CHECK(std::string{bad.what()} == "temperature must be in [0, 2]");

  ApiError key = invalid_api_key();
  CHECK(key.status == 401);
  CHECK(key.type == "authentication_error");
  CHECK(error_body(key)["error"]["code"] == "invalid_api_key");
  CHECK(error_body(key)["error"]["param"].is_null());

  ApiError model = model_not_found("gpt-9");
  CHECK(model.status == 404);
  CHECK(model.code == "model_not_found");
  CHECK(model.message.find("gpt-9") != std::string::npos);

  CHECK(path_not_found("GET", "/v2/x").status == 404);
  CHECK(rate_limit_exceeded().status == 429);
  CHECK(rate_limit_exceeded().code == "rate_limit_exceeded");
  CHECK(service_unavailable().status == 503);
  CHECK(service_unavailable().code == "overloaded");
  CHECK(internal_error("boom").status == 500);

  ApiError context = context_length_exceeded(5000, 4096, "messages");
  CHECK(context.status == 400);
  CHECK(context.code == "context_length_exceeded");
  CHECK(context.param == "messages");
  CHECK(context.message.find("4096") != std::string::npos);
  CHECK(context.message.find("5000") != std::string::npos);

  // The message may quote the client's invalid UTF-8; the body still dumps.
  ApiError quoted = invalid_request("bad \xff value");
  std::string dumped = dump_json(error_body(quoted));
  CHECK(json::parse(dumped)["error"]["message"] == "bad \xEF\xBF\xBD value");
  nlohmann::ordered_json event = parse_event(sse_event(error_body(quoted)));
  CHECK(event["error"]["type"] == "invalid_request_error");
}

TEST_CASE("a non-streamed chat.completion has what the SDKs read", "[openai_protocol]") {
  ResponseMeta meta = meta_for("chatcmpl-abc");
  ChoiceResult first;
  first.index = 0;
  first.text = "Hello";
  first.finish = FinishReason::Stop;
  first.tokens = {{"Hel", -0.5f, {{"Hel", -0.5f}, {"Hi", -1.25f}}}, {"lo", -0.25f, {}}};
  ChoiceResult second;
  second.index = 1;
  second.text = "Hey";
  second.finish = FinishReason::Length;
  Usage usage{12, 5, 8};

  json response =
      json::parse(dump_json(chat_completion_response(meta, {first, second}, usage, true)));
  CHECK(response["id"] == "chatcmpl-abc");
  CHECK(response["object"] == "chat.completion");
  CHECK(response["created"] == 1700000000);
  CHECK(response["model"] == "tiny");
  CHECK_FALSE(response.contains("system_fingerprint"));
  REQUIRE(response["choices"].size() == 2);
  json choice = response["choices"][0];
  CHECK(choice["index"] == 0);
  CHECK(choice["message"]["role"] == "assistant");
  CHECK(choice["message"]["content"] == "Hello");
  CHECK(choice["finish_reason"] == "stop");
  json content = choice["logprobs"]["content"];
  REQUIRE(content.size() == 2);
  CHECK(content[0]["token"] == "Hel");
  CHECK(content[0]["logprob"] == -0.5);
  CHECK(content[0]["bytes"] == json::array({72, 101, 108}));
  REQUIRE(content[0]["top_logprobs"].size() == 2);
  CHECK(content[0]["top_logprobs"][1]["token"] == "Hi");
  CHECK(content[0]["top_logprobs"][1]["logprob"] == -1.25);
  CHECK(content[0]["top_logprobs"][1]["bytes"] == json::array({72, 105}));
  CHECK(content[1]["top_logprobs"].empty());
  CHECK(response["choices"][1]["finish_reason"] == "length");
  CHECK(response["choices"][1]["index"] == 1);
  CHECK(response["usage"]["prompt_tokens"] == 12);
  CHECK(response["usage"]["completion_tokens"] == 5);
  CHECK(response["usage"]["total_tokens"] == 17);
  CHECK(response["usage"]["prompt_tokens_details"]["cached_tokens"] == 8);

  // Without logprobs requested, "logprobs" is null; a fingerprint shows when set.
  meta.system_fingerprint = "fp_caflm";
  json plain = json::parse(dump_json(chat_completion_response(meta, {first}, usage, false)));
  CHECK(plain["choices"][0]["logprobs"].is_null());
  CHECK(plain["system_fingerprint"] == "fp_caflm");
  // Key order is stable: id first, usage last.
  std::string text = dump_json(chat_completion_response(meta, {first}, usage, false));
  CHECK(text.rfind("{\"id\":", 0) == 0);
  CHECK(text.find("\"usage\":") > text.find("\"choices\":"));
}

TEST_CASE("a non-streamed text_completion has completions' logprob shape", "[openai_protocol]") {
  ResponseMeta meta = meta_for("cmpl-xyz");
  ChoiceResult choice;
  choice.text = "a\xC3\xA9z";
  choice.finish = FinishReason::Length;
  // "é" split over two tokens: each token's bytes are a partial UTF-8 sequence.
  choice.tokens = {{"a", -0.1f, {{"a", -0.1f}, {"b", -2.0f}, {"a", -3.0f}}},
                   {"\xC3", -0.5f, {{"\xC3", -0.5f}}},
                   {"\xA9", -0.0f, {{"\xA9", 0.0f}}},
                   {"z", -std::numeric_limits<float>::infinity(), {}}};
  Usage usage{3, 4, 0};
  json response = json::parse(
      dump_json(text_completion_response(meta, {choice}, usage, true, true, /*base=*/10)));
  CHECK(response["object"] == "text_completion");
  CHECK(response["id"] == "cmpl-xyz");
  json first = response["choices"][0];
  CHECK(first["text"] == "a\xC3\xA9z");
  CHECK(first["finish_reason"] == "length");
  json logprobs = first["logprobs"];
  REQUIRE(logprobs["tokens"].size() == 4);
  CHECK(logprobs["tokens"][0] == "a");
  // Partial sequences become U+FFFD in JSON text, never a dump error.
  CHECK(logprobs["tokens"][1] == "\xEF\xBF\xBD");
  CHECK(logprobs["token_logprobs"][0].get<double>() == Approx(-0.1));
  // A probability that rounds to zero is reported as OpenAI's -9999.
  CHECK(logprobs["token_logprobs"][3] == -9999.0);
  REQUIRE(logprobs["top_logprobs"].size() == 4);
  // Duplicate texts keep the likelier entry.
  CHECK(logprobs["top_logprobs"][0].size() == 2);
  CHECK(logprobs["top_logprobs"][0]["a"].get<double>() == Approx(-0.1));
  CHECK(logprobs["top_logprobs"][0]["b"] == -2.0);
  CHECK(logprobs["top_logprobs"][3].empty());
  // Offsets in code points: the two halves of "é" make one.
  CHECK(logprobs["text_offset"] == json::array({10, 11, 12, 12}));
  CHECK(response["usage"]["total_tokens"] == 7);

  json without_top =
      json::parse(dump_json(text_completion_response(meta, {choice}, usage, true, false)));
  CHECK(without_top["choices"][0]["logprobs"]["top_logprobs"].is_null());
  CHECK(without_top["choices"][0]["logprobs"]["text_offset"][0] == 0);
  json without =
      json::parse(dump_json(text_completion_response(meta, {choice}, usage, false, false)));
  CHECK(without["choices"][0]["logprobs"].is_null());
}

TEST_CASE("chat bytes are the raw bytes of a partial UTF-8 token", "[openai_protocol]") {
  std::vector<TokenInfo> tokens = {{"\xE2\x82", -0.5f, {{"\xE2\x82", -0.5f}, {"\xFF", -1.0f}}}};
  json logprobs = json::parse(dump_json(chat_logprobs_json(tokens)));
  CHECK(logprobs["content"][0]["bytes"] == json::array({0xE2, 0x82}));
  CHECK(logprobs["content"][0]["top_logprobs"][1]["bytes"] == json::array({0xFF}));
  CHECK(logprobs["content"][0]["token"].get<std::string>().find("\xEF\xBF\xBD") !=
        std::string::npos);
}

TEST_CASE("a chat stream: role, content, finish, usage, done", "[openai_protocol]") {
  ResponseMeta meta = meta_for("chatcmpl-s");
  meta.include_usage = true;
  std::vector<TokenInfo> step = {{"Hi", -0.2f, {{"Hi", -0.2f}}}};
  std::string stream =
      sse_event(chat_role_chunk(meta, 0)) + sse_event(chat_content_chunk(meta, 0, "Hi", &step)) +
      sse_event(chat_content_chunk(meta, 0, " there", nullptr)) +
      sse_event(chat_finish_chunk(meta, 0, FinishReason::Stop)) +
      sse_event(usage_chunk(meta, "chat.completion.chunk", Usage{4, 2, 0})) + sse_done();

  // Split the stream into frames as a client would.
  std::vector<std::string> frames;
  for (std::size_t start = 0; start < stream.size();) {
    std::size_t end = stream.find("\n\n", start);
    REQUIRE(end != std::string::npos);
    frames.push_back(stream.substr(start, end + 2 - start));
    start = end + 2;
  }
  REQUIRE(frames.size() == 6);
  CHECK(frames.back() == "data: [DONE]\n\n");

  std::string content;
  for (std::size_t i = 0; i < 4; ++i) {
    json chunk = parse_event(frames[i]);
    CHECK(chunk["id"] == "chatcmpl-s");
    CHECK(chunk["object"] == "chat.completion.chunk");
    CHECK(chunk["created"] == 1700000000);
    CHECK(chunk["model"] == "tiny");
    CHECK(chunk.contains("usage"));
    CHECK(chunk["usage"].is_null());
    REQUIRE(chunk["choices"].size() == 1);
    CHECK(chunk["choices"][0]["index"] == 0);
    json delta = chunk["choices"][0]["delta"];
    if (delta.contains("content"))
      content += delta["content"].get<std::string>();
    if (i == 0) {
      CHECK(delta["role"] == "assistant");
      CHECK(delta["content"] == "");
    } else {
      CHECK_FALSE(delta.contains("role"));
    }
    if (i < 3)
      CHECK(chunk["choices"][0]["finish_reason"].is_null());
  }
  CHECK(content == "Hi there");
  json with_logprobs = parse_event(frames[1]);
  CHECK(with_logprobs["choices"][0]["logprobs"]["content"][0]["token"] == "Hi");
  CHECK(parse_event(frames[2])["choices"][0]["logprobs"].is_null());
  json finish = parse_event(frames[3]);
  CHECK(finish["choices"][0]["delta"].empty());
  CHECK(finish["choices"][0]["finish_reason"] == "stop");
  json usage = parse_event(frames[4]);
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["total_tokens"] == 6);
  CHECK(usage["usage"]["prompt_tokens_details"]["cached_tokens"] == 0);

  // Without include_usage, chunks carry no usage key at all.
  meta.include_usage = false;
  CHECK_FALSE(json::parse(dump_json(chat_role_chunk(meta, 2))).contains("usage"));
  CHECK(json::parse(dump_json(chat_role_chunk(meta, 2)))["choices"][0]["index"] == 2);
  // The last content may close the choice in the same chunk.
  json closing =
      json::parse(dump_json(chat_content_chunk(meta, 1, "!", nullptr, FinishReason::Length)));
  CHECK(closing["choices"][0]["finish_reason"] == "length");
  CHECK(closing["choices"][0]["delta"]["content"] == "!");
}

TEST_CASE("a completion stream", "[openai_protocol]") {
  ResponseMeta meta = meta_for("cmpl-s");
  std::vector<TokenInfo> step = {{"\xC3\xA9t\xC3\xA9", -0.3f, {{"x", -1.0f}}}};
  json first =
      parse_event(sse_event(completion_chunk(meta, 0, "\xC3\xA9t\xC3\xA9", &step, true, 5)));
  CHECK(first["object"] == "text_completion");
  CHECK(first["id"] == "cmpl-s");
  CHECK(first["choices"][0]["text"] == "\xC3\xA9t\xC3\xA9");
  CHECK(first["choices"][0]["finish_reason"].is_null());
  CHECK(first["choices"][0]["logprobs"]["text_offset"] == json::array({5}));
  CHECK(first["choices"][0]["logprobs"]["top_logprobs"][0]["x"] == -1.0);
  CHECK_FALSE(first.contains("usage"));
  CHECK(utf8_length("\xC3\xA9t\xC3\xA9") == 3u);

  json last = parse_event(
      sse_event(completion_chunk(meta, 3, "", nullptr, false, 0, FinishReason::Length)));
  CHECK(last["choices"][0]["index"] == 3);
  CHECK(last["choices"][0]["finish_reason"] == "length");
  CHECK(last["choices"][0]["logprobs"].is_null());

  json usage = parse_event(sse_event(usage_chunk(meta, "text_completion", Usage{2, 3, 1})));
  CHECK(usage["object"] == "text_completion");
  CHECK(usage["choices"].empty());
  CHECK(usage["usage"]["completion_tokens"] == 3);
}

TEST_CASE("invalid UTF-8 in generated text never breaks a dump", "[openai_protocol]") {
  ResponseMeta meta = meta_for("chatcmpl-u");
  meta.model = "m\xC0";
  std::string frame = sse_event(chat_content_chunk(meta, 0, "ok \xF0\x9F bad", nullptr));
  json chunk = parse_event(frame);
  CHECK(chunk["choices"][0]["delta"]["content"].get<std::string>().rfind("ok ", 0) == 0);
  ChoiceResult choice;
  choice.text = "\xFE\xFF";
  json response = json::parse(dump_json(chat_completion_response(meta, {choice}, Usage{}, false)));
  CHECK(response["choices"][0]["message"]["content"] == "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST_CASE("finish reasons, ids, models", "[openai_protocol]") {
  CHECK(finish_reason_json(FinishReason::None).is_null());
  CHECK(finish_reason_json(FinishReason::Stop) == "stop");
  CHECK(finish_reason_json(FinishReason::Length) == "length");

  std::string a = new_response_id("chatcmpl-");
  std::string b = new_response_id("chatcmpl-");
  CHECK(a.rfind("chatcmpl-", 0) == 0);
  CHECK(a.size() == 9 + 24);
  CHECK(a != b);
  for (char c : a.substr(9))
    CHECK(std::isalnum(static_cast<unsigned char>(c)));
  // Every part of the id is random: the last characters of many ids differ
  // (they were always "AAA" when only the first 20 were drawn).
  std::set<std::string> tails;
  for (int i = 0; i < 20; ++i)
    tails.insert(new_response_id("x-").substr(2 + 21));
  CHECK(tails.size() > 10);
  CHECK(unix_time_now() > 1600000000);

  json models = json::parse(dump_json(models_list({"tiny", "other"}, 1700000000)));
  CHECK(models["object"] == "list");
  REQUIRE(models["data"].size() == 2);
  CHECK(models["data"][1]["id"] == "other");
  CHECK(models["data"][0]["object"] == "model");
  CHECK(models["data"][0]["owned_by"] == "caflm");
  CHECK(models["data"][0]["created"] == 1700000000);
}

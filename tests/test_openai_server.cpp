// `caflm serve`'s API end to end, in process: a cluster of one CPU replica
// behind the OpenAI server, driven over real sockets with a plain HTTP
// client. Every endpoint's shape, streaming against the same request not
// streamed, errors with their statuses, a client that leaves mid-stream
// (its request cancelled, seen through /metrics) and backpressure as 429.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "support/openai_server_fixture.hpp"

using namespace caflm;
using namespace caflm::testing;

TEST_CASE("the OpenAI endpoints answer in OpenAI's shapes", "[openai_server]") {
  ServerFixture f;
  const Reply models = f.get("/v1/models");
  REQUIRE(models.status == 200);
  CHECK(models.parsed()["data"][0]["id"] == "tiny");
  const Reply health = f.get("/health");
  CHECK(health.status == 200);
  CHECK(health.parsed()["status"] == "ok");

  // Chat, n = 2 with a seed: two choices, each its own draw.
  json body = chat_body(6);
  body["temperature"] = 1.0;
  body["seed"] = 11;
  body["n"] = 2;
  body["logprobs"] = true;
  body["top_logprobs"] = 3;
  const Reply chat = f.post("/v1/chat/completions", body);
  INFO(chat.body);
  REQUIRE(chat.status == 200);
  const json c = chat.parsed();
  CHECK(c["object"] == "chat.completion");
  REQUIRE(c["choices"].size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(c["choices"][i]["index"] == i);
    CHECK(c["choices"][i]["message"]["role"] == "assistant");
    CHECK(c["choices"][i]["finish_reason"] == "length");
    const json& content = c["choices"][i]["logprobs"]["content"];
    REQUIRE(content.size() == 6);
    CHECK(content[0]["top_logprobs"].size() == 3);
    CHECK(content[0]["logprob"].get<double>() <= 0.0);
  }
  CHECK(c["usage"]["completion_tokens"] == 12);
  CHECK(c["usage"]["total_tokens"] ==
        c["usage"]["prompt_tokens"].get<int>() + c["usage"]["completion_tokens"].get<int>());
  CHECK(c["usage"]["prompt_tokens_details"].contains("cached_tokens"));
  // The same request again gives the same choices: seeds are per choice.
  CHECK(f.post("/v1/chat/completions", body).parsed()["choices"] == c["choices"]);

  // Completions from token ids, with logprobs in that endpoint's shape.
  const json completion =
      f.post("/v1/completions",
             {{"prompt", {1, 2, 3, 4, 5}}, {"max_tokens", 5}, {"temperature", 0}, {"logprobs", 2}})
          .parsed();
  CHECK(completion["object"] == "text_completion");
  CHECK(completion["usage"]["prompt_tokens"] == 5);
  const json& logprobs = completion["choices"][0]["logprobs"];
  CHECK(logprobs["tokens"].size() == 5);
  CHECK(logprobs["token_logprobs"].size() == 5);
  CHECK(logprobs["top_logprobs"].size() == 5);

  // A stop string taken from the greedy answer ends it there, unshown.
  const std::string greedy =
      f.post("/v1/completions",
             {{"prompt", "Once"}, {"max_tokens", 12}, {"ignore_eos", true}, {"temperature", 0}})
          .parsed()["choices"][0]["text"];
  // Two ASCII characters past the start (a random model's text holds
  // multi-byte characters a byte cut would break).
  std::size_t at = 1;
  while (at + 1 < greedy.size() && (static_cast<unsigned char>(greedy[at]) >= 0x80 ||
                                    static_cast<unsigned char>(greedy[at + 1]) >= 0x80))
    ++at;
  REQUIRE(at + 1 < greedy.size());
  const std::string stop = greedy.substr(at, 2);
  const json stopped = f.post("/v1/completions", {{"prompt", "Once"},
                                                  {"max_tokens", 12},
                                                  {"ignore_eos", true},
                                                  {"temperature", 0},
                                                  {"stop", stop}})
                           .parsed();
  const std::string text = stopped["choices"][0]["text"];
  CHECK(text == greedy.substr(0, greedy.find(stop)));
  CHECK(stopped["choices"][0]["finish_reason"] == "stop");
}

TEST_CASE("a streamed answer is the answer not streamed, in chunks", "[openai_server]") {
  ServerFixture f;
  const json plain = f.post("/v1/chat/completions", chat_body(8)).parsed();
  json body = chat_body(8);
  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  const Reply streamed = f.post("/v1/chat/completions", body);
  REQUIRE(streamed.status == 200);
  bool done = false;
  const std::vector<json> events = sse_events(streamed.body, done);
  CHECK(done);
  REQUIRE(events.size() >= 3);
  CHECK(events.front()["choices"][0]["delta"]["role"] == "assistant");
  std::string text;
  std::string finish;
  for (const json& event : events) {
    CHECK(event["object"] == "chat.completion.chunk");
    CHECK(event["id"] == events.front()["id"]);
    if (event["choices"].empty())
      continue;
    const json& delta = event["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string())
      text += delta["content"].get<std::string>();
    if (!event["choices"][0]["finish_reason"].is_null())
      finish = event["choices"][0]["finish_reason"];
  }
  CHECK(text == plain["choices"][0]["message"]["content"]);
  CHECK(finish == "length");
  // The last event carries the usage and no choice.
  CHECK(events.back()["choices"].empty());
  CHECK(events.back()["usage"]["completion_tokens"] == 8);
  for (const char* count : {"prompt_tokens", "completion_tokens", "total_tokens"})
    CHECK(events.back()["usage"][count] == plain["usage"][count]);
  // The same prompt again: its full blocks came from the prefix cache.
  CHECK(events.back()["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>() > 0);
}

TEST_CASE("bad requests get OpenAI's errors with the right status", "[openai_server]") {
  ServerFixture f({}, "secret");
  // The key guards /v1/; /health needs none.
  CHECK(f.get("/health").status == 200);
  const Reply missing = f.get("/v1/models");
  CHECK(missing.status == 401);
  CHECK(missing.parsed()["error"]["code"] == "invalid_api_key");
  CHECK(f.get("/v1/models", "wrong").status == 401);
  CHECK(f.get("/v1/models", "secret").status == 200);
  CHECK(f.post("/v1/chat/completions", chat_body(2)).status == 401);
  CHECK(f.post("/v1/chat/completions", chat_body(2), "secret").status == 200);

  Client raw{f.server->port()};
  const Reply not_json = raw.request(http::verb::post, "/v1/completions", "{oops", "secret");
  CHECK(not_json.status == 400);
  CHECK(not_json.parsed()["error"]["type"] == "invalid_request_error");

  json wrong_type = chat_body(2);
  wrong_type["temperature"] = "hot";
  const Reply bad_type = f.post("/v1/chat/completions", wrong_type, "secret");
  CHECK(bad_type.status == 400);
  CHECK(bad_type.parsed()["error"]["param"] == "temperature");

  json other_model = chat_body(2);
  other_model["model"] = "gpt-4";
  const Reply unknown = f.post("/v1/chat/completions", other_model, "secret");
  CHECK(unknown.status == 404);
  CHECK(unknown.parsed()["error"]["code"] == "model_not_found");

  CHECK(f.get("/v2/nothing", "secret").status == 404);

  // A prompt longer than the context: 400, nothing runs.
  const Reply too_long = f.post(
      "/v1/completions", {{"prompt", std::vector<int>(600, 7)}, {"max_tokens", 1}}, "secret");
  CHECK(too_long.status == 400);
  CHECK(too_long.parsed()["error"]["code"] == "context_length_exceeded");
  const Reply bad_token = f.post(
      "/v1/completions", {{"prompt", std::vector<int>{1, 1 << 30}}, {"max_tokens", 1}}, "secret");
  CHECK(bad_token.status == 400);
}

TEST_CASE("a client that leaves mid-stream cancels its request at once", "[openai_server]") {
  ServerFixture f({}, {}, 16384);
  {
    Client client{f.server->port()};
    client.send(http::verb::post, "/v1/completions",
                json{{"prompt", "Once upon a time"},
                     {"max_tokens", 16000},
                     {"ignore_eos", true},
                     {"stream", true}}
                    .dump());
    http::response_parser<http::string_body> parser;
    http::read_header(client.socket, client.buffer, parser);
    REQUIRE(parser.get().result_int() == 200);
    while (parser.get().body().find("\n\n") == std::string::npos)
      http::read_some(client.socket, client.buffer, parser);
    // One event arrived; the client goes away.
  }
  REQUIRE(f.metric_becomes("vllm:num_requests_running{model_name=\"tiny\"}", 0.0));
  CHECK(f.metric_becomes(
      "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"abort\"}", 1.0));
  CHECK(f.metric("vllm:generation_tokens_total{model_name=\"tiny\"}") < 16000.0);
  // Its stream is no longer counted open.
  CHECK(f.metric_becomes("caflm_http_streams_open{model_name=\"tiny\"}", 0.0));
}

TEST_CASE("when every engine's queue is full, a request gets 429 with Retry-After",
          "[openai_server]") {
  EngineLimits limits;
  limits.max_concurrent = 1;
  limits.queue_capacity = 1;
  ServerFixture f(limits, {}, 16384);
  const std::string long_stream = json{
      {"prompt", "Once upon a time"},
      {"max_tokens", 16000},
      {"ignore_eos", true},
      {"stream", true}}.dump();
  Client running{f.server->port()};
  running.send(http::verb::post, "/v1/completions", long_stream);
  REQUIRE(f.metric_becomes("vllm:num_requests_running{model_name=\"tiny\"}", 1.0));
  Client waiting{f.server->port()};
  waiting.send(http::verb::post, "/v1/completions", long_stream);
  REQUIRE(f.metric_becomes("vllm:num_requests_waiting{model_name=\"tiny\"}", 1.0));

  const Reply refused = f.post("/v1/completions", {{"prompt", "Hi"}, {"max_tokens", 2}});
  CHECK(refused.status == 429);
  CHECK_FALSE(refused.retry_after.empty());
  CHECK(refused.parsed()["error"]["code"] == "rate_limit_exceeded");
  // Nothing else was disturbed: the two long requests still hold the engine.
  CHECK(f.metric("vllm:num_requests_running{model_name=\"tiny\"}") == 1.0);
}

TEST_CASE("without a chat template, completions serve and chat says what is missing",
          "[openai_server]") {
  ServerFixture f({}, {}, 512, /*chat_template=*/false);
  const Reply chat = f.post("/v1/chat/completions", chat_body(2));
  CHECK(chat.status == 400);
  CHECK(chat.parsed()["error"]["message"].get<std::string>().find("--chat-template") !=
        std::string::npos);
  CHECK(f.post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 2}}).status == 200);
}

TEST_CASE("/metrics names each engine and measures the queue time of every request",
          "[openai_server]") {
  ServerFixture f({}, {}, 512, true, /*replicas=*/2);
  // Four choices of one long prompt: they form one prefill group, which the
  // coordinator keeps on one engine and that engine computes once.
  std::vector<int> prompt(70);
  for (std::size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int>(3 + i * 7 % 200);
  const Reply reply = f.post("/v1/completions", {{"prompt", prompt},
                                                 {"max_tokens", 3},
                                                 {"ignore_eos", true},
                                                 {"n", 4},
                                                 {"seed", 9},
                                                 {"temperature", 1.0}});
  INFO(reply.body);
  REQUIRE(reply.status == 200);
  CHECK(reply.parsed()["choices"].size() == 4);
  CHECK(reply.parsed()["usage"]["prompt_tokens"] == 70);
  CHECK(f.metric("vllm:request_queue_time_seconds_count{model_name=\"tiny\"}") == 4.0);
  CHECK(f.metric("vllm:request_queue_time_seconds_sum{model_name=\"tiny\"}") >= 0.0);
  for (const char* engine : {"local-0", "local-1"})
    CHECK(f.metric(std::string("caflm_engine_up{model_name=\"tiny\",engine=\"") + engine + "\"}") ==
          1.0);
}

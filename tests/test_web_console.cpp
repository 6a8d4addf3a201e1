// The web console's side of `caflm serve`, in process over real sockets:
// the embedded pages and their security headers, `/v1/cluster` with the API
// key, the engines that served each answer, and the event stream telling of
// a lost engine and the request it moved.
#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <sys/time.h>

#include <string>
#include <vector>

#include "support/openai_server_fixture.hpp"

using namespace caflm;
using namespace caflm::testing;

namespace {

/// Polls /v1/cluster until `accept` holds for it; the last answer either way.
template <class Predicate>
json cluster_until(ServerFixture& f, const std::string& key, Predicate accept) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  json state;
  while (std::chrono::steady_clock::now() < deadline) {
    const Reply reply = f.get("/v1/cluster", key);
    REQUIRE(reply.status == 200);
    state = reply.parsed();
    if (accept(state))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return state;
}

bool all_up(const json& state) {
  for (const auto& engine : state["engines"])
    if (engine["state"] != "up")
      return false;
  return !state["engines"].empty();
}

/// A streamed response read as it comes, each read bounded by `patience`.
struct Stream {
  Stream(std::uint16_t port, http::verb method, const std::string& target,
         const std::string& body = {})
    : client(port) {
    const timeval timeout{static_cast<time_t>(patience.count()), 0};
    ::setsockopt(client.socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    client.send(method, target, body);
    http::read_header(client.socket, client.buffer, parser);
  }

  int status() { return static_cast<int>(parser.get().result_int()); }

  /// Reads until the body holds `text`; false when the stream ends or stalls
  /// first.
  bool read_until(const std::string& text) {
    boost::system::error_code error;
    while (parser.get().body().find(text) == std::string::npos) {
      http::read_some(client.socket, client.buffer, parser, error);
      if (error)
        return false;
    }
    return true;
  }

  /// Reads until the body has grown by `bytes`; false as above.
  bool read_more(std::size_t bytes) {
    const std::size_t target = parser.get().body().size() + bytes;
    boost::system::error_code error;
    while (parser.get().body().size() < target) {
      http::read_some(client.socket, client.buffer, parser, error);
      if (error)
        return false;
    }
    return true;
  }

  const std::string& body() { return parser.get().body(); }

  Client client;
  http::response_parser<http::string_body> parser;
};

} // namespace

TEST_CASE("the console's pages and files come from the binary, under a strict policy",
          "[web_console]") {
  ServerFixture f({}, "secret");
  for (const char* path : {"/", "/cluster", "/console/console.js", "/console/chat.js",
                           "/console/cluster.js", "/console/console.css"}) {
    INFO(path);
    // The pages need no key: they ask for it.
    const Reply page = f.get(path);
    CHECK(page.status == 200);
    CHECK_FALSE(page.body.empty());
    CHECK(page.headers["Content-Security-Policy"].find("default-src 'self'") !=
          boost::string_view::npos);
    CHECK(page.headers["X-Content-Type-Options"] == "nosniff");
  }
  CHECK(f.get("/").headers["Content-Type"] == "text/html; charset=utf-8");
  CHECK(f.get("/").body.find("/console/chat.js") != std::string::npos);
  CHECK(f.get("/cluster").body.find("/console/cluster.js") != std::string::npos);
  CHECK(f.get("/console/chat.js").headers["Content-Type"] == "text/javascript; charset=utf-8");
  CHECK(f.get("/console/nothing.js").status == 404);
}

TEST_CASE("/v1/cluster shows each engine, the requests and their latencies; answers name "
          "their engines",
          "[web_console]") {
  ServerFixture f({}, "secret", 512, true, /*replicas=*/2);
  CHECK(f.get("/v1/cluster").status == 401);
  CHECK(f.get("/v1/cluster", "wrong").status == 401);
  CHECK(f.get("/v1/cluster/events").status == 401);
  json state = cluster_until(f, "secret", all_up);
  REQUIRE(state["engines"].size() == 2);
  CHECK(state["model"] == "tiny");
  CHECK(state["engines"][0]["name"] == "local-0");
  CHECK(state["engines"][0]["kind"] == "local");
  CHECK(state["engines"][0]["kv_blocks_total"].get<int>() > 0);

  json body = chat_body(4);
  const Reply whole = f.post("/v1/chat/completions", body, "secret");
  REQUIRE(whole.status == 200);
  const json engines = whole.parsed()["choices"][0]["engines"];
  REQUIRE(engines.size() == 1);
  CHECK((engines[0] == "local-0" || engines[0] == "local-1"));

  body["stream"] = true;
  const Reply streamed = f.post("/v1/chat/completions", body, "secret");
  bool done = false;
  const auto chunks = sse_events(streamed.body, done);
  REQUIRE(done);
  bool saw_engines = false;
  for (const auto& chunk : chunks)
    if (!chunk["choices"].empty() && !chunk["choices"][0]["finish_reason"].is_null()) {
      CHECK(chunk["choices"][0]["engines"].size() == 1);
      saw_engines = true;
    }
  CHECK(saw_engines);

  state = cluster_until(f, "secret", [](const json& s) { return s["requests"]["total"] == 2; });
  CHECK(state["requests"]["total"] == 2);
  CHECK(state["requests"]["running"] == 0);
  CHECK(state["requests"]["failed"] == 0);
  // The requests' latencies are in the interval they ended in; the snapshot
  // may come from a later one (intervals are 5 s long), so look at them all.
  bool saw_ttft = false, saw_itl = false;
  for (const json& point : state["series"]["points"]) {
    saw_ttft = saw_ttft || point["ttft_p50"].is_number();
    saw_itl = saw_itl || point["itl_p50"].is_number();
  }
  CHECK(saw_ttft);
  CHECK(saw_itl);
}

TEST_CASE("the event stream replays the timeline, then tells of a lost engine and the request "
          "it moved",
          "[web_console]") {
  ServerFixture f({}, {}, 16384, true, /*replicas=*/2);
  cluster_until(f, "", all_up);
  Stream events(f.server->port(), http::verb::get, "/v1/cluster/events");
  REQUIRE(events.status() == 200);
  CHECK(events.parser.get()[http::field::content_type] == "text/event-stream");
  REQUIRE(events.read_until("\"engine\":\"local-1\""));
  CHECK(events.body().find("\"type\":\"engine_up\"") != std::string::npos);

  // A long answer streams from one engine; that engine dies.
  Stream answer(f.server->port(), http::verb::post, "/v1/completions",
                json{{"prompt", "Once upon a time"},
                     {"max_tokens", 16000},
                     {"ignore_eos", true},
                     {"stream", true}}
                    .dump());
  REQUIRE(answer.read_until("\"text\""));
  json state = cluster_until(f, "", [](const json& s) {
    return s["engines"][0]["running"] == 1 || s["engines"][1]["running"] == 1;
  });
  const std::size_t busy = state["engines"][0]["running"] == 1 ? 0 : 1;
  const std::string busy_name = "local-" + std::to_string(busy);
  const std::string other_name = "local-" + std::to_string(1 - busy);
  caf::anon_send_exit(f.cluster->engines()[busy], caf::exit_reason::kill);

  REQUIRE(events.read_until("\"type\":\"request_moved\""));
  REQUIRE(events.read_until("\"type\":\"engine_lost\",\"message\":\"engine " + busy_name));
  CHECK(events.body().find("\"from\":\"" + busy_name + "\",\"to\":\"" + other_name + "\"") !=
        std::string::npos);
  state =
      cluster_until(f, "", [busy](const json& s) { return s["engines"][busy]["state"] == "lost"; });
  CHECK(state["engines"][busy]["state"] == "lost");
  CHECK(state["engines"][busy]["reconnecting"] == false);
  CHECK(state["requests"]["failovers"] == 1);

  // The answer goes on from the other engine.
  CHECK(answer.read_more(1000));

  // A client resuming after an event it saw gets only the later ones.
  const std::size_t lost_at = events.body().find("\"type\":\"engine_lost\"");
  const std::size_t id_at = events.body().rfind("id: ", lost_at);
  const std::string lost_id =
      events.body().substr(id_at + 4, events.body().find('\n', id_at) - id_at - 4);
  Stream resumed(f.server->port(), http::verb::get,
                 "/v1/cluster/events?after=" + std::to_string(std::stoi(lost_id) - 1));
  REQUIRE(resumed.read_until("id: " + lost_id + "\n"));
  CHECK(resumed.body().find("\"type\":\"engine_up\"") == std::string::npos);
}

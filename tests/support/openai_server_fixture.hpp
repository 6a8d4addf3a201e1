#pragma once

// `caflm serve`'s API in process for tests: a cluster of CPU replicas of a
// small random model behind the OpenAI server, and a blocking HTTP client
// over real sockets.

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <caf/all.hpp>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "caflm/actors/cluster.hpp"
#include "caflm/model/model.hpp"
#include "caflm/server/openai_server.hpp"
#include "model_harness.hpp"

namespace caflm::testing {

using json = nlohmann::json;
namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;

/// Bounds every wait, so a broken server fails instead of hanging; not a
/// timing assertion.
constexpr auto patience = std::chrono::seconds{30};

inline caf::actor_system_config& threaded(caf::actor_system_config& cfg) {
  add_message_types(cfg);
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  return cfg;
}

struct Reply {
  int status = 0;
  std::string body;
  std::string retry_after;
  http::fields headers;
  json parsed() const { return json::parse(body); }
};

/// One blocking client connection.
struct Client {
  explicit Client(std::uint16_t port) {
    socket.connect({net::ip::make_address("127.0.0.1"), port});
  }

  void send(http::verb method, const std::string& target, const std::string& body,
            const std::string& api_key = {}) {
    http::request<http::string_body> req{method, target, 11};
    req.set(http::field::host, "127.0.0.1");
    req.set(http::field::content_type, "application/json");
    if (!api_key.empty())
      req.set(http::field::authorization, "Bearer " + api_key);
    if (method == http::verb::post) {
      req.body() = body;
      req.prepare_payload();
    }
    http::write(socket, req);
  }

  Reply request(http::verb method, const std::string& target, const std::string& body = {},
                const std::string& api_key = {}) {
    send(method, target, body, api_key);
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    http::read(socket, buffer, parser);
    auto response = parser.release();
    return Reply{static_cast<int>(response.result_int()), response.body(),
                 std::string(response[http::field::retry_after]), response.base()};
  }

  net::io_context io;
  tcp::socket socket{io};
  boost::beast::flat_buffer buffer;
};

/// The JSON objects of an SSE body, and whether it ended with [DONE].
inline std::vector<json> sse_events(const std::string& body, bool& done) {
  std::vector<json> events;
  done = false;
  std::size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const std::size_t end = body.find("\n\n", at);
    REQUIRE(end != std::string::npos);
    const std::string data = body.substr(at + 6, end - at - 6);
    if (data == "[DONE]")
      done = true;
    else
      events.push_back(json::parse(data));
    at = end + 2;
  }
  return events;
}

/// A cluster of one replica and its server.
struct ServerFixture {
  explicit ServerFixture(EngineLimits limits = {}, std::string api_key = {},
                         std::uint32_t context = 512, bool chat_template = true,
                         std::uint32_t replicas = 1)
    : system(threaded(cfg)) {
    RandomModelSpec spec = small_random_spec("llama", 77);
    spec.context_length = context;
    model = random_model(spec);
    ClusterOptions options;
    options.replicas = replicas;
    options.limits = limits;
    options.kv_cache_bytes = std::size_t{16} << 20;
    options.request.max_backpressure_refusals = 1;
    cluster.emplace(system, model, options);
    server::OpenAiServerOptions server_options;
    server_options.served_model_name = "tiny";
    server_options.api_key = std::move(api_key);
    server_options.max_context = context;
    server_options.http.port = 0;
    std::optional<ChatTemplate> chat;
    if (chat_template)
      chat = ChatTemplate::builtin("chatml", model->file());
    server.emplace(system, *cluster, cluster->tokenizer(), std::move(chat), server_options);
    server->start();
  }

  ~ServerFixture() {
    server.reset();
    cluster->shutdown();
  }

  Reply post(const std::string& path, const json& body, const std::string& key = {}) {
    Client client{server->port()};
    return client.request(http::verb::post, path, body.dump(), key);
  }

  Reply get(const std::string& path, const std::string& key = {}) {
    Client client{server->port()};
    return client.request(http::verb::get, path, {}, key);
  }

  /// The value of the metric line starting with `series` in /metrics.
  double metric(const std::string& series) {
    const std::string text = get("/metrics").body;
    const std::size_t at = text.find("\n" + series + " ");
    REQUIRE(at != std::string::npos);
    return std::stod(text.substr(at + series.size() + 2));
  }

  /// Polls `series` until it equals `value`; false after `patience`.
  bool metric_becomes(const std::string& series, double value) {
    const auto deadline = std::chrono::steady_clock::now() + patience;
    while (std::chrono::steady_clock::now() < deadline) {
      if (metric(series) == value)
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }

  caf::actor_system_config cfg;
  caf::actor_system system;
  std::shared_ptr<const Model> model;
  std::optional<Cluster> cluster;
  std::optional<server::OpenAiServer> server;
};

/// A short greedy chat request to the fixture's model.
inline json chat_body(std::uint32_t max_tokens) {
  return json{{"model", "tiny"},
              {"messages", json::array({{{"role", "system"}, {"content", "Be brief."}},
                                        {{"role", "user"}, {"content", "Say something."}}})},
              {"max_tokens", max_tokens},
              {"ignore_eos", true},
              {"temperature", 0}};
}

} // namespace caflm::testing

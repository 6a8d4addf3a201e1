// The HTTP transport of `caflm serve`, driven by Beast's synchronous client:
// routing, bodies, keep-alive, limits, malformed input, streaming, disconnect
// detection, and 1,000 concurrent streams on a bounded number of threads.

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/resource.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>

#include "caflm/server/http_server.hpp"

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using caflm::server::HttpRequest;
using caflm::server::HttpServer;
using caflm::server::ResponseWriter;

namespace {

/// Bounds every wait of the test, so a broken server fails instead of
/// hanging; not a timing assertion.
constexpr auto patience = std::chrono::seconds{20};

using Writer = std::shared_ptr<ResponseWriter>;

/// One blocking client connection.
struct Client {
  explicit Client(std::uint16_t port) {
    socket.connect({net::ip::make_address("127.0.0.1"), port});
  }

  http::response<http::string_body> request(http::verb method, std::string target,
                                            std::string body = {}, unsigned version = 11) {
    http::request<http::string_body> req{method, target, version};
    req.set(http::field::host, "127.0.0.1");
    if (!body.empty() || method == http::verb::post) {
      req.body() = std::move(body);
      req.prepare_payload();
    }
    http::write(socket, req);
    return read_response();
  }

  http::response<http::string_body> read_response() {
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    http::read(socket, buffer, parser);
    return parser.release();
  }

  void send_raw(std::string_view bytes) {
    net::write(socket, net::buffer(bytes.data(), bytes.size()));
  }

  /// Whether the server has closed the connection: a read that ends in EOF
  /// (or a reset) rather than data.
  bool sees_close() {
    char byte;
    boost::system::error_code ec;
    auto n = socket.read_some(net::buffer(&byte, 1), ec);
    return n == 0 && ec;
  }

  net::io_context io;
  tcp::socket socket{io};
  boost::beast::flat_buffer buffer;
};

HttpServer::Options test_options() {
  HttpServer::Options options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.threads = 2;
  return options;
}

/// Passes writers from handlers (io threads) to the test thread.
class WriterBox {
 public:
  void put(Writer writer) {
    std::lock_guard<std::mutex> guard{mutex_};
    writers_.push_back(std::move(writer));
    changed_.notify_all();
  }

  /// Waits until `count` writers have arrived; false when they did not.
  bool wait_for(std::size_t count) {
    std::unique_lock<std::mutex> lock{mutex_};
    return changed_.wait_for(lock, patience, [&] { return writers_.size() >= count; });
  }

  Writer at(std::size_t i) {
    std::lock_guard<std::mutex> guard{mutex_};
    return writers_.at(i);
  }

  std::vector<Writer> all() {
    std::lock_guard<std::mutex> guard{mutex_};
    return writers_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Writer> writers_;
};

/// A flag raised by one thread and awaited by another.
class Signal {
 public:
  void raise() {
    std::lock_guard<std::mutex> guard{mutex_};
    raised_ = true;
    changed_.notify_all();
  }

  bool wait() {
    std::unique_lock<std::mutex> lock{mutex_};
    return changed_.wait_for(lock, patience, [&] { return raised_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool raised_ = false;
};

int process_thread_count() {
  std::ifstream status{"/proc/self/status"};
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("Threads:", 0) == 0)
      return std::stoi(line.substr(8));
  return -1;
}

} // namespace

TEST_CASE("requests go to their route, others get 404 and 405", "[http_server]") {
  HttpServer server{test_options()};
  server.route("GET", "/hello", [](const HttpRequest& req, Writer writer) {
    writer->respond(200, "text/plain", "hello " + req.target + " query=" + req.query);
  });
  server.start();
  REQUIRE(server.port() != 0);
  Client client{server.port()};

  auto hello = client.request(http::verb::get, "/hello?x=1&y=2");
  CHECK(hello.result_int() == 200);
  CHECK(hello.body() == "hello /hello query=x=1&y=2");
  CHECK(hello[http::field::content_type] == "text/plain");

  auto missing = client.request(http::verb::get, "/nowhere");
  CHECK(missing.result_int() == 404);
  CHECK(missing[http::field::content_type] == "application/json");
  CHECK(missing.body().find(R"({"error":{"message":)") == 0);
  CHECK(missing.body().find("/nowhere") != std::string::npos);

  auto wrong_method = client.request(http::verb::post, "/hello", "x");
  CHECK(wrong_method.result_int() == 405);
  CHECK(wrong_method[http::field::allow] == "GET");
}

TEST_CASE("the fallback handler can be replaced", "[http_server]") {
  HttpServer server{test_options()};
  server.fallback([](const HttpRequest& req, Writer writer) {
    writer->respond(418, "text/plain", "teapot at " + req.target, {{"X-Fallback", "yes"}});
  });
  server.start();
  Client client{server.port()};
  auto response = client.request(http::verb::get, "/anything");
  CHECK(response.result_int() == 418);
  CHECK(response.body() == "teapot at /anything");
  CHECK(response["X-Fallback"] == "yes");
  CHECK_THROWS_AS(server.route("GET", "/late", [](auto&&, auto&&) {}), std::logic_error);
}

TEST_CASE("a POST body and its headers reach the handler", "[http_server]") {
  HttpServer server{test_options()};
  server.route("POST", "/echo", [](const HttpRequest& req, Writer writer) {
    auto tag = req.header("x-TAG");
    writer->respond(200, "application/octet-stream",
                    std::string{tag.value_or("none")} + ":" + req.body);
  });
  server.start();
  Client client{server.port()};

  std::string body(100'000, 'b');
  for (std::size_t i = 0; i < body.size(); i += 7)
    body[i] = static_cast<char>('a' + i % 26);
  http::request<http::string_body> req{http::verb::post, "/echo", 11};
  req.set(http::field::host, "127.0.0.1");
  req.set("X-Tag", "t1");
  req.body() = body;
  req.prepare_payload();
  http::write(client.socket, req);
  auto response = client.read_response();
  CHECK(response.result_int() == 200);
  CHECK(response.body() == "t1:" + body);

  // The same body sent chunked arrives de-chunked.
  http::request<http::string_body> chunked{http::verb::post, "/echo", 11};
  chunked.set(http::field::host, "127.0.0.1");
  chunked.body() = "chunked body";
  chunked.chunked(true);
  http::write(client.socket, chunked);
  CHECK(client.read_response().body() == "none:chunked body");
}

TEST_CASE("a connection is kept alive across requests", "[http_server]") {
  HttpServer server{test_options()};
  server.route("GET", "/who", [](const HttpRequest& req, Writer writer) {
    writer->respond(200, "text/plain", req.remote);
  });
  server.start();
  Client client{server.port()};
  auto first = client.request(http::verb::get, "/who");
  auto second = client.request(http::verb::get, "/who");
  CHECK(first.keep_alive());
  CHECK(first.body().rfind("127.0.0.1:", 0) == 0);
  // The same client address and port: the same connection served both.
  CHECK(second.body() == first.body());
  CHECK(server.connection_count() == 1);

  // Pipelined: two requests sent before either answer, answered in order.
  client.send_raw("GET /who HTTP/1.1\r\nHost: x\r\n\r\n"
                  "GET /missing HTTP/1.1\r\nHost: x\r\n\r\n");
  CHECK(client.read_response().body() == first.body());
  CHECK(client.read_response().result_int() == 404);

  // HTTP/1.0 without keep-alive: answered, then closed.
  Client old{server.port()};
  auto response = old.request(http::verb::get, "/who", {}, 10);
  CHECK(response.result_int() == 200);
  CHECK(old.sees_close());
}

TEST_CASE("a body over the limit gets 413", "[http_server]") {
  auto options = test_options();
  options.max_body_bytes = 1024;
  HttpServer server{options};
  std::atomic<int> calls{0};
  server.route("POST", "/echo", [&](const HttpRequest& req, Writer writer) {
    ++calls;
    writer->respond(200, "text/plain", req.body);
  });
  server.start();

  SECTION("with Content-Length") {
    Client client{server.port()};
    auto response = client.request(http::verb::post, "/echo", std::string(4096, 'x'));
    CHECK(response.result_int() == 413);
    CHECK(response.body().find("1024") != std::string::npos);
    CHECK(client.sees_close());
  }
  SECTION("chunked") {
    Client client{server.port()};
    http::request<http::string_body> req{http::verb::post, "/echo", 11};
    req.set(http::field::host, "x");
    req.body() = std::string(4096, 'x');
    req.chunked(true);
    http::write(client.socket, req);
    CHECK(client.read_response().result_int() == 413);
    CHECK(client.sees_close());
  }
  SECTION("at the limit it passes") {
    Client client{server.port()};
    auto response = client.request(http::verb::post, "/echo", std::string(1024, 'y'));
    CHECK(response.result_int() == 200);
    CHECK(response.body() == std::string(1024, 'y'));
  }
  SECTION("Expect: 100-continue") {
    Client client{server.port()};
    client.send_raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                    "Expect: 100-continue\r\n\r\n");
    // The interim response comes before the body is sent.
    CHECK(client.read_response().result_int() == 100);
    client.send_raw("hello");
    auto response = client.read_response();
    CHECK(response.result_int() == 200);
    CHECK(response.body() == "hello");

    // Too large: refused without the body being sent.
    client.send_raw("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n"
                    "Expect: 100-continue\r\n\r\n");
    CHECK(client.read_response().result_int() == 413);
    CHECK(client.sees_close());
  }
  if (calls > 1)
    FAIL("the handler ran for a refused body");
}

TEST_CASE("malformed requests get 400 and a close", "[http_server]") {
  HttpServer server{test_options()};
  server.route("GET", "/ok",
               [](const HttpRequest&, Writer writer) { writer->respond(200, "text/plain", "ok"); });
  server.start();
  for (std::string_view garbage :
       {"GARBAGE\r\n\r\n", "GET /ok HTTP/9.9\r\n\r\n", "GET /ok HTTP/1.1\r\nBad Header\r\n\r\n",
        "POST /ok HTTP/1.1\r\nContent-Length: abc\r\n\r\n"}) {
    INFO(garbage);
    Client client{server.port()};
    client.send_raw(garbage);
    auto response = client.read_response();
    CHECK(response.result_int() == 400);
    CHECK(response.body().find("Malformed") != std::string::npos);
    CHECK(client.sees_close());
  }
  // The server still serves.
  Client client{server.port()};
  CHECK(client.request(http::verb::get, "/ok").body() == "ok");
}

TEST_CASE("a handler that throws or drops its writer yields 500", "[http_server]") {
  HttpServer server{test_options()};
  server.route("GET", "/throw",
               [](const HttpRequest&, Writer) { throw std::runtime_error("boom"); });
  server.route("GET", "/drop", [](const HttpRequest&, Writer) {});
  server.route("GET", "/inject", [](const HttpRequest&, Writer writer) {
    // A line break in a header value would forge headers: refused.
    writer->respond(200, "text/plain", "x", {{"X-Evil", "a\r\nSet-Cookie: b"}});
  });
  server.start();
  Client client{server.port()};
  auto thrown = client.request(http::verb::get, "/throw");
  CHECK(thrown.result_int() == 500);
  CHECK(thrown.body().find("boom") != std::string::npos);
  CHECK(client.request(http::verb::get, "/drop").result_int() == 500);
  auto injected = client.request(http::verb::get, "/inject");
  CHECK(injected.result_int() == 500);
  CHECK(injected.find("Set-Cookie") == injected.end());
}

TEST_CASE("a streamed response reaches the client piece by piece", "[http_server]") {
  HttpServer server{test_options()};
  WriterBox box;
  server.route("GET", "/events", [&](const HttpRequest&, Writer writer) {
    writer->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
    box.put(std::move(writer));
  });
  server.start();
  Client client{server.port()};
  http::request<http::string_body> req{http::verb::get, "/events", 11};
  req.set(http::field::host, "x");
  http::write(client.socket, req);

  REQUIRE(box.wait_for(1));
  Signal client_saw_first;
  // Another thread than the io threads answers, as an actor would.
  auto producer = std::async(std::launch::async, [&] {
    auto writer = box.at(0);
    bool ok = writer->write("data: 1\n\n");
    if (!client_saw_first.wait())
      return false;
    ok = writer->write("data: 2\n\n") && ok;
    writer->finish();
    return ok && !writer->write("late");
  });

  http::response_parser<http::string_body> parser;
  http::read_header(client.socket, client.buffer, parser);
  CHECK(parser.get().result_int() == 200);
  CHECK(parser.get().chunked());
  CHECK(parser.get()[http::field::content_type] == "text/event-stream");
  CHECK(parser.get()[http::field::cache_control] == "no-cache");
  while (parser.get().body().find("data: 1\n\n") == std::string::npos) {
    REQUIRE_FALSE(parser.is_done());
    http::read_some(client.socket, client.buffer, parser);
  }
  // The second event does not exist yet: the first arrived on its own.
  CHECK(parser.get().body() == "data: 1\n\n");
  client_saw_first.raise();
  http::read(client.socket, client.buffer, parser);
  CHECK(parser.get().body() == "data: 1\n\ndata: 2\n\n");
  CHECK(producer.get());

  // The connection serves the next request after the stream.
  auto next = client.request(http::verb::get, "/missing");
  CHECK(next.result_int() == 404);
}

TEST_CASE("an HTTP/1.0 stream is the raw body ended by a close", "[http_server]") {
  HttpServer server{test_options()};
  server.route("GET", "/events", [&](const HttpRequest&, Writer writer) {
    writer->start_stream(200, "text/event-stream");
    writer->write("data: a\n\n");
    writer->write("data: b\n\n");
    writer->finish();
  });
  server.start();
  Client client{server.port()};
  auto response = client.request(http::verb::get, "/events", {}, 10);
  CHECK(response.result_int() == 200);
  CHECK_FALSE(response.chunked());
  CHECK(response.body() == "data: a\n\ndata: b\n\n");
}

TEST_CASE("a client that leaves is seen, streaming or not yet answered", "[http_server]") {
  HttpServer server{test_options()};
  WriterBox box;
  std::promise<void> closed_while_streaming;
  std::promise<void> closed_before_answer;
  std::atomic<int> close_calls{0};
  server.route("GET", "/stream", [&](const HttpRequest&, Writer writer) {
    writer->on_close([&] {
      ++close_calls;
      closed_while_streaming.set_value();
    });
    writer->start_stream(200, "text/event-stream");
    writer->write("data: first\n\n");
    box.put(std::move(writer));
  });
  server.route("GET", "/slow", [&](const HttpRequest&, Writer writer) {
    writer->on_close([&] { closed_before_answer.set_value(); });
    box.put(std::move(writer));
  });
  server.start();

  SECTION("mid-stream") {
    {
      Client client{server.port()};
      http::request<http::string_body> req{http::verb::get, "/stream", 11};
      req.set(http::field::host, "x");
      http::write(client.socket, req);
      http::response_parser<http::string_body> parser;
      http::read_header(client.socket, client.buffer, parser);
      while (parser.get().body().empty())
        http::read_some(client.socket, client.buffer, parser);
      CHECK(parser.get().body() == "data: first\n\n");
    } // The client disconnects.
    REQUIRE(closed_while_streaming.get_future().wait_for(patience) == std::future_status::ready);
    auto writer = box.at(0);
    CHECK(writer->closed());
    CHECK_FALSE(writer->write("data: dropped\n\n"));
    writer->finish();
    // A late registration runs at once; the first ran exactly once.
    bool late = false;
    writer->on_close([&] { late = true; });
    CHECK(late);
    CHECK(close_calls == 1);
  }
  SECTION("before the handler answered") {
    {
      Client client{server.port()};
      http::request<http::string_body> req{http::verb::get, "/slow", 11};
      req.set(http::field::host, "x");
      http::write(client.socket, req);
      REQUIRE(box.wait_for(1));
    }
    REQUIRE(closed_before_answer.get_future().wait_for(patience) == std::future_status::ready);
    auto writer = box.at(0);
    CHECK(writer->closed());
    CHECK_FALSE(writer->respond(200, "text/plain", "too late"));
  }
  SECTION("the server stops") {
    Client client{server.port()};
    http::request<http::string_body> req{http::verb::get, "/stream", 11};
    req.set(http::field::host, "x");
    http::write(client.socket, req);
    REQUIRE(box.wait_for(1));
    server.stop();
    CHECK(close_calls == 1);
    CHECK_FALSE(box.at(0)->write("data: after stop\n\n"));
  }
}

TEST_CASE("idle and surplus connections are closed", "[http_server]") {
  auto options = test_options();
  options.idle_timeout = std::chrono::milliseconds{100};
  options.max_connections = 2;
  HttpServer server{options};
  server.route("GET", "/ok",
               [](const HttpRequest&, Writer writer) { writer->respond(200, "text/plain", "ok"); });
  server.start();

  SECTION("idle") {
    Client client{server.port()};
    CHECK(client.request(http::verb::get, "/ok").body() == "ok");
    // Nothing more is sent: the server closes after the idle timeout.
    CHECK(client.sees_close());
  }
  SECTION("over the connection limit") {
    auto no_timeout = test_options();
    no_timeout.max_connections = 2;
    HttpServer limited{no_timeout};
    limited.route("GET", "/ok", [](const HttpRequest&, Writer writer) {
      writer->respond(200, "text/plain", "ok");
    });
    limited.start();
    Client first{limited.port()};
    Client second{limited.port()};
    // Both answered: both accepted and counted before the third comes.
    CHECK(first.request(http::verb::get, "/ok").body() == "ok");
    CHECK(second.request(http::verb::get, "/ok").body() == "ok");
    Client third{limited.port()};
    CHECK(third.sees_close());
    CHECK(limited.connection_count() == 2);
  }
}

TEST_CASE("1,000 concurrent streams complete on a bounded number of threads", "[http_server]") {
  constexpr std::size_t n_clients = 1000;
  constexpr int n_events = 5;
  // Each stream holds a client and a server descriptor.
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_cur < 2 * n_clients + 100) {
    limit.rlim_cur = std::min<rlim_t>(limit.rlim_max, 2 * n_clients + 1000);
    setrlimit(RLIMIT_NOFILE, &limit);
    getrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < 2 * n_clients + 100) {
    WARN("skipped: RLIMIT_NOFILE is " << limit.rlim_cur);
    return;
  }

  HttpServer server{test_options()};
  WriterBox box;
  server.route("GET", "/stream", [&](const HttpRequest&, Writer writer) {
    writer->start_stream(200, "text/event-stream");
    box.put(std::move(writer));
  });
  server.start();

  net::io_context io;
  std::vector<tcp::socket> sockets;
  sockets.reserve(n_clients);
  tcp::endpoint endpoint{net::ip::make_address("127.0.0.1"), server.port()};
  std::string request = "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n";
  for (std::size_t i = 0; i < n_clients; ++i) {
    sockets.emplace_back(io);
    sockets.back().connect(endpoint);
    net::write(sockets.back(), net::buffer(request));
  }
  REQUIRE(box.wait_for(n_clients));
  CHECK(server.connection_count() == n_clients);
  int threads_while_open = process_thread_count();

  // One timer thread writes every stream's events.
  std::thread producer{[&] {
    auto writers = box.all();
    for (int event = 0; event < n_events; ++event) {
      for (auto& writer : writers)
        writer->write("data: " + std::to_string(event) + "\n\n");
      std::this_thread::sleep_for(std::chrono::milliseconds{10});
    }
    for (auto& writer : writers)
      writer->finish();
  }};

  std::string expected;
  for (int event = 0; event < n_events; ++event)
    expected += "data: " + std::to_string(event) + "\n\n";
  std::size_t complete = 0;
  for (auto& socket : sockets) {
    boost::beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    boost::system::error_code ec;
    http::read(socket, buffer, parser, ec);
    if (!ec && parser.get().result_int() == 200 && parser.get().body() == expected)
      ++complete;
  }
  producer.join();
  int threads_after = process_thread_count();
  CHECK(complete == n_clients);
  INFO("threads while open: " << threads_while_open);
  CHECK(threads_while_open > 0);
  CHECK(threads_while_open < 40);
  CHECK(threads_after < 40);
}

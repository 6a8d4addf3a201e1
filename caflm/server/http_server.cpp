#include "caflm/server/http_server.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <nlohmann/json.hpp>

namespace caflm::server {

namespace net = boost::asio;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

namespace {

bool ascii_iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

/// An OpenAI-style error body: {"error": {"message", "type", "param",
/// "code"}}.
std::string error_body(std::string_view message, std::string_view type, int status) {
  nlohmann::ordered_json error;
  error["message"] = message;
  error["type"] = type;
  error["param"] = nullptr;
  error["code"] = status;
  return nlohmann::ordered_json{{"error", std::move(error)}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

/// Throws std::invalid_argument when a header field could break the framing
/// of the response (header injection) or is one the server sets itself.
void check_extra_headers(const HttpHeaders& headers) {
  for (const auto& [name, value] : headers) {
    if (name.empty() || name.find_first_of("\r\n: \t") != std::string::npos)
      throw std::invalid_argument("HTTP response header name '" + name +
                                  "' is empty or has a separator");
    if (value.find_first_of("\r\n") != std::string::npos)
      throw std::invalid_argument("HTTP response header '" + name +
                                  "' has a line break in its value");
    if (ascii_iequals(name, "content-length") || ascii_iequals(name, "transfer-encoding") ||
        ascii_iequals(name, "connection"))
      throw std::invalid_argument("HTTP response header '" + name + "' is set by the server");
  }
}

/// How the body of a response is framed.
enum class Framing {
  /// A Content-Length header, then exactly that many bytes.
  content_length,
  /// Transfer-Encoding: chunked.
  chunked,
  /// Raw bytes until the server closes the connection (HTTP/1.0 streams).
  until_close,
};

/// The status line and header fields of a response, ending in the blank line.
std::string response_head(int status, std::string_view content_type,
                          const HttpHeaders& extra_headers, Framing framing,
                          std::size_t content_length, bool keep_alive, unsigned request_version) {
  if (status < 100 || status > 999)
    throw std::invalid_argument("HTTP status " + std::to_string(status) +
                                " is not a three-digit code");
  auto beast_reason = http::obsolete_reason(static_cast<http::status>(status));
  std::string_view reason{beast_reason.data(), beast_reason.size()};
  if (reason.empty() || reason.front() == '<')
    reason = "Unknown";
  std::string head = "HTTP/1.1 " + std::to_string(status) + " ";
  head.append(reason.data(), reason.size());
  head += "\r\n";
  if (!content_type.empty()) {
    head += "Content-Type: ";
    head.append(content_type.data(), content_type.size());
    head += "\r\n";
  }
  switch (framing) {
  case Framing::content_length:
    head += "Content-Length: " + std::to_string(content_length) + "\r\n";
    break;
  case Framing::chunked:
    head += "Transfer-Encoding: chunked\r\n";
    break;
  case Framing::until_close:
    break;
  }
  for (const auto& [name, value] : extra_headers)
    head += name + ": " + value + "\r\n";
  if (!keep_alive)
    head += "Connection: close\r\n";
  else if (request_version < 11)
    head += "Connection: keep-alive\r\n";
  head += "\r\n";
  return head;
}

/// A whole JSON error response.
std::string error_response(int status, std::string_view message, std::string_view type,
                           bool keep_alive, unsigned request_version,
                           const HttpHeaders& extra_headers = {}) {
  auto body = error_body(message, type, status);
  return response_head(status, "application/json", extra_headers, Framing::content_length,
                       body.size(), keep_alive, request_version) +
         body;
}

constexpr std::string_view continue_response = "HTTP/1.1 100 Continue\r\n\r\n";

/// How long a closing connection waits for the client to close its side
/// after the last response (see Connection::graceful_close).
constexpr std::chrono::milliseconds linger_limit{2000};

class Connection;

} // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& [field, value] : headers)
    if (ascii_iequals(field, name))
      return std::string_view{value};
  return std::nullopt;
}

bool has_bearer_token(const HttpRequest& request, std::string_view token) {
  const auto header = request.header("Authorization");
  constexpr std::string_view scheme = "Bearer ";
  if (!header || header->size() != scheme.size() + token.size() ||
      header->substr(0, scheme.size()) != scheme)
    return false;
  unsigned char difference = 0;
  for (std::size_t i = 0; i < token.size(); ++i)
    difference |= static_cast<unsigned char>((*header)[scheme.size() + i] ^ token[i]);
  return difference == 0;
}

// -- server state -------------------------------------------------------------

struct HttpServer::State : std::enable_shared_from_this<State> {
  explicit State(Options opts)
    : options(std::move(opts))
    , acceptor(io)
    , retry_timer(io) {
    if (options.threads == 0)
      options.threads = 1;
    fallback = [](const HttpRequest& request, std::shared_ptr<ResponseWriter> writer) {
      writer->respond(404, "application/json",
                      error_body("Not found: " + request.method + " " + request.target,
                                 "not_found_error", 404));
    };
  }

  void do_accept();
  void on_accept(const error_code& ec, tcp::socket socket);
  void dispatch(const HttpRequest& request, const std::shared_ptr<ResponseWriter>& writer) const;
  void forget(std::uint64_t id) {
    std::lock_guard<std::mutex> guard{connections_mutex};
    connections.erase(id);
  }

  Options options;
  net::io_context io;
  // Used by one accept at a time on the io threads, and by start/stop while
  // no io thread runs.
  tcp::acceptor acceptor;
  // Delays the next accept after a failed one (e.g. out of descriptors), so
  // that the io threads do not spin.
  net::steady_timer retry_timer;
  std::map<std::pair<std::string, std::string>, HttpHandler> routes;
  HttpHandler fallback;
  std::atomic<bool> started{false};
  std::atomic<bool> stopped{false};
  std::atomic<std::uint16_t> bound_port{0};
  std::vector<std::thread> threads;
  mutable std::mutex connections_mutex;
  // Weak: a connection lives as long as its pending operations and writers.
  std::unordered_map<std::uint64_t, std::weak_ptr<Connection>> connections;
  std::uint64_t next_connection_id = 0;
};

namespace {

// -- connection ---------------------------------------------------------------

/// One piece of output and what its delivery completes.
struct Output {
  std::string bytes;
  /// The last bytes of the current response.
  bool ends_response = false;
  /// The connection is closed after this response.
  bool close_after = false;
};

class SocketResponseWriter;

/// One client connection. Every member function runs on the connection's
/// strand (the executor of its socket), except the constructor.
///
/// While a request is being answered, the connection keeps reading the next
/// request: that read sees the client leave (EOF or an error; an HTTP client
/// half-closing after its request is taken as gone too), and it keeps a
/// pipelined request until the current response is out.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<HttpServer::State> server, tcp::socket socket, std::uint64_t id,
             std::string remote)
    : server_(std::move(server))
    , socket_(std::move(socket))
    , timer_(socket_.get_executor())
    , id_(id)
    , remote_(std::move(remote)) {}

  const net::any_io_executor& executor() const { return executor_; }

  /// Starts reading the first request, from any thread.
  void start() {
    net::post(executor_, [self = shared_from_this()] {
      self->arm_timer(self->server_->options.idle_timeout);
      self->start_read();
    });
  }

  /// Queues output for the client; a response's bytes arrive in order.
  void enqueue(std::string bytes, bool ends_response, bool close_after) {
    if (closed_)
      return;
    queue_.push_back(Output{std::move(bytes), ends_response, close_after});
    if (!writing_)
      do_write();
  }

  /// The writer of the current response was dropped before it finished.
  void writer_abandoned(bool stream_started) {
    if (closed_)
      return;
    if (stream_started) {
      // Cutting the connection is the only way to tell the client that a
      // chunked body is incomplete.
      close();
      return;
    }
    enqueue(error_response(500, "The request handler did not answer", "server_error", keep_alive_,
                           request_version_),
            true, !keep_alive_);
  }

  /// Closes the socket at once; an unfinished response sees the client gone.
  void close();

 private:
  void start_read() {
    reading_ = true;
    parser_.emplace();
    parser_->body_limit(server_->options.max_body_bytes);
    parser_->header_limit(static_cast<std::uint32_t>(
        std::min<std::size_t>(server_->options.max_header_bytes, UINT32_MAX)));
    http::async_read_header(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, std::size_t) { self->on_header(ec); });
  }

  void on_header(const error_code& ec) {
    if (ec)
      return on_read_failed(ec);
    if (closed_)
      return;
    if (parser_->is_done())
      return on_request(ec);
    if (!closing_) {
      auto expect = parser_->get()[http::field::expect];
      if (ascii_iequals({expect.data(), expect.size()}, "100-continue")) {
        // The client waits for this before it sends the body; a response
        // in progress must go out first.
        if (active_)
          continue_deferred_ = true;
        else
          enqueue(std::string{continue_response}, false, false);
      }
    }
    http::async_read(
        socket_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, std::size_t) { self->on_request(ec); });
  }

  void on_request(const error_code& ec) {
    reading_ = false;
    if (ec)
      return on_read_failed(ec);
    if (closed_)
      return;
    if (closing_)
      return start_discard();
    // The body is here: a deferred "100 Continue" is moot.
    continue_deferred_ = false;
    auto request = parser_->release();
    if (active_) {
      // Pipelined: answered once the current response is out. Reading
      // stops until then.
      stashed_request_ = std::move(request);
      return;
    }
    dispatch(std::move(request));
  }

  void on_read_failed(const error_code& ec) {
    reading_ = false;
    if (closed_)
      return;
    if (closing_)
      return close();
    int status = 0;
    std::string message;
    const auto& http_category = http::make_error_code(http::error::bad_method).category();
    if (ec == http::error::body_limit) {
      status = 413;
      message = "The request body is larger than " +
                std::to_string(server_->options.max_body_bytes) + " bytes";
    } else if (ec == http::error::header_limit) {
      status = 431;
      message = "The request header is larger than " +
                std::to_string(server_->options.max_header_bytes) + " bytes";
    } else if (ec.category() == http_category && ec != http::error::end_of_stream &&
               ec != http::error::partial_message) {
      status = 400;
      message = "Malformed HTTP request: " + ec.message();
    } else {
      // EOF or a socket error: the client has gone.
      close();
      return;
    }
    if (active_) {
      stashed_error_ = std::make_pair(status, std::move(message));
      return;
    }
    send_error(status, message);
  }

  /// Answers an unreadable request and closes the connection afterwards.
  void send_error(int status, std::string_view message) {
    active_ = true;
    keep_alive_ = false;
    enqueue(error_response(status, message, "invalid_request_error", false, 11), true, true);
  }

  void dispatch(http::request<http::string_body> message);

  void do_write() {
    writing_ = true;
    while (!queue_.empty()) {
      in_flight_.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    // After the moves: a moved string may live elsewhere (small buffers).
    for (const auto& output : in_flight_)
      if (!output.bytes.empty())
        buffers_.push_back(net::buffer(output.bytes));
    net::async_write(socket_, buffers_, [self = shared_from_this()](error_code ec, std::size_t) {
      self->on_write(ec);
    });
  }

  void on_write(const error_code& ec) {
    writing_ = false;
    if (closed_)
      return;
    if (ec) {
      close();
      return;
    }
    bool ended = false;
    bool close_after = false;
    for (const auto& output : in_flight_) {
      if (output.ends_response) {
        ended = true;
        close_after = output.close_after;
      }
    }
    in_flight_.clear();
    buffers_.clear();
    if (ended)
      on_response_complete(close_after);
    if (!closed_ && !writing_ && !queue_.empty())
      do_write();
  }

  void on_response_complete(bool close_after) {
    active_ = false;
    writer_.reset();
    if (close_after || !keep_alive_)
      return graceful_close();
    if (stashed_error_) {
      auto [status, message] = std::move(*stashed_error_);
      stashed_error_.reset();
      return send_error(status, message);
    }
    if (stashed_request_) {
      auto request = std::move(*stashed_request_);
      stashed_request_.reset();
      return dispatch(std::move(request));
    }
    if (continue_deferred_) {
      continue_deferred_ = false;
      enqueue(std::string{continue_response}, false, false);
    }
    if (!reading_)
      start_read();
    arm_timer(server_->options.idle_timeout);
  }

  /// Closes after the last response without losing it: a close with unread
  /// input (e.g. the rest of a body answered 413) makes the kernel send a
  /// reset, which may discard the response before the client reads it. So
  /// shut down sending, then read and drop input until the client closes or
  /// the linger limit passes.
  void graceful_close() {
    if (closing_ || closed_)
      return;
    closing_ = true;
    error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_send, ignored);
    arm_timer(std::min(server_->options.idle_timeout, linger_limit));
    if (!reading_)
      start_discard();
  }

  void start_discard() {
    if (closed_)
      return;
    if (!discard_buffer_)
      discard_buffer_ = std::make_unique<char[]>(discard_size);
    reading_ = true;
    socket_.async_read_some(net::buffer(discard_buffer_.get(), discard_size),
                            [self = shared_from_this()](error_code ec, std::size_t) {
                              self->reading_ = false;
                              if (ec)
                                self->close();
                              else
                                self->start_discard();
                            });
  }

  void arm_timer(std::chrono::milliseconds duration) {
    auto generation = ++timer_generation_;
    timer_.expires_after(duration);
    timer_.async_wait([self = shared_from_this(), generation](const error_code& ec) {
      // A stale expiry (re-armed or cancelled since) does nothing.
      if (ec || generation != self->timer_generation_ || self->closed_)
        return;
      if (self->closing_ || !self->active_)
        self->close();
    });
  }

  void cancel_timer() {
    ++timer_generation_;
    timer_.cancel();
  }

  static constexpr std::size_t discard_size = 4096;

  // First member: destroyed last, after the socket and timer that use its
  // io_context.
  std::shared_ptr<HttpServer::State> server_;
  tcp::socket socket_;
  net::any_io_executor executor_{socket_.get_executor()};
  net::steady_timer timer_;
  std::uint64_t id_;
  std::string remote_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::request<http::string_body>> stashed_request_;
  std::optional<std::pair<int, std::string>> stashed_error_;
  std::weak_ptr<SocketResponseWriter> writer_;
  std::deque<Output> queue_;
  std::vector<Output> in_flight_;
  std::vector<net::const_buffer> buffers_;
  std::unique_ptr<char[]> discard_buffer_;
  std::uint64_t timer_generation_ = 0;
  unsigned request_version_ = 11;
  /// A request read is in progress.
  bool reading_ = false;
  /// A write is in progress.
  bool writing_ = false;
  /// A request is being answered (from dispatch until its last byte is
  /// written).
  bool active_ = false;
  /// The current request lets the connection stay open.
  bool keep_alive_ = true;
  /// A pipelined request expects "100 Continue" once the current response is
  /// out.
  bool continue_deferred_ = false;
  /// The last response is out; waiting for the client to close.
  bool closing_ = false;
  bool closed_ = false;
};

// -- response writer ----------------------------------------------------------

/// The ResponseWriter of one request on a Connection. Its state is guarded
/// by a mutex; its output goes to the connection's strand in call order.
class SocketResponseWriter final : public ResponseWriter {
 public:
  SocketResponseWriter(std::shared_ptr<Connection> connection, bool keep_alive,
                       unsigned request_version)
    : connection_(std::move(connection))
    , executor_(connection_->executor())
    , keep_alive_(keep_alive)
    , request_version_(request_version) {}

  ~SocketResponseWriter() override {
    if (connection_ && (phase_ == Phase::unanswered || phase_ == Phase::streaming)) {
      net::post(executor_,
                [connection = std::move(connection_), streaming = phase_ == Phase::streaming] {
                  connection->writer_abandoned(streaming);
                });
    }
  }

  bool respond(int status, std::string content_type, std::string body,
               HttpHeaders extra_headers) override {
    check_extra_headers(extra_headers);
    auto bytes = response_head(status, content_type, extra_headers, Framing::content_length,
                               body.size(), keep_alive_, request_version_);
    bytes += body;
    std::lock_guard<std::mutex> guard{mutex_};
    if (phase_ != Phase::unanswered)
      return false;
    phase_ = Phase::finished;
    post(std::move(bytes), true, !keep_alive_);
    release();
    return true;
  }

  bool start_stream(int status, std::string content_type, HttpHeaders extra_headers) override {
    check_extra_headers(extra_headers);
    auto bytes = response_head(status, content_type, extra_headers, framing(), 0, keep_alive(),
                               request_version_);
    std::lock_guard<std::mutex> guard{mutex_};
    if (phase_ != Phase::unanswered)
      return false;
    phase_ = Phase::streaming;
    post(std::move(bytes), false, false);
    return true;
  }

  bool write(std::string chunk) override {
    if (framing() == Framing::chunked && !chunk.empty()) {
      char size[24];
      std::snprintf(size, sizeof size, "%zx\r\n", chunk.size());
      chunk.insert(0, size);
      chunk += "\r\n";
    }
    std::lock_guard<std::mutex> guard{mutex_};
    if (phase_ != Phase::streaming)
      return false;
    if (!chunk.empty())
      post(std::move(chunk), false, false);
    return true;
  }

  void finish() override {
    std::lock_guard<std::mutex> guard{mutex_};
    if (phase_ != Phase::streaming)
      return;
    phase_ = Phase::finished;
    post(framing() == Framing::chunked ? "0\r\n\r\n" : "", true, !keep_alive());
    release();
  }

  bool closed() const override {
    std::lock_guard<std::mutex> guard{mutex_};
    return phase_ == Phase::gone;
  }

  void on_close(std::function<void()> callback) override {
    {
      std::lock_guard<std::mutex> guard{mutex_};
      if (phase_ == Phase::finished)
        return;
      if (phase_ != Phase::gone) {
        on_close_ = std::move(callback);
        return;
      }
    }
    if (callback)
      callback();
  }

  /// The client went away (or the server stopped); runs on the strand.
  void client_gone() {
    std::function<void()> callback;
    {
      std::lock_guard<std::mutex> guard{mutex_};
      if (phase_ != Phase::unanswered && phase_ != Phase::streaming)
        return;
      phase_ = Phase::gone;
      callback = std::move(on_close_);
      on_close_ = nullptr;
      release();
    }
    if (callback)
      callback();
  }

 private:
  enum class Phase { unanswered, streaming, finished, gone };

  /// HTTP/1.0 has no chunked encoding: its streams end with a close.
  Framing framing() const {
    return request_version_ >= 11 ? Framing::chunked : Framing::until_close;
  }

  bool keep_alive() const { return keep_alive_ && framing() == Framing::chunked; }

  /// Sends `bytes` to the connection's strand; called under the mutex, so
  /// that output leaves in call order.
  void post(std::string bytes, bool ends_response, bool close_after) {
    net::post(executor_, [connection = connection_, bytes = std::move(bytes), ends_response,
                          close_after]() mutable {
      connection->enqueue(std::move(bytes), ends_response, close_after);
    });
  }

  /// Drops the connection once nothing more will be sent (the posted
  /// output holds it until then).
  void release() {
    connection_.reset();
    on_close_ = nullptr;
  }

  mutable std::mutex mutex_;
  std::shared_ptr<Connection> connection_;
  net::any_io_executor executor_;
  const bool keep_alive_;
  const unsigned request_version_;
  Phase phase_ = Phase::unanswered;
  std::function<void()> on_close_;
};

void Connection::close() {
  if (closed_)
    return;
  closed_ = true;
  cancel_timer();
  error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  queue_.clear();
  stashed_request_.reset();
  if (auto writer = writer_.lock()) {
    writer_.reset();
    writer->client_gone();
  }
  server_->forget(id_);
}

void Connection::dispatch(http::request<http::string_body> message) {
  cancel_timer();
  active_ = true;
  keep_alive_ = message.keep_alive();
  request_version_ = message.version();
  HttpRequest request;
  request.method = std::string{message.method_string()};
  auto target = message.target();
  auto question = target.find('?');
  request.target = std::string{target.substr(0, question)};
  if (question != boost::string_view::npos)
    request.query = std::string{target.substr(question + 1)};
  request.version = message.version();
  for (const auto& field : message)
    request.headers.emplace_back(std::string{field.name_string()}, std::string{field.value()});
  request.body = std::move(message.body());
  request.remote = remote_;
  auto writer =
      std::make_shared<SocketResponseWriter>(shared_from_this(), keep_alive_, request_version_);
  writer_ = writer;
  try {
    server_->dispatch(request, writer);
  } catch (const std::exception& e) {
    writer->respond(
        500, "application/json",
        error_body(std::string{"The request handler failed: "} + e.what(), "server_error", 500),
        {});
  } catch (...) {
    writer->respond(500, "application/json",
                    error_body("The request handler failed", "server_error", 500), {});
  }
  // When the handler kept no reference, this posts writer_abandoned.
  writer.reset();
  if (!closed_ && !closing_ && !reading_)
    start_read();
}

} // namespace

// -- accepting ----------------------------------------------------------------

void HttpServer::State::do_accept() {
  acceptor.async_accept(net::make_strand(io),
                        [self = shared_from_this()](error_code ec, tcp::socket socket) {
                          self->on_accept(ec, std::move(socket));
                        });
}

void HttpServer::State::on_accept(const error_code& ec, tcp::socket socket) {
  if (ec == net::error::operation_aborted || stopped)
    return;
  if (ec) {
    // Typically out of descriptors: wait for connections to close.
    retry_timer.expires_after(std::chrono::milliseconds{50});
    retry_timer.async_wait([self = shared_from_this()](const error_code& e) {
      if (!e && !self->stopped)
        self->do_accept();
    });
    return;
  }
  std::shared_ptr<Connection> connection;
  {
    std::lock_guard<std::mutex> guard{connections_mutex};
    if (connections.size() < options.max_connections) {
      error_code ignored;
      socket.set_option(tcp::no_delay{true}, ignored);
      auto endpoint = socket.remote_endpoint(ignored);
      auto id = next_connection_id++;
      connection = std::make_shared<Connection>(shared_from_this(), std::move(socket), id,
                                                endpoint.address().to_string() + ":" +
                                                    std::to_string(endpoint.port()));
      connections.emplace(id, connection);
    }
  }
  if (connection) {
    connection->start();
  } else {
    // Over the limit: refused without a response, which would cost the
    // very resources the limit protects.
    error_code ignored;
    socket.close(ignored);
  }
  do_accept();
}

void HttpServer::State::dispatch(const HttpRequest& request,
                                 const std::shared_ptr<ResponseWriter>& writer) const {
  if (auto i = routes.find({request.method, request.target}); i != routes.end()) {
    i->second(request, writer);
    return;
  }
  std::string allowed;
  for (const auto& [key, handler] : routes) {
    if (key.second == request.target)
      allowed += (allowed.empty() ? "" : ", ") + key.first;
  }
  if (!allowed.empty()) {
    writer->respond(405, "application/json",
                    error_body("Method " + request.method + " is not allowed for " + request.target,
                               "invalid_request_error", 405),
                    {{"Allow", allowed}});
    return;
  }
  fallback(request, writer);
}

// -- HttpServer ---------------------------------------------------------------

HttpServer::HttpServer(Options options)
  : state_(std::make_shared<State>(std::move(options))) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::route(std::string method, std::string path, HttpHandler handler) {
  if (state_->started)
    throw std::logic_error("HttpServer::route for " + method + " " + path + " after start()");
  if (!handler)
    throw std::invalid_argument("HttpServer::route for " + method + " " + path +
                                " without a handler");
  state_->routes[{std::move(method), std::move(path)}] = std::move(handler);
}

void HttpServer::fallback(HttpHandler handler) {
  if (state_->started)
    throw std::logic_error("HttpServer::fallback after start()");
  if (!handler)
    throw std::invalid_argument("HttpServer::fallback without a handler");
  state_->fallback = std::move(handler);
}

void HttpServer::start() {
  auto& s = *state_;
  if (s.started.exchange(true))
    throw std::logic_error("HttpServer::start called twice");
  auto where = s.options.host + ":" + std::to_string(s.options.port);
  error_code ec;
  tcp::resolver resolver{s.io};
  auto endpoints =
      resolver.resolve(s.options.host, std::to_string(s.options.port), tcp::resolver::passive, ec);
  if (ec || endpoints.empty())
    throw std::runtime_error("HTTP server cannot resolve " + where + ": " +
                             (ec ? ec.message() : "no address"));
  auto endpoint = endpoints.begin()->endpoint();
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec)
    s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec)
    s.acceptor.bind(endpoint, ec);
  if (!ec)
    s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    s.acceptor.close(ignored);
    throw std::runtime_error("HTTP server cannot listen on " + where + ": " + ec.message());
  }
  s.bound_port = s.acceptor.local_endpoint().port();
  s.do_accept();
  for (std::size_t i = 0; i < s.options.threads; ++i) {
    s.threads.emplace_back([state = state_] {
      // A handler's exception is caught where it is called; anything else
      // escaping must not end the thread with the connections it serves.
      for (;;) {
        try {
          state->io.run();
          return;
        } catch (const std::exception& e) {
          std::fprintf(stderr, "caflm http server: %s\n", e.what());
        }
      }
    });
  }
}

std::uint16_t HttpServer::port() const {
  return state_->bound_port;
}

void HttpServer::stop() {
  auto& s = *state_;
  if (!s.started || s.stopped.exchange(true))
    return;
  s.io.stop();
  for (auto& thread : s.threads)
    if (thread.joinable())
      thread.join();
  s.threads.clear();
  // No io thread runs now: this thread may act for every strand.
  error_code ignored;
  s.acceptor.close(ignored);
  s.retry_timer.cancel();
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard<std::mutex> guard{s.connections_mutex};
    for (const auto& [id, weak] : s.connections)
      if (auto connection = weak.lock())
        open.push_back(std::move(connection));
  }
  for (const auto& connection : open)
    connection->close();
  open.clear();
  // Run the cancelled operations' handlers: they hold the connections, and
  // the connections hold this state.
  s.io.restart();
  s.io.poll();
}

std::size_t HttpServer::connection_count() const {
  std::lock_guard<std::mutex> guard{state_->connections_mutex};
  return state_->connections.size();
}

} // namespace caflm::server

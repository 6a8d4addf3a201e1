#pragma once

// The HTTP/1.1 transport of `caflm serve`: routing, keep-alive, bounded
// request sizes, whole and streamed (chunked) responses, and disconnect
// detection while a request is in progress.
//
// It runs on Boost.Beast/Asio (header-only in Debian's Boost 1.74) rather than
// cpp-httplib: the server must carry 1,000 concurrent streaming connections
// with a bounded number of threads, and cpp-httplib 0.11.4 holds one pool
// thread per open stream (its default pool of about 8 threads would block the
// ninth stream). Here every connection is a set of asynchronous operations on
// a few io threads, and a streamed response costs no thread while it waits for
// its next chunk.
//
// Boost stays out of this header (the server is a pimpl), so the layers above
// compile without it.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace caflm::server {

/// Header fields as name/value pairs, in the order they were received or are
/// to be sent.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

/// One parsed HTTP request.
struct HttpRequest {
  /// The method as sent, e.g. "GET" or "POST".
  std::string method;
  /// The path of the request target, without the query.
  std::string target;
  /// The query of the request target, without the '?'; empty when absent.
  std::string query;
  /// 10 for HTTP/1.0, 11 for HTTP/1.1.
  unsigned version = 11;
  /// The header fields as received.
  HttpHeaders headers;
  /// The body, de-chunked when it was sent chunked.
  std::string body;
  /// The client's address as "ip:port".
  std::string remote;

  /// The value of the first header field named `name` (compared
  /// case-insensitively), or nullopt when there is none.
  std::optional<std::string_view> header(std::string_view name) const;
};

/// Whether `request` carries "Authorization: Bearer <token>" (RFC 6750),
/// compared in time independent of where a wrong token differs.
bool has_bearer_token(const HttpRequest& request, std::string_view token);

/// The answer to one request. The server hands a handler a shared_ptr to one;
/// the handler may answer at once or keep it and answer later from any thread
/// (e.g. a CAF actor). Every member is thread-safe.
///
/// A request gets either one whole response (respond) or one streamed
/// response (start_stream, write..., finish). Calls out of that order return
/// false and send nothing. Once the client has gone, every call returns false
/// and its bytes are dropped.
///
/// Dropping the last reference without answering is a handler bug; the server
/// then answers 500 (nothing sent yet) or cuts the connection (stream started
/// but not finished), so the client never hangs.
///
/// It is an interface so that the layers above can test their handlers with a
/// recording implementation, without sockets.
class ResponseWriter {
 public:
  virtual ~ResponseWriter() = default;

  /// Sends a whole response with a Content-Length. `extra_headers` must not
  /// contain Content-Length, Transfer-Encoding or Connection (the server sets
  /// them); names and values with CR or LF throw std::invalid_argument.
  /// Returns false when the request was answered already or the client left.
  virtual bool respond(int status, std::string content_type, std::string body,
                       HttpHeaders extra_headers = {}) = 0;

  /// Starts a streamed response: chunked transfer encoding for HTTP/1.1
  /// clients (the connection stays usable afterwards), the raw body followed
  /// by a close for HTTP/1.0 clients. Returns false when the request was
  /// answered already or the client left.
  virtual bool start_stream(int status, std::string content_type,
                            HttpHeaders extra_headers = {}) = 0;

  /// Queues one piece of a streamed response; the bytes go out in call order
  /// without blocking the caller. An empty chunk sends nothing. Returns false
  /// (and drops the bytes) when no stream is open or the client left.
  virtual bool write(std::string chunk) = 0;

  /// Ends a streamed response. Does nothing when no stream is open.
  virtual void finish() = 0;

  /// Whether the client has gone (disconnected or the server stopped) before
  /// the response was finished.
  virtual bool closed() const = 0;

  /// Registers `callback`, called exactly once when the client goes away
  /// before the response is finished, including before the handler answered.
  /// It is called at once (on the caller's thread) when the client has gone
  /// already; otherwise on an io thread, where it must not block. It is never
  /// called once the response is finished. A second registration replaces
  /// the first while the callback has not run.
  virtual void on_close(std::function<void()> callback) = 0;
};

/// Handles one request. Handlers run on an io thread and must not block:
/// they answer at once or hand the writer to whatever computes the answer.
/// An exception escaping a handler that has not answered becomes a 500.
using HttpHandler = std::function<void(const HttpRequest&, std::shared_ptr<ResponseWriter>)>;

/// How an HttpServer listens and what it accepts.
struct HttpServerOptions {
  /// The address or host name to listen on.
  std::string host = "127.0.0.1";
  /// The port to listen on; 0 picks any free one (see HttpServer::port).
  std::uint16_t port = 0;
  /// The number of io threads, at least 1. Connections do not add threads.
  std::size_t threads = 2;
  /// Requests with a larger body are answered 413 and the connection closed.
  std::size_t max_body_bytes = std::size_t{8} << 20;
  /// Requests with a larger header are answered 431 and the connection
  /// closed.
  std::size_t max_header_bytes = std::size_t{64} << 10;
  /// Connections beyond this many are closed as soon as they are accepted.
  std::size_t max_connections = 4096;
  /// A connection waiting this long for (the rest of) its next request is
  /// closed. It does not apply while a request is being answered, however
  /// long a stream lasts.
  std::chrono::milliseconds idle_timeout{60'000};
};

/// An HTTP/1.1 server on a fixed pool of io threads.
///
/// Register routes, then start(). Requests whose method and path match a
/// route go to its handler; a known path with another method gets 405; any
/// other request goes to the fallback handler (by default a 404 with an
/// OpenAI-style {"error": {...}} body). Malformed requests get 400 and the
/// connection is closed.
class HttpServer {
 public:
  using Options = HttpServerOptions;

  explicit HttpServer(Options options = {});

  /// Stops the server (see stop).
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  /// Routes requests with exactly this method and path (no query) to
  /// `handler`. Replaces an earlier route for the same pair. Only before
  /// start(); afterwards it throws std::logic_error.
  void route(std::string method, std::string path, HttpHandler handler);

  /// Replaces the handler of requests that match no route. Only before
  /// start(); afterwards it throws std::logic_error.
  void fallback(HttpHandler handler);

  /// Binds, listens and starts the io threads. Throws std::runtime_error
  /// naming the address when it cannot listen, std::logic_error when
  /// started twice.
  void start();

  /// The port the server listens on (the one picked when Options::port was
  /// 0); 0 before start().
  std::uint16_t port() const;

  /// Stops accepting, closes every connection and joins the io threads.
  /// Writers of unfinished responses see the client gone (their on_close
  /// callbacks run on the calling thread). Idempotent; the server cannot be
  /// started again. Not from a handler or an on_close callback: it joins the
  /// io threads.
  void stop();

  /// The number of open connections.
  std::size_t connection_count() const;

  /// The server's shared internals (io context, routes, connections); opaque
  /// here, public only so that the connections in the .cpp can name it.
  struct State;

 private:
  std::shared_ptr<State> state_;
};

} // namespace caflm::server

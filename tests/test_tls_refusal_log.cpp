// A TLS accept that fails is logged with the peer's address and OpenSSL's
// reason, one that only waits for bytes is not, and a flood of refusals is
// throttled with the rest counted. The accepts go through caflm's
// replacement of SSL_accept (hook_openssl), the one CAF's middleman calls,
// on real loopback TCP connections.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "caflm/actors/openssl_hooks.hpp"
#include "caflm/actors/tls_refusal_log.hpp"
#include "caflm/engine/log.hpp"

namespace {

using namespace std::chrono_literals;
using caflm::RefusalThrottle;

/// One accepted loopback TCP connection: both ends, and the client's port.
struct LoopbackConnection {
  int client = -1;
  int server = -1;
  std::uint16_t client_port = 0;

  LoopbackConnection() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listener >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), length) == 0);
    REQUIRE(::listen(listener, 1) == 0);
    REQUIRE(::getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) == 0);
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(::connect(client, reinterpret_cast<sockaddr*>(&address), length) == 0);
    server = ::accept(listener, nullptr, nullptr);
    REQUIRE(server >= 0);
    ::close(listener);
    sockaddr_in own{};
    length = sizeof(own);
    REQUIRE(::getsockname(client, reinterpret_cast<sockaddr*>(&own), &length) == 0);
    client_port = ntohs(own.sin_port);
    // Non-blocking, as the middleman's sockets are.
    ::fcntl(server, F_SETFL, ::fcntl(server, F_GETFL) | O_NONBLOCK);
  }
  ~LoopbackConnection() {
    ::close(client);
    ::close(server);
  }
};

/// The server side of a TLS session on `fd`; SSL_accept needs no
/// certificate to refuse bytes that are not TLS.
struct ServerSession {
  SSL_CTX* context = SSL_CTX_new(TLS_server_method());
  SSL* ssl = nullptr;

  explicit ServerSession(int fd) {
    REQUIRE(context != nullptr);
    ssl = SSL_new(context);
    REQUIRE(ssl != nullptr);
    SSL_set_fd(ssl, fd);
  }
  /// SSL_accept, again while it waits for bytes (up to a second), as the
  /// middleman does; returns its last result.
  int accept_until_settled() {
    int result = 0;
    for (int attempt = 0; attempt < 1000; ++attempt) {
      result = SSL_accept(ssl);
      if (SSL_get_error(ssl, result) != SSL_ERROR_WANT_READ)
        break;
      ::usleep(1000);
    }
    return result;
  }
  ~ServerSession() {
    SSL_free(ssl);
    SSL_CTX_free(context);
  }
};

/// Takes the operator log's warnings for the length of a test.
struct CapturedLog {
  std::vector<std::string> lines;

  CapturedLog() {
    caflm::hook_openssl();
    caflm::set_log_level(caflm::LogLevel::Warning);
    caflm::set_log_sink(
        [this](caflm::LogLevel, std::string_view line) { lines.emplace_back(line); });
  }
  ~CapturedLog() { caflm::set_log_sink({}); }
};

} // namespace

TEST_CASE("a TLS accept that fails is logged with the peer and OpenSSL's reason") {
  CapturedLog log;
  LoopbackConnection connection;
  ServerSession session(connection.server);
  const std::string request = "GET / HTTP/1.1\r\nHost: worker\r\n\r\n";
  REQUIRE(::write(connection.client, request.data(), request.size()) ==
          static_cast<ssize_t>(request.size()));
  REQUIRE(session.accept_until_settled() != 1);
  REQUIRE(log.lines.size() == 1);
  INFO(log.lines.front());
  CHECK(log.lines.front().find("127.0.0.1:" + std::to_string(connection.client_port)) !=
        std::string::npos);
  CHECK(log.lines.front().find("http request") != std::string::npos);
  // CAF may try a failed session again; it is still one refusal.
  CHECK(SSL_accept(session.ssl) != 1);
  CHECK(log.lines.size() == 1);
}

TEST_CASE("a TLS accept that waits for the peer's bytes is not a refusal") {
  CapturedLog log;
  LoopbackConnection connection;
  ServerSession session(connection.server);
  const int result = SSL_accept(session.ssl);
  REQUIRE(SSL_get_error(session.ssl, result) == SSL_ERROR_WANT_READ);
  CHECK(log.lines.empty());
}

TEST_CASE("a peer that closes during the handshake is logged with its address") {
  CapturedLog log;
  LoopbackConnection connection;
  ServerSession session(connection.server);
  ::shutdown(connection.client, SHUT_WR);
  session.accept_until_settled();
  REQUIRE(log.lines.size() == 1);
  INFO(log.lines.front());
  CHECK(log.lines.front().find("127.0.0.1:" + std::to_string(connection.client_port)) !=
        std::string::npos);
}

TEST_CASE("refusals beyond a few lines a second are counted, not logged") {
  RefusalThrottle throttle(3);
  const auto start = RefusalThrottle::clock::now();
  std::uint64_t unlogged = 99;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(throttle.admit(start + i * 100ms, unlogged));
    CHECK(unlogged == 0);
  }
  for (int i = 0; i < 5; ++i)
    CHECK_FALSE(throttle.admit(start + 500ms, unlogged));
  // A new second: the first line says how many went unlogged.
  REQUIRE(throttle.admit(start + 1000ms, unlogged));
  CHECK(unlogged == 5);
  REQUIRE(throttle.admit(start + 1100ms, unlogged));
  CHECK(unlogged == 0);
}

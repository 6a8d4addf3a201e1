#include "caflm/actors/tls_refusal_log.hpp"

#include "caflm/engine/log.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <mutex>

namespace caflm {

namespace {

/// "203.0.113.5:40112", "[::1]:40112", or "an unknown peer".
std::string peer_address(const SSL* ssl) {
  const int fd = SSL_get_fd(ssl);
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  if (fd < 0 || ::getpeername(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0)
    return "an unknown peer";
  char host[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, host, sizeof(host));
    return fmt::format("{}:{}", host, ntohs(v4.sin_port));
  }
  if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, host, sizeof(host));
    return fmt::format("[{}]:{}", host, ntohs(v6.sin6_port));
  }
  return "an unknown peer";
}

/// Why the handshake failed, in OpenSSL's words. Reads the error queue
/// without taking from it: CAF asks SSL_get_error next.
std::string refusal_reason(const SSL* ssl, int error) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify != X509_V_OK)
    return fmt::format("its certificate failed verification ({})",
                       X509_verify_cert_error_string(verify));
  if (const unsigned long queued = ERR_peek_last_error(); queued != 0) {
    const char* reason = ERR_reason_error_string(queued);
    return reason != nullptr ? reason : fmt::format("OpenSSL error {:#x}", queued);
  }
  if (error == SSL_ERROR_SYSCALL || error == SSL_ERROR_ZERO_RETURN)
    return "it closed the connection during the handshake";
  return fmt::format("SSL_get_error {}", error);
}

} // namespace

bool RefusalThrottle::admit(clock::time_point now, std::uint64_t& unlogged) {
  if (now - window_start_ >= std::chrono::seconds(1)) {
    window_start_ = now;
    lines_in_window_ = 0;
  }
  if (lines_in_window_ >= lines_per_second_) {
    ++unlogged_;
    return false;
  }
  ++lines_in_window_;
  unlogged = unlogged_;
  unlogged_ = 0;
  return true;
}

void report_refused_handshake(ssl_st* ssl, int result) {
  const int error = SSL_get_error(ssl, result);
  if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE)
    return;
  // CAF may call SSL_accept again on a session that failed (which then
  // fails as closed): one line per session.
  static const int reported_index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  if (reported_index < 0 || SSL_get_ex_data(ssl, reported_index) != nullptr)
    return;
  static int reported = 1;
  SSL_set_ex_data(ssl, reported_index, &reported);
  if (!log_enabled(LogLevel::Warning))
    return;
  static std::mutex mutex;
  static RefusalThrottle throttle(5);
  std::uint64_t unlogged = 0;
  {
    std::lock_guard<std::mutex> guard(mutex);
    if (!throttle.admit(RefusalThrottle::clock::now(), unlogged))
      return;
  }
  const std::string more = unlogged == 0
                               ? std::string()
                               : fmt::format(" ({} more refused before it, not logged)", unlogged);
  log(LogLevel::Warning, "refused the TLS connection of {}: {}{}", peer_address(ssl),
      refusal_reason(ssl, error), more);
}

} // namespace caflm

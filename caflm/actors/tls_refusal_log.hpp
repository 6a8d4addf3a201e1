#pragma once

#include <chrono>
#include <cstdint>
#include <string>

struct ssl_st;

namespace caflm {

/// Logs (at warning) that the TLS accept of `ssl` failed with `result`, the
/// value SSL_accept returned: which peer, and why in OpenSSL's words (no
/// certificate, a certificate of another CA, not TLS at all). Nothing when
/// the accept only waits for more bytes, or when this session's refusal was
/// reported already. Call right after SSL_accept, with its error queue
/// untouched. A flood of refusals is logged a few lines a second; the rest
/// are counted in the next line.
void report_refused_handshake(ssl_st* ssl, int result);

/// Decides which refusals get a line of their own: at most `lines_per_second`
/// a second, and counts the others. Not thread-safe.
class RefusalThrottle {
 public:
  using clock = std::chrono::steady_clock;

  explicit RefusalThrottle(std::uint32_t lines_per_second)
    : lines_per_second_(lines_per_second) {}

  /// Records a refusal at `now`. Returns whether it gets a line; if so,
  /// `unlogged` is how many refusals before it got none.
  bool admit(clock::time_point now, std::uint64_t& unlogged);

 private:
  std::uint32_t lines_per_second_;
  clock::time_point window_start_{};
  std::uint32_t lines_in_window_ = 0;
  std::uint64_t unlogged_ = 0;
};

} // namespace caflm

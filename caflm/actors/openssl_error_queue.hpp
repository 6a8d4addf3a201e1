#pragma once

namespace caflm {

/// Makes every TLS read, write, accept and connect of this process start
/// with an empty OpenSSL error queue. CAF 0.17's OpenSSL module never
/// clears the thread's queue, and OpenSSL's SSL_get_error reports any
/// queued error as the failure of whichever session asks next: one peer
/// failing its handshake (no certificate, another CA, plain TCP) made the
/// middleman close the next healthy link it read from. The process's
/// SSL_read, SSL_write, SSL_accept and SSL_connect are replaced by ones that
/// clear the queue and call OpenSSL's (this file's object defines them; the
/// call below makes sure the linker keeps it). Idempotent.
void isolate_openssl_errors();

} // namespace caflm

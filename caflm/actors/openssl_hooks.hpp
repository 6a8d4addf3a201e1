#pragma once

namespace caflm {

/// Replaces, for the whole process, the OpenSSL calls CAF 0.17's OpenSSL
/// module makes on node links (SSL_read, SSL_write, SSL_accept and
/// SSL_connect; this file's object defines them, and the call below makes
/// sure the linker keeps it). Each calls OpenSSL's own after two fixes:
/// - it starts with an empty error queue. CAF never clears the thread's
///   queue, and OpenSSL's SSL_get_error reports any queued error as the
///   failure of whichever session asks next: one peer failing its handshake
///   (no certificate, another CA, plain TCP) made the middleman close the
///   next healthy link it read from;
/// - a TLS accept that fails is logged (report_refused_handshake): CAF
///   closes such a connection before its middleman sees it, silently.
/// Idempotent.
void hook_openssl();

} // namespace caflm

#pragma once

#include <optional>
#include <string>

// No CAF here: command-line parsing includes this.

namespace caflm {

/// Mutual TLS between caflm nodes, through CAF's OpenSSL module: each node
/// presents `certificate` (with its `key`) and accepts only peers whose
/// certificate the cluster's CA (`ca`) signed. All three are PEM files.
/// `caflm certs` writes a CA and node certificates.
///
/// CAF 0.17 falls back to anonymous ciphers when its OpenSSL module has no
/// certificate, which authenticates nobody; caflm never uses that mode.
struct TlsOptions {
  std::string certificate;
  std::string key;
  std::string ca;

  /// Whether any file is given (then all three must be).
  bool enabled() const { return !certificate.empty() || !key.empty() || !ca.empty(); }
};

/// Returns why `tls` cannot secure a node, or std::nullopt: all three files
/// or none; each readable and well-formed; the key the certificate's; the
/// certificate signed by the CA and valid now. Checked before the actor
/// system starts, since CAF's module only finds out on the first connection,
/// and then in its network thread.
std::optional<std::string> validate(const TlsOptions& tls);

/// Whether `host` names only this machine (a loopback address or
/// "localhost"), where plain TCP reaches no other machine.
bool is_loopback_host(const std::string& host);

} // namespace caflm

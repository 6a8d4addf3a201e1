#include "caflm/actors/tls_options.hpp"

#include <memory>

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

namespace caflm {

namespace {

template <class T, void (*Free)(T*)>
struct OpenSslFree {
  void operator()(T* p) const { Free(p); }
};

using Bio = std::unique_ptr<BIO, OpenSslFree<BIO, BIO_free_all>>;
using X509Ptr = std::unique_ptr<X509, OpenSslFree<X509, X509_free>>;
using KeyPtr = std::unique_ptr<EVP_PKEY, OpenSslFree<EVP_PKEY, EVP_PKEY_free>>;
using StorePtr = std::unique_ptr<X509_STORE, OpenSslFree<X509_STORE, X509_STORE_free>>;
/// A stack of certificates that owns them.
struct ChainFree {
  void operator()(STACK_OF(X509) * chain) const { sk_X509_pop_free(chain, X509_free); }
};
using ChainPtr = std::unique_ptr<STACK_OF(X509), ChainFree>;
using StoreCtxPtr =
    std::unique_ptr<X509_STORE_CTX, OpenSslFree<X509_STORE_CTX, X509_STORE_CTX_free>>;

/// OpenSSL's queued errors as one line (and the queue emptied).
std::string openssl_errors() {
  std::string text;
  while (const unsigned long code = ERR_get_error()) {
    char line[256];
    ERR_error_string_n(code, line, sizeof line);
    text += text.empty() ? "" : "; ";
    text += line;
  }
  return text.empty() ? "no detail from OpenSSL" : text;
}

Bio open_file(const std::string& path) {
  return Bio{BIO_new_file(path.c_str(), "r")};
}

} // namespace

std::optional<std::string> validate(const TlsOptions& tls) {
  if (!tls.enabled())
    return std::nullopt;
  if (tls.certificate.empty() || tls.key.empty() || tls.ca.empty())
    return std::string("TLS needs all three of --tls-cert, --tls-key and --tls-ca");
  ERR_clear_error();
  Bio cert_file = open_file(tls.certificate);
  if (!cert_file)
    return "cannot open the TLS certificate " + tls.certificate + ": " + openssl_errors();
  X509Ptr cert{PEM_read_bio_X509(cert_file.get(), nullptr, nullptr, nullptr)};
  if (!cert)
    return "the TLS certificate " + tls.certificate + " is no PEM certificate: " + openssl_errors();
  Bio key_file = open_file(tls.key);
  if (!key_file)
    return "cannot open the TLS key " + tls.key + ": " + openssl_errors();
  // No passphrase callback: an encrypted key fails here rather than
  // prompting on a terminal nobody watches.
  KeyPtr key{PEM_read_bio_PrivateKey(key_file.get(), nullptr, nullptr, const_cast<char*>(""))};
  if (!key)
    return "the TLS key " + tls.key + " is no unencrypted PEM private key: " + openssl_errors();
  if (X509_check_private_key(cert.get(), key.get()) != 1)
    return "the TLS key " + tls.key + " does not belong to the certificate " + tls.certificate;
  StorePtr store{X509_STORE_new()};
  if (!store || X509_STORE_load_file(store.get(), tls.ca.c_str()) != 1)
    return "cannot load the TLS CA certificate(s) " + tls.ca + ": " + openssl_errors();
  // Intermediate certificates after the node's own in its file travel with
  // it in the handshake (CAF loads the file as a chain): they count here too.
  ChainPtr chain{sk_X509_new_null()};
  if (!chain)
    return "cannot verify the TLS certificate: " + openssl_errors();
  while (X509* intermediate = PEM_read_bio_X509(cert_file.get(), nullptr, nullptr, nullptr)) {
    if (sk_X509_push(chain.get(), intermediate) == 0) {
      X509_free(intermediate);
      return "cannot verify the TLS certificate: " + openssl_errors();
    }
  }
  ERR_clear_error(); // the end of the file
  StoreCtxPtr verify{X509_STORE_CTX_new()};
  if (!verify || X509_STORE_CTX_init(verify.get(), store.get(), cert.get(), chain.get()) != 1)
    return "cannot verify the TLS certificate: " + openssl_errors();
  if (X509_verify_cert(verify.get()) != 1) {
    const int error = X509_STORE_CTX_get_error(verify.get());
    return "the TLS certificate " + tls.certificate + " does not verify against the CA " + tls.ca +
           ": " + X509_verify_cert_error_string(error);
  }
  return std::nullopt;
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost")
    return true;
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1)
    return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6) != 0;
  return false;
}

} // namespace caflm

#include "caflm/actors/openssl_hooks.hpp"

#include "caflm/actors/tls_refusal_log.hpp"

#include <dlfcn.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <cstdio>
#include <cstdlib>

namespace {

/// OpenSSL's own `name`, the next definition after this executable's.
template <class Function>
Function next_definition(const char* name) {
  void* symbol = dlsym(RTLD_NEXT, name);
  if (symbol == nullptr) {
    std::fprintf(stderr, "caflm: cannot find OpenSSL's %s: %s\n", name, dlerror());
    std::abort();
  }
  return reinterpret_cast<Function>(symbol);
}

} // namespace

// The replacements: the queue cleared, then OpenSSL's function (and a
// failed accept logged). Each looks its original up once, on first use.
extern "C" {

int SSL_read(SSL* ssl, void* buffer, int size) {
  static const auto original = next_definition<int (*)(SSL*, void*, int)>("SSL_read");
  ERR_clear_error();
  return original(ssl, buffer, size);
}

int SSL_write(SSL* ssl, const void* buffer, int size) {
  static const auto original = next_definition<int (*)(SSL*, const void*, int)>("SSL_write");
  ERR_clear_error();
  return original(ssl, buffer, size);
}

int SSL_accept(SSL* ssl) {
  static const auto original = next_definition<int (*)(SSL*)>("SSL_accept");
  ERR_clear_error();
  const int result = original(ssl);
  if (result != 1)
    caflm::report_refused_handshake(ssl, result);
  return result;
}

int SSL_connect(SSL* ssl) {
  static const auto original = next_definition<int (*)(SSL*)>("SSL_connect");
  ERR_clear_error();
  return original(ssl);
}

} // extern "C"

namespace caflm {

void hook_openssl() {
  // Nothing to do at run time: referencing this object keeps the
  // replacements above in the program.
}

} // namespace caflm

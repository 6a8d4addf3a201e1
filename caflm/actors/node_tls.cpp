#include "caflm/actors/node_tls.hpp"

#include "caflm/actors/openssl_hooks.hpp"

#include <stdexcept>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/io/middleman.hpp>
#include <caf/openssl/manager.hpp>
#include <caf/openssl/publish.hpp>

namespace caflm {

void enable_tls(caf::actor_system_config& config, const TlsOptions& tls) {
  if (auto problem = validate(tls))
    throw std::invalid_argument(*problem);
  if (!tls.enabled())
    return;
  hook_openssl();
  config.openssl_certificate = tls.certificate;
  config.openssl_key = tls.key;
  config.openssl_cafile = tls.ca;
  config.load<caf::openssl::manager>();
}

bool uses_tls(caf::actor_system& system) {
  if (!system.has_openssl_manager())
    return false;
  const caf::actor_system_config& config = system.config();
  const bool has_ca = !config.openssl_cafile.empty() || !config.openssl_capath.empty();
  if (!system.openssl_manager().authentication_enabled() || !has_ca)
    throw std::runtime_error(
        "CAF's OpenSSL module is loaded without a certificate and a CA: anonymous TLS "
        "authenticates nobody; configure it with caflm::enable_tls");
  return true;
}

caf::expected<std::uint16_t> publish_engine(caf::actor_system& system,
                                            const engine_core_actor& engine,
                                            const std::string& host, std::uint16_t port) {
  if (uses_tls(system))
    return caf::openssl::publish(engine, port, host.c_str(), true);
  return system.middleman().publish(engine, port, host.c_str(), true);
}

} // namespace caflm

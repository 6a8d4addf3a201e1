#pragma once

#include <cstdint>
#include <string>

#include <caf/expected.hpp>
#include <caf/fwd.hpp>

#include "caflm/actors/tls_options.hpp"
#include "caflm/messages/interfaces.hpp"

namespace caflm {

/// Loads CAF's OpenSSL module into `config` with `tls`'s files (nothing
/// without files); std::invalid_argument when validate(tls) fails. Call
/// after add_message_types(config), which loads the middleman the module
/// needs, and before the actor system is created; then publish
/// engines with publish_engine and let Cluster connect to workers: both use
/// TLS whenever the system has the module.
void enable_tls(caf::actor_system_config& config, const TlsOptions& tls);

/// Whether `system` links to other nodes through CAF's OpenSSL module, with
/// certificates. Throws std::runtime_error when the module is loaded with no
/// certificate (anonymous TLS, refused).
bool uses_tls(caf::actor_system& system);

/// Publishes `engine` to other nodes on `host`:`port` (0: any free port),
/// through TLS when uses_tls(system); returns the port.
caf::expected<std::uint16_t> publish_engine(caf::actor_system& system,
                                            const engine_core_actor& engine,
                                            const std::string& host, std::uint16_t port);

} // namespace caflm

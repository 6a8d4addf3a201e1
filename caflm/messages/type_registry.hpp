#pragma once

namespace caf {
class actor_system_config;
} // namespace caf

namespace caflm {

/// Registers every type that caflm's actors exchange, so they cross process
/// boundaries. Call it once on each node's config before creating the
/// actor system (it also loads the middleman).
void add_message_types(caf::actor_system_config& config);

} // namespace caflm

#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>

namespace caflm::apps {

/// The actor system config every caflm process uses: message types
/// registered, middleman loaded, no log files.
caf::actor_system_config& configure(caf::actor_system_config& config);

} // namespace caflm::apps

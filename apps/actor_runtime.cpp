#include "apps/actor_runtime.hpp"

#include <caf/atom.hpp>

#include "caflm/messages/type_registry.hpp"

namespace caflm::apps {

caf::actor_system_config& configure(caf::actor_system_config& config) {
  add_message_types(config);
  config.set("logger.file-verbosity", caf::atom("quiet"));
  config.set("logger.console-verbosity", caf::atom("quiet"));
  return config;
}

} // namespace caflm::apps

#include "caflm/actors/node_janitor.hpp"

#include <caf/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>

#include "caflm/engine/log.hpp"
#include "caflm/messages/atoms.hpp"

namespace caflm {

namespace {

/// Drops the spawn-server handles of nodes without a route. Runs on the
/// middleman's event loop, the only thread that touches the broker.
void prune_departed_nodes(caf::io::basp_broker& broker) {
  std::size_t pruned = 0;
  for (auto it = broker.spawn_servers.begin(); it != broker.spawn_servers.end();) {
    if (broker.instance.tbl().lookup(it->first)) {
      ++it;
      continue;
    }
    // It has usually ended already (its node's config server went down).
    caf::anon_send_exit(it->second, caf::exit_reason::user_shutdown);
    it = broker.spawn_servers.erase(it);
    ++pruned;
  }
  if (pruned > 0)
    log(LogLevel::Debug, "released the middleman's state of {} node(s) that left", pruned);
}

using janitor_actor = caf::typed_actor<caf::reacts_to<poll_atom>>;

janitor_actor::behavior_type janitor(janitor_actor::pointer self,
                                     std::chrono::milliseconds interval) {
  self->send(self, poll_atom::value);
  return {
      [self, interval](poll_atom) {
        auto& middleman = self->home_system().middleman();
        caf::actor basp = middleman.named_broker<caf::io::basp_broker>(caf::atom("BASP"));
        middleman.run_later([basp] {
          auto* broker =
              static_cast<caf::io::basp_broker*>(caf::actor_cast<caf::abstract_actor*>(basp));
          prune_departed_nodes(*broker);
        });
        self->delayed_send(self, interval, poll_atom::value);
      },
  };
}

} // namespace

void start_node_janitor(caf::actor_system& system, std::chrono::milliseconds interval) {
  system.spawn<caf::hidden>(janitor, interval);
}

} // namespace caflm

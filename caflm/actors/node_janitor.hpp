#pragma once

#include <chrono>

#include <caf/fwd.hpp>

namespace caflm {

/// Stops a leak in CAF 0.17's middleman. For every node that connects, its
/// BASP broker spawns a helper actor (a "spawn server") and keeps a handle
/// to it in `basp_broker::spawn_servers`, which nothing prunes when the
/// node leaves: about 1.3 KB for every client that ever came and went (CAF
/// 0.18 rewrote the broker). A worker that clients keep connecting to would
/// grow without bound. The janitor, an actor of `system`, drops every
/// `interval` the handles of nodes the broker has no route to any more.
void start_node_janitor(caf::actor_system& system,
                        std::chrono::milliseconds interval = std::chrono::seconds(5));

} // namespace caflm

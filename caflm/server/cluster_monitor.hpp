#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include <caf/actor.hpp>
#include <caf/fwd.hpp>

#include "caflm/engine/inference_engine.hpp"
#include "caflm/messages/interfaces.hpp"
#include "caflm/server/cluster_events.hpp"
#include "caflm/server/cluster_view.hpp"

namespace caflm {
class Cluster;
} // namespace caflm

namespace caflm::server {

/// How often the monitor polls.
struct ClusterMonitorOptions {
  /// The coordinator's stats: the dashboard refreshes every second, and a
  /// lost engine shows within about this long.
  std::chrono::milliseconds poll_interval{500};
  /// A comment to every event stream, to keep proxies from closing them.
  std::chrono::milliseconds heartbeat_interval{15000};
};

/// The engines of `cluster`, in its order, for a ClusterView.
std::vector<EngineIdentity> engine_identities(const Cluster& cluster);

/// Each of `engines`' load in `stats`, nullopt for an engine the
/// coordinator does not have registered (lost, or not yet connected).
std::vector<std::optional<LoadReport>>
loads_by_engine(const std::vector<engine_core_actor>& engines, const CoordinatorStats& stats);

/// Polls a cluster's coordinator from an actor of its own and feeds a
/// ClusterView, whether or not anyone watches: a lost engine is on the
/// timeline when the operator looks later.
class ClusterMonitor {
 public:
  ClusterMonitor(caf::actor_system& system, Cluster& cluster, std::shared_ptr<ClusterView> view,
                 std::shared_ptr<ClusterEventLog> events, ClusterMonitorOptions options = {});
  ~ClusterMonitor();

  ClusterMonitor(const ClusterMonitor&) = delete;
  ClusterMonitor& operator=(const ClusterMonitor&) = delete;

  void start();
  void stop();

 private:
  caf::actor_system& system_;
  Cluster& cluster_;
  std::shared_ptr<ClusterView> view_;
  std::shared_ptr<ClusterEventLog> events_;
  ClusterMonitorOptions options_;
  caf::actor poller_;
};

} // namespace caflm::server

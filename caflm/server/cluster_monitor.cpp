#include "caflm/server/cluster_monitor.hpp"

#include <algorithm>

#include <caf/all.hpp>

#include "caflm/actors/cluster.hpp"
#include "caflm/messages/atoms.hpp"

namespace caflm::server {

std::vector<EngineIdentity> engine_identities(const Cluster& cluster) {
  std::vector<EngineIdentity> identities;
  const auto& names = cluster.engine_names();
  for (std::size_t i = 0; i < names.size(); ++i)
    identities.push_back(EngineIdentity{names[i], cluster.is_remote_engine(i)});
  return identities;
}

std::vector<std::optional<LoadReport>>
loads_by_engine(const std::vector<engine_core_actor>& engines, const CoordinatorStats& stats) {
  std::vector<std::optional<LoadReport>> loads(engines.size());
  for (std::size_t i = 0; i < stats.loads.size() && i < stats.handles.size(); ++i) {
    const auto known = std::find(engines.begin(), engines.end(), stats.handles[i]);
    if (known != engines.end())
      loads[static_cast<std::size_t>(known - engines.begin())] = stats.loads[i];
  }
  return loads;
}

ClusterMonitor::ClusterMonitor(caf::actor_system& system, Cluster& cluster,
                               std::shared_ptr<ClusterView> view,
                               std::shared_ptr<ClusterEventLog> events,
                               ClusterMonitorOptions options)
  : system_(system)
  , cluster_(cluster)
  , view_(std::move(view))
  , events_(std::move(events))
  , options_(options) {}

ClusterMonitor::~ClusterMonitor() {
  stop();
}

void ClusterMonitor::start() {
  if (poller_)
    return;
  const dp_coordinator_actor coordinator = cluster_.coordinator();
  // The poller keeps what it needs, not the cluster: it may outlive a poll
  // in flight when the monitor stops.
  std::vector<engine_core_actor> engines = cluster_.engines();
  const auto heartbeat_every =
      std::max<long>(1, static_cast<long>(options_.heartbeat_interval / options_.poll_interval));
  poller_ = system_.spawn([coordinator, engines, view = view_, events = events_,
                           interval = options_.poll_interval,
                           heartbeat_every](caf::event_based_actor* self) -> caf::behavior {
    auto polls = std::make_shared<long>(0);
    self->send(self, poll_atom::value);
    return {
        [=](poll_atom) {
          self->delayed_send(self, interval, poll_atom::value);
          if (++*polls % heartbeat_every == 0)
            events->heartbeat();
          // One poll at a time: the answer (or its timeout) comes before the
          // next two ticks.
          self->request(coordinator, interval * 2, stats_atom::value)
              .then(
                  [=](const CoordinatorStats& stats) {
                    view->update(unix_seconds_now(), loads_by_engine(engines, stats));
                  },
                  // No answer: the view keeps the last one, the next poll asks again.
                  [](const caf::error&) {});
        },
    };
  });
}

void ClusterMonitor::stop() {
  if (!poller_)
    return;
  caf::anon_send_exit(poller_, caf::exit_reason::user_shutdown);
  poller_ = caf::actor{};
}

} // namespace caflm::server

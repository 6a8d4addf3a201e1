#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "caflm/engine/inference_engine.hpp"
#include "caflm/server/cluster_events.hpp"

namespace caflm::server {

/// One engine of a cluster as the dashboard lists it.
struct EngineIdentity {
  /// The cluster's stable name: "local-N" or "HOST:PORT".
  std::string name;
  /// A proxy of a `caflm worker` process, which reconnects when it is lost.
  bool remote = false;
};

/// The cluster's engines as successive polls of the coordinator saw them:
/// each one's state and load, and its generation rate. It turns the changes
/// between polls into timeline events (engine up, lost, back; preemptions;
/// the 429s noted since the last poll). No CAF: ClusterMonitor polls and
/// feeds it. Thread-safe.
class ClusterView {
 public:
  ClusterView(std::vector<EngineIdentity> engines, std::shared_ptr<ClusterEventLog> events,
              double now);

  /// One poll at `now`: for each engine (in the constructor's order) its
  /// load when the coordinator has it registered, nullopt when not. A load
  /// with no blocks (registered, no report yet) counts as not up.
  void update(double now, const std::vector<std::optional<LoadReport>>& loads);

  /// Counts a request refused with 429; the next update turns those of one
  /// poll into one event, so that a flood of refusals does not flood the
  /// timeline. Lock-free.
  void note_rate_limited() { rate_limited_.fetch_add(1, std::memory_order_relaxed); }

  /// Every engine: `{"name", "kind": "local"|"remote", "state": "up"|"lost",
  /// "reconnecting", "since", "running", "waiting", "kv_blocks_used",
  /// "kv_blocks_total", "kv_blocks_cached", "prefix_cache_hit_rate",
  /// "tokens_per_second", "generated_tokens", "preemptions"}`, the load
  /// fields null for an engine never seen. A lost remote engine is
  /// `reconnecting`: its proxy keeps trying to reach the worker.
  nlohmann::ordered_json engines_json() const;

  /// The number of engines up at the last poll.
  std::size_t engines_up() const;

 private:
  struct Engine {
    EngineIdentity identity;
    bool up = false;
    bool ever_up = false;
    /// When `up` last changed (or the view started).
    double since = 0.0;
    LoadReport load;
    /// (time, generated tokens) of the polls in the rate window.
    std::deque<std::pair<double, std::uint64_t>> generated;
    double tokens_per_second = 0.0;
  };

  /// Updates one engine and publishes what changed (mutex held).
  void update_engine(Engine& engine, double now, const std::optional<LoadReport>& load);
  static void update_rate(Engine& engine, double now);

  std::shared_ptr<ClusterEventLog> events_;
  mutable std::mutex mutex_;
  std::vector<Engine> engines_;
  std::atomic<std::uint64_t> rate_limited_{0};
};

} // namespace caflm::server

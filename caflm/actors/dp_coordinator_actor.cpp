#include "caflm/actors/dp_coordinator_actor.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <unordered_set>
#include <xxhash.h>

#include <caf/all.hpp>

#include "caflm/engine/log.hpp"

namespace caflm {

namespace {

struct EngineEntry {
  engine_core_actor engine;
  LoadReport load;
  /// Requests ever routed here, and how many of them the last load report
  /// can reflect: those routed before the poll it answered was sent. The
  /// difference counts optimistically until a later report covers it.
  std::uint64_t routed = 0;
  std::uint64_t routed_in_load = 0;
  /// Recent prompt-prefix hashes, oldest first, bounded.
  std::deque<std::uint64_t> prefix_order;
  std::unordered_set<std::uint64_t> prefixes;

  double score() const {
    return load_score(load.running, load.waiting) + static_cast<double>(routed - routed_in_load);
  }

  void remember(std::uint64_t hash, std::uint32_t capacity) {
    if (!prefixes.insert(hash).second)
      return;
    prefix_order.push_back(hash);
    if (prefix_order.size() > capacity) {
      prefixes.erase(prefix_order.front());
      prefix_order.pop_front();
    }
  }
};

struct CoordinatorState {
  CoordinatorConfig config;
  std::vector<EngineEntry> engines;
  std::uint64_t routed = 0;
  std::size_t round_robin = 0;

  static inline const char* name = "caflm.coordinator";
};

/// The coordinator as it sees itself: it also takes its own poll timer.
using coordinator_actor = dp_coordinator_actor::extend<caf::reacts_to<poll_atom>>;
using coordinator_pointer = coordinator_actor::stateful_pointer<CoordinatorState>;

std::vector<EngineEntry>::iterator find(CoordinatorState& st, const caf::actor_addr& address) {
  return std::find_if(st.engines.begin(), st.engines.end(),
                      [&](const EngineEntry& e) { return e.engine.address() == address; });
}

void poll(coordinator_pointer self) {
  for (const EngineEntry& entry : self->state.engines) {
    engine_core_actor engine = entry.engine;
    // Routes made from now on may reach the engine after it answers: they
    // stay counted on top of this report.
    const std::uint64_t routed_before = entry.routed;
    self->request(engine, std::chrono::seconds(2), get_load_atom::value)
        .then(
            [self, engine, routed_before](const LoadReport& report) {
              auto it = find(self->state, engine.address());
              if (it != self->state.engines.end()) {
                it->load = report;
                it->routed_in_load = std::max(it->routed_in_load, routed_before);
              }
            },
            [](const caf::error&) {
              // A slow or lost engine keeps its last load; monitoring (or its
              // proxy) takes it out when it is gone.
            });
  }
  self->delayed_send(self, self->state.config.poll_interval, poll_atom::value);
}

engine_core_actor route(CoordinatorState& st, std::uint64_t hash, const engine_core_actor& avoid) {
  if (st.engines.empty())
    return {};
  // An engine that just failed the request is skipped while any other is
  // registered.
  auto eligible = [&](const EngineEntry& e) {
    return st.engines.size() == 1 || !avoid || e.engine != avoid;
  };
  double best = std::numeric_limits<double>::infinity();
  for (const EngineEntry& e : st.engines)
    if (eligible(e))
      best = std::min(best, e.score());
  // Round robin over the least loaded, unless an engine within the margin
  // already holds this prefix.
  const std::size_t n = st.engines.size();
  EngineEntry* chosen = nullptr;
  for (std::size_t i = 0; i < n && chosen == nullptr; ++i) {
    EngineEntry& e = st.engines[(st.round_robin + i) % n];
    if (eligible(e) && e.score() <= best + st.config.affinity_margin && e.prefixes.count(hash) != 0)
      chosen = &e;
  }
  for (std::size_t i = 0; i < n && chosen == nullptr; ++i) {
    EngineEntry& e = st.engines[(st.round_robin + i) % n];
    if (eligible(e) && e.score() <= best)
      chosen = &e;
  }
  st.round_robin = (st.round_robin + 1) % n;
  chosen->remember(hash, st.config.prefix_memory);
  ++chosen->routed;
  ++st.routed;
  return chosen->engine;
}

coordinator_actor::behavior_type coordinator(coordinator_pointer self, CoordinatorConfig config) {
  self->state.config = config;
  self->set_down_handler([self](const caf::down_msg& down) {
    auto it = find(self->state, down.source);
    if (it == self->state.engines.end())
      return;
    self->state.engines.erase(it);
    log(LogLevel::Warning, "coordinator lost an engine ({}); {} left",
        self->system().render(down.reason), self->state.engines.size());
  });
  self->send(self, poll_atom::value);
  return {
      [self](route_atom, std::uint64_t hash, const engine_core_actor& avoid) -> engine_core_actor {
        return route(self->state, hash, avoid);
      },
      [self](register_atom, const engine_core_actor& engine) {
        if (!engine || find(self->state, engine.address()) != self->state.engines.end())
          return;
        self->monitor(engine);
        EngineEntry entry;
        entry.engine = engine;
        self->state.engines.push_back(std::move(entry));
      },
      [self](deregister_atom, const engine_core_actor& engine) {
        auto it = find(self->state, engine.address());
        if (it == self->state.engines.end())
          return;
        self->demonitor(engine.address());
        self->state.engines.erase(it);
      },
      [self](stats_atom) -> CoordinatorStats {
        CoordinatorStats stats;
        stats.engines = static_cast<std::uint32_t>(self->state.engines.size());
        stats.routed = self->state.routed;
        for (const EngineEntry& e : self->state.engines)
          stats.loads.push_back(e.load);
        return stats;
      },
      [self](poll_atom) { poll(self); },
  };
}

} // namespace

dp_coordinator_actor spawn_coordinator(caf::actor_system& system, const CoordinatorConfig& config) {
  return system.spawn(coordinator, config);
}

std::uint64_t prefix_hash(std::string_view prompt) {
  // Long enough to tell system prompts apart, short enough to ignore the
  // question that follows them.
  return XXH3_64bits(prompt.data(), std::min<std::size_t>(prompt.size(), 256));
}

} // namespace caflm

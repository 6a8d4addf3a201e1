#include "caflm/actors/dp_coordinator_actor.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <stdexcept>
#include <unordered_map>
#include <xxhash.h>

#include <caf/all.hpp>

#include "caflm/engine/cuda_engine.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/kv/prefix_cache.hpp"

namespace caflm {

// The default block size serves both backends; a mixed cluster would need
// one per engine.
static_assert(kCpuKvBlockSize == kCudaKvBlockSize, "CPU and CUDA engines key blocks alike");

namespace {

/// A bounded set of block keys, the least recently touched forgotten first.
/// Its storage is taken on the first touch, then nothing allocates.
class BlockKeyLru {
 public:
  explicit BlockKeyLru(std::uint32_t capacity)
    : capacity_(capacity) {}

  bool contains(std::uint64_t key) const { return !map_.empty() && find_slot(key) != none; }

  /// Adds `key`, or marks it most recently used when present.
  void touch(std::uint64_t key) {
    if (capacity_ == 0)
      return;
    if (map_.empty())
      allocate();
    if (std::uint32_t slot = find_slot(key); slot != none) {
      unlink(map_[slot]);
      push_back(map_[slot]);
      return;
    }
    std::uint32_t node;
    if (size_ < capacity_) {
      node = size_++;
    } else {
      node = head_;
      map_erase(find_slot(nodes_[node].key));
      unlink(node);
    }
    nodes_[node].key = key;
    push_back(node);
    std::uint32_t slot = home_slot(key);
    while (map_[slot] != none)
      slot = (slot + 1) & mask_;
    map_[slot] = node;
  }

 private:
  static constexpr std::uint32_t none = std::numeric_limits<std::uint32_t>::max();

  struct Node {
    std::uint64_t key = 0;
    std::uint32_t prev = none;
    std::uint32_t next = none;
  };

  void allocate() {
    // At most half full, so probe sequences stay short.
    std::uint32_t slots = 2;
    while (slots < 2 * capacity_)
      slots *= 2;
    nodes_.resize(capacity_);
    map_.assign(slots, none);
    mask_ = slots - 1;
  }

  std::uint32_t home_slot(std::uint64_t key) const {
    // Keys are hashes already: their bits are uniform.
    return static_cast<std::uint32_t>(key ^ (key >> 32)) & mask_;
  }

  std::uint32_t find_slot(std::uint64_t key) const {
    for (std::uint32_t slot = home_slot(key); map_[slot] != none; slot = (slot + 1) & mask_)
      if (nodes_[map_[slot]].key == key)
        return slot;
    return none;
  }

  void map_erase(std::uint32_t hole) {
    // Backward-shift deletion keeps every probe sequence unbroken.
    for (std::uint32_t slot = (hole + 1) & mask_; map_[slot] != none; slot = (slot + 1) & mask_) {
      const std::uint32_t home = home_slot(nodes_[map_[slot]].key);
      const bool home_in_gap =
          hole <= slot ? (hole < home && home <= slot) : (hole < home || home <= slot);
      if (home_in_gap)
        continue;
      map_[hole] = map_[slot];
      hole = slot;
    }
    map_[hole] = none;
  }

  void unlink(std::uint32_t node) {
    Node& n = nodes_[node];
    (n.prev != none ? nodes_[n.prev].next : head_) = n.next;
    (n.next != none ? nodes_[n.next].prev : tail_) = n.prev;
    n.prev = n.next = none;
  }

  void push_back(std::uint32_t node) {
    nodes_[node].prev = tail_;
    nodes_[node].next = none;
    (tail_ != none ? nodes_[tail_].next : head_) = node;
    tail_ = node;
  }

  std::uint32_t capacity_;
  std::uint32_t size_ = 0;
  std::vector<Node> nodes_;        // [capacity]
  std::vector<std::uint32_t> map_; // open addressing, linear probing; node index or none
  std::uint32_t mask_ = 0;
  std::uint32_t head_ = none; // least recently used
  std::uint32_t tail_ = none;
};

struct EngineEntry {
  engine_core_actor engine;
  LoadReport load;
  /// Requests ever routed here, and how many of them the last load report
  /// can reflect: those routed before the poll it answered was sent. The
  /// difference counts optimistically until a later report covers it.
  std::uint64_t routed = 0;
  std::uint64_t routed_in_load = 0;
  /// Block keys of the prompts routed here: what its prefix cache is
  /// likely to hold.
  BlockKeyLru blocks;

  explicit EngineEntry(engine_core_actor handle, std::uint32_t block_memory)
    : engine(std::move(handle))
    , blocks(block_memory) {}

  double score() const {
    return load_score(load.running, load.waiting) + static_cast<double>(routed - routed_in_load);
  }

  /// How many leading keys of `chain` this engine holds.
  std::size_t matched(const std::vector<std::uint64_t>& chain) const {
    std::size_t count = 0;
    while (count < chain.size() && blocks.contains(chain[count]))
      ++count;
    return count;
  }

  void remember(const std::vector<std::uint64_t>& chain) {
    // Deepest block first, so that the first blocks, which every longer
    // prompt of this prefix shares, are the last to be forgotten.
    for (auto key = chain.rbegin(); key != chain.rend(); ++key)
      blocks.touch(*key);
  }
};

/// Prefill groups whose engine the coordinator remembers: far more than
/// can arrive while one group's members are being routed.
constexpr std::size_t kRememberedGroups = 4096;

struct CoordinatorState {
  CoordinatorConfig config;
  std::vector<EngineEntry> engines;
  std::uint64_t routed = 0;
  std::size_t round_robin = 0;
  /// The block key chain of the request being routed (reused).
  std::vector<std::uint64_t> chain;
  /// Where the latest prefill groups went (oldest first forgotten), so that
  /// the parallel samples of one prompt meet on one engine and share its
  /// prefill.
  std::unordered_map<std::uint64_t, caf::actor_addr> group_engines;
  std::deque<std::uint64_t> group_order;

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

/// Fills `out` with the keys `request` routes by: its prompt's block key
/// chain; for a prompt given only as text (the engine tokenizes it), one
/// key hashing its first bytes; none without prefix routing.
void routing_keys(const CoordinatorConfig& config, const GenerateRequest& request,
                  std::vector<std::uint64_t>& out) {
  out.clear();
  if (!config.prefix_routing)
    return;
  if (!request.prompt_tokens.empty())
    prefix_block_keys(request.prompt_tokens.data(), request.prompt_tokens.size(), config.block_size,
                      config.cache_salt, out);
  else if (!request.prompt.empty())
    out.push_back(prefix_hash(request.prompt));
}

engine_core_actor route(CoordinatorState& st, const GenerateRequest& request,
                        const engine_core_actor& avoid) {
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
  routing_keys(st.config, request, st.chain);
  // Candidates: the least loaded engines, and those within the margin that
  // hold a prefix of the chain. The longest prefix wins, then the lower
  // score, then the first in round-robin order.
  const std::size_t n = st.engines.size();
  EngineEntry* chosen = nullptr;
  std::size_t chosen_match = 0;
  double chosen_score = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    EngineEntry& e = st.engines[(st.round_robin + i) % n];
    if (!eligible(e))
      continue;
    const double score = e.score();
    if (score > best + st.config.affinity_margin)
      continue;
    const std::size_t match = e.matched(st.chain);
    if (match == 0 && score > best)
      continue;
    if (chosen == nullptr || match > chosen_match ||
        (match == chosen_match && score < chosen_score)) {
      chosen = &e;
      chosen_match = match;
      chosen_score = score;
    }
  }
  st.round_robin = (st.round_robin + 1) % n;
  chosen->remember(st.chain);
  ++chosen->routed;
  ++st.routed;
  return chosen->engine;
}

/// Routes a member of a prefill group to the engine its group went to, if
/// that one is still registered and eligible; otherwise as any request.
engine_core_actor route_member(CoordinatorState& st, const GenerateRequest& request,
                               const engine_core_actor& avoid) {
  if (request.prefill_group == 0 || !request.generated.empty())
    return route(st, request, avoid);
  auto known = st.group_engines.find(request.prefill_group);
  if (known != st.group_engines.end()) {
    auto entry = find(st, known->second);
    if (entry != st.engines.end() && (!avoid || entry->engine != avoid)) {
      ++entry->routed;
      ++st.routed;
      return entry->engine;
    }
  }
  engine_core_actor chosen = route(st, request, avoid);
  if (chosen) {
    if (known != st.group_engines.end()) {
      known->second = chosen.address();
    } else {
      st.group_engines.emplace(request.prefill_group, chosen.address());
      st.group_order.push_back(request.prefill_group);
      if (st.group_order.size() > kRememberedGroups) {
        st.group_engines.erase(st.group_order.front());
        st.group_order.pop_front();
      }
    }
  }
  return chosen;
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
      [self](route_atom, const GenerateRequest& request, const engine_core_actor& avoid)
          -> engine_core_actor { return route_member(self->state, request, avoid); },
      [self](register_atom, const engine_core_actor& engine) {
        if (!engine || find(self->state, engine.address()) != self->state.engines.end())
          return;
        self->monitor(engine);
        self->state.engines.emplace_back(engine, self->state.config.prefix_block_memory);
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
        for (const EngineEntry& e : self->state.engines) {
          stats.loads.push_back(e.load);
          stats.handles.push_back(e.engine);
        }
        return stats;
      },
      [self](poll_atom) { poll(self); },
  };
}

} // namespace

dp_coordinator_actor spawn_coordinator(caf::actor_system& system, const CoordinatorConfig& config) {
  if (config.block_size == 0)
    throw std::invalid_argument("the coordinator's block size must be at least one token");
  return system.spawn(coordinator, config);
}

void prefix_block_keys(const TokenId* tokens, std::size_t count, std::uint32_t block_size,
                       std::uint64_t salt, std::vector<std::uint64_t>& out) {
  out.clear();
  if (block_size == 0)
    throw std::invalid_argument("prefix_block_keys: the block size must be at least one token");
  const std::size_t blocks = count / block_size;
  out.reserve(blocks);
  // The first block's parent key is 0, as in PrefixCache::lookup.
  std::uint64_t parent = 0;
  for (std::size_t i = 0; i < blocks; ++i) {
    parent = PrefixCache::default_hash(parent, tokens + i * block_size, block_size, salt);
    out.push_back(parent);
  }
}

std::uint64_t prefix_hash(std::string_view prompt) {
  // Long enough to tell system prompts apart, short enough to ignore the
  // question that follows them.
  return XXH3_64bits(prompt.data(), std::min<std::size_t>(prompt.size(), 256));
}

} // namespace caflm

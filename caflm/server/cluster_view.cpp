#include "caflm/server/cluster_view.hpp"

#include <cstdio>
#include <stdexcept>

namespace caflm::server {

namespace {

/// Generation rates are over this many seconds of polls.
constexpr double kRateWindowSeconds = 5.0;

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f s", seconds);
  return text;
}

} // namespace

ClusterView::ClusterView(std::vector<EngineIdentity> engines,
                         std::shared_ptr<ClusterEventLog> events, double now)
  : events_(std::move(events)) {
  if (!events_)
    throw std::invalid_argument("ClusterView: no event log");
  for (auto& identity : engines) {
    Engine engine;
    engine.identity = std::move(identity);
    engine.since = now;
    engines_.push_back(std::move(engine));
  }
}

void ClusterView::update(double now, const std::vector<std::optional<LoadReport>>& loads) {
  if (loads.size() != engines_.size())
    throw std::invalid_argument("ClusterView::update: " + std::to_string(loads.size()) +
                                " loads for " + std::to_string(engines_.size()) + " engines");
  std::lock_guard<std::mutex> guard{mutex_};
  for (std::size_t i = 0; i < engines_.size(); ++i) {
    // The coordinator holds an empty report for an engine it registered
    // until the engine first answers; every engine has blocks, so such a
    // report means "not heard from yet", not "up with nothing".
    const bool heard_from = loads[i] && loads[i]->total_blocks > 0;
    update_engine(engines_[i], now, heard_from ? loads[i] : std::nullopt);
  }
  if (const auto refused = rate_limited_.exchange(0, std::memory_order_relaxed)) {
    nlohmann::ordered_json fields;
    fields["count"] = refused;
    events_->publish(now, "rate_limited",
                     std::to_string(refused) + (refused == 1 ? " request" : " requests") +
                         " refused with 429: every engine's queue was full",
                     fields);
  }
}

void ClusterView::update_engine(Engine& engine, double now, const std::optional<LoadReport>& load) {
  const std::string& name = engine.identity.name;
  nlohmann::ordered_json fields;
  fields["engine"] = name;
  if (load && !engine.up) {
    if (engine.ever_up)
      events_->publish(now, "engine_back",
                       "engine " + name + " is back after " + seconds_text(now - engine.since),
                       fields);
    else
      events_->publish(now, "engine_up", "engine " + name + " is up", fields);
    engine.up = true;
    engine.ever_up = true;
    engine.since = now;
    // A worker that restarted counts from zero again.
    engine.generated.clear();
    engine.load = *load;
  } else if (!load && engine.up) {
    events_->publish(now, "engine_lost",
                     "engine " + name + " lost" +
                         (engine.load.running + engine.load.waiting > 0
                              ? "; its requests fail over to the other engines"
                              : "") +
                         (engine.identity.remote ? "; reconnecting" : ""),
                     fields);
    engine.up = false;
    engine.since = now;
    engine.generated.clear();
    engine.tokens_per_second = 0.0;
    engine.load.running = 0;
    engine.load.waiting = 0;
    return;
  }
  if (!load)
    return;
  if (load->preemptions > engine.load.preemptions) {
    const std::uint64_t count = load->preemptions - engine.load.preemptions;
    fields["count"] = count;
    events_->publish(now, "preemption",
                     "engine " + name + " preempted " + std::to_string(count) +
                         (count == 1 ? " request" : " requests") + " to free KV blocks",
                     fields);
  }
  if (load->generated_tokens < engine.load.generated_tokens)
    engine.generated.clear(); // a restarted worker's counters
  engine.load = *load;
  engine.generated.emplace_back(now, load->generated_tokens);
  update_rate(engine, now);
}

void ClusterView::update_rate(Engine& engine, double now) {
  auto& history = engine.generated;
  while (history.size() > 2 && history.front().first < now - kRateWindowSeconds)
    history.pop_front();
  const double span = history.back().first - history.front().first;
  engine.tokens_per_second =
      span > 0.0 ? double(history.back().second - history.front().second) / span : 0.0;
}

nlohmann::ordered_json ClusterView::engines_json() const {
  std::lock_guard<std::mutex> guard{mutex_};
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const Engine& engine : engines_) {
    nlohmann::ordered_json item;
    item["name"] = engine.identity.name;
    item["kind"] = engine.identity.remote ? "remote" : "local";
    item["state"] = engine.up ? "up" : "lost";
    item["reconnecting"] = !engine.up && engine.identity.remote;
    item["since"] = engine.since;
    const LoadReport& load = engine.load;
    if (!engine.ever_up) {
      for (const char* field :
           {"running", "waiting", "kv_blocks_used", "kv_blocks_total", "kv_blocks_cached",
            "prefix_cache_hit_rate", "tokens_per_second", "generated_tokens", "preemptions"})
        item[field] = nullptr;
    } else {
      item["running"] = load.running;
      item["waiting"] = load.waiting;
      item["kv_blocks_used"] =
          engine.up ? load.total_blocks - std::min(load.free_blocks, load.total_blocks) : 0;
      item["kv_blocks_total"] = load.total_blocks;
      item["kv_blocks_cached"] = engine.up ? load.cached_blocks : 0;
      if (load.prefix_queried_tokens > 0)
        item["prefix_cache_hit_rate"] =
            double(load.prefix_hit_tokens) / double(load.prefix_queried_tokens);
      else
        item["prefix_cache_hit_rate"] = nullptr;
      item["tokens_per_second"] = engine.tokens_per_second;
      item["generated_tokens"] = load.generated_tokens;
      item["preemptions"] = load.preemptions;
    }
    list.push_back(std::move(item));
  }
  return list;
}

std::size_t ClusterView::engines_up() const {
  std::lock_guard<std::mutex> guard{mutex_};
  std::size_t up = 0;
  for (const Engine& engine : engines_)
    up += engine.up ? 1 : 0;
  return up;
}

} // namespace caflm::server

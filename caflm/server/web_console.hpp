#pragma once

// The web console of `caflm serve`: the chat page (`/`), the cluster
// dashboard (`/cluster`) and their files (`/console/...`), embedded in the
// binary; and the JSON they read, which operators' own tools may read too:
//
// - `GET /v1/cluster`: every engine's state and load, request totals, and
//   per-interval request rate and latency percentiles over the last minutes.
// - `GET /v1/cluster/events[?after=ID]`: the timeline as Server-Sent Events
//   (`id`, event `cluster`, JSON data with id, time, type, message), the
//   kept ones after ID (or the Last-Event-ID header) first, then live.
//
// The pages need no key; the JSON needs the API key when one is set.

#include <memory>
#include <string>

#include "caflm/server/cluster_events.hpp"
#include "caflm/server/cluster_view.hpp"
#include "caflm/server/http_server.hpp"
#include "caflm/server/recent_activity.hpp"

namespace caflm::server {

/// What the console shows and who may read it.
struct WebConsoleSources {
  std::string served_model_name;
  /// When set, the JSON endpoints need "Authorization: Bearer <key>".
  std::string api_key;
  std::shared_ptr<ClusterView> view;
  std::shared_ptr<RecentActivity> activity;
  std::shared_ptr<ClusterEventLog> events;
};

/// Adds the console's routes to `http` (before it starts).
void add_web_console(HttpServer& http, WebConsoleSources sources);

/// The body of `GET /v1/cluster` at `now` (Unix seconds).
nlohmann::ordered_json cluster_snapshot(const WebConsoleSources& sources, double now);

} // namespace caflm::server

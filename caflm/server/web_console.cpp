#include "caflm/server/web_console.hpp"

#include <charconv>
#include <optional>
#include <stdexcept>
#include <string_view>

#include "caflm/server/console_assets.hpp"
#include "caflm/server/openai_protocol.hpp"

namespace caflm::server {

namespace {

/// The pages run their own files only: no inline script or style, no other
/// origin, no framing (clickjacking).
constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'";

std::string content_type_of(std::string_view name) {
  auto ends_with = [name](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  if (ends_with(".html"))
    return "text/html; charset=utf-8";
  if (ends_with(".css"))
    return "text/css; charset=utf-8";
  if (ends_with(".js"))
    return "text/javascript; charset=utf-8";
  if (ends_with(".svg"))
    return "image/svg+xml";
  if (ends_with(".png"))
    return "image/png";
  return "application/octet-stream";
}

/// The path each file is served at: the two pages at their own, the rest
/// under /console/.
std::string path_of(std::string_view name) {
  if (name == "chat.html")
    return "/";
  if (name == "cluster.html")
    return "/cluster";
  return "/console/" + std::string(name);
}

HttpHandler serve_file(const EmbeddedFile& file) {
  return [body = std::string(file.bytes), type = content_type_of(file.name)](
             const HttpRequest&, std::shared_ptr<ResponseWriter> writer) {
    writer->respond(200, type, body,
                    {{"Content-Security-Policy", kContentSecurityPolicy},
                     {"X-Content-Type-Options", "nosniff"},
                     {"Referrer-Policy", "no-referrer"},
                     {"Cache-Control", "no-cache"}});
  };
}

/// Answers 401 and returns false unless the request may read the JSON.
bool authorized(const WebConsoleSources& sources, const HttpRequest& request,
                ResponseWriter& writer) {
  if (sources.api_key.empty() || has_bearer_token(request, sources.api_key))
    return true;
  writer.respond(401, "application/json", dump_json(error_body(invalid_api_key())));
  return false;
}

/// The event id to resume after: `after=N` in the query, else the
/// Last-Event-ID header (an EventSource reconnecting), else 0.
std::uint64_t resume_after(const HttpRequest& request) {
  auto parse = [](std::string_view text) -> std::optional<std::uint64_t> {
    std::uint64_t value = 0;
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error != std::errc{} || end != text.data() + text.size())
      return std::nullopt;
    return value;
  };
  std::string_view query = request.query;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    if (pair.substr(0, 6) == "after=")
      if (auto value = parse(pair.substr(6)))
        return *value;
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
  }
  if (auto header = request.header("Last-Event-ID"))
    if (auto value = parse(*header))
      return *value;
  return 0;
}

} // namespace

nlohmann::ordered_json cluster_snapshot(const WebConsoleSources& sources, double now) {
  nlohmann::ordered_json body;
  body["time"] = now;
  body["model"] = sources.served_model_name;
  body["engines"] = sources.view->engines_json();
  body["requests"] = sources.activity->totals_json(now);
  body["series"] = sources.activity->series_json(now);
  return body;
}

void add_web_console(HttpServer& http, WebConsoleSources sources) {
  if (!sources.view || !sources.activity || !sources.events)
    throw std::invalid_argument("add_web_console: a source is missing");
  for (const EmbeddedFile& file : console_assets())
    http.route("GET", path_of(file.name), serve_file(file));
  auto shared = std::make_shared<const WebConsoleSources>(std::move(sources));
  http.route("GET", "/v1/cluster",
             [shared](const HttpRequest& request, std::shared_ptr<ResponseWriter> writer) {
               if (!authorized(*shared, request, *writer))
                 return;
               writer->respond(200, "application/json",
                               dump_json(cluster_snapshot(*shared, unix_seconds_now())),
                               {{"Cache-Control", "no-store"}});
             });
  http.route("GET", "/v1/cluster/events",
             [shared](const HttpRequest& request, std::shared_ptr<ResponseWriter> writer) {
               if (!authorized(*shared, request, *writer))
                 return;
               const std::uint64_t after = resume_after(request);
               writer->start_stream(200, "text/event-stream",
                                    {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
               // How long an EventSource waits before it reconnects.
               writer->write("retry: 2000\n\n");
               const std::uint64_t subscription = shared->events->subscribe(
                   after, [writer](const std::string& text) { return writer->write(text); });
               if (subscription == 0) {
                 writer->write(sse_event(
                     error_body(ApiError(503, "too many event streams are open; retry later",
                                         "server_error", {}, "too_many_streams"))));
                 writer->finish();
                 return;
               }
               std::weak_ptr<ClusterEventLog> events = shared->events;
               writer->on_close([events, subscription] {
                 if (auto log = events.lock())
                   log->unsubscribe(subscription);
               });
             });
}

} // namespace caflm::server

#pragma once

// `caflm serve`'s HTTP API in front of a Cluster: the OpenAI endpoints
// (/v1/chat/completions, /v1/completions, /v1/models), /health,
// /metrics, and the web console (web_console.hpp). The transport is http_server.hpp, the wire
// format openai_protocol.hpp, the metrics metrics.hpp; this component binds them to the cluster's
// request actors: one request actor per choice, its chunks streamed as Server-Sent Events or
// gathered into one response, and a client that goes away cancels every choice at once.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <caf/fwd.hpp>

#include "caflm/server/http_server.hpp"
#include "caflm/server/metrics.hpp"
#include "caflm/text/chat_template.hpp"
#include "caflm/text/tokenizer.hpp"

namespace caflm {
class Cluster;
} // namespace caflm

namespace caflm::server {

class ClusterMonitor;

/// What an OpenAiServer serves and how.
struct OpenAiServerOptions {
  /// The model's name in requests and responses (`model`).
  std::string served_model_name = "caflm";
  /// When set, every /v1/ request needs "Authorization: Bearer <key>".
  std::string api_key;
  /// Longest sequence (prompt and generated tokens) a request may ask for.
  std::uint32_t max_context = 2048;
  /// The value of Retry-After on a 429.
  std::chrono::seconds retry_after{1};
  HttpServerOptions http;
};

/// The HTTP front end of one cluster. The cluster's request options should
/// set max_backpressure_refusals (see RequestOptions), so that a request
/// every engine refuses for a full queue becomes a 429 rather than a wait.
class OpenAiServer {
 public:
  /// `tokenizer` and `chat_template` are the served model's: prompts are
  /// tokenized here, so the coordinator routes by their KV block keys.
  /// Without a chat template, /v1/chat/completions answers 400 saying so
  /// and /v1/completions still serves.
  OpenAiServer(caf::actor_system& system, Cluster& cluster,
               std::shared_ptr<const Tokenizer> tokenizer,
               std::optional<ChatTemplate> chat_template, OpenAiServerOptions options);
  ~OpenAiServer();

  OpenAiServer(const OpenAiServer&) = delete;
  OpenAiServer& operator=(const OpenAiServer&) = delete;

  /// Listens; throws std::runtime_error naming the address when it cannot.
  void start();
  /// The port listened on (the one picked for port 0).
  std::uint16_t port() const;
  /// Closes every connection (cancelling their requests) and stops.
  void stop();

  ServingMetrics& metrics() { return *metrics_; }

  struct Shared;

 private:
  std::shared_ptr<Shared> shared_;
  std::shared_ptr<ServingMetrics> metrics_;
  std::unique_ptr<ClusterMonitor> monitor_;
  HttpServer http_;
};

} // namespace caflm::server

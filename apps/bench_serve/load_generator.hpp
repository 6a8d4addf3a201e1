#pragma once

// The client side of `caflm bench-serve`: streaming completion requests sent
// to an OpenAI-compatible server on a schedule, over Boost.Beast on one
// io thread, with the arrival time of every streamed chunk recorded.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace caflm::apps::bench_serve {

/// An `http://host:port[/base]` URL taken apart.
struct ServerUrl {
  std::string host;
  std::string port;
  /// The path before `/v1/...`, without a trailing slash ("" or "/base").
  std::string base_path;

  /// `http://host:port/base` again, for messages.
  std::string to_string() const;
};

/// Parses `url`; std::invalid_argument naming the fault for anything but
/// `http://host[:port][/base]` (https, a missing host, a bad port, a query).
/// The port defaults to 80.
ServerUrl parse_server_url(const std::string& url);

/// One request of the workload.
struct PlannedRequest {
  /// The prompt as token ids (the shared prefix first).
  std::vector<std::int64_t> prompt;
  /// `max_tokens`; the server is asked to ignore EOS, so this many come back.
  std::uint32_t max_tokens = 1;
  /// When it arrives, in seconds after the start of the run.
  double arrival_s = 0;
};

/// What became of one request. Times are seconds after the start of the run.
struct RequestOutcome {
  bool success = false;
  /// Why it failed ("HTTP 429: ...", "connect: Connection refused", ...).
  std::string error;
  /// When it arrived, when it was sent (after waiting for a slot under
  /// --max-concurrency) and when its response ended.
  double arrival_s = 0;
  double sent_s = 0;
  double finished_s = 0;
  /// When each chunk that carried text (or token ids) was read: the first
  /// gives TTFT, the gaps between the others the inter-token latencies.
  std::vector<double> chunk_times_s;
  /// Prompt tokens: usage.prompt_tokens when the server sent usage, else the
  /// prompt's length.
  std::uint32_t prompt_tokens = 0;
  /// Generated tokens: usage.completion_tokens when the server sent usage,
  /// else the number of chunks that carried text.
  std::uint32_t output_tokens = 0;
  bool output_tokens_from_usage = false;
  /// usage.prompt_tokens_details.cached_tokens when given.
  std::optional<std::uint32_t> cached_tokens;
};

/// How to reach the server and how many requests may be in flight.
struct LoadOptions {
  ServerUrl url;
  std::string model;
  /// Sent as `Authorization: Bearer KEY` when not empty.
  std::string api_key;
  /// At most this many requests in flight; 0 for no bound.
  std::uint32_t max_concurrency = 0;
  /// A request fails when the server sends nothing for this long.
  double idle_timeout_s = 300;
  /// The run stops sending once this many connections in a row failed
  /// before any request connected (the rest fail as "not sent").
  std::uint32_t max_connect_failures = 10;
};

/// The answer to `GET /v1/models`.
struct ModelList {
  int status = 0;
  std::vector<std::string> ids;
  /// The error message of a non-200 answer.
  std::string error;
};

/// Asks `GET base/v1/models`. Throws std::runtime_error naming the URL when
/// the host cannot be resolved or the server cannot be reached.
ModelList fetch_models(const LoadOptions& options);

/// Sends every request of `plan` at its arrival time (each on its own
/// connection), waits for all to finish and returns their outcomes in plan
/// order. Throws std::runtime_error when the host cannot be resolved.
std::vector<RequestOutcome> run_load(const LoadOptions& options,
                                     const std::vector<PlannedRequest>& plan);

/// The body of one streaming request: `{"model", "prompt": [ids],
/// "max_tokens", "ignore_eos": true, "stream": true, "stream_options":
/// {"include_usage": true}, "temperature": 0}`.
std::string completion_request_body(const std::string& model, const PlannedRequest& request);

/// Reads a `text/event-stream` body as it arrives and records into an
/// outcome what the `text_completion` chunks say.
class SseReader {
 public:
  explicit SseReader(RequestOutcome& outcome)
    : outcome_(outcome) {}

  /// `size` bytes of the body, read at `time_s`.
  void feed(const char* data, std::size_t size, double time_s);

  /// Whether `data: [DONE]` was seen.
  bool done() const { return done_; }
  /// The first error: an `{"error": ...}` event or data that is not JSON.
  const std::string& error() const { return error_; }

 private:
  void handle_event(const std::string& event, double time_s);
  void handle_data(const std::string& data, double time_s);

  RequestOutcome& outcome_;
  std::string pending_;
  bool done_ = false;
  std::string error_;
};

} // namespace caflm::apps::bench_serve

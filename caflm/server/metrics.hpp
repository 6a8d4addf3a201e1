#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace caflm::server {

// -- Prometheus text exposition format 0.0.4 ---------------------------------

/// `value` as a Prometheus sample value or `le` label: the shortest text
/// that reads back as the same double, integral values with a trailing
/// ".0" (as Python's client writes them, so `le="1.0"` matches vLLM's
/// buckets), and "+Inf", "-Inf", "NaN".
std::string format_prometheus_value(double value);

/// A label value escaped for the exposition: backslash, double quote and
/// line feed become \\, \" and \n.
std::string escape_label_value(std::string_view value);

/// A HELP text escaped for the exposition: backslash and line feed become
/// \\ and \n (a double quote stays as it is there).
std::string escape_help(std::string_view help);

/// Whether `name` is a valid metric name: [a-zA-Z_:][a-zA-Z0-9_:]*.
bool is_valid_metric_name(std::string_view name);

/// Whether `name` is a valid label name: [a-zA-Z_][a-zA-Z0-9_]*, not
/// starting with "__" (reserved for Prometheus itself).
bool is_valid_label_name(std::string_view name);

// -- one series of each type --------------------------------------------------

/// A monotonically increasing value. Lock-free; any thread may add.
class Counter {
 public:
  /// Adds `amount`, which must be non-negative and finite.
  void inc(double amount = 1.0);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

/// A value that goes up and down, usually set at scrape time. Lock-free.
class Gauge {
 public:
  void set(double value) { value_.store(value, std::memory_order_relaxed); }
  void add(double amount);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

/// Observations counted into fixed buckets, with their sum and count. One
/// small mutex per series, so that a scrape sees buckets, sum and count of
/// the same set of observations.
class Histogram {
 public:
  /// `upper_bounds`: strictly increasing, finite; +Inf is implied.
  explicit Histogram(std::shared_ptr<const std::vector<double>> upper_bounds);

  /// Records `count` observations of `value` at once. NaN is ignored: it
  /// would poison the sum for good.
  void observe(double value, std::uint64_t count = 1);

  struct Snapshot {
    /// Cumulative: counts[i] observations were <= upper_bounds[i]; the last
    /// entry (+Inf) equals `count`.
    std::vector<std::uint64_t> cumulative_counts;
    double sum = 0.0;
    std::uint64_t count = 0;
  };
  Snapshot snapshot() const;
  const std::vector<double>& upper_bounds() const { return *upper_bounds_; }

 private:
  std::shared_ptr<const std::vector<double>> upper_bounds_;
  mutable std::mutex mutex_;
  /// Per bucket, not cumulative; one more entry than bounds (+Inf).
  std::vector<std::uint64_t> bucket_counts_;
  double sum_ = 0.0;
  std::uint64_t count_ = 0;
};

// -- families: one name, one type, many label sets ----------------------------

/// What every family shares: name, help, label names, and its rendering.
class MetricFamily {
 public:
  MetricFamily(std::string name, std::string help, std::vector<std::string> label_names);
  virtual ~MetricFamily() = default;
  MetricFamily(const MetricFamily&) = delete;
  MetricFamily& operator=(const MetricFamily&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<std::string>& label_names() const { return label_names_; }
  /// "counter", "gauge" or "histogram".
  virtual const char* type() const = 0;
  /// Appends the HELP and TYPE lines and every series' samples.
  void render(std::string& out) const;

 protected:
  /// Appends `{a="x",b="y"}` (or nothing for no labels), with `extra` (an
  /// already formatted `le="..."`) last.
  void append_labels(std::string& out, const std::vector<std::string>& values,
                     std::string_view extra = {}) const;
  void check_label_count(const std::vector<std::string>& values) const;
  virtual void render_samples(std::string& out) const = 0;

 private:
  std::string name_;
  std::string help_;
  std::vector<std::string> label_names_;
};

/// A family of series of one metric type, keyed by label values. Series
/// are created on first use and keep their address until removed, so a
/// caller may keep the reference for its hot path.
template <class Metric>
class SeriesFamily : public MetricFamily {
 public:
  using MetricFamily::MetricFamily;

  /// The series with these label values (in `label_names()` order),
  /// created at zero if it is new.
  Metric& labels(const std::vector<std::string>& values) {
    check_label_count(values);
    std::lock_guard<std::mutex> guard{mutex_};
    auto& slot = series_[values];
    if (!slot)
      slot = make_series();
    return *slot;
  }

  /// Drops one series; references to it dangle afterwards. False when
  /// there was none.
  bool remove(const std::vector<std::string>& values) {
    std::lock_guard<std::mutex> guard{mutex_};
    return series_.erase(values) > 0;
  }

  /// Drops every series; references to them dangle afterwards.
  void clear() {
    std::lock_guard<std::mutex> guard{mutex_};
    series_.clear();
  }

  std::size_t size() const {
    std::lock_guard<std::mutex> guard{mutex_};
    return series_.size();
  }

 protected:
  virtual std::unique_ptr<Metric> make_series() const = 0;
  virtual void render_series(std::string& out, const std::vector<std::string>& values,
                             const Metric& metric) const = 0;

  void render_samples(std::string& out) const final {
    std::lock_guard<std::mutex> guard{mutex_};
    for (const auto& [values, metric] : series_)
      render_series(out, values, *metric);
  }

 private:
  mutable std::mutex mutex_;
  // std::map: the exposition lists series in a stable order, and nodes do
  // not move, so references handed out stay valid.
  std::map<std::vector<std::string>, std::unique_ptr<Metric>> series_;
};

class CounterFamily final : public SeriesFamily<Counter> {
 public:
  /// `name` must end in "_total".
  CounterFamily(std::string name, std::string help, std::vector<std::string> label_names);
  const char* type() const override { return "counter"; }

 private:
  std::unique_ptr<Counter> make_series() const override;
  void render_series(std::string& out, const std::vector<std::string>& values,
                     const Counter& metric) const override;
};

class GaugeFamily final : public SeriesFamily<Gauge> {
 public:
  using SeriesFamily<Gauge>::SeriesFamily;
  const char* type() const override { return "gauge"; }

 private:
  std::unique_ptr<Gauge> make_series() const override;
  void render_series(std::string& out, const std::vector<std::string>& values,
                     const Gauge& metric) const override;
};

class HistogramFamily final : public SeriesFamily<Histogram> {
 public:
  /// `upper_bounds`: strictly increasing and finite; "le" may not be a
  /// label name.
  HistogramFamily(std::string name, std::string help, std::vector<std::string> label_names,
                  std::vector<double> upper_bounds);
  const char* type() const override { return "histogram"; }

 private:
  std::unique_ptr<Histogram> make_series() const override;
  void render_series(std::string& out, const std::vector<std::string>& values,
                     const Histogram& metric) const override;

  std::shared_ptr<const std::vector<double>> upper_bounds_;
  /// The bounds as `le="..."`, formatted once.
  std::vector<std::string> le_labels_;
};

/// Families in registration order, rendered together. Thread-safe.
class Registry {
 public:
  /// Each throws std::invalid_argument for an invalid or already registered
  /// name or label name. The family lives as long as the registry.
  CounterFamily& counter(std::string name, std::string help,
                         std::vector<std::string> label_names = {});
  GaugeFamily& gauge(std::string name, std::string help, std::vector<std::string> label_names = {});
  HistogramFamily& histogram(std::string name, std::string help,
                             std::vector<std::string> label_names,
                             std::vector<double> upper_bounds);

  /// Runs `hook` at the start of every render(), before any family is
  /// read: the place to set gauges from current state. Hooks run outside
  /// the registry's lock and may use the registry's families.
  void on_scrape(std::function<void()> hook);

  /// The whole exposition (Content-Type: text/plain; version=0.0.4).
  std::string render() const;

 private:
  template <class Family>
  Family& add(std::unique_ptr<Family> family);

  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<MetricFamily>> families_;
  std::vector<std::function<void()>> scrape_hooks_;
};

/// The Content-Type of `Registry::render()`'s text.
inline constexpr std::string_view prometheus_content_type =
    "text/plain; version=0.0.4; charset=utf-8";

/// vLLM's bucket boundaries, so that dashboards' `le` thresholds match.
std::vector<double> vllm_ttft_buckets();
/// For inter-token latency (and the older time per output token).
std::vector<double> vllm_inter_token_buckets();
/// For end-to-end latency and queue time.
std::vector<double> vllm_request_latency_buckets();
/// 1, 2, 5, 10, 20, 50, ... up to `max_value` (vLLM's token-count buckets).
std::vector<double> one_two_five_buckets(double max_value);

// -- the serving metrics ------------------------------------------------------

/// One engine as the cluster sees it at scrape time.
struct EngineState {
  /// The `engine` label (Cluster::engine_names: local-N for a local
  /// replica, host:port for a remote worker). Must stay the same for the
  /// same engine across scrapes.
  std::string name;
  bool up = false;
  std::uint32_t running = 0;
  std::uint32_t waiting = 0;
  std::uint32_t free_blocks = 0;
  std::uint32_t total_blocks = 0;
  /// Blocks only the prefix cache holds (LoadReport::cached_blocks).
  std::uint32_t cached_blocks = 0;
  /// The routing load score (caflm::load_score): lower is better.
  double load = 0.0;
  /// Which run of the engine this is (e.g. a random number drawn when it
  /// started); 0 when unknown. A change means the engine restarted and its
  /// counters began again from zero. Without it, a restart is inferred from
  /// a counter that went back.
  std::uint64_t incarnation = 0;
  // Cumulative since the engine started (LoadReport's totals):
  /// Requests preempted to free KV blocks.
  std::uint64_t preemptions = 0;
  /// Prompt tokens of admitted requests, and tokens generated.
  std::uint64_t prompt_tokens = 0;
  std::uint64_t generated_tokens = 0;
  /// Prompt tokens looked up in the prefix cache, and those found there.
  std::uint64_t prefix_queried_tokens = 0;
  std::uint64_t prefix_hit_tokens = 0;
};

/// Every engine of the cluster, local and remote, down ones included.
struct ClusterState {
  std::vector<EngineState> engines;
};

/// Where vllm:prompt_tokens_total and vllm:generation_tokens_total come
/// from.
enum class TokenCounts {
  /// The engines' own totals (EngineState), as vLLM counts them: tokens
  /// the engines processed, a request moved to another engine counted on
  /// both, remote workers included, advanced at each set_cluster_state.
  from_engines,
  /// This server's request events: first_token/token/tokens count the
  /// generated tokens as they come, request_finished the prompt tokens.
  from_requests,
};

/// The serving metrics of `caflm serve`: vLLM's names (prefix "vllm:",
/// labelled model_name) so that existing dashboards work, and caflm's own
/// (prefix "caflm_"). Every method is thread-safe; the per-event ones are a
/// few atomic adds or one short lock each.
class ServingMetrics {
 public:
  /// `model_name`: the served model name (the model_name label).
  /// `max_model_len`: the longest sequence, the top of the token-count
  /// histograms' buckets. `token_counts`: see TokenCounts.
  explicit ServingMetrics(std::string model_name, std::uint32_t max_model_len = 8192,
                          TokenCounts token_counts = TokenCounts::from_engines);

  /// A request was accepted and handed to the cluster.
  void request_started();
  /// A request's first token: `ttft_s` since the request arrived, of which
  /// `queue_s` waited before it was scheduled. With
  /// TokenCounts::from_requests, counts one generated token.
  void first_token(double ttft_s, double queue_s);
  /// One more generated token, `itl_s` after the previous one (and, with
  /// TokenCounts::from_requests, counted).
  void token(double itl_s);
  /// `count` more generated tokens that arrived together, each observed
  /// with the inter-token latency `itl_s` (pass the elapsed time / `count`).
  void tokens(std::uint64_t count, double itl_s);
  /// A request ended. `finish_reason`: "stop", "length", "abort" (client
  /// gone or cancelled) or "error". Both token counts feed the per-request
  /// histograms; with TokenCounts::from_requests, `prompt_tokens` is also
  /// added to vllm:prompt_tokens_total (the generated ones were counted as
  /// they came, so `completion_tokens` is not added again).
  void request_finished(std::string_view finish_reason, std::uint64_t prompt_tokens,
                        std::uint64_t completion_tokens, double e2e_s);
  /// A request turned away before it reached an engine, e.g. "queue_full"
  /// (429), "invalid" (400), "unauthorized" (401), "unavailable" (503).
  void request_rejected(std::string_view reason);
  /// A request moved to another engine after its engine failed.
  void failover();
  /// An HTTP streaming response opened or closed.
  void stream_opened();
  void stream_closed();

  /// The cluster's state, taken at scrape time just before render(). Sets
  /// the gauges, and advances the cumulative engine counters by what each
  /// engine counted since the last call. They never go back: an engine that
  /// disappears keeps its contribution, an engine that is down is skipped
  /// (its counters are not read), and an engine one of whose counters went
  /// back (it restarted) contributes its new counts from zero. Engine names
  /// must be unique (std::invalid_argument otherwise, nothing changed).
  void set_cluster_state(const ClusterState& state);

  /// The whole exposition.
  std::string render() const;
  const std::string& model_name() const { return model_name_; }

 private:
  /// The cumulative counters of one engine, as last seen.
  struct EngineCounters {
    std::uint64_t incarnation = 0;
    std::uint64_t preemptions = 0;
    std::uint64_t prompt_tokens = 0;
    std::uint64_t generated_tokens = 0;
    std::uint64_t prefix_queried_tokens = 0;
    std::uint64_t prefix_hit_tokens = 0;
  };

  std::string model_name_;
  TokenCounts token_counts_;
  Registry registry_;

  // Hot-path series, resolved once.
  Counter* prompt_tokens_;
  Counter* generation_tokens_;
  Counter* requests_received_;
  Counter* failovers_;
  Counter* preemptions_;
  Counter* prefix_queries_;
  Counter* prefix_hits_;
  Histogram* time_to_first_token_;
  Histogram* inter_token_latency_;
  Histogram* time_per_output_token_;
  Histogram* e2e_latency_;
  Histogram* queue_time_;
  Histogram* prompt_tokens_per_request_;
  Histogram* generation_tokens_per_request_;
  CounterFamily* request_success_;
  CounterFamily* requests_rejected_;
  Gauge* streams_open_;

  // Set from the cluster state.
  Gauge* running_;
  Gauge* waiting_;
  Gauge* kv_cache_usage_;
  Gauge* gpu_cache_usage_;
  Gauge* engines_up_;
  Gauge* engines_total_;
  GaugeFamily* engine_up_;
  GaugeFamily* engine_load_;
  GaugeFamily* engine_running_;
  GaugeFamily* engine_waiting_;
  GaugeFamily* engine_kv_blocks_used_;
  GaugeFamily* engine_kv_blocks_total_;
  GaugeFamily* engine_kv_blocks_cached_;

  /// Serializes set_cluster_state with itself and with render(), so that a
  /// scrape never sees the per-engine gauges half replaced.
  mutable std::mutex cluster_mutex_;
  std::map<std::string, EngineCounters> last_engine_counters_;
};

} // namespace caflm::server

#include "caflm/server/metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <system_error>

namespace caflm::server {

// -- exposition helpers -------------------------------------------------------

std::string format_prometheus_value(double value) {
  if (std::isnan(value))
    return "NaN";
  if (std::isinf(value))
    return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  // Without a format, to_chars writes the shortest text that round-trips.
  auto [end, error] = std::to_chars(buffer, buffer + sizeof buffer, value);
  if (error != std::errc{})
    throw std::runtime_error("format_prometheus_value: cannot format a double");
  std::string text{buffer, end};
  if (text.find_first_of(".e") == std::string::npos)
    text += ".0";
  return text;
}

std::string escape_label_value(std::string_view value) {
  std::string escaped;
  escaped.reserve(value.size());
  for (char c : value) {
    switch (c) {
    case '\\':
      escaped += "\\\\";
      break;
    case '"':
      escaped += "\\\"";
      break;
    case '\n':
      escaped += "\\n";
      break;
    default:
      escaped += c;
    }
  }
  return escaped;
}

std::string escape_help(std::string_view help) {
  std::string escaped;
  escaped.reserve(help.size());
  for (char c : help) {
    if (c == '\\')
      escaped += "\\\\";
    else if (c == '\n')
      escaped += "\\n";
    else
      escaped += c;
  }
  return escaped;
}

namespace {

bool is_ascii_letter(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

bool is_ascii_digit(char c) {
  return c >= '0' && c <= '9';
}

void check_upper_bounds(const std::string& family, const std::vector<double>& bounds) {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i]))
      throw std::invalid_argument("histogram " + family + ": bucket bound " + std::to_string(i) +
                                  " is not finite (+Inf is implied)");
    if (i > 0 && !(bounds[i - 1] < bounds[i]))
      throw std::invalid_argument("histogram " + family + ": bucket bounds must increase (bound " +
                                  std::to_string(i) + ")");
  }
}

} // namespace

bool is_valid_metric_name(std::string_view name) {
  if (name.empty())
    return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = is_ascii_letter(c) || c == '_' || c == ':' || (i > 0 && is_ascii_digit(c));
    if (!ok)
      return false;
  }
  return true;
}

bool is_valid_label_name(std::string_view name) {
  if (name.empty() || name.substr(0, 2) == "__")
    return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = is_ascii_letter(c) || c == '_' || (i > 0 && is_ascii_digit(c));
    if (!ok)
      return false;
  }
  return true;
}

// -- series -------------------------------------------------------------------

void Counter::inc(double amount) {
  if (!(amount >= 0.0) || std::isinf(amount))
    throw std::invalid_argument("Counter::inc: amount must be finite and non-negative, got " +
                                format_prometheus_value(amount));
  // std::atomic<double>::fetch_add is C++20; a CAS loop is its C++17 form.
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

void Gauge::add(double amount) {
  double current = value_.load(std::memory_order_relaxed);
  while (!value_.compare_exchange_weak(current, current + amount, std::memory_order_relaxed)) {
  }
}

Histogram::Histogram(std::shared_ptr<const std::vector<double>> upper_bounds)
  : upper_bounds_(std::move(upper_bounds))
  , bucket_counts_(upper_bounds_->size() + 1, 0) {}

void Histogram::observe(double value, std::uint64_t count) {
  if (std::isnan(value) || count == 0)
    return;
  // Bucket i holds bounds[i-1] < value <= bounds[i]: the first bound >= value.
  const auto& bounds = *upper_bounds_;
  auto bucket = static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), value) -
                                         bounds.begin());
  std::lock_guard<std::mutex> guard{mutex_};
  bucket_counts_[bucket] += count;
  sum_ += value * static_cast<double>(count);
  count_ += count;
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot result;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    result.cumulative_counts = bucket_counts_;
    result.sum = sum_;
    result.count = count_;
  }
  std::uint64_t running_total = 0;
  for (auto& bucket : result.cumulative_counts) {
    running_total += bucket;
    bucket = running_total;
  }
  return result;
}

// -- families -----------------------------------------------------------------

MetricFamily::MetricFamily(std::string name, std::string help, std::vector<std::string> label_names)
  : name_(std::move(name))
  , help_(std::move(help))
  , label_names_(std::move(label_names)) {
  if (!is_valid_metric_name(name_))
    throw std::invalid_argument("metric name '" + name_ + "' is not valid");
  for (std::size_t i = 0; i < label_names_.size(); ++i) {
    if (!is_valid_label_name(label_names_[i]))
      throw std::invalid_argument("metric " + name_ + ": label name '" + label_names_[i] +
                                  "' is not valid");
    for (std::size_t j = 0; j < i; ++j)
      if (label_names_[j] == label_names_[i])
        throw std::invalid_argument("metric " + name_ + ": label name '" + label_names_[i] +
                                    "' appears twice");
  }
}

void MetricFamily::render(std::string& out) const {
  out += "# HELP ";
  out += name_;
  out += ' ';
  out += escape_help(help_);
  out += "\n# TYPE ";
  out += name_;
  out += ' ';
  out += type();
  out += '\n';
  render_samples(out);
}

void MetricFamily::append_labels(std::string& out, const std::vector<std::string>& values,
                                 std::string_view extra) const {
  if (values.empty() && extra.empty())
    return;
  out += '{';
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0)
      out += ',';
    out += label_names_[i];
    out += "=\"";
    out += escape_label_value(values[i]);
    out += '"';
  }
  if (!extra.empty()) {
    if (!values.empty())
      out += ',';
    out += extra;
  }
  out += '}';
}

void MetricFamily::check_label_count(const std::vector<std::string>& values) const {
  if (values.size() != label_names_.size())
    throw std::invalid_argument("metric " + name_ + ": " + std::to_string(values.size()) +
                                " label values for " + std::to_string(label_names_.size()) +
                                " label names");
}

namespace {

std::string with_suffix(const std::string& name, std::string_view suffix) {
  std::string result = name;
  result += suffix;
  return result;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

} // namespace

CounterFamily::CounterFamily(std::string name, std::string help,
                             std::vector<std::string> label_names)
  : SeriesFamily<Counter>(std::move(name), std::move(help), std::move(label_names)) {
  if (!ends_with(this->name(), "_total"))
    throw std::invalid_argument("counter " + this->name() + ": a counter's name ends in _total");
}

std::unique_ptr<Counter> CounterFamily::make_series() const {
  return std::make_unique<Counter>();
}

void CounterFamily::render_series(std::string& out, const std::vector<std::string>& values,
                                  const Counter& metric) const {
  out += name();
  append_labels(out, values);
  out += ' ';
  out += format_prometheus_value(metric.value());
  out += '\n';
}

std::unique_ptr<Gauge> GaugeFamily::make_series() const {
  return std::make_unique<Gauge>();
}

void GaugeFamily::render_series(std::string& out, const std::vector<std::string>& values,
                                const Gauge& metric) const {
  out += name();
  append_labels(out, values);
  out += ' ';
  out += format_prometheus_value(metric.value());
  out += '\n';
}

HistogramFamily::HistogramFamily(std::string name, std::string help,
                                 std::vector<std::string> label_names,
                                 std::vector<double> upper_bounds)
  : SeriesFamily<Histogram>(std::move(name), std::move(help), std::move(label_names)) {
  for (const auto& label : this->label_names())
    if (label == "le")
      throw std::invalid_argument("histogram " + this->name() + ": 'le' is reserved");
  check_upper_bounds(this->name(), upper_bounds);
  for (double bound : upper_bounds)
    le_labels_.push_back("le=\"" + format_prometheus_value(bound) + "\"");
  le_labels_.push_back("le=\"+Inf\"");
  upper_bounds_ = std::make_shared<const std::vector<double>>(std::move(upper_bounds));
}

std::unique_ptr<Histogram> HistogramFamily::make_series() const {
  return std::make_unique<Histogram>(upper_bounds_);
}

void HistogramFamily::render_series(std::string& out, const std::vector<std::string>& values,
                                    const Histogram& metric) const {
  auto snapshot = metric.snapshot();
  const std::string bucket_name = with_suffix(name(), "_bucket");
  for (std::size_t i = 0; i < snapshot.cumulative_counts.size(); ++i) {
    out += bucket_name;
    append_labels(out, values, le_labels_[i]);
    out += ' ';
    out += format_prometheus_value(static_cast<double>(snapshot.cumulative_counts[i]));
    out += '\n';
  }
  out += name();
  out += "_sum";
  append_labels(out, values);
  out += ' ';
  out += format_prometheus_value(snapshot.sum);
  out += '\n';
  out += name();
  out += "_count";
  append_labels(out, values);
  out += ' ';
  out += format_prometheus_value(static_cast<double>(snapshot.count));
  out += '\n';
}

// -- registry -----------------------------------------------------------------

template <class Family>
Family& Registry::add(std::unique_ptr<Family> family) {
  std::lock_guard<std::mutex> guard{mutex_};
  for (const auto& existing : families_)
    if (existing->name() == family->name())
      throw std::invalid_argument("metric " + family->name() + " is already registered");
  auto& result = *family;
  families_.push_back(std::move(family));
  return result;
}

CounterFamily& Registry::counter(std::string name, std::string help,
                                 std::vector<std::string> label_names) {
  return add(
      std::make_unique<CounterFamily>(std::move(name), std::move(help), std::move(label_names)));
}

GaugeFamily& Registry::gauge(std::string name, std::string help,
                             std::vector<std::string> label_names) {
  return add(
      std::make_unique<GaugeFamily>(std::move(name), std::move(help), std::move(label_names)));
}

HistogramFamily& Registry::histogram(std::string name, std::string help,
                                     std::vector<std::string> label_names,
                                     std::vector<double> upper_bounds) {
  return add(std::make_unique<HistogramFamily>(std::move(name), std::move(help),
                                               std::move(label_names), std::move(upper_bounds)));
}

void Registry::on_scrape(std::function<void()> hook) {
  std::lock_guard<std::mutex> guard{mutex_};
  scrape_hooks_.push_back(std::move(hook));
}

std::string Registry::render() const {
  std::vector<std::function<void()>> hooks;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    hooks = scrape_hooks_;
  }
  for (const auto& hook : hooks)
    hook();
  std::string out;
  std::lock_guard<std::mutex> guard{mutex_};
  for (const auto& family : families_)
    family->render(out);
  return out;
}

// -- vLLM's buckets -----------------------------------------------------------

std::vector<double> vllm_ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}

std::vector<double> vllm_inter_token_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
          0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
}

std::vector<double> vllm_request_latency_buckets() {
  return {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
          30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::vector<double> one_two_five_buckets(double max_value) {
  std::vector<double> buckets;
  for (double decade = 1.0;; decade *= 10.0) {
    for (double mantissa : {1.0, 2.0, 5.0}) {
      double bound = mantissa * decade;
      if (bound > max_value)
        return buckets;
      buckets.push_back(bound);
    }
  }
}

// -- ServingMetrics -----------------------------------------------------------

namespace {} // namespace

ServingMetrics::ServingMetrics(std::string model_name, std::uint32_t max_model_len,
                               TokenCounts token_counts)
  : model_name_(std::move(model_name))
  , token_counts_(token_counts) {
  const std::vector<std::string> model{model_name_};
  const std::vector<std::string> by_model{"model_name"};
  const std::vector<std::string> by_engine{"model_name", "engine"};
  auto& r = registry_;

  // vLLM's gauges, aggregated over every engine that is up.
  running_ = &r.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                      by_model)
                  .labels(model);
  waiting_ =
      &r.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", by_model)
           .labels(model);
  kv_cache_usage_ =
      &r.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", by_model)
           .labels(model);
  gpu_cache_usage_ = &r.gauge("vllm:gpu_cache_usage_perc",
                              "KV-cache usage. 1 means 100 percent usage. DEPRECATED: Use "
                              "vllm:kv_cache_usage_perc instead.",
                              by_model)
                          .labels(model);

  // vLLM's counters.
  prompt_tokens_ =
      &r.counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.", by_model)
           .labels(model);
  generation_tokens_ =
      &r.counter("vllm:generation_tokens_total", "Number of generation tokens processed.", by_model)
           .labels(model);
  preemptions_ = &r.counter("vllm:num_preemptions_total",
                            "Cumulative number of preemption from the engine.", by_model)
                      .labels(model);
  prefix_queries_ =
      &r.counter("vllm:prefix_cache_queries_total",
                 "Prefix cache queries, in terms of number of queried tokens.", by_model)
           .labels(model);
  prefix_hits_ = &r.counter("vllm:prefix_cache_hits_total",
                            "Prefix cache hits, in terms of number of cached tokens.", by_model)
                      .labels(model);
  request_success_ =
      &r.counter("vllm:request_success_total", "Count of successfully processed requests.",
                 {"model_name", "finished_reason"});
  // Present from the start at zero, so rate() sees each reason begin.
  for (const char* reason : {"stop", "length", "abort"})
    request_success_->labels({model_name_, reason});

  // vLLM's histograms, with vLLM's buckets.
  time_to_first_token_ =
      &r.histogram("vllm:time_to_first_token_seconds",
                   "Histogram of time to first token in seconds.", by_model, vllm_ttft_buckets())
           .labels(model);
  inter_token_latency_ = &r.histogram("vllm:inter_token_latency_seconds",
                                      "Histogram of inter-token latency in seconds.", by_model,
                                      vllm_inter_token_buckets())
                              .labels(model);
  // Older dashboards read the same observations under this name.
  time_per_output_token_ = &r.histogram("vllm:time_per_output_token_seconds",
                                        "Histogram of time per output token in seconds. "
                                        "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
                                        by_model, vllm_inter_token_buckets())
                                .labels(model);
  e2e_latency_ = &r.histogram("vllm:e2e_request_latency_seconds",
                              "Histogram of e2e request latency in seconds.", by_model,
                              vllm_request_latency_buckets())
                      .labels(model);
  queue_time_ = &r.histogram("vllm:request_queue_time_seconds",
                             "Histogram of time spent in WAITING phase for request.", by_model,
                             vllm_request_latency_buckets())
                     .labels(model);
  const auto token_buckets = one_two_five_buckets(std::max<double>(max_model_len, 1.0));
  prompt_tokens_per_request_ =
      &r.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", by_model,
                   token_buckets)
           .labels(model);
  generation_tokens_per_request_ =
      &r.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                   by_model, token_buckets)
           .labels(model);

  // caflm's own.
  requests_received_ = &r.counter("caflm_requests_received_total",
                                  "Requests accepted and handed to the cluster.", by_model)
                            .labels(model);
  requests_rejected_ = &r.counter("caflm_requests_rejected_total",
                                  "Requests turned away before they reached an engine, by reason.",
                                  {"model_name", "reason"});
  for (const char* reason : {"queue_full", "invalid"})
    requests_rejected_->labels({model_name_, reason});
  failovers_ = &r.counter("caflm_failovers_total",
                          "Requests moved to another engine after their engine failed.", by_model)
                    .labels(model);
  streams_open_ =
      &r.gauge("caflm_http_streams_open", "Streaming HTTP responses now open.", by_model)
           .labels(model);
  engines_up_ = &r.gauge("caflm_engines_up", "Engines that are up.", by_model).labels(model);
  engines_total_ =
      &r.gauge("caflm_engines_total", "Engines of the cluster, up or not.", by_model).labels(model);
  engine_up_ = &r.gauge("caflm_engine_up", "1 when the engine is up, 0 when not.", by_engine);
  engine_load_ = &r.gauge("caflm_engine_load", "The engine's routing load score (lower is better).",
                          by_engine);
  engine_running_ = &r.gauge("caflm_engine_running", "Requests running on the engine.", by_engine);
  engine_waiting_ = &r.gauge("caflm_engine_waiting", "Requests waiting on the engine.", by_engine);
  engine_kv_blocks_used_ =
      &r.gauge("caflm_engine_kv_blocks_used", "KV blocks in use on the engine.", by_engine);
  engine_kv_blocks_total_ =
      &r.gauge("caflm_engine_kv_blocks_total", "KV blocks of the engine's pool.", by_engine);
  engine_kv_blocks_cached_ = &r.gauge("caflm_engine_kv_blocks_cached",
                                      "KV blocks in use that only the prefix cache holds "
                                      "(evicted on demand); used minus cached is what requests "
                                      "hold.",
                                      by_engine);
}

void ServingMetrics::request_started() {
  requests_received_->inc();
}

void ServingMetrics::first_token(double ttft_s, double queue_s) {
  time_to_first_token_->observe(ttft_s);
  queue_time_->observe(queue_s);
  if (token_counts_ == TokenCounts::from_requests)
    generation_tokens_->inc();
}

void ServingMetrics::token(double itl_s) {
  tokens(1, itl_s);
}

void ServingMetrics::tokens(std::uint64_t count, double itl_s) {
  if (count == 0)
    return;
  inter_token_latency_->observe(itl_s, count);
  time_per_output_token_->observe(itl_s, count);
  if (token_counts_ == TokenCounts::from_requests)
    generation_tokens_->inc(static_cast<double>(count));
}

void ServingMetrics::request_finished(std::string_view finish_reason, std::uint64_t prompt_tokens,
                                      std::uint64_t completion_tokens, double e2e_s) {
  request_success_->labels({model_name_, std::string{finish_reason}}).inc();
  if (token_counts_ == TokenCounts::from_requests)
    prompt_tokens_->inc(static_cast<double>(prompt_tokens));
  e2e_latency_->observe(e2e_s);
  prompt_tokens_per_request_->observe(static_cast<double>(prompt_tokens));
  generation_tokens_per_request_->observe(static_cast<double>(completion_tokens));
}

void ServingMetrics::request_rejected(std::string_view reason) {
  requests_rejected_->labels({model_name_, std::string{reason}}).inc();
}

void ServingMetrics::failover() {
  failovers_->inc();
}

void ServingMetrics::stream_opened() {
  streams_open_->add(1.0);
}

void ServingMetrics::stream_closed() {
  streams_open_->add(-1.0);
}

void ServingMetrics::set_cluster_state(const ClusterState& state) {
  for (std::size_t i = 0; i < state.engines.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (state.engines[i].name == state.engines[j].name)
        throw std::invalid_argument("ServingMetrics::set_cluster_state: two engines named '" +
                                    state.engines[i].name + "'");
  std::lock_guard<std::mutex> guard{cluster_mutex_};
  std::uint64_t running = 0;
  std::uint64_t waiting = 0;
  std::uint64_t used_blocks = 0;
  std::uint64_t total_blocks = 0;
  std::uint32_t up = 0;
  // The per-engine series are rebuilt from this state, so that an engine
  // that left the cluster leaves the exposition too.
  for (auto* family : {engine_up_, engine_load_, engine_running_, engine_waiting_,
                       engine_kv_blocks_used_, engine_kv_blocks_total_, engine_kv_blocks_cached_})
    family->clear();
  for (const auto& engine : state.engines) {
    const std::vector<std::string> labels{model_name_, engine.name};
    // A pool cannot have more free blocks than it has; clamp a bad report.
    const std::uint32_t used =
        engine.total_blocks - std::min(engine.free_blocks, engine.total_blocks);
    engine_up_->labels(labels).set(engine.up ? 1.0 : 0.0);
    engine_load_->labels(labels).set(engine.load);
    engine_running_->labels(labels).set(engine.running);
    engine_waiting_->labels(labels).set(engine.waiting);
    engine_kv_blocks_used_->labels(labels).set(used);
    engine_kv_blocks_total_->labels(labels).set(engine.total_blocks);
    engine_kv_blocks_cached_->labels(labels).set(engine.cached_blocks);
    if (!engine.up)
      continue; // Its figures are stale, and its counters may read zero.
    ++up;
    running += engine.running;
    waiting += engine.waiting;
    used_blocks += used;
    total_blocks += engine.total_blocks;

    // A new engine starts from zeros: its counts so far are all new here.
    auto& last = last_engine_counters_[engine.name];
    const EngineCounters now{engine.incarnation,           engine.preemptions,
                             engine.prompt_tokens,         engine.generated_tokens,
                             engine.prefix_queried_tokens, engine.prefix_hit_tokens};
    // Another incarnation, or a counter that went back, means the engine
    // restarted (a worker came back under the same name): everything it
    // counted since is new.
    const bool restarted =
        now.incarnation != last.incarnation || now.preemptions < last.preemptions ||
        now.prompt_tokens < last.prompt_tokens || now.generated_tokens < last.generated_tokens ||
        now.prefix_queried_tokens < last.prefix_queried_tokens ||
        now.prefix_hit_tokens < last.prefix_hit_tokens;
    auto advance = [restarted](Counter& counter, std::uint64_t current, std::uint64_t before) {
      counter.inc(static_cast<double>(restarted ? current : current - before));
    };
    advance(*preemptions_, now.preemptions, last.preemptions);
    advance(*prefix_queries_, now.prefix_queried_tokens, last.prefix_queried_tokens);
    advance(*prefix_hits_, now.prefix_hit_tokens, last.prefix_hit_tokens);
    if (token_counts_ == TokenCounts::from_engines) {
      advance(*prompt_tokens_, now.prompt_tokens, last.prompt_tokens);
      advance(*generation_tokens_, now.generated_tokens, last.generated_tokens);
    }
    last = now;
  }
  running_->set(static_cast<double>(running));
  waiting_->set(static_cast<double>(waiting));
  const double usage = total_blocks == 0
                           ? 0.0
                           : static_cast<double>(used_blocks) / static_cast<double>(total_blocks);
  kv_cache_usage_->set(usage);
  gpu_cache_usage_->set(usage);
  engines_up_->set(up);
  engines_total_->set(static_cast<double>(state.engines.size()));
}

std::string ServingMetrics::render() const {
  std::lock_guard<std::mutex> guard{cluster_mutex_};
  return registry_.render();
}

} // namespace caflm::server

#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

namespace caflm::server {

/// What the server's requests did over the last minutes, for the cluster
/// dashboard: per interval the request rate, 429s, and time-to-first-token
/// and inter-token latency percentiles; and totals since the start. Prometheus
/// histograms (metrics.hpp) cannot give recent percentiles without a
/// Prometheus server; this can. Times are Unix seconds passed in by the
/// caller, so that tests control the clock. Thread-safe.
class RecentActivity {
 public:
  /// Keeps `window_s` seconds in intervals of `interval_s` seconds; at most
  /// `samples_per_interval` latencies of each kind per interval (a uniform
  /// sample of them beyond that, so memory stays bounded under any load).
  explicit RecentActivity(double interval_s = 5.0, double window_s = 600.0,
                          std::size_t samples_per_interval = 2048);

  void request_started(double now);
  /// A request ended: `ok` when it finished (stop, length, cancelled by its
  /// client), false when it failed.
  void request_finished(bool ok);
  /// A request turned away with 429 (every queue full).
  void request_rejected(double now);
  void failover();
  void first_token(double now, double ttft_s);
  /// `count` tokens that took `itl_s` each.
  void inter_token(double now, double itl_s, std::uint64_t count = 1);

  /// `{"running", "total", "failed", "rejected", "failovers",
  /// "requests_per_second"}`, the rate over the last 10 s.
  nlohmann::ordered_json totals_json(double now) const;
  /// `{"interval_seconds", "window_seconds", "points": [...]}`, oldest
  /// first, each point `{"time", "requests_per_second", "rejected",
  /// "ttft_p50", "ttft_p90", "ttft_p99", "itl_p50", "itl_p90", "itl_p99"}`
  /// (seconds; null without samples). Intervals without any activity are
  /// points of zero rate, so the time axis has no holes.
  nlohmann::ordered_json series_json(double now) const;

 private:
  /// A bounded uniform sample of one interval's latencies (reservoir
  /// sampling, Vitter's algorithm R).
  struct Sample {
    std::vector<double> values;
    std::uint64_t seen = 0;
  };
  struct Interval {
    double start = 0.0;
    std::uint64_t started = 0;
    std::uint64_t rejected = 0;
    Sample ttft;
    Sample itl;
  };

  /// The interval `now` falls in, appended when new (mutex held).
  Interval& interval_at(double now);
  void add_sample(Sample& sample, double value, std::uint64_t count);
  double rate_over(double now, double seconds) const;

  const double interval_s_;
  const double window_s_;
  const std::size_t samples_per_interval_;
  mutable std::mutex mutex_;
  std::deque<Interval> intervals_;
  std::minstd_rand random_;
  std::uint64_t running_ = 0;
  std::uint64_t total_ = 0;
  std::uint64_t failed_ = 0;
  std::uint64_t rejected_ = 0;
  std::uint64_t failovers_ = 0;
};

} // namespace caflm::server

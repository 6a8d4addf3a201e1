#include "caflm/server/recent_activity.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace caflm::server {

namespace {

/// The nearest-rank `q` quantile of `values`, or null when there are none.
nlohmann::ordered_json quantile(std::vector<double> values, double q) {
  if (values.empty())
    return nullptr;
  const auto rank = static_cast<std::size_t>(std::ceil(q * double(values.size())));
  const std::size_t index = std::min(values.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(values.begin(), values.begin() + std::ptrdiff_t(index), values.end());
  return values[index];
}

} // namespace

RecentActivity::RecentActivity(double interval_s, double window_s, std::size_t samples_per_interval)
  : interval_s_(interval_s)
  , window_s_(window_s)
  , samples_per_interval_(samples_per_interval) {
  if (!(interval_s > 0.0) || !(window_s >= interval_s) || samples_per_interval == 0)
    throw std::invalid_argument("RecentActivity: the interval must be positive, the window at "
                                "least one interval, and the samples at least one");
}

RecentActivity::Interval& RecentActivity::interval_at(double now) {
  const double start = std::floor(now / interval_s_) * interval_s_;
  // A clock that stepped back lands in the newest interval.
  if (!intervals_.empty() && intervals_.back().start >= start)
    return intervals_.back();
  intervals_.push_back(Interval{start, 0, 0, {}, {}});
  while (intervals_.front().start <= start - window_s_)
    intervals_.pop_front();
  return intervals_.back();
}

void RecentActivity::add_sample(Sample& sample, double value, std::uint64_t count) {
  if (!std::isfinite(value))
    return;
  for (std::uint64_t i = 0; i < count; ++i) {
    ++sample.seen;
    if (sample.values.size() < samples_per_interval_) {
      sample.values.push_back(value);
      continue;
    }
    // Every value seen so far stays in with the same probability.
    const std::uint64_t slot =
        std::uniform_int_distribution<std::uint64_t>{0, sample.seen - 1}(random_);
    if (slot < samples_per_interval_)
      sample.values[slot] = value;
  }
}

void RecentActivity::request_started(double now) {
  std::lock_guard<std::mutex> guard{mutex_};
  ++interval_at(now).started;
  ++running_;
  ++total_;
}

void RecentActivity::request_finished(bool ok) {
  std::lock_guard<std::mutex> guard{mutex_};
  running_ -= running_ > 0 ? 1 : 0;
  failed_ += ok ? 0 : 1;
}

void RecentActivity::request_rejected(double now) {
  std::lock_guard<std::mutex> guard{mutex_};
  ++interval_at(now).rejected;
  ++rejected_;
}

void RecentActivity::failover() {
  std::lock_guard<std::mutex> guard{mutex_};
  ++failovers_;
}

void RecentActivity::first_token(double now, double ttft_s) {
  std::lock_guard<std::mutex> guard{mutex_};
  add_sample(interval_at(now).ttft, ttft_s, 1);
}

void RecentActivity::inter_token(double now, double itl_s, std::uint64_t count) {
  std::lock_guard<std::mutex> guard{mutex_};
  add_sample(interval_at(now).itl, itl_s, count);
}

double RecentActivity::rate_over(double now, double seconds) const {
  const double from = now - seconds;
  double started = 0.0;
  for (const Interval& interval : intervals_) {
    const double end = interval.start + interval_s_;
    if (end <= from || interval.start > now)
      continue;
    // The part of the interval inside [from, now], assuming an even spread.
    const double covered = std::min(end, now) - std::max(interval.start, from);
    const double length = std::min(end, now) - interval.start;
    if (length > 0.0)
      started += double(interval.started) * std::clamp(covered / length, 0.0, 1.0);
  }
  return started / seconds;
}

nlohmann::ordered_json RecentActivity::totals_json(double now) const {
  std::lock_guard<std::mutex> guard{mutex_};
  nlohmann::ordered_json totals;
  totals["running"] = running_;
  totals["total"] = total_;
  totals["failed"] = failed_;
  totals["rejected"] = rejected_;
  totals["failovers"] = failovers_;
  totals["requests_per_second"] = rate_over(now, 10.0);
  return totals;
}

nlohmann::ordered_json RecentActivity::series_json(double now) const {
  std::lock_guard<std::mutex> guard{mutex_};
  nlohmann::ordered_json points = nlohmann::ordered_json::array();
  const double newest = std::floor(now / interval_s_) * interval_s_;
  const double oldest = newest - window_s_ + interval_s_;
  auto next = intervals_.begin();
  for (double start = oldest; start <= newest; start += interval_s_) {
    while (next != intervals_.end() && next->start < start - interval_s_ / 2)
      ++next;
    const bool have = next != intervals_.end() && std::abs(next->start - start) < interval_s_ / 2;
    if (!have && (intervals_.empty() || start < intervals_.front().start))
      continue; // before anything happened: no point at all
    nlohmann::ordered_json point;
    point["time"] = start;
    // The newest interval is still filling: its rate is over its elapsed part.
    const double elapsed = start == newest ? std::max(now - start, 1.0) : interval_s_;
    point["requests_per_second"] = have ? double(next->started) / elapsed : 0.0;
    point["rejected"] = have ? next->rejected : 0;
    const std::vector<double> none;
    const std::vector<double>& ttft = have ? next->ttft.values : none;
    const std::vector<double>& itl = have ? next->itl.values : none;
    point["ttft_p50"] = quantile(ttft, 0.50);
    point["ttft_p90"] = quantile(ttft, 0.90);
    point["ttft_p99"] = quantile(ttft, 0.99);
    point["itl_p50"] = quantile(itl, 0.50);
    point["itl_p90"] = quantile(itl, 0.90);
    point["itl_p99"] = quantile(itl, 0.99);
    points.push_back(std::move(point));
  }
  nlohmann::ordered_json series;
  series["interval_seconds"] = interval_s_;
  series["window_seconds"] = window_s_;
  series["points"] = std::move(points);
  return series;
}

} // namespace caflm::server

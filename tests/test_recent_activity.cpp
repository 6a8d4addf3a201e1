// The dashboard's recent request figures: per-interval rates and latency
// percentiles over a sliding window, totals, and bounded memory under load.
#include <catch2/catch.hpp>

#include "caflm/server/recent_activity.hpp"

using caflm::server::RecentActivity;

TEST_CASE("each interval has its rate, 429s and latency percentiles", "[recent_activity]") {
  RecentActivity activity(/*interval_s=*/5.0, /*window_s=*/30.0);
  // Interval [100, 105): ten requests, TTFTs 10..100 ms.
  for (int i = 1; i <= 10; ++i) {
    activity.request_started(100.0 + 0.1 * i);
    activity.first_token(100.5, 0.01 * i);
  }
  activity.inter_token(101.0, 0.002, 99);
  activity.inter_token(101.0, 0.5, 1);
  // Nothing in [105, 110); one 429 in [110, 115).
  activity.request_rejected(111.0);

  const auto series = activity.series_json(112.0);
  CHECK(series["interval_seconds"] == 5.0);
  const auto& points = series["points"];
  REQUIRE(points.size() == 3);
  CHECK(points[0]["time"] == 100.0);
  CHECK(points[0]["requests_per_second"] == Approx(2.0));
  CHECK(points[0]["ttft_p50"] == Approx(0.05));
  CHECK(points[0]["ttft_p90"] == Approx(0.09));
  CHECK(points[0]["ttft_p99"] == Approx(0.10));
  CHECK(points[0]["itl_p50"] == Approx(0.002));
  CHECK(points[0]["itl_p99"] == Approx(0.002));
  // An idle interval is a point of zero rate without latencies.
  CHECK(points[1]["requests_per_second"] == 0.0);
  CHECK(points[1]["ttft_p50"].is_null());
  CHECK(points[2]["rejected"] == 1);
}

TEST_CASE("totals count running, failed and rejected requests and the recent rate",
          "[recent_activity]") {
  RecentActivity activity(5.0, 60.0);
  for (int i = 0; i < 20; ++i)
    activity.request_started(200.0 + 0.5 * i); // 2 per second over [200, 210)
  for (int i = 0; i < 15; ++i)
    activity.request_finished(i != 3);
  activity.request_rejected(209.0);
  activity.failover();
  const auto totals = activity.totals_json(210.0);
  CHECK(totals["running"] == 5);
  CHECK(totals["total"] == 20);
  CHECK(totals["failed"] == 1);
  CHECK(totals["rejected"] == 1);
  CHECK(totals["failovers"] == 1);
  CHECK(totals["requests_per_second"] == Approx(2.0));
  // Long after, the rate is zero and old intervals are gone from the window.
  CHECK(activity.totals_json(400.0)["requests_per_second"] == 0.0);
}

TEST_CASE("old intervals leave the window and samples stay bounded", "[recent_activity]") {
  RecentActivity activity(1.0, 10.0, /*samples_per_interval=*/64);
  for (int second = 0; second < 100; ++second) {
    activity.request_started(second);
    activity.inter_token(second + 0.5, 0.001 * (second % 7 + 1), 10000);
  }
  const auto points = activity.series_json(99.5)["points"];
  REQUIRE(points.size() == 10);
  CHECK(points.front()["time"] == 90.0);
  CHECK(points.back()["time"] == 99.0);
  // 10,000 equal samples, kept as at most 64: the percentiles are exact.
  CHECK(points.back()["itl_p50"] == Approx(0.001 * (99 % 7 + 1)));
}

TEST_CASE("bad settings and non-finite latencies are refused or ignored", "[recent_activity]") {
  CHECK_THROWS_AS(RecentActivity(0.0, 10.0), std::invalid_argument);
  CHECK_THROWS_AS(RecentActivity(5.0, 1.0), std::invalid_argument);
  RecentActivity activity;
  activity.first_token(10.0, std::numeric_limits<double>::quiet_NaN());
  activity.first_token(10.0, std::numeric_limits<double>::infinity());
  CHECK(activity.series_json(10.0)["points"].at(0)["ttft_p50"].is_null());
}

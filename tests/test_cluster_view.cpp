// The dashboard's model of the cluster, without actors: engine states and
// rates from successive polls, the timeline events their changes make, and
// the event log's delivery to Server-Sent-Event subscribers.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "caflm/server/cluster_events.hpp"
#include "caflm/server/cluster_view.hpp"

using namespace caflm;
using namespace caflm::server;
using json = nlohmann::ordered_json;

namespace {

LoadReport load(std::uint32_t running, std::uint64_t generated, std::uint64_t preemptions = 0) {
  LoadReport report;
  report.running = running;
  report.total_blocks = 100;
  report.free_blocks = 100 - running * 10;
  report.generated_tokens = generated;
  report.preemptions = preemptions;
  return report;
}

std::vector<std::string> types(const ClusterEventLog& log) {
  std::vector<std::string> result;
  for (const auto& event : log.events_after(0))
    result.push_back(event["type"].get<std::string>());
  return result;
}

json engine(const ClusterView& view, std::size_t index) {
  return view.engines_json().at(index);
}

} // namespace

TEST_CASE("an engine goes up, is lost and comes back, each change an event once",
          "[cluster_view]") {
  auto log = std::make_shared<ClusterEventLog>();
  ClusterView view({{"local-0", false}, {"10.0.0.2:7100", true}}, log, 100.0);
  // Before any poll, nothing is known about the load.
  CHECK(engine(view, 1)["state"] == "lost");
  CHECK(engine(view, 1)["running"].is_null());
  CHECK(engine(view, 1)["generated_tokens"].is_null());

  view.update(101.0, {load(1, 0), load(2, 0)});
  view.update(102.0, {load(1, 50), load(2, 200)});
  CHECK(types(*log) == std::vector<std::string>{"engine_up", "engine_up"});
  CHECK(view.engines_up() == 2);
  json remote = engine(view, 1);
  CHECK(remote["kind"] == "remote");
  CHECK(remote["state"] == "up");
  CHECK(remote["since"] == 101.0);
  CHECK(remote["running"] == 2);
  CHECK(remote["kv_blocks_used"] == 20);
  CHECK(remote["kv_blocks_total"] == 100);
  CHECK(remote["tokens_per_second"] == Approx(200.0));
  CHECK(remote["generated_tokens"] == 200);
  CHECK(remote["prefix_cache_hit_rate"].is_null());

  // The remote worker dies: one event, however many polls see it gone.
  view.update(103.0, {load(1, 100), std::nullopt});
  view.update(104.0, {load(1, 150), std::nullopt});
  remote = engine(view, 1);
  CHECK(remote["state"] == "lost");
  CHECK(remote["reconnecting"] == true);
  CHECK(remote["since"] == 103.0);
  CHECK(remote["running"] == 0);
  CHECK(remote["tokens_per_second"] == 0.0);
  const auto events = log->events_after(2);
  REQUIRE(events.size() == 1);
  CHECK(events[0]["type"] == "engine_lost");
  CHECK(events[0]["engine"] == "10.0.0.2:7100");
  CHECK(events[0]["time"] == 103.0);
  CHECK(events[0]["message"].get<std::string>().find("fail over") != std::string::npos);

  // It restarts: its counters begin at zero again, which is no negative rate.
  view.update(106.5, {load(1, 200), load(0, 5)});
  view.update(107.5, {load(1, 250), load(0, 25)});
  CHECK(types(*log).back() == "engine_back");
  CHECK(log->events_after(3).at(0)["message"].get<std::string>().find("3.5 s") !=
        std::string::npos);
  CHECK(engine(view, 1)["tokens_per_second"] == Approx(20.0));

  // A local replica that is gone is lost, and does not reconnect.
  view.update(108.0, {std::nullopt, load(0, 30)});
  CHECK(engine(view, 0)["state"] == "lost");
  CHECK(engine(view, 0)["reconnecting"] == false);
}

TEST_CASE("preemptions and a burst of 429s become one event each per poll", "[cluster_view]") {
  auto log = std::make_shared<ClusterEventLog>();
  ClusterView view({{"local-0", false}}, log, 0.0);
  view.update(1.0, {load(4, 0, 0)});
  view.update(2.0, {load(4, 10, 3)});
  for (int i = 0; i < 250; ++i)
    view.note_rate_limited();
  view.update(3.0, {load(4, 20, 3)});
  view.update(4.0, {load(4, 30, 3)});
  const auto events = log->events_after(1);
  REQUIRE(events.size() == 2);
  CHECK(events[0]["type"] == "preemption");
  CHECK(events[0]["count"] == 3);
  CHECK(events[1]["type"] == "rate_limited");
  CHECK(events[1]["count"] == 250);
  CHECK(engine(view, 0)["preemptions"] == 3);
}

TEST_CASE("an engine registered but not heard from yet is not up", "[cluster_view]") {
  auto log = std::make_shared<ClusterEventLog>();
  ClusterView view({{"local-0", false}}, log, 0.0);
  view.update(1.0, {LoadReport{}}); // what the coordinator holds before the first answer
  CHECK(engine(view, 0)["state"] == "lost");
  CHECK(engine(view, 0)["kv_blocks_total"].is_null());
  CHECK(view.engines_up() == 0);
  CHECK(log->events_after(0).empty());
  view.update(2.0, {load(0, 0)});
  CHECK(engine(view, 0)["state"] == "up");
  CHECK(engine(view, 0)["kv_blocks_total"] == 100);
  CHECK(types(*log) == std::vector<std::string>{"engine_up"});
}

TEST_CASE("a poll must name every engine", "[cluster_view]") {
  ClusterView view({{"local-0", false}}, std::make_shared<ClusterEventLog>(), 0.0);
  CHECK_THROWS_AS(view.update(1.0, {}), std::invalid_argument);
}

TEST_CASE("subscribers get the kept events after theirs, then each new one once, in order",
          "[cluster_events]") {
  ClusterEventLog log(/*capacity=*/3, /*max_subscribers=*/2);
  for (int i = 1; i <= 5; ++i)
    log.publish(double(i), "engine_up", "event " + std::to_string(i));
  // Only the last three are kept.
  CHECK(log.events_after(0).size() == 3);
  CHECK(log.events_after(0).front()["id"] == 3);

  std::string first;
  const auto subscription = log.subscribe(3, [&](const std::string& text) {
    first += text;
    return true;
  });
  REQUIRE(subscription != 0);
  CHECK(first.find("id: 4\nevent: cluster\ndata: {\"id\":4,") == 0);
  CHECK(first.find("id: 5\n") != std::string::npos);
  CHECK(first.find("id: 3\n") == std::string::npos);

  bool second_open = true;
  int second_deliveries = 0;
  REQUIRE(log.subscribe(99, [&](const std::string&) {
    ++second_deliveries;
    return second_open;
  }) != 0);
  // A third subscriber is over the limit.
  CHECK(log.subscribe(0, [](const std::string&) { return true; }) == 0);

  first.clear();
  log.publish(6.0, "engine_lost", "lost", json{{"engine", "local-0"}});
  CHECK(first == "id: 6\nevent: cluster\ndata: {\"id\":6,\"time\":6.0,\"type\":\"engine_lost\","
                 "\"message\":\"lost\",\"engine\":\"local-0\"}\n\n");
  CHECK(second_deliveries == 1);

  // A subscriber whose client left is dropped at the next delivery.
  second_open = false;
  log.heartbeat();
  CHECK(log.subscriber_count() == 1);
  log.unsubscribe(subscription);
  CHECK(log.subscriber_count() == 0);
  log.publish(7.0, "engine_up", "up");
  CHECK(first.find("id: 7") == std::string::npos);
}

TEST_CASE("a subscriber may unsubscribe from inside a delivery", "[cluster_events]") {
  ClusterEventLog log;
  std::uint64_t subscription = 0;
  int deliveries = 0;
  subscription = log.subscribe(0, [&](const std::string&) {
    ++deliveries;
    log.unsubscribe(subscription); // what a writer's on_close may do
    return true;
  });
  log.publish(1.0, "engine_up", "up");
  log.publish(2.0, "engine_up", "up");
  CHECK(deliveries == 1);
}

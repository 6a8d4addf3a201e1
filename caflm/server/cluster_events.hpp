#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace caflm::server {

/// The cluster's timeline: engines lost and back, requests moved from one
/// engine to another, preemptions, 429s. It keeps the latest events and
/// streams new ones to subscribers (the dashboard's Server-Sent Events),
/// each subscriber seeing every event once, in order. Thread-safe.
class ClusterEventLog {
 public:
  /// Delivers one Server-Sent Event's text; returns false when the
  /// subscriber has gone (it is then dropped).
  using Subscriber = std::function<bool(const std::string& text)>;

  /// Keeps the last `capacity` events; at most `max_subscribers` at once.
  explicit ClusterEventLog(std::size_t capacity = 500, std::size_t max_subscribers = 64);

  /// Records an event and sends it to every subscriber. The event is
  /// `fields` (an object, or null) after "id", "time" (`now`, Unix seconds),
  /// "type" and "message" (one line for people). Returns its id; ids start
  /// at 1 and increase by one.
  std::uint64_t publish(double now, const std::string& type, const std::string& message,
                        const nlohmann::ordered_json& fields = nullptr);

  /// Adds `subscriber`, first sending it the kept events after id `after`.
  /// Returns the subscription, or 0 when there are `max_subscribers`
  /// already.
  std::uint64_t subscribe(std::uint64_t after, Subscriber subscriber);
  void unsubscribe(std::uint64_t subscription);

  /// Sends a comment line to every subscriber: it keeps proxies from closing
  /// a quiet stream, and finds subscribers that left.
  void heartbeat();

  /// The kept events after id `after`, oldest first.
  std::vector<nlohmann::ordered_json> events_after(std::uint64_t after) const;
  std::size_t subscriber_count() const;

 private:
  struct Event {
    std::uint64_t id;
    nlohmann::ordered_json body;
    std::string text;
  };
  using SubscriberList = std::vector<std::pair<std::uint64_t, std::shared_ptr<Subscriber>>>;

  /// Sends `text` to `subscribers` and drops those that have gone
  /// (delivery_mutex_ held).
  void deliver(const SubscriberList& subscribers, const std::string& text);

  const std::size_t capacity_;
  const std::size_t max_subscribers_;
  /// Held while sending, so that every subscriber sees events in id order;
  /// taken before `mutex_`. Unsubscribing takes only `mutex_`, so a writer
  /// that reports its client gone from inside a write cannot deadlock.
  std::mutex delivery_mutex_;
  mutable std::mutex mutex_;
  std::deque<Event> events_;
  std::uint64_t next_id_ = 1;
  std::map<std::uint64_t, std::shared_ptr<Subscriber>> subscribers_;
  std::uint64_t next_subscription_ = 1;
};

/// Now as Unix seconds, with the fraction: the time of events and of the
/// dashboard's figures.
double unix_seconds_now();

/// `event` as one Server-Sent Event: its id, the event name "cluster", and
/// the JSON as data.
std::string sse_cluster_event(const nlohmann::ordered_json& event);

} // namespace caflm::server

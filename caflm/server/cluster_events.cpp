#include "caflm/server/cluster_events.hpp"

#include <chrono>
#include <stdexcept>

namespace caflm::server {

double unix_seconds_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string sse_cluster_event(const nlohmann::ordered_json& event) {
  std::string text = "id: " + std::to_string(event.value("id", std::uint64_t{0}));
  text += "\nevent: cluster\ndata: ";
  text += event.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  text += "\n\n";
  return text;
}

ClusterEventLog::ClusterEventLog(std::size_t capacity, std::size_t max_subscribers)
  : capacity_(capacity)
  , max_subscribers_(max_subscribers) {
  if (capacity == 0)
    throw std::invalid_argument("ClusterEventLog: the capacity must be at least one event");
}

std::uint64_t ClusterEventLog::publish(double now, const std::string& type,
                                       const std::string& message,
                                       const nlohmann::ordered_json& fields) {
  std::lock_guard<std::mutex> delivery{delivery_mutex_};
  SubscriberList subscribers;
  Event event;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    event.id = next_id_++;
    event.body["id"] = event.id;
    event.body["time"] = now;
    event.body["type"] = type;
    event.body["message"] = message;
    if (fields.is_object())
      for (const auto& [key, value] : fields.items())
        event.body[key] = value;
    event.text = sse_cluster_event(event.body);
    events_.push_back(event);
    while (events_.size() > capacity_)
      events_.pop_front();
    subscribers.assign(subscribers_.begin(), subscribers_.end());
  }
  deliver(subscribers, event.text);
  return event.id;
}

std::uint64_t ClusterEventLog::subscribe(std::uint64_t after, Subscriber subscriber) {
  std::lock_guard<std::mutex> delivery{delivery_mutex_};
  std::uint64_t subscription = 0;
  std::string backlog;
  auto shared = std::make_shared<Subscriber>(std::move(subscriber));
  {
    std::lock_guard<std::mutex> guard{mutex_};
    if (subscribers_.size() >= max_subscribers_)
      return 0;
    subscription = next_subscription_++;
    subscribers_.emplace(subscription, shared);
    for (const Event& event : events_)
      if (event.id > after)
        backlog += event.text;
  }
  if (!backlog.empty())
    deliver({{subscription, shared}}, backlog);
  return subscription;
}

void ClusterEventLog::unsubscribe(std::uint64_t subscription) {
  std::lock_guard<std::mutex> guard{mutex_};
  subscribers_.erase(subscription);
}

void ClusterEventLog::heartbeat() {
  std::lock_guard<std::mutex> delivery{delivery_mutex_};
  SubscriberList subscribers;
  {
    std::lock_guard<std::mutex> guard{mutex_};
    subscribers.assign(subscribers_.begin(), subscribers_.end());
  }
  deliver(subscribers, ": keep-alive\n\n");
}

void ClusterEventLog::deliver(const SubscriberList& subscribers, const std::string& text) {
  std::vector<std::uint64_t> gone;
  for (const auto& [subscription, subscriber] : subscribers)
    if (!(*subscriber)(text))
      gone.push_back(subscription);
  if (gone.empty())
    return;
  std::lock_guard<std::mutex> guard{mutex_};
  for (std::uint64_t subscription : gone)
    subscribers_.erase(subscription);
}

std::vector<nlohmann::ordered_json> ClusterEventLog::events_after(std::uint64_t after) const {
  std::lock_guard<std::mutex> guard{mutex_};
  std::vector<nlohmann::ordered_json> result;
  for (const Event& event : events_)
    if (event.id > after)
      result.push_back(event.body);
  return result;
}

std::size_t ClusterEventLog::subscriber_count() const {
  std::lock_guard<std::mutex> guard{mutex_};
  return subscribers_.size();
}

} // namespace caflm::server

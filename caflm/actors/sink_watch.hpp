#pragma once

#include <cstdint>
#include <unordered_map>

#include <caf/actor_addr.hpp>

#include "caflm/messages/interfaces.hpp"

namespace caflm {

/// The sinks an actor holds requests for, each monitored once while it has
/// any: a sink that goes down (its client gone) is noticed, and a sink with
/// no request left costs no monitor.
class SinkWatch {
 public:
  /// Counts one more request of `sink`; `self` monitors it on the first.
  template <class Self>
  void add(Self* self, const token_sink& sink) {
    if (uses_[sink.address()]++ == 0)
      self->monitor(sink);
  }

  /// Counts one request of `sink` less; `self` stops monitoring it on the
  /// last.
  template <class Self>
  void remove(Self* self, const caf::actor_addr& sink) {
    auto it = uses_.find(sink);
    if (it != uses_.end() && --it->second == 0) {
      self->demonitor(sink);
      uses_.erase(it);
    }
  }

  /// Whether `sink` has requests here.
  bool watches(const caf::actor_addr& sink) const { return uses_.count(sink) != 0; }

  /// Forgets `sink` at once (it went down, so its monitor is spent).
  void erase(const caf::actor_addr& sink) { uses_.erase(sink); }

 private:
  std::unordered_map<caf::actor_addr, std::uint32_t> uses_;
};

} // namespace caflm

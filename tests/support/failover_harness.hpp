#pragma once

// What the multi-process failover tests (CPU and GPU workers) share: asking
// the cluster's actors, waiting for its engines, per-request progress of its
// streams (to break a worker while requests are mid-stream) and waiting for
// every result within a time limit.

#include <catch2/catch.hpp>

#include <chrono>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <caf/all.hpp>

#include "caflm/actors/cluster.hpp"

namespace caflm::testing {

/// What `actor` answers to `message`; an error, or no answer within 2 s,
/// fails the test.
template <typename Answer, typename Actor, typename Message>
Answer ask(caf::actor_system& system, const Actor& actor, Message message) {
  caf::scoped_actor self{system};
  Answer out;
  std::string failure;
  self->request(actor, std::chrono::seconds(2), message)
      .receive([&](const Answer& answer) { out = answer; },
               [&](const caf::error& e) { failure = system.render(e); });
  INFO(failure);
  REQUIRE(failure.empty());
  return out;
}

/// What the coordinator knows of its engines.
CoordinatorStats stats(caf::actor_system& system, const Cluster& cluster) {
  return ask<CoordinatorStats>(system, cluster.coordinator(), stats_atom::value);
}

/// Waits until the coordinator has `engines` engines; false on timeout.
bool wait_for_engines(caf::actor_system& system, const Cluster& cluster, std::uint32_t engines,
                      std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (stats(system, cluster).engines != engines) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

/// Counts, per request, the tokens that reached this process, so the test
/// can break a worker while requests are mid-stream. The observers share
/// the counts: a test that fails leaves collectors running a little longer.
class Progress {
 public:
  explicit Progress(std::size_t requests)
    : counts_(std::make_shared<Counts>()) {
    counts_->tokens.assign(requests, 0);
    counts_->finished.assign(requests, false);
  }

  ChunkObserver observer(std::size_t index) const {
    return [counts = counts_, index](const TokenChunk& chunk) {
      std::lock_guard<std::mutex> lock(counts->mutex);
      counts->tokens[index] += chunk.tokens.size();
      if (chunk.finish != FinishReason::None)
        counts->finished[index] = true;
      counts->changed.notify_all();
    };
  }

  /// Waits until every request has streamed at least `tokens` tokens or
  /// finished; false on timeout.
  bool wait_until_streaming(std::size_t tokens, std::chrono::milliseconds timeout) {
    Counts& c = *counts_;
    std::unique_lock<std::mutex> lock(c.mutex);
    return c.changed.wait_for(lock, timeout, [&] {
      for (std::size_t i = 0; i < c.tokens.size(); ++i)
        if (c.tokens[i] < tokens && !c.finished[i])
          return false;
      return true;
    });
  }

  std::vector<std::size_t> tokens() const {
    std::lock_guard<std::mutex> lock(counts_->mutex);
    return counts_->tokens;
  }

 private:
  struct Counts {
    std::mutex mutex;
    std::condition_variable changed;
    std::vector<std::size_t> tokens;
    std::vector<bool> finished;
  };
  std::shared_ptr<Counts> counts_;
};

/// Waits for every future, all within `timeout`; a request still running
/// then fails the test, which shows how far each request got.
std::vector<GenerationResult> collect(std::vector<std::future<GenerationResult>>& futures,
                                      const Progress& progress, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<GenerationResult> results;
  for (std::size_t i = 0; i < futures.size(); ++i) {
    bool ready = futures[i].wait_until(deadline) == std::future_status::ready;
    INFO("request index " << i << "; tokens per request: "
                          << Catch::Detail::stringify(progress.tokens()));
    REQUIRE(ready);
    results.push_back(futures[i].get());
  }
  return results;
}

} // namespace caflm::testing

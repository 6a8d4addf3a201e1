#pragma once

// Drives an InferenceEngine step by step and collects each request's events:
// the small configurations, sampling parameters and runs that the engine's
// tests share.

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/inference_engine.hpp"

namespace caflm::testing {

/// A small engine: short context, small blocks and a token budget that splits
/// prompts into several prefill chunks.
inline EngineConfig small_config(std::uint32_t token_budget = 24, bool prefix_caching = true) {
  EngineConfig config;
  config.scheduler.max_requests = 24;
  config.scheduler.max_running = 16;
  config.scheduler.max_context = 128;
  config.scheduler.block_size = 8;
  config.scheduler.token_budget = token_budget;
  config.kv_blocks = 400;
  config.prefix_caching = prefix_caching;
  return config;
}

inline SamplingParams greedy(std::uint32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

inline SamplingParams seeded(std::uint32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_p = 0.9f;
  p.seed = 5;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

inline GenerationRequest make_request(std::uint64_t id, std::vector<TokenId> prompt,
                                      SamplingParams params) {
  GenerationRequest request;
  request.id = id;
  request.prompt = std::move(prompt);
  request.params = std::move(params);
  return request;
}

/// One request's events, in order.
struct Stream {
  std::vector<TokenEvent> events;

  /// The tokens of events [from, to).
  std::vector<TokenId> tokens(std::size_t from = 0, std::size_t to = SIZE_MAX) const {
    std::vector<TokenId> out;
    for (std::size_t i = from; i < std::min(to, events.size()); ++i)
      out.push_back(events[i].token);
    return out;
  }
  /// The joined text of events [0, count).
  std::string text(std::size_t count = SIZE_MAX) const {
    std::string out;
    for (std::size_t i = 0; i < std::min(count, events.size()); ++i)
      out += events[i].text;
    return out;
  }
  const TokenEvent& last() const { return events.back(); }
};

/// Steps until the engine is idle; `before_step(n)` runs before step n (to
/// add requests mid-run). Checks that a request's events stop after its
/// final one.
inline std::map<std::uint64_t, Stream> run_until_idle(
    InferenceEngine& engine, const std::function<void(int)>& before_step = [](int) {}) {
  std::map<std::uint64_t, Stream> streams;
  for (int n = 0; engine.has_work() || n == 0; ++n) {
    before_step(n);
    REQUIRE(n < 10000);
    for (auto& event : engine.step()) {
      Stream& stream = streams[event.request_id];
      REQUIRE((stream.events.empty() || stream.last().finish == FinishReason::None));
      stream.events.push_back(std::move(event));
    }
  }
  return streams;
}

/// Runs one request alone in a fresh engine.
inline Stream run_alone(const std::shared_ptr<const Model>& model, const EngineConfig& config,
                        GenerationRequest request) {
  auto engine = make_cpu_engine(model, config);
  std::uint64_t id = request.id;
  REQUIRE_FALSE(engine->add(std::move(request)));
  auto streams = run_until_idle(*engine);
  REQUIRE(streams.size() == 1);
  return streams[id];
}

} // namespace caflm::testing

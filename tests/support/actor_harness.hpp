#pragma once

// Engines without a model for actor tests, a paced backend that keeps a
// request running long enough to act on it, and CAF's deterministic
// scheduler.

#include <chrono>
#include <memory>
#include <thread>

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>

#include "caflm/engine/inference_engine.hpp"
#include "caflm/messages/messages.hpp"
#include "caflm/text/vocabulary.hpp"
#include "tests/support/fake_backend.hpp"

namespace caflm::testing {

/// The small byte-level BPE tokenizer of the random test models, built once.
inline std::shared_ptr<const Tokenizer> test_tokenizer() {
  static const auto tokenizer = std::make_shared<const Tokenizer>(
      std::make_shared<const Vocabulary>(Vocabulary::byte_level_bpe()));
  return tokenizer;
}

/// A FakeBackend that sleeps `pause` before each launch. A bare fake decodes
/// thousands of tokens in milliseconds; paced, a long request is certainly
/// still running when a test cancels it or kills its sink.
class PacedBackend : public FakeBackend {
 public:
  PacedBackend(std::uint32_t vocab, std::chrono::microseconds pause)
    : FakeBackend(vocab)
    , pause_(pause) {}

  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override {
    std::this_thread::sleep_for(pause_);
    return FakeBackend::execute(batch, outputs, logits);
  }

 private:
  std::chrono::microseconds pause_;
};

/// An InferenceEngine over a (paced) FakeBackend with the test tokenizer.
inline std::shared_ptr<InferenceEngine>
make_fake_engine(const EngineConfig& config,
                 std::chrono::microseconds pause = std::chrono::microseconds{0}) {
  auto tokenizer = test_tokenizer();
  const auto vocab = static_cast<std::uint32_t>(tokenizer->vocabulary().size());
  return std::make_shared<InferenceEngine>(tokenizer, std::make_unique<PacedBackend>(vocab, pause),
                                           config, 7);
}

/// A small engine for fake backends: 64 slots, a context of 64 tokens in
/// blocks of 8, 100 blocks.
inline EngineConfig fake_config() {
  EngineConfig config;
  config.scheduler.max_requests = 64;
  config.scheduler.max_running = 64;
  config.scheduler.max_context = 64;
  config.scheduler.block_size = 8;
  config.scheduler.token_budget = 128;
  config.kv_blocks = 100;
  return config;
}

/// A greedy request for 8 tokens with a text prompt that names it.
inline GenerateRequest make_request(std::uint64_t id, std::int32_t priority = 0) {
  GenerateRequest request;
  request.id = id;
  request.prompt = "Hello there, request " + std::to_string(id);
  request.params.temperature = 0.0f;
  request.params.max_tokens = 8;
  request.priority = priority;
  return request;
}

/// Configures `cfg` for CAF's deterministic testing scheduler: actors run
/// only when the test drives the scheduler, one message at a time, and
/// timers fire only when the test advances the clock.
inline caf::actor_system_config& deterministic(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  return cfg;
}

} // namespace caflm::testing

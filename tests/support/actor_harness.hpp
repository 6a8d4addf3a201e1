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

/// Configures `cfg` for CAF's deterministic testing scheduler: actors run
/// only when the test drives the scheduler, one message at a time, and
/// timers fire only when the test advances the clock.
inline caf::actor_system_config& deterministic(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("testing"));
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  return cfg;
}

} // namespace caflm::testing

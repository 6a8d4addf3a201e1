#pragma once

// Drives the CPU runner through the real scheduler with scripted tokens
// instead of sampling, and records the logits of every computed position.

#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <unistd.h>
#include <vector>

#include "caflm/cpu/cpu_model_runner.hpp"
#include "caflm/gguf/gguf.hpp"
#include "caflm/model/random_model.hpp"
#include "caflm/scheduler/step.hpp"
#include "caflm/text/vocabulary.hpp"

namespace caflm::testing {

/// The tokenizer of random test models: the small built-in byte-level BPE,
/// as a vocabulary-only GGUF file.
inline const GgufFile& test_vocabulary_file() {
  static const GgufFile file = GgufFile::from_bytes(Vocabulary::byte_level_bpe().to_gguf());
  return file;
}

/// Writes a random model to a temporary file and loads it.
inline std::shared_ptr<const Model> random_model(RandomModelSpec spec) {
  auto path = std::filesystem::temp_directory_path() /
              ("caflm-test-" + std::to_string(::getpid()) + "-" + std::to_string(spec.seed) + "-" +
               spec.architecture + "-" + to_string(spec.type) + ".gguf");
  write_random_model(spec, test_vocabulary_file(), path.string());
  auto model = Model::load(path.string());
  std::filesystem::remove(path); // the mapping stays valid
  return model;
}

/// A small model's shape (64 wide, 2 layers, 4 query heads over 2 KV heads,
/// FFN 96, context 256): quick to run, yet with grouped-query attention.
inline RandomModelSpec small_random_spec(const std::string& architecture, std::uint64_t seed) {
  RandomModelSpec spec;
  spec.architecture = architecture;
  spec.dim = 64;
  spec.n_layers = 2;
  spec.n_heads = 4;
  spec.n_kv_heads = 2;
  spec.ffn_dim = 96;
  spec.context_length = 256;
  spec.seed = seed;
  return spec;
}

/// `n` token ids drawn uniformly below `vocab`.
inline std::vector<TokenId> random_tokens(std::mt19937& rng, std::size_t n, std::uint32_t vocab) {
  std::vector<TokenId> tokens(n);
  for (auto& t : tokens)
    t = std::uniform_int_distribution<TokenId>(0, vocab - 1)(rng);
  return tokens;
}

class ModelHarness {
 public:
  ModelHarness(std::shared_ptr<const Model> model, SchedulerConfig config, std::uint32_t blocks,
               bool prefix_cache = true, KvCacheType kv_type = KvCacheType::F32)
    : config_(config)
    , pool_(blocks)
    , cache_(blocks, config.block_size, model->cache_salt())
    , table_(config, pool_, prefix_cache ? &cache_ : nullptr)
    , planner_(config)
    , plan_(config.max_requests)
    , runner_(model, RunnerLimits{config.token_budget, config.max_requests, config.max_context,
                                  blocks, config.block_size, kv_type})
    , buffers_(config.max_requests, config.token_budget, config.max_requests * config.max_pages(),
               runner_.vocab_size()) {}

  /// Admits request `id` with the first `prompt_length` tokens of `script`;
  /// the rest of the script is fed one token per decode.
  bool admit(std::uint64_t id, std::vector<TokenId> script, std::uint32_t prompt_length) {
    scripts_[id] = std::move(script);
    return table_.admit(id, scripts_[id].data(), prompt_length).has_value();
  }

  /// Forks `parent` into `child`, which then follows `child_script` (the
  /// parent's tokens so far, then its own).
  bool fork(std::uint64_t parent, std::uint64_t child, std::vector<TokenId> child_script) {
    scripts_[child] = std::move(child_script);
    return table_.fork(parent, child).has_value();
  }

  /// One step; returns false when nothing ran.
  bool step() {
    auto receipt = run_step(table_, planner_, runner_, plan_, buffers_);
    REQUIRE(receipt);
    preemptions_ += plan_.preempted_count;
    for (std::uint32_t i = 0; i < buffers_.item_count; ++i) {
      const RaggedBatchItem& item = buffers_.items[i];
      RequestView v = table_.view(item.slot);
      if (!v.awaiting_token)
        continue;
      std::vector<float> row(buffers_.logits_row(i), buffers_.logits_row(i) + buffers_.vocab_size);
      auto key = std::make_pair(v.request_id, v.token_count - 1);
      auto [it, fresh] = logits_.emplace(key, row);
      if (!fresh) // recomputed after preemption: must be bitwise the same
        REQUIRE(std::memcmp(it->second.data(), row.data(), row.size() * sizeof(float)) == 0);
      const auto& script = scripts_[v.request_id];
      if (v.token_count < script.size())
        REQUIRE(table_.append_token(item.slot, script[v.token_count]));
      else
        REQUIRE(table_.finish(v.request_id));
    }
    return buffers_.item_count > 0;
  }

  void run_until_idle() {
    while (table_.active_count() > 0)
      REQUIRE(step());
  }

  RequestTable& table() { return table_; }
  BlockPool& pool() { return pool_; }
  PrefixCache& cache() { return cache_; }
  long preemptions() const { return preemptions_; }
  const std::vector<TokenId>& script(std::uint64_t id) { return scripts_[id]; }
  /// (request, position) -> logits after that position.
  const std::map<std::pair<std::uint64_t, std::uint32_t>, std::vector<float>>& logits() const {
    return logits_;
  }

 private:
  SchedulerConfig config_;
  BlockPool pool_;
  PrefixCache cache_;
  RequestTable table_;
  StepPlanner planner_;
  StepPlan plan_;
  CpuModelRunner runner_;
  RaggedBatchBuffers buffers_;
  std::map<std::uint64_t, std::vector<TokenId>> scripts_;
  std::map<std::pair<std::uint64_t, std::uint32_t>, std::vector<float>> logits_;
  long preemptions_ = 0;
};

} // namespace caflm::testing

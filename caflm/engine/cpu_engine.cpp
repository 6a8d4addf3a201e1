#include "caflm/engine/cpu_engine.hpp"

#include <algorithm>

#include "caflm/cpu/cpu_model_runner.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"

namespace caflm {

EngineConfig cpu_engine_config(const Model& model, std::uint32_t max_context,
                               std::size_t kv_cache_bytes) {
  const ModelConfig& m = model.config();
  EngineConfig config;
  SchedulerConfig& s = config.scheduler;
  s.max_context = max_context == 0 ? m.context_length : std::min(max_context, m.context_length);
  s.max_requests = 64;
  s.max_running = 32;
  s.block_size = 16;
  s.token_budget = 512;
  const std::size_t block_bytes =
      std::size_t{2} * m.n_layers * s.block_size * m.kv_dim() * sizeof(float);
  config.kv_blocks = static_cast<std::uint32_t>(
      std::max<std::size_t>(kv_cache_bytes / block_bytes, s.max_pages() + 1));
  return config;
}

std::unique_ptr<InferenceEngine> make_cpu_engine(std::shared_ptr<const Model> model,
                                                 std::shared_ptr<const Tokenizer> tokenizer,
                                                 const EngineConfig& config) {
  RunnerLimits limits;
  limits.max_tokens = config.scheduler.token_budget;
  limits.max_items = config.scheduler.max_requests;
  limits.max_context = config.scheduler.max_context;
  limits.kv_blocks = config.kv_blocks;
  limits.block_size = config.scheduler.block_size;
  std::uint64_t salt = model->cache_salt();
  auto runner = std::make_unique<CpuModelRunner>(std::move(model), limits);
  return std::make_unique<InferenceEngine>(std::move(tokenizer), std::move(runner), config, salt);
}

std::unique_ptr<InferenceEngine> make_cpu_engine(std::shared_ptr<const Model> model,
                                                 const EngineConfig& config) {
  auto tokenizer = load_tokenizer(*model);
  return make_cpu_engine(std::move(model), std::move(tokenizer), config);
}

} // namespace caflm

#include "caflm/engine/cpu_engine.hpp"

#include <algorithm>
#include <fmt/format.h>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <new>
#include <omp.h>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include "caflm/cpu/cpu_model_runner.hpp"
#include "caflm/engine/log.hpp"
#include "caflm/engine/model_tokenizer.hpp"
#include "caflm/model/model.hpp"

namespace caflm {

namespace {

/// a * b, or std::invalid_argument naming `what` when it overflows.
std::uint64_t checked_product(std::uint64_t a, std::uint64_t b, const char* what) {
  std::uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    throw std::invalid_argument(fmt::format("the size of {} overflows", what));
  return product;
}

/// Memory the operating system says is available now (MemAvailable), or 0
/// when it cannot tell.
std::size_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::size_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:")
      return kib * 1024;
  return 0;
}

} // namespace

std::uint64_t cpu_kv_block_bytes(const ModelConfig& m, KvCacheType type) {
  std::uint64_t bytes = checked_product(2ull * kv_element_bytes(type), m.n_layers, "a KV block");
  bytes = checked_product(bytes, kCpuKvBlockSize, "a KV block");
  return checked_product(bytes, m.kv_dim(), "a KV block");
}

KvCacheType auto_kv_cache_type(const Model& model) {
  const ModelWeights& w = model.weights();
  const auto all_f32 = [](std::initializer_list<const WeightView*> views) {
    return std::all_of(views.begin(), views.end(),
                       [](const WeightView* v) { return v->type == TensorType::F32; });
  };
  bool f32 = all_f32({&w.output});
  for (const LayerWeights& l : w.layers)
    f32 = f32 && all_f32({&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down});
  return f32 ? KvCacheType::F32 : KvCacheType::F16;
}

std::uint64_t cpu_kv_blocks_for(std::uint64_t tokens) {
  return (tokens + kCpuKvBlockSize - 1) / kCpuKvBlockSize;
}

EngineConfig cpu_engine_config(const Model& model, const EngineOptions& options) {
  const ModelConfig& m = model.config();
  EngineConfig config;
  config.requests = options.requests;
  SchedulerConfig& s = config.scheduler;
  s.max_requests = std::max<std::uint32_t>(options.max_requests, 1);
  s.max_running = std::clamp<std::uint32_t>(options.max_running, 1, s.max_requests);
  s.block_size = kCpuKvBlockSize;
  s.token_budget = 512;
  config.kv_cache_type = options.kv_cache_type.value_or(auto_kv_cache_type(model));
  const std::uint64_t block_bytes = cpu_kv_block_bytes(m, config.kv_cache_type);
  const std::uint64_t blocks = options.kv_cache_bytes / block_bytes;
  if (blocks == 0)
    throw std::invalid_argument(fmt::format(
        "a KV cache of {} holds no block: one block of {} tokens takes {} ({} layers, K and V of "
        "{} {} values per token)",
        human_bytes(options.kv_cache_bytes), s.block_size, human_bytes(block_bytes), m.n_layers,
        m.kv_dim(), to_string(config.kv_cache_type)));
  // The pool counts blocks in 32 bits; no machine holds that many anyway.
  config.kv_blocks = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(blocks, std::numeric_limits<std::uint32_t>::max() - 1));
  const std::uint32_t asked =
      options.max_context == 0 ? m.context_length : std::min(m.context_length, options.max_context);
  s.max_context = asked;
  config = fit_context_to_pool(config);
  if (config.scheduler.max_context < asked)
    log(LogLevel::Info,
        "the KV cache of {} holds {} tokens: sequences are limited to that (the context asked "
        "for is {})",
        human_bytes(options.kv_cache_bytes), config.scheduler.max_context, asked);
  return config;
}

std::size_t cpu_engine_bytes(const Model& model, const EngineConfig& config) {
  const ModelConfig& m = model.config();
  const SchedulerConfig& s = config.scheduler;
  const std::uint64_t f = sizeof(float);
  const std::uint64_t kv = checked_product(
      config.kv_blocks, cpu_kv_block_bytes(m, config.kv_cache_type), "the KV cache");
  const std::uint64_t pool_tokens = std::uint64_t{config.kv_blocks} * s.block_size;
  // Tokens of every slot, and the prefix cache's copy of every cached block.
  const std::uint64_t table =
      checked_product(std::uint64_t{s.max_requests} * s.max_context, f, "the request table") +
      pool_tokens * f;
  const std::uint64_t activations =
      std::uint64_t{s.token_budget} *
      (2ull * m.dim + 2ull * m.q_dim() + 2ull * m.kv_dim() + 2ull * m.ffn_dim) * f;
  const std::uint64_t logits = std::uint64_t{s.max_requests} * m.vocab_size * f;
  constexpr std::uint64_t run = CpuModelRunner::kAttentionRunTokens;
  const std::uint64_t scores =
      std::uint64_t(omp_get_max_threads()) * run * (s.max_context + run) * m.query_group() * f;
  return kv + table + activations + logits + scores;
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
  limits.kv_type = config.kv_cache_type;
  const std::uint64_t salt = model->cache_salt();
  const std::size_t bytes = cpu_engine_bytes(*model, config);
  try {
    auto runner = std::make_unique<CpuModelRunner>(std::move(model), limits);
    return std::make_unique<InferenceEngine>(std::move(tokenizer), std::move(runner), config, salt);
  } catch (const std::bad_alloc&) {
    throw std::runtime_error(fmt::format(
        "out of memory allocating a CPU engine of {} ({} KV blocks of {} tokens, {} request "
        "slots of {} tokens)",
        human_bytes(bytes), config.kv_blocks, config.scheduler.block_size,
        config.scheduler.max_requests, config.scheduler.max_context));
  }
}

std::unique_ptr<InferenceEngine> make_cpu_engine(std::shared_ptr<const Model> model,
                                                 const EngineConfig& config) {
  auto tokenizer = load_tokenizer(*model);
  return make_cpu_engine(std::move(model), std::move(tokenizer), config);
}

void check_available_memory(double bytes, const std::string& what) {
  const std::size_t available = available_memory_bytes();
  if (available > 0 && bytes > double(available))
    throw std::runtime_error(fmt::format("{} need {} of memory, more than the {} available", what,
                                         human_bytes(static_cast<std::uint64_t>(bytes)),
                                         human_bytes(available)));
}

} // namespace caflm

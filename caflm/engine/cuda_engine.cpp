#include "caflm/engine/cuda_engine.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "caflm/engine/log.hpp"
#include "caflm/model/model.hpp"

#ifdef CAFLM_HAVE_CUDA
#include "caflm/cuda/cuda_device.hpp"
#include "caflm/cuda/cuda_model_runner.hpp"
#endif

namespace caflm {

bool built_with_cuda() {
#ifdef CAFLM_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

#ifdef CAFLM_HAVE_CUDA

namespace {

/// Whether environment variable `name` is set to `expected`.
bool env_is(const char* name, const char* expected) {
  const char* value = std::getenv(name);
  return value != nullptr && std::strcmp(value, expected) == 0;
}

} // namespace

std::unique_ptr<InferenceEngine> make_cuda_engine(std::shared_ptr<const Model> model,
                                                  std::shared_ptr<const Tokenizer> tokenizer,
                                                  const EngineOptions& options) {
  const std::vector<cuda::CudaDeviceInfo> devices = cuda::cuda_devices();
  if (devices.empty())
    throw std::runtime_error("no CUDA device: " + cuda::cuda_unavailable_reason());
  if (options.gpu_index < 0 || static_cast<std::size_t>(options.gpu_index) >= devices.size())
    throw std::runtime_error("CUDA device " + std::to_string(options.gpu_index) +
                             " does not exist (" + std::to_string(devices.size()) + " found)");
  const cuda::CudaDeviceInfo& device = devices[static_cast<std::size_t>(options.gpu_index)];
  const ModelConfig& m = model->config();

  EngineConfig config;
  config.requests = options.requests;
  SchedulerConfig& s = config.scheduler;
  s.max_requests = std::max<std::uint32_t>(options.max_requests, 1);
  s.max_running = std::clamp<std::uint32_t>(options.max_running, 1, s.max_requests);
  s.block_size = kCudaKvBlockSize;
  s.token_budget = kCudaTokenBudget;
  s.max_context =
      options.max_context == 0 ? m.context_length : std::min(m.context_length, options.max_context);

  cuda::CudaRunnerOptions runner_options;
  runner_options.device = device.index;
  runner_options.memory_budget_bytes = options.gpu_memory.budget(device.total_bytes);
  runner_options.max_tokens = s.token_budget;
  runner_options.max_items = s.max_requests;
  runner_options.max_context = s.max_context;
  runner_options.block_size = s.block_size;
  // CAFLM_CUDA_GRAPHS=0 turns decode graphs off and CAFLM_CUDA_PDL=1
  // programmatic launches on, to measure what each pays.
  runner_options.cuda_graphs = !env_is("CAFLM_CUDA_GRAPHS", "0");
  runner_options.programmatic_launch = env_is("CAFLM_CUDA_PDL", "1");
  auto runner = std::make_unique<cuda::CudaModelRunner>(model, runner_options);
  config.kv_blocks = runner->kv_blocks();
  const std::uint32_t asked = s.max_context;
  config = fit_context_to_pool(config);
  log(LogLevel::Info,
      "CUDA engine on device {} ({}): {} of device memory, KV cache of {} blocks ({} tokens){}",
      device.index, device.name, human_bytes(runner->device_bytes()), config.kv_blocks,
      std::uint64_t{config.kv_blocks} * s.block_size,
      config.scheduler.max_context < asked
          ? ", sequences limited to " + std::to_string(config.scheduler.max_context) + " tokens"
          : std::string());
  const std::uint64_t salt = model->cache_salt();
  return std::make_unique<InferenceEngine>(std::move(tokenizer), std::move(runner), config, salt);
}

#else

std::unique_ptr<InferenceEngine> make_cuda_engine(std::shared_ptr<const Model>,
                                                  std::shared_ptr<const Tokenizer>,
                                                  const EngineOptions&) {
  throw std::runtime_error("this caflm was built without CUDA (nvcc was not found when it was "
                           "configured)");
}

#endif

} // namespace caflm

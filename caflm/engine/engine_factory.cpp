#include "caflm/engine/engine_factory.hpp"

#include <atomic>
#include <stdexcept>

#include "caflm/engine/cpu_engine.hpp"
#include "caflm/engine/cuda_engine.hpp"
#include "caflm/engine/log.hpp"

#ifdef CAFLM_HAVE_CUDA
#include "caflm/cuda/cuda_device.hpp"
#endif

namespace caflm {

std::string cuda_unavailable_here() {
#ifdef CAFLM_HAVE_CUDA
  return cuda::cuda_unavailable_reason();
#else
  return "this caflm was built without CUDA (nvcc was not found when it was configured)";
#endif
}

std::size_t cuda_device_count() {
#ifdef CAFLM_HAVE_CUDA
  return cuda::cuda_devices().size();
#else
  return 0;
#endif
}

Device resolve_device(Device requested) {
  if (requested == Device::Cpu)
    return Device::Cpu;
  const std::string reason = cuda_unavailable_here();
  if (reason.empty())
    return Device::Cuda;
  if (requested == Device::Cuda)
    throw std::runtime_error("--device cuda: " + reason);
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    log(LogLevel::Warning, "no usable CUDA device ({}): running on the CPU", reason);
  return Device::Cpu;
}

KvCacheType engine_kv_cache_type(Device device, std::optional<KvCacheType> requested,
                                 const Model& model) {
  if (device == Device::Cuda)
    return KvCacheType::F32;
  return requested.value_or(auto_kv_cache_type(model));
}

std::unique_ptr<InferenceEngine> make_engine(std::shared_ptr<const Model> model,
                                             std::shared_ptr<const Tokenizer> tokenizer,
                                             const EngineOptions& options) {
  if (resolve_device(options.device) == Device::Cuda) {
    if (options.kv_cache_type &&
        *options.kv_cache_type != engine_kv_cache_type(Device::Cuda, std::nullopt, *model)) {
      static std::atomic<bool> said{false};
      if (!said.exchange(true))
        log(LogLevel::Warning,
            "a CUDA engine keeps its KV cache in f32; the KV cache type {} "
            "applies to CPU engines only",
            to_string(*options.kv_cache_type));
    }
    return make_cuda_engine(std::move(model), std::move(tokenizer), options);
  }
  const EngineConfig config = cpu_engine_config(*model, options);
  check_available_memory(double(cpu_engine_bytes(*model, config)),
                         "the engine's KV cache and buffers");
  return make_cpu_engine(std::move(model), std::move(tokenizer), config);
}

} // namespace caflm

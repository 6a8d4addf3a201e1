#pragma once

#include <memory>

#include "caflm/engine/engine_options.hpp"
#include "caflm/engine/inference_engine.hpp"

namespace caflm {

class Model;

/// Tokens per KV block of a CUDA engine.
inline constexpr std::uint32_t kCudaKvBlockSize = 16;
/// Most tokens one step of a CUDA engine computes: a GPU takes far larger
/// prefill chunks than a CPU before a step stops being memory-bound.
inline constexpr std::uint32_t kCudaTokenBudget = 2048;

/// True when this caflm was built with the CUDA backend.
bool built_with_cuda();

/// An engine running `model` on CUDA device `options.gpu_index`, taking
/// `options.gpu_memory` of it: the weights, a workspace, and the KV cache
/// from the rest (the scheduler's block count comes from it). Throws
/// std::runtime_error saying why when no CUDA device is usable, caflm was
/// built without CUDA, or the budget holds no KV block.
std::unique_ptr<InferenceEngine> make_cuda_engine(std::shared_ptr<const Model> model,
                                                  std::shared_ptr<const Tokenizer> tokenizer,
                                                  const EngineOptions& options);

} // namespace caflm

#pragma once

#include <memory>
#include <optional>

#include "caflm/engine/engine_options.hpp"
#include "caflm/engine/inference_engine.hpp"

namespace caflm {

class Model;

/// Why no CUDA device can serve here, or "" when one can.
std::string cuda_unavailable_here();

/// CUDA devices usable here (0 without CUDA).
std::size_t cuda_device_count();

/// The device `requested` resolves to: Cpu and Cuda as asked, Auto to Cuda
/// when a CUDA device is usable and to Cpu otherwise (logged once per
/// process, with the reason). Throws std::runtime_error, saying why, for
/// Cuda when no CUDA device is usable.
Device resolve_device(Device requested);

/// The element type of the KV cache an engine on `device` (Cpu or Cuda,
/// resolved) keeps for `model` when `requested` is asked for: a CUDA
/// engine's is always F32; a CPU engine's is `requested`, else
/// auto_kv_cache_type(model).
KvCacheType engine_kv_cache_type(Device device, std::optional<KvCacheType> requested,
                                 const Model& model);

/// An engine for `model` on `options.device` (resolved), sized by `options`.
/// Throws std::runtime_error or std::invalid_argument saying what cannot be
/// built.
std::unique_ptr<InferenceEngine> make_engine(std::shared_ptr<const Model> model,
                                             std::shared_ptr<const Tokenizer> tokenizer,
                                             const EngineOptions& options);

} // namespace caflm

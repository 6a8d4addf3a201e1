#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "caflm/engine/inference_engine.hpp"

namespace caflm {

class Model;

/// Engine sizing for `model` on the CPU: the context is the model's (capped
/// by `max_context` when non-zero) and the KV cache gets about
/// `kv_cache_bytes`, never less than one full-context sequence.
EngineConfig cpu_engine_config(const Model& model, std::uint32_t max_context = 0,
                               std::size_t kv_cache_bytes = std::size_t{1} << 30);

/// An engine running `model` on the CPU runner, with `tokenizer` (see
/// load_tokenizer) for its text.
std::unique_ptr<InferenceEngine> make_cpu_engine(std::shared_ptr<const Model> model,
                                                 std::shared_ptr<const Tokenizer> tokenizer,
                                                 const EngineConfig& config);

/// As above, with the tokenizer read from `model`'s file.
std::unique_ptr<InferenceEngine> make_cpu_engine(std::shared_ptr<const Model> model,
                                                 const EngineConfig& config);

} // namespace caflm

#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "caflm/engine/engine_options.hpp"
#include "caflm/engine/inference_engine.hpp"
#include "caflm/kv/kv_storage.hpp"

namespace caflm {

class Model;
struct ModelConfig;

/// Tokens per KV block of a CPU engine.
inline constexpr std::uint32_t kCpuKvBlockSize = 16;

/// Bytes of one KV block of a CPU engine: K and V of every layer, in
/// `type`, for kCpuKvBlockSize tokens. Throws std::invalid_argument when that
/// overflows.
std::uint64_t cpu_kv_block_bytes(const ModelConfig& config, KvCacheType type);

/// The KV cache type an engine of `model` takes when none is asked for, as
/// vLLM's `auto` (the model's own precision): F32 when every matrix of the
/// model is F32, so that its log-probabilities match an F32 reference; F16,
/// llama.cpp's default, for F16, BF16 and quantized models, whose weights
/// already carry less precision than the cache would keep.
KvCacheType auto_kv_cache_type(const Model& model);

/// The KV blocks `tokens` of one sequence take (whole blocks).
std::uint64_t cpu_kv_blocks_for(std::uint64_t tokens);

/// Engine sizing for `model` on the CPU. Throws std::invalid_argument,
/// saying what one block takes, when the KV budget holds not a single
/// block, and when a size computed from the model's header overflows.
EngineConfig cpu_engine_config(const Model& model, const EngineOptions& options = {});

/// Bytes the large buffers of a CPU engine of `config` take (KV cache,
/// request table, step scratch), to check a cluster against the machine's
/// memory before building it.
std::size_t cpu_engine_bytes(const Model& model, const EngineConfig& config);

/// An engine running `model` on the CPU runner, with `tokenizer` (see
/// load_tokenizer) for its text. Throws std::runtime_error naming what it
/// was allocating when memory runs out.
std::unique_ptr<InferenceEngine> make_cpu_engine(std::shared_ptr<const Model> model,
                                                 std::shared_ptr<const Tokenizer> tokenizer,
                                                 const EngineConfig& config);

/// As above, with the tokenizer read from `model`'s file.
std::unique_ptr<InferenceEngine> make_cpu_engine(std::shared_ptr<const Model> model,
                                                 const EngineConfig& config);

/// Throws std::runtime_error, saying how much `what` needs and how much is
/// available, when `bytes` exceed the available memory: better than
/// allocating it and having the process killed for it.
void check_available_memory(double bytes, const std::string& what);

} // namespace caflm

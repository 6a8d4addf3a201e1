#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "caflm/engine/request_limits.hpp"
#include "caflm/kv/kv_storage.hpp"

namespace caflm {

/// Where an engine runs.
enum class Device : std::uint8_t {
  /// CUDA when a device is usable, else the CPU (said once in the log).
  Auto,
  Cpu,
  Cuda,
};

/// "auto", "cpu", "cuda".
const char* to_string(Device device);

/// The device named `name` ("auto", "cpu", "cuda"), or std::nullopt.
std::optional<Device> parse_device(std::string_view name);

/// How much of a GPU's memory an engine takes: weights, workspace, then the
/// KV cache from the rest.
struct GpuMemory {
  /// A fraction of the device's total memory, in (0, 1], or 0 when `bytes`
  /// says instead.
  double fraction = 0.9;
  std::uint64_t bytes = 0;

  /// The budget in bytes on a device of `total_bytes`.
  std::uint64_t budget(std::uint64_t total_bytes) const;
};

/// `--gpu-memory`'s value: a number in (0, 1] is a fraction of the device's
/// memory, a larger one MiB. Throws std::invalid_argument for anything else.
GpuMemory parse_gpu_memory(std::string_view text);

/// What an operator sizes an engine by.
struct EngineOptions {
  /// Bytes for a CPU engine's KV cache (every layer's K and V). Honoured:
  /// the engine gets the blocks that fit, and its context is cut to what
  /// they hold.
  std::size_t kv_cache_bytes = std::size_t{1} << 30;
  /// A CPU engine's KV cache element type; unset (auto) follows the model
  /// (auto_kv_cache_type). F32 keeps log-probabilities within 1e-3 of
  /// llama.cpp's with an F32 cache; F16 (llama.cpp's default) holds twice the
  /// tokens in the same bytes and halves attention's memory traffic, moving
  /// log-probabilities by up to about 1e-2. CUDA engines keep theirs in F32.
  std::optional<KvCacheType> kv_cache_type;
  /// Longest sequence (prompt and reply) the engine accepts; 0 for the
  /// model's context. Either way at most what the KV cache holds.
  std::uint32_t max_context = 0;
  /// Request slots, and sequences that run at once.
  std::uint32_t max_requests = 64;
  std::uint32_t max_running = 32;
  Device device = Device::Cpu;
  /// A CUDA engine's share of its device, and the device's ordinal.
  GpuMemory gpu_memory;
  int gpu_index = 0;
  /// What one request may ask of the engine (EngineConfig::requests).
  RequestLimits requests;
};

} // namespace caflm

#pragma once

#include <cstdint>

namespace caflm {

/// Sizes that fix every buffer of the scheduler at start-up.
struct SchedulerConfig {
  /// Request slots: requests admitted at once, running or waiting.
  std::uint32_t max_requests = 64;
  /// Most tokens (prompt and generated) one sequence may hold.
  std::uint32_t max_context = 2048;
  /// Tokens per KV block.
  std::uint32_t block_size = 16;
  /// Most tokens one step computes, decodes and prefill chunks together.
  std::uint32_t token_budget = 512;
  /// Most sequences that hold KV and take part in steps at once.
  std::uint32_t max_running = 32;

  std::uint32_t max_pages() const { return (max_context + block_size - 1) / block_size; }
};

} // namespace caflm

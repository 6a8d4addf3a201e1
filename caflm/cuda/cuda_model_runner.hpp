#pragma once

// The CUDA model runner: a RaggedBackend that runs a whole ragged step (prefill
// chunks and decodes of many sequences) on one GPU, over a paged KV cache in
// device memory, and samples on the device. Plain C++: no CUDA headers, so the
// engine layer includes it without them.

#include <cstdint>
#include <memory>

#include "caflm/model/model.hpp"
#include "caflm/scheduler/ragged_batch.hpp"

namespace caflm::cuda {

/// What a CUDA runner is sized by.
struct CudaRunnerOptions {
  /// The CUDA device ordinal.
  int device = 0;
  /// Device memory the runner may take: the weights first, then its
  /// workspace, then KV blocks from what remains.
  std::uint64_t memory_budget_bytes = 0;
  /// Most tokens in one step (the scheduler's token budget) and most items.
  std::uint32_t max_tokens = 512;
  std::uint32_t max_items = 64;
  /// Longest sequence attended over.
  std::uint32_t max_context = 2048;
  /// Tokens per KV block, as in the scheduler's pool.
  std::uint32_t block_size = 16;
  /// At most this many KV blocks (0: as many as the budget holds).
  std::uint32_t max_kv_blocks = 0;
  /// Capture decode steps as CUDA graphs by batch-size bucket.
  bool cuda_graphs = true;
  /// Launch the forward pass's kernels programmatically where the device can
  /// (programmatic_launch.cuh): each may start while the one before it ends,
  /// and the linear layers' weights stream in meanwhile. Off by default until
  /// its speed is measured: its correctness is tested on an H200, its gain
  /// is not yet.
  bool programmatic_launch = false;
};

/// Counters of what a runner did, for tests and benchmarks.
struct CudaRunnerStats {
  std::uint64_t steps = 0;
  /// Steps replayed from a captured decode graph, and graphs captured.
  std::uint64_t graph_replays = 0;
  std::uint64_t graphs_captured = 0;
};

/// The decode-graph bucket of a step of `tokens` decode tokens: the smallest
/// power of two >= tokens, or 0 when it exceeds `max_tokens` or 512 (the
/// step runs without a graph; the runner passes the smaller of its token
/// and item limits). Padding a step to its bucket changes no row's result:
/// every kernel computes each row on its own.
std::uint32_t decode_graph_bucket(std::uint32_t tokens, std::uint32_t max_tokens);

/// Bytes of a runner's workspace for `config` and the limits in `options`:
/// activations for max_tokens, logits for max_items, the step's metadata and
/// the sampler's scratch. With the weights' arena (plan_weight_upload) and
/// the KV blocks, all the device memory a runner takes.
std::uint64_t cuda_workspace_bytes(const ModelConfig& config, const CudaRunnerOptions& options);

/// Runs a llama, qwen2, qwen3 or phi3 model on one GPU.
///
/// Weights are uploaded once, in their GGUF bytes, and dequantized inside the
/// matrix kernels (gemm_kernels.hpp); activations and the KV cache are F32.
/// Batch invariance: every kernel computes each row (token, or token and
/// head) in an order fixed by the row's own length, never by the batch, so a
/// sequence's logits and samples are bitwise the same whatever shares its
/// step, as on the CPU runner.
class CudaModelRunner : public RaggedBackend {
 public:
  /// Uploads the weights and allocates the KV cache on `options.device`.
  /// Throws std::runtime_error naming what does not fit (the budget below
  /// the weights and workspace, or no KV block left), and for a CUDA error.
  CudaModelRunner(std::shared_ptr<const Model> model, const CudaRunnerOptions& options);
  ~CudaModelRunner() override;

  CudaModelRunner(const CudaModelRunner&) = delete;
  CudaModelRunner& operator=(const CudaModelRunner&) = delete;

  std::uint32_t vocab_size() const override;
  /// KV blocks of `options().block_size` tokens the cache holds.
  std::uint32_t kv_blocks() const;
  const CudaRunnerOptions& options() const;
  /// Bytes of device memory taken: weights, workspace and KV cache.
  std::uint64_t device_bytes() const;
  CudaRunnerStats stats() const;

  /// Runs the step; `logits` may be null (they stay on the device for
  /// sample()); when given, row i receives item i's logits.
  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override;

  bool samples_on_device() const override { return true; }
  RaggedSampleCapacity sample_capacity() const override;

  Expected<std::uint32_t, BackendError> sample(const RaggedSampleBatch& batch,
                                               RaggedSampleResult* results,
                                               RaggedTopLogprob* top_logprobs) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace caflm::cuda

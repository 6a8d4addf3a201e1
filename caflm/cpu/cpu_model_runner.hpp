#pragma once

#include <cstdint>
#include <vector>

#include <memory>

#include "caflm/cpu/cache_line_vector.hpp"
#include "caflm/cpu/cpu_kernels.hpp"
#include "caflm/kv/kv_storage.hpp"
#include "caflm/model/model.hpp"
#include "caflm/scheduler/ragged_batch.hpp"

namespace caflm {

/// Sizes that fix the runner's buffers at construction.
struct RunnerLimits {
  /// Most tokens in one step (the scheduler's token budget).
  std::uint32_t max_tokens = 512;
  /// Most items (sequences) in one step.
  std::uint32_t max_items = 64;
  /// Longest sequence attended over.
  std::uint32_t max_context = 2048;
  /// Physical KV blocks and their size, as in the scheduler's pool.
  std::uint32_t kv_blocks = 1024;
  std::uint32_t block_size = 16;
  /// The cache's element type.
  KvCacheType kv_type = KvCacheType::F32;
};

/// Runs a llama, qwen2, qwen3 or phi3 model on the CPU, one whole ragged step (prefill
/// chunks and decodes of many sequences) per call, over the paged KV cache.
///
/// Batch invariance: every kernel fixes each output row's reduction order
/// by the row's length alone, and attention for one (token, head) reads only
/// its own sequence's cache in position order (caflm/cpu/paged_attention.hpp). So a sequence's
/// logits are bitwise the same whatever shares its step, and whether its KV entered the cache by
/// prefill or by decode.
class CpuModelRunner : public RaggedBackend {
 public:
  CpuModelRunner(std::shared_ptr<const Model> model, RunnerLimits limits);

  /// Consecutive tokens of one sequence whose attention one call computes
  /// (paged_attention_tokens); the score scratch holds that many, or one
  /// token's every KV head (paged_attention_heads), whichever is more.
  static constexpr std::uint32_t kAttentionRunTokens = 4;

  std::uint32_t vocab_size() const override { return config_.vocab_size; }
  const RunnerLimits& limits() const { return limits_; }
  KvStorage& kv() { return kv_; }

  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override;

 private:
  bool valid(const RaggedBatch& batch) const;
  void attention_layer(std::uint32_t layer, const RaggedBatch& batch);
  void store_kv(std::uint32_t layer, const RaggedBatch& batch, std::uint32_t n_tokens);

  std::shared_ptr<const Model> model_;
  const ModelConfig& config_;
  const ModelWeights& weights_;
  RunnerLimits limits_;
  RopeConfig rope_;
  KvStorage kv_;
  // Step scratch, sized by the limits; a step allocates nothing.
  CacheLineVector<float> x_;              // [max_tokens, dim] residual stream
  CacheLineVector<float> h_;              // [max_tokens, dim] normed input / block output
  CacheLineVector<float> q_;              // [max_tokens, q_dim]
  CacheLineVector<float> k_;              // [max_tokens, kv_dim]
  CacheLineVector<float> v_;              // [max_tokens, kv_dim]
  CacheLineVector<float> attn_;           // [max_tokens, q_dim]
  CacheLineVector<float> gate_;           // [max_tokens, ffn_dim]
  CacheLineVector<float> up_;             // [max_tokens, ffn_dim]
  CacheLineVector<float> last_;           // [max_items, dim] last token of each item
  std::vector<std::int32_t> positions_;   // [max_tokens]
  std::vector<float> rope_angles_;        // [max_tokens, head_dim] cos and sin of each pair
  std::vector<std::uint32_t> token_item_; // [max_tokens] item of each token
  /// One call of a step's attention: consecutive tokens of one item and a
  /// run of its KV heads.
  struct AttentionWork {
    std::uint32_t first_row;
    std::uint32_t tokens;
    std::uint32_t first_kv_head;
    std::uint32_t kv_heads;
  };
  std::vector<AttentionWork> attention_work_; // [max_tokens * n_kv_heads] this step's
  int threads_;                               // OpenMP threads of the attention loop
  std::size_t scores_per_thread_;             // max(run, n_kv_heads) * group * (max_context + run)
  CacheLineVector<float> scores_;             // [threads, scores_per_thread_]
};

} // namespace caflm

#include "caflm/cpu/cpu_model_runner.hpp"

#include <algorithm>
#include <cmath>
#include <omp.h>

#include "caflm/cpu/cpu_matmul.hpp"
#include "caflm/cpu/paged_attention.hpp"

namespace caflm {

namespace {

const float* bias_or_null(const std::vector<float>& bias) {
  return bias.empty() ? nullptr : bias.data();
}

/// K and V values a step stores below which one thread stores them all: a
/// decode step of a few sequences is less work than waking the others.
constexpr std::size_t kParallelStoreMinValues = std::size_t{1} << 14;

} // namespace

CpuModelRunner::CpuModelRunner(std::shared_ptr<const Model> model, RunnerLimits limits)
  : model_(std::move(model))
  , config_(model_->config())
  , weights_(model_->weights())
  , limits_(limits)
  , rope_{config_.rope_mode,       config_.head_dim,
          config_.rope_base,       weights_.rope_factors(config_, limits.max_context),
          config_.rope_freq_scale, config_.rope_attn_factor}
  , kv_(limits.kv_type, config_.n_layers, limits.kv_blocks, limits.block_size, config_.n_kv_heads,
        config_.head_dim)
  , x_(std::size_t{limits.max_tokens} * config_.dim)
  , h_(x_.size())
  , q_(std::size_t{limits.max_tokens} * config_.q_dim())
  , k_(std::size_t{limits.max_tokens} * config_.kv_dim())
  , v_(k_.size())
  , attn_(q_.size())
  , gate_(std::size_t{limits.max_tokens} * config_.ffn_dim)
  , up_(gate_.size())
  , last_(std::size_t{limits.max_items} * config_.dim)
  , positions_(limits.max_tokens)
  , rope_angles_(std::size_t{limits.max_tokens} * config_.head_dim)
  , token_item_(limits.max_tokens)
  , attention_work_(std::size_t{limits.max_tokens} * config_.n_kv_heads)
  , threads_(omp_get_max_threads())
  , scores_per_thread_(std::size_t{std::max(kAttentionRunTokens, config_.n_kv_heads)} *
                       config_.query_group() * (limits.max_context + kAttentionRunTokens))
  , scores_(std::size_t(threads_) * scores_per_thread_) {}

bool CpuModelRunner::valid(const RaggedBatch& batch) const {
  if (batch.item_count > limits_.max_items || batch.token_count > limits_.max_tokens)
    return false;
  std::uint32_t next_token = 0;
  for (std::uint32_t i = 0; i < batch.item_count; ++i) {
    const RaggedBatchItem& item = batch.items[i];
    const std::uint64_t end = std::uint64_t{item.position} + item.query_length;
    if (item.query_length == 0 || item.token_offset != next_token || end > limits_.max_context ||
        std::uint64_t{item.page_count} * limits_.block_size < end ||
        std::uint64_t{item.block_table_offset} + item.page_count > batch.block_table_size)
      return false;
    next_token += item.query_length;
    for (std::uint32_t p = 0; p < item.page_count; ++p)
      if (batch.block_tables[item.block_table_offset + p] >= limits_.kv_blocks)
        return false;
  }
  if (next_token != batch.token_count)
    return false;
  for (std::uint32_t t = 0; t < batch.token_count; ++t)
    if (batch.tokens[t] >= config_.vocab_size)
      return false;
  for (std::uint32_t c = 0; c < batch.copy_count; ++c)
    if (batch.copies[c].source >= limits_.kv_blocks ||
        batch.copies[c].destination >= limits_.kv_blocks)
      return false;
  return true;
}

Expected<RaggedBatchReceipt, BackendError>
CpuModelRunner::execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) {
  if (!valid(batch))
    return BackendError::InvalidBatch;
  // One fstat a step: the weights are read in place from the mapped file.
  if (model_->file().changed_on_disk())
    return BackendError::WeightsChanged;
  for (std::uint32_t c = 0; c < batch.copy_count; ++c)
    kv_.copy_block(batch.copies[c].source, batch.copies[c].destination);
  const std::uint32_t n_tokens = batch.token_count;
  const std::uint32_t dim = config_.dim;
  for (std::uint32_t i = 0; i < batch.item_count; ++i) {
    const RaggedBatchItem& item = batch.items[i];
    for (std::uint32_t t = 0; t < item.query_length; ++t) {
      positions_[item.token_offset + t] = static_cast<std::int32_t>(item.position + t);
      token_item_[item.token_offset + t] = i;
    }
  }

  // The same angles rotate q and k of every layer.
  rope_angles(positions_.data(), n_tokens, rope_, rope_angles_.data());
  embedding_lookup(weights_.token_embedding, batch.tokens, n_tokens, x_.data());
  for (std::uint32_t layer = 0; layer < config_.n_layers; ++layer) {
    const LayerWeights& w = weights_.layers[layer];
    // Attention block: x += wo · attention(rope(q), rope(k), v).
    rms_norm(x_.data(), n_tokens, dim, w.attn_norm.data(), config_.rms_eps, h_.data());
    linear_shared_input(h_.data(), n_tokens,
                        {{&w.wq, q_.data(), bias_or_null(w.bq)},
                         {&w.wk, k_.data(), bias_or_null(w.bk)},
                         {&w.wv, v_.data(), bias_or_null(w.bv)}});
    if (config_.qk_norm) {
      // qwen3: each head of q and k RMS-normalized on its own before RoPE.
      const float eps = config_.rms_eps;
      rms_norm(q_.data(), std::size_t{n_tokens} * config_.n_heads, config_.head_dim,
               w.q_norm.data(), eps, q_.data());
      rms_norm(k_.data(), std::size_t{n_tokens} * config_.n_kv_heads, config_.head_dim,
               w.k_norm.data(), eps, k_.data());
    }
    rope_rotate(q_.data(), n_tokens, config_.n_heads, rope_angles_.data(), rope_);
    rope_rotate(k_.data(), n_tokens, config_.n_kv_heads, rope_angles_.data(), rope_);
    store_kv(layer, batch, n_tokens);
    attention_layer(layer, batch);
    linear(w.wo, attn_.data(), n_tokens, h_.data(), bias_or_null(w.bo));
    for (std::size_t e = 0; e < std::size_t{n_tokens} * dim; ++e)
      x_[e] += h_[e];
    // Feed-forward block: x += w_down · (silu(w_gate · h) * (w_up · h)).
    rms_norm(x_.data(), n_tokens, dim, w.ffn_norm.data(), config_.rms_eps, h_.data());
    linear_shared_input(h_.data(), n_tokens,
                        {{&w.w_gate, gate_.data(), bias_or_null(w.b_gate)},
                         {&w.w_up, up_.data(), bias_or_null(w.b_up)}});
    silu_mul(gate_.data(), up_.data(), n_tokens, config_.ffn_dim, gate_.data());
    linear(w.w_down, gate_.data(), n_tokens, h_.data(), bias_or_null(w.b_down));
    for (std::size_t e = 0; e < std::size_t{n_tokens} * dim; ++e)
      x_[e] += h_[e];
  }

  // Logits only for each item's last token.
  for (std::uint32_t i = 0; i < batch.item_count; ++i) {
    const RaggedBatchItem& item = batch.items[i];
    const float* row = x_.data() + std::size_t{item.token_offset + item.query_length - 1} * dim;
    std::copy_n(row, dim, last_.data() + std::size_t{i} * dim);
  }
  rms_norm(last_.data(), batch.item_count, dim, weights_.output_norm.data(), config_.rms_eps,
           last_.data());
  linear(weights_.output, last_.data(), batch.item_count, logits, nullptr);

  for (std::uint32_t i = 0; i < batch.item_count; ++i)
    outputs[i] = RaggedBatchOutput{batch.items[i].request_id, batch.items[i].slot,
                                   batch.items[i].query_length};
  return RaggedBatchReceipt{batch.item_count, 1, n_tokens};
}

void CpuModelRunner::store_kv(std::uint32_t layer, const RaggedBatch& batch,
                              std::uint32_t n_tokens) {
  const std::uint32_t head_dim = config_.head_dim;
  const std::uint32_t block_size = limits_.block_size;
  const auto heads = static_cast<std::int64_t>(config_.n_kv_heads);
  // Split by KV head: each head's cells of a block are its own bytes, so no
  // two threads write the same cache line.
#pragma omp parallel for schedule(static)                                                          \
    num_threads(threads_) if (std::size_t{n_tokens} * config_.kv_dim() >= kParallelStoreMinValues)
  for (std::int64_t h = 0; h < heads; ++h) {
    const auto head = static_cast<std::uint32_t>(h);
    for (std::uint32_t i = 0; i < batch.item_count; ++i) {
      const RaggedBatchItem& item = batch.items[i];
      const BlockId* pages = batch.block_tables + item.block_table_offset;
      for (std::uint32_t t = 0; t < item.query_length; ++t) {
        const std::uint32_t row = item.token_offset + t;
        const std::uint32_t pos = item.position + t;
        const std::size_t src = std::size_t{row} * config_.kv_dim() + std::size_t{head} * head_dim;
        store_kv_head(kv_, layer, pages[pos / block_size], head, pos % block_size, &k_[src],
                      &v_[src]);
      }
    }
  }
}

void CpuModelRunner::attention_layer(std::uint32_t layer, const RaggedBatch& batch) {
  const std::uint32_t head_dim = config_.head_dim;
  const std::uint32_t group = config_.query_group();
  const std::uint32_t kv_heads = config_.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // A decode token's KV heads go in runs, each one call that reads every
  // block's heads together (paged_attention_heads), one run of the cache
  // per block: runs as long as still leave about 4 calls per thread. A
  // prefill's tokens go in runs of up to kAttentionRunTokens, one KV head
  // each, and read each block of their cache once per run.
  std::uint32_t decode_tokens = 0;
  for (std::uint32_t i = 0; i < batch.item_count; ++i)
    decode_tokens += batch.items[i].query_length == 1 ? 1 : 0;
  const std::uint32_t calls_wanted = 4 * static_cast<std::uint32_t>(threads_);
  const std::uint32_t heads_per_call = std::clamp<std::uint32_t>(
      (decode_tokens * kv_heads + calls_wanted - 1) / calls_wanted, 1, kv_heads);
  std::size_t n_work = 0;
  for (std::uint32_t i = 0; i < batch.item_count; ++i) {
    const RaggedBatchItem& item = batch.items[i];
    if (item.query_length == 1) {
      for (std::uint32_t h = 0; h < kv_heads; h += heads_per_call)
        attention_work_[n_work++] =
            AttentionWork{item.token_offset, 1, h, std::min(heads_per_call, kv_heads - h)};
      continue;
    }
    for (std::uint32_t t = 0; t < item.query_length; t += kAttentionRunTokens)
      for (std::uint32_t h = 0; h < kv_heads; ++h)
        attention_work_[n_work++] = AttentionWork{
            item.token_offset + t, std::min(kAttentionRunTokens, item.query_length - t), h, 1};
  }
  const MatmulIsa isa = default_matmul_isa();

  // Each call reads only its own sequence's cache, in position order, and
  // every token's result has the bits of its own attention, so nothing
  // depends on how the work is split. Calls are handed out dynamically: a
  // prefill's later tokens attend to longer contexts than its first ones.
#pragma omp parallel for schedule(dynamic) num_threads(threads_)
  for (std::int64_t w = 0; w < static_cast<std::int64_t>(n_work); ++w) {
    const AttentionWork& work = attention_work_[static_cast<std::size_t>(w)];
    const RaggedBatchItem& item = batch.items[token_item_[work.first_row]];
    const PagedKvHead cache{&kv_, layer, work.first_kv_head,
                            batch.block_tables + item.block_table_offset};
    const auto context = static_cast<std::uint32_t>(positions_[work.first_row]) + 1; // causal
    const std::size_t first_head = std::size_t{work.first_row} * config_.q_dim() +
                                   std::size_t{work.first_kv_head} * group * head_dim;
    float* scores = scores_.data() + std::size_t(omp_get_thread_num()) * scores_per_thread_;
    if (work.tokens == 1)
      paged_attention_heads(cache, work.kv_heads, context, q_.data() + first_head, group, scale,
                            scores, attn_.data() + first_head, isa);
    else
      paged_attention_tokens(cache, context, work.tokens, q_.data() + first_head, config_.q_dim(),
                             group, scale, scores, attn_.data() + first_head, isa);
  }
}

} // namespace caflm

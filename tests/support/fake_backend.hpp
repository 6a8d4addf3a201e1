#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "caflm/scheduler/ragged_batch.hpp"

namespace caflm::testing {

/// A backend with no model: it echoes every item's identity, records what
/// it was given, and writes logits whose argmax is a function of the item's
/// last token and position, so tests can predict each sampled token.
class FakeBackend : public RaggedBackend {
 public:
  explicit FakeBackend(std::uint32_t vocab = 32)
    : vocab_(vocab) {}

  std::uint32_t vocab_size() const override { return vocab_; }

  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override {
    ++launches;
    if (fail_next) {
      fail_next = false;
      return BackendError::DeviceFailure;
    }
    last_items.assign(batch.items, batch.items + batch.item_count);
    last_tables.assign(batch.block_tables, batch.block_tables + batch.block_table_size);
    last_copies.assign(batch.copies, batch.copies + batch.copy_count);
    RaggedBatchReceipt receipt{batch.item_count, 1, 0};
    for (std::uint32_t i = 0; i < batch.item_count; ++i) {
      const RaggedBatchItem& item = batch.items[i];
      outputs[i] = RaggedBatchOutput{item.request_id, item.slot, item.query_length};
      receipt.tokens += item.query_length;
      TokenId last = batch.tokens[item.token_offset + item.query_length - 1];
      float* row = logits + static_cast<std::size_t>(i) * vocab_;
      std::fill(row, row + vocab_, 0.0f);
      row[next_token(last, item.position + item.query_length - 1)] = 1.0f;
    }
    if (corrupt_next && batch.item_count > 0) {
      corrupt_next = false;
      outputs[batch.item_count - 1].request_id ^= 0x1;
    }
    return receipt;
  }

  /// The token the fake model predicts after `token` at `position`.
  TokenId next_token(TokenId token, std::uint32_t position) const {
    return (token * 7 + position * 3 + 1) % vocab_;
  }

  std::uint32_t launches = 0;
  bool fail_next = false;
  bool corrupt_next = false;
  std::vector<RaggedBatchItem> last_items;
  std::vector<BlockId> last_tables;
  std::vector<BlockCopy> last_copies;

 private:
  std::uint32_t vocab_;
};

/// Index of the largest logit.
inline TokenId argmax(const float* row, std::uint32_t vocab) {
  return static_cast<TokenId>(std::max_element(row, row + vocab) - row);
}

} // namespace caflm::testing

#include "caflm/scheduler/step.hpp"

namespace caflm::testing {

/// Everything one scheduler needs, sized for small tests.
struct SchedulerRig {
  explicit SchedulerRig(SchedulerConfig cfg, std::uint32_t blocks, bool with_cache = true,
                        std::uint32_t vocab = 32)
    : config(cfg)
    , pool(blocks)
    , cache(blocks, cfg.block_size, 1234)
    , table(cfg, pool, with_cache ? &cache : nullptr)
    , planner(cfg)
    , plan(cfg.max_requests)
    , buffers(cfg.max_requests, cfg.token_budget, cfg.max_requests * cfg.max_pages(), vocab)
    , backend(vocab) {}

  /// One step; every request that awaits a token gets the fake model's
  /// greedy choice appended.
  Expected<RaggedBatchReceipt, SchedulerError> step() {
    auto receipt = run_step(table, planner, backend, plan, buffers);
    if (!receipt)
      return receipt;
    for (std::uint32_t i = 0; i < buffers.item_count; ++i) {
      std::uint32_t slot = buffers.items[i].slot;
      if (table.view(slot).awaiting_token)
        (void)table.append_token(slot, argmax(buffers.logits_row(i), buffers.vocab_size));
    }
    return receipt;
  }

  SchedulerConfig config;
  BlockPool pool;
  PrefixCache cache;
  RequestTable table;
  StepPlanner planner;
  StepPlan plan;
  RaggedBatchBuffers buffers;
  FakeBackend backend;
};

} // namespace caflm::testing

#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <stdexcept>

#include <sys/syscall.h>
#include <unistd.h>

#include "caflm/scheduler/ragged_batch.hpp"

namespace caflm::bench {

/// A backend that does no model compute, so a benchmark measures only what
/// surrounds it (scheduling, sampling, detokenizing, actors). It echoes each
/// item's identity and writes a one-hot logits row on a lowercase letter's
/// byte token chosen by position: greedy decoding then yields one byte of
/// ASCII text per token. It counts its launches and records the thread that
/// runs it, so a benchmark can attribute that thread's CPU time.
class NullBackend : public RaggedBackend {
 public:
  /// `vocab` must hold the 256 byte tokens at ids 0..255 (byte-level BPE).
  explicit NullBackend(std::uint32_t vocab)
    : vocab_(vocab) {
    if (vocab_ < 256)
      throw std::invalid_argument("NullBackend needs a byte-level vocabulary");
  }

  std::uint32_t vocab_size() const override { return vocab_; }

  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override {
    thread_id_.store(static_cast<long>(syscall(SYS_gettid)), std::memory_order_relaxed);
    RaggedBatchReceipt receipt{batch.item_count, 1, 0};
    for (std::uint32_t i = 0; i < batch.item_count; ++i) {
      const RaggedBatchItem& item = batch.items[i];
      outputs[i] = RaggedBatchOutput{item.request_id, item.slot, item.query_length};
      receipt.tokens += item.query_length;
      float* row = logits + static_cast<std::size_t>(i) * vocab_; // [vocab]
      std::fill(row, row + vocab_, 0.0f);
      row[next_token(item.position + item.query_length - 1)] = 1.0f;
    }
    launches_.fetch_add(1, std::memory_order_relaxed);
    items_.fetch_add(batch.item_count, std::memory_order_relaxed);
    tokens_.fetch_add(receipt.tokens, std::memory_order_relaxed);
    return receipt;
  }

  /// The token that follows position `position`: 'a'..'z' in turn.
  static TokenId next_token(std::uint32_t position) { return TokenId{'a'} + position % 26; }

  /// Steps run so far (one launch each).
  std::uint64_t launches() const { return launches_.load(std::memory_order_relaxed); }
  /// Items (sequences) over all steps; a decode is one item of one token.
  std::uint64_t items() const { return items_.load(std::memory_order_relaxed); }
  /// Tokens computed over all steps, prompt and generated.
  std::uint64_t tokens() const { return tokens_.load(std::memory_order_relaxed); }
  /// Kernel id of the thread that ran the latest step; 0 before the first.
  long thread_id() const { return thread_id_.load(std::memory_order_relaxed); }

 private:
  std::uint32_t vocab_;
  std::atomic<std::uint64_t> launches_{0};
  std::atomic<std::uint64_t> items_{0};
  std::atomic<std::uint64_t> tokens_{0};
  std::atomic<long> thread_id_{0};
};

} // namespace caflm::bench

#pragma once

#include <cstdint>
#include <type_traits>
#include <vector>

#include "caflm/kv/block_pool.hpp"
#include "caflm/kv/expected.hpp"
#include "caflm/kv/token_id.hpp"

namespace caflm {

/// One sequence's share of a ragged step: `query_length` tokens starting at
/// sequence position `position`. A decode is an item with query length 1; a
/// prefill chunk is an item with a longer one. 32 bytes, standard layout, so
/// backends on other devices can take the array as it is.
struct RaggedBatchItem {
  std::uint64_t request_id;
  std::uint32_t slot;
  /// Index of the item's first token in `RaggedBatch::tokens`.
  std::uint32_t token_offset;
  /// Sequence position of that token.
  std::uint32_t position;
  /// Index of the item's first page in `RaggedBatch::block_tables`.
  std::uint32_t block_table_offset;
  /// Pages in the item's table; they cover `position + query_length` tokens.
  std::uint32_t page_count;
  /// Tokens this item computes.
  std::uint32_t query_length;
};

/// What the backend reports per item, in item order; checked against the
/// items before any scheduler state changes. 16 bytes, standard layout.
struct RaggedBatchOutput {
  std::uint64_t request_id;
  std::uint32_t slot;
  /// Tokens whose KV the backend wrote; equals the item's query length.
  std::uint32_t tokens_computed;
};

static_assert(sizeof(RaggedBatchItem) == 32 && std::is_standard_layout_v<RaggedBatchItem>);
static_assert(sizeof(RaggedBatchOutput) == 16 && std::is_standard_layout_v<RaggedBatchOutput>);

/// A copy-on-write the backend performs, for every layer's K and V, before
/// it writes anything in the step.
struct BlockCopy {
  BlockId source;
  BlockId destination;
};

/// Summary of one backend call.
struct RaggedBatchReceipt {
  std::uint32_t batch_size = 0;
  std::uint32_t backend_launches = 0;
  std::uint32_t tokens = 0;
};

/// One step's whole input: every item, their tokens, their concatenated
/// block tables and the copies to perform first.
struct RaggedBatch {
  const RaggedBatchItem* items; // [item_count]
  std::uint32_t item_count;
  const TokenId* tokens; // [token_count]
  std::uint32_t token_count;
  const BlockId* block_tables; // [block_table_size]
  std::uint32_t block_table_size;
  const BlockCopy* copies; // [copy_count]
  std::uint32_t copy_count;
};

/// Why a backend could not run a step.
enum class BackendError : std::uint8_t {
  InvalidBatch,
  OutOfMemory,
  DeviceFailure,
  /// The weights' file changed under the backend (it shrank or was written
  /// in place): reading on would be wrong, or fatal (SIGBUS).
  WeightsChanged,
};

const char* to_string(BackendError error);

/// A model executor that runs a whole ragged step in one launch.
class RaggedBackend {
 public:
  virtual ~RaggedBackend() = default;

  /// Vocabulary size: the width of each logits row.
  virtual std::uint32_t vocab_size() const = 0;

  /// Performs `batch.copies`, writes KV for every item's tokens, fills
  /// `outputs` [item_count] and leaves the logits of each item's last token
  /// in row i of `logits` [item_count, vocab_size].
  virtual Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) = 0;
};

/// Preallocated storage for one step, sized once for the largest step.
struct RaggedBatchBuffers {
  RaggedBatchBuffers(std::uint32_t max_items, std::uint32_t max_tokens,
                     std::uint32_t max_table_entries, std::uint32_t vocab_size);

  RaggedBatch batch() const;
  void clear();

  std::vector<RaggedBatchItem> items;     // [max_items]
  std::vector<TokenId> tokens;            // [max_tokens]
  std::vector<BlockId> block_tables;      // [max_table_entries]
  std::vector<BlockCopy> copies;          // [max_table_entries]
  std::vector<RaggedBatchOutput> outputs; // [max_items]
  std::vector<float> logits;              // [max_items, vocab_size]
  std::uint32_t vocab_size;
  std::uint32_t item_count = 0;
  std::uint32_t token_count = 0;
  std::uint32_t block_table_size = 0;
  std::uint32_t copy_count = 0;

  /// Logits of item `i`'s last token. // [vocab_size]
  const float* logits_row(std::uint32_t i) const {
    return logits.data() + static_cast<std::size_t>(i) * vocab_size;
  }
};

} // namespace caflm

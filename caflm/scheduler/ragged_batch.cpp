#include "caflm/scheduler/ragged_batch.hpp"

namespace caflm {

const char* to_string(BackendError error) {
  switch (error) {
  case BackendError::InvalidBatch:
    return "invalid ragged batch";
  case BackendError::OutOfMemory:
    return "backend out of memory";
  case BackendError::DeviceFailure:
    return "backend device failure";
  case BackendError::WeightsChanged:
    return "the model file changed under the engine (shrank or was written in place)";
  }
  return "unknown backend error";
}

RaggedBatchBuffers::RaggedBatchBuffers(std::uint32_t max_items, std::uint32_t max_tokens,
                                       std::uint32_t max_table_entries, std::uint32_t vocab)
  : items(max_items)
  , tokens(max_tokens)
  , block_tables(max_table_entries)
  , copies(max_table_entries)
  , outputs(max_items)
  , logits(static_cast<std::size_t>(max_items) * vocab)
  , vocab_size(vocab) {}

RaggedBatch RaggedBatchBuffers::batch() const {
  return RaggedBatch{items.data(),        item_count,       tokens.data(), token_count,
                     block_tables.data(), block_table_size, copies.data(), copy_count};
}

void RaggedBatchBuffers::clear() {
  item_count = token_count = block_table_size = copy_count = 0;
}

} // namespace caflm

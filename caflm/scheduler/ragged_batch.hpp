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

/// How one logits row of a step is sampled on a backend's device (see
/// RaggedBackend::sample): the sampling layer's Sampler semantics as plain
/// numbers, with the draw's uniform number already computed on the host from
/// the counter-based RNG (counter_uniform(seed, step)), so device and host
/// draws take the same u. The chain is the Sampler's: penalties and bans ->
/// top_k -> top_p -> min_p -> temperature -> draw over the kept tokens sorted
/// by probability descending (ties: lower id first) until the cumulative
/// mass exceeds uniform * mass. 56 bytes, standard layout.
struct RaggedSampleSpec {
  /// Row of the step's logits: the item whose last token is sampled.
  std::uint32_t item;
  /// <= 1e-6 (Sampler::kGreedyTemperature): the argmax after penalties and
  /// bans (ties: lowest id), no draw.
  float temperature;
  /// 0 or negative: disabled.
  std::int32_t top_k;
  float top_p;
  float min_p;
  float repetition_penalty;
  float presence_penalty;
  float frequency_penalty;
  /// counter_uniform(seed, step), in [0, 1).
  float uniform;
  /// Most likely tokens of the raw log-softmax to report, 0..kMaxSampleTopLogprobs.
  std::uint32_t top_logprobs;
  /// The tokens in the request's penalty window, each once with its count:
  /// entries [penalty_offset, penalty_offset + penalty_count) of
  /// RaggedSampleBatch::penalty_tokens / penalty_counts.
  std::uint32_t penalty_offset;
  std::uint32_t penalty_count;
  /// Tokens never chosen (eos under ignore_eos): entries [banned_offset,
  /// banned_offset + banned_count) of RaggedSampleBatch::banned.
  std::uint32_t banned_offset;
  std::uint32_t banned_count;
};

/// The most top logprobs a spec may ask for (OpenAI's bound).
inline constexpr std::uint32_t kMaxSampleTopLogprobs = 20;

/// Everything one RaggedBackend::sample call reads.
struct RaggedSampleBatch {
  const RaggedSampleSpec* specs; // [spec_count]
  std::uint32_t spec_count;
  const TokenId* penalty_tokens;       // [penalty_size] distinct per spec
  const std::uint32_t* penalty_counts; // [penalty_size] occurrences, >= 1
  std::uint32_t penalty_size;
  const TokenId* banned; // [banned_size]
  std::uint32_t banned_size;
};

/// The most one RaggedBackend::sample call takes; a caller with more splits
/// its specs over several calls. Every single spec whose lists are within
/// the limits fits in one call.
struct RaggedSampleCapacity {
  std::uint32_t max_specs = 0;
  std::uint32_t max_penalty_entries = 0;
  std::uint32_t max_banned = 0;
};

/// One entry of a top-logprobs list.
struct RaggedTopLogprob {
  TokenId token;
  float logprob;
};

/// What RaggedBackend::sample reports per spec, in spec order.
struct RaggedSampleResult {
  TokenId token;
  /// The token's log-probability under the log-softmax of the raw logits.
  float logprob;
  /// Logits of the row that were NaN (sampled around as -infinity).
  std::uint32_t nan_logits;
  /// Entries written to the spec's top-logprobs row, sorted descending, ties
  /// by lower id: min(top_logprobs, vocab_size).
  std::uint32_t top_count;
};

static_assert(sizeof(RaggedSampleSpec) == 56 && std::is_standard_layout_v<RaggedSampleSpec>);

/// A model executor that runs a whole ragged step in one launch.
class RaggedBackend {
 public:
  virtual ~RaggedBackend() = default;

  /// Vocabulary size: the width of each logits row.
  virtual std::uint32_t vocab_size() const = 0;

  /// Performs `batch.copies`, writes KV for every item's tokens, fills
  /// `outputs` [item_count] and leaves the logits of each item's last token
  /// in row i of `logits` [item_count, vocab_size].
  /// A backend that samples on its device (samples_on_device()) may take a
  /// null `logits` and keep them on the device for sample().
  virtual Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) = 0;

  /// True when the backend samples the last step's logits itself (sample()),
  /// so that only token ids and requested logprobs cross to the host.
  virtual bool samples_on_device() const { return false; }

  /// The most one sample() call takes (zeros for a backend that does not
  /// sample).
  virtual RaggedSampleCapacity sample_capacity() const { return {}; }

  /// Samples rows of the last execute()'s logits as `batch.specs` say:
  /// writes `results` [spec_count] and, for spec i, its top logprobs to
  /// `top_logprobs` [spec_count, kMaxSampleTopLogprobs] row i. Only for a
  /// backend that samples_on_device(); others return InvalidBatch.
  virtual Expected<std::uint32_t, BackendError> sample(const RaggedSampleBatch& batch,
                                                       RaggedSampleResult* results,
                                                       RaggedTopLogprob* top_logprobs) {
    (void)batch, (void)results, (void)top_logprobs;
    return BackendError::InvalidBatch;
  }
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

#include "caflm/cuda/device_sampler.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace caflm::cuda {

namespace {

/// Every array of the device allocation starts on this boundary (what
/// cudaMalloc itself guarantees, and what cub asks of its scratch).
constexpr std::uint64_t kArrayAlignment = 256;

/// The Sampler's greedy bound (Sampler::kGreedyTemperature), restated here so
/// that caflm_cuda does not depend on the sampling layer.
constexpr float kGreedyTemperature = 1e-6f;

std::uint64_t aligned(std::uint64_t bytes) {
  return (bytes + kArrayAlignment - 1) / kArrayAlignment * kArrayAlignment;
}

/// Appends an array of `bytes` at the aligned end of `end`; returns its offset.
std::uint64_t place(std::uint64_t& end, std::uint64_t bytes) {
  const std::uint64_t offset = aligned(end);
  end = offset + bytes;
  return offset;
}

[[noreturn]] void refuse_spec(std::uint32_t index, const std::string& why) {
  throw std::invalid_argument("DeviceSampler::sample: spec " + std::to_string(index) + ": " + why);
}

/// True when [offset, offset + count) lies inside an array of `size`.
bool inside(std::uint32_t offset, std::uint32_t count, std::uint32_t size) {
  return offset <= size && count <= size - offset;
}

/// Checks one spec's values against the ranges validate(SamplingParams)
/// allows; comparisons are written so that NaN fails them.
void check_values(std::uint32_t index, const RaggedSampleSpec& spec) {
  if (!(spec.temperature >= 0.0f && spec.temperature <= 100.0f))
    refuse_spec(index, "temperature must be in [0, 100]");
  if (spec.top_k < -1)
    refuse_spec(index, "top_k must be -1, 0 or positive");
  if (!(spec.top_p > 0.0f && spec.top_p <= 1.0f))
    refuse_spec(index, "top_p must be in (0, 1]");
  if (!(spec.min_p >= 0.0f && spec.min_p <= 1.0f))
    refuse_spec(index, "min_p must be in [0, 1]");
  if (!(spec.repetition_penalty > 0.0f && std::isfinite(spec.repetition_penalty)))
    refuse_spec(index, "repetition_penalty must be positive and finite");
  if (!(spec.presence_penalty >= -2.0f && spec.presence_penalty <= 2.0f))
    refuse_spec(index, "presence_penalty must be in [-2, 2]");
  if (!(spec.frequency_penalty >= -2.0f && spec.frequency_penalty <= 2.0f))
    refuse_spec(index, "frequency_penalty must be in [-2, 2]");
  if (!(spec.uniform >= 0.0f && spec.uniform < 1.0f))
    refuse_spec(index, "uniform must be in [0, 1)");
  if (spec.top_logprobs > kMaxSampleTopLogprobs)
    refuse_spec(index, "top_logprobs " + std::to_string(spec.top_logprobs) + " exceeds " +
                           std::to_string(kMaxSampleTopLogprobs));
}

} // namespace

void check_capacity(const DeviceSamplerCapacity& capacity) {
  if (capacity.vocab_size < 2 || capacity.vocab_size > kMaxDeviceSamplerVocab)
    throw std::invalid_argument("DeviceSampler: vocabulary of " +
                                std::to_string(capacity.vocab_size) + " tokens outside 2.." +
                                std::to_string(kMaxDeviceSamplerVocab));
  if (capacity.max_rows == 0)
    throw std::invalid_argument("DeviceSampler: max_rows is 0");
  // cub's segmented sort counts items and offsets in int.
  if (std::uint64_t{capacity.max_rows} * capacity.vocab_size >
      static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument("DeviceSampler: " + std::to_string(capacity.max_rows) +
                                " rows of " + std::to_string(capacity.vocab_size) +
                                " logits exceed the sort's 2^31 - 1 items");
}

DeviceSamplerLayout device_sampler_layout(const DeviceSamplerCapacity& capacity) {
  check_capacity(capacity);
  const std::uint64_t rows = capacity.max_rows;
  const std::uint64_t row_items = rows * capacity.vocab_size;
  DeviceSamplerLayout layout{};
  std::uint64_t end = 0;
  layout.specs = place(end, rows * sizeof(DeviceSampleSpec));
  layout.begin_offsets = place(end, rows * sizeof(int));
  layout.end_offsets = place(end, rows * sizeof(int));
  layout.penalty_tokens = place(end, std::uint64_t{capacity.max_penalty_entries} * sizeof(TokenId));
  layout.penalty_counts =
      place(end, std::uint64_t{capacity.max_penalty_entries} * sizeof(std::uint32_t));
  layout.banned = place(end, std::uint64_t{capacity.max_banned} * sizeof(TokenId));
  layout.upload_bytes = end;
  layout.row_states = place(end, rows * sizeof(DeviceRowState));
  layout.results = place(end, rows * sizeof(RaggedSampleResult));
  layout.top_logprobs = place(end, rows * kMaxSampleTopLogprobs * sizeof(RaggedTopLogprob));
  for (int buffer = 0; buffer < 2; ++buffer) {
    layout.keys[buffer] = place(end, row_items * sizeof(std::uint32_t));
    layout.ids[buffer] = place(end, row_items * sizeof(TokenId));
  }
  layout.sort_scratch = place(end, kSortScratchReserve);
  layout.total_bytes = aligned(end);
  return layout;
}

std::uint64_t device_sampler_bytes(std::uint32_t vocab_size, std::uint32_t max_rows,
                                   std::uint32_t max_penalty_entries, std::uint32_t max_banned) {
  return device_sampler_layout({vocab_size, max_rows, max_penalty_entries, max_banned}).total_bytes;
}

std::uint32_t check_sample_batch(const RaggedSampleBatch& batch, std::uint32_t rows,
                                 const DeviceSamplerCapacity& capacity, std::uint8_t* token_marks) {
  if (batch.spec_count > capacity.max_rows)
    throw std::invalid_argument("DeviceSampler::sample: " + std::to_string(batch.spec_count) +
                                " specs exceed the capacity of " +
                                std::to_string(capacity.max_rows));
  if (batch.penalty_size > capacity.max_penalty_entries)
    throw std::invalid_argument("DeviceSampler::sample: " + std::to_string(batch.penalty_size) +
                                " penalty entries exceed the capacity of " +
                                std::to_string(capacity.max_penalty_entries));
  if (batch.banned_size > capacity.max_banned)
    throw std::invalid_argument("DeviceSampler::sample: " + std::to_string(batch.banned_size) +
                                " banned entries exceed the capacity of " +
                                std::to_string(capacity.max_banned));
  if ((batch.spec_count > 0 && batch.specs == nullptr) ||
      (batch.penalty_size > 0 &&
       (batch.penalty_tokens == nullptr || batch.penalty_counts == nullptr)) ||
      (batch.banned_size > 0 && batch.banned == nullptr))
    throw std::invalid_argument("DeviceSampler::sample: a non-empty array of the batch is null");

  const std::uint32_t vocab = capacity.vocab_size;
  std::uint32_t drawing = 0;
  for (std::uint32_t index = 0; index < batch.spec_count; ++index) {
    const RaggedSampleSpec& spec = batch.specs[index];
    if (spec.item >= rows)
      refuse_spec(index, "item " + std::to_string(spec.item) + " outside the " +
                             std::to_string(rows) + " logits rows");
    check_values(index, spec);
    if (!inside(spec.penalty_offset, spec.penalty_count, batch.penalty_size))
      refuse_spec(index, "penalty entries [" + std::to_string(spec.penalty_offset) + ", +" +
                             std::to_string(spec.penalty_count) + ") outside the " +
                             std::to_string(batch.penalty_size) + " given");
    if (!inside(spec.banned_offset, spec.banned_count, batch.banned_size))
      refuse_spec(index, "banned entries [" + std::to_string(spec.banned_offset) + ", +" +
                             std::to_string(spec.banned_count) + ") outside the " +
                             std::to_string(batch.banned_size) + " given");

    // Distinct penalty tokens: the device writes each one's penalized logit
    // from one thread, so a repeated token would race.
    const TokenId* penalty = batch.penalty_tokens + spec.penalty_offset;
    bool repeated = false;
    for (std::uint32_t i = 0; i < spec.penalty_count; ++i) {
      if (penalty[i] < vocab) {
        repeated = repeated || token_marks[penalty[i]] != 0;
        token_marks[penalty[i]] = 1;
      }
    }
    for (std::uint32_t i = 0; i < spec.penalty_count; ++i) {
      if (penalty[i] < vocab)
        token_marks[penalty[i]] = 0;
    }
    if (repeated)
      refuse_spec(index, "a penalty token appears twice");

    // Fewer entries than tokens cannot ban them all; only a list as long as
    // the vocabulary needs counting its distinct in-vocabulary ids.
    if (spec.banned_count >= vocab) {
      const TokenId* banned = batch.banned + spec.banned_offset;
      std::uint32_t distinct = 0;
      for (std::uint32_t i = 0; i < spec.banned_count; ++i) {
        if (banned[i] < vocab && token_marks[banned[i]] == 0) {
          token_marks[banned[i]] = 1;
          ++distinct;
        }
      }
      for (std::uint32_t i = 0; i < spec.banned_count; ++i) {
        if (banned[i] < vocab)
          token_marks[banned[i]] = 0;
      }
      if (distinct == vocab)
        refuse_spec(index, "every token is banned");
    }
    drawing += spec.temperature > kGreedyTemperature ? 1 : 0;
  }
  return drawing;
}

} // namespace caflm::cuda

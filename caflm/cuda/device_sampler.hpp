#pragma once

#include <cstdint>

#include "caflm/scheduler/ragged_batch.hpp"

// Host-side part of the GPU sampler (cuda/device_sampler.cuh): its device
// memory footprint and the checks a sample batch passes before anything is
// copied to the device. Plain C++, no CUDA headers, so that the runner and
// CPU-only tests can include it.

namespace caflm::cuda {

/// What one DeviceSampler is sized for, once, at construction.
struct DeviceSamplerCapacity {
  /// Width of every logits row, 2..kMaxDeviceSamplerVocab.
  std::uint32_t vocab_size = 0;
  /// Most specs (sampled rows) one call takes.
  std::uint32_t max_rows = 0;
  /// Most entries of RaggedSampleBatch::penalty_tokens one call takes.
  std::uint32_t max_penalty_entries = 0;
  /// Most entries of RaggedSampleBatch::banned one call takes.
  std::uint32_t max_banned = 0;
};

/// Largest vocabulary the sampler takes (gemma's 262144).
inline constexpr std::uint32_t kMaxDeviceSamplerVocab = 262144;

/// Bytes reserved for the segmented sort's own scratch. Sorting double
/// buffers it owns (cub's DoubleBuffer mode), cub needs only alignment slack;
/// the constructor checks that it asks for no more.
inline constexpr std::uint64_t kSortScratchReserve = 64 * 1024;

/// A spec as the kernels read it: RaggedSampleSpec's values plus those the
/// host derives once, computed there with the Sampler's own expressions so
/// that the device rounds nothing differently. 64 bytes.
struct DeviceSampleSpec {
  std::uint32_t item;
  /// 1 when the spec draws (temperature above the greedy bound).
  std::uint32_t draws;
  /// 1.0f / temperature (draws only).
  float inverse_temperature;
  std::int32_t top_k;
  float top_p;
  float min_p;
  /// std::log(min_p) (min_p > 0 only).
  float log_min_p;
  float repetition_penalty;
  float presence_penalty;
  float frequency_penalty;
  float uniform;
  std::uint32_t top_logprobs;
  std::uint32_t penalty_offset;
  std::uint32_t penalty_count;
  std::uint32_t banned_offset;
  std::uint32_t banned_count;
};

/// What the first kernel leaves per spec for the draw. 16 bytes.
struct DeviceRowState {
  /// log(sum(exp(raw logits))), as the Sampler's log_sum_exp.
  float log_normalizer;
  /// Tokens not banned.
  std::uint32_t allowed;
  /// 1 when the row still has to draw (a drawing spec whose top penalized
  /// logit is finite); 0 when its token is already written.
  std::uint32_t needs_draw;
  std::uint32_t unused;
};

/// Byte offsets of each array in the sampler's one device allocation. The
/// upload arrays come first, in the order and at the offsets the pinned
/// upload staging uses too ([0, upload_bytes)).
struct DeviceSamplerLayout {
  std::uint64_t specs;          // DeviceSampleSpec [max_rows]
  std::uint64_t begin_offsets;  // int [max_rows] first key of each sorted segment
  std::uint64_t end_offsets;    // int [max_rows]
  std::uint64_t penalty_tokens; // TokenId [max_penalty_entries]
  std::uint64_t penalty_counts; // uint32 [max_penalty_entries]
  std::uint64_t banned;         // TokenId [max_banned]
  std::uint64_t upload_bytes;
  std::uint64_t row_states;   // DeviceRowState [max_rows]
  std::uint64_t results;      // RaggedSampleResult [max_rows]
  std::uint64_t top_logprobs; // RaggedTopLogprob [max_rows, kMaxSampleTopLogprobs]
  std::uint64_t keys[2];      // uint32 [max_rows, vocab_size] each, the sort's double buffer
  std::uint64_t ids[2];       // TokenId [max_rows, vocab_size] each
  std::uint64_t sort_scratch; // kSortScratchReserve bytes
  std::uint64_t total_bytes;
};

/// The layout of a sampler of this capacity (every array 256-byte aligned).
/// Throws as check_capacity does.
DeviceSamplerLayout device_sampler_layout(const DeviceSamplerCapacity& capacity);

/// Throws std::invalid_argument unless `capacity` is usable: a vocabulary of
/// 2..kMaxDeviceSamplerVocab, at least one row, and max_rows * vocab_size
/// within the 32-bit item count of the segmented sort.
void check_capacity(const DeviceSamplerCapacity& capacity);

/// Bytes of device memory a DeviceSampler of this capacity allocates
/// (device_sampler_layout().total_bytes; its pinned host staging is apart).
/// Throws as check_capacity does.
std::uint64_t device_sampler_bytes(std::uint32_t vocab_size, std::uint32_t max_rows,
                                   std::uint32_t max_penalty_entries, std::uint32_t max_banned);

/// Checks everything about `batch` that can be checked on the host, before
/// any copy: capacity, spec.item < rows, top_logprobs <= kMaxSampleTopLogprobs,
/// the sampling values in the ranges validate(SamplingParams) allows (NaN
/// refused), uniform in [0, 1), list ranges inside the arrays, penalty tokens
/// distinct per spec, and at least one token left allowed per spec (ids outside
/// the vocabulary are ignored, as the Sampler ignores them). Throws
/// std::invalid_argument naming the spec at fault; returns how many specs
/// draw (temperature above the greedy bound).
/// - token_marks: [capacity.vocab_size] scratch, all zero; left all zero.
std::uint32_t check_sample_batch(const RaggedSampleBatch& batch, std::uint32_t rows,
                                 const DeviceSamplerCapacity& capacity, std::uint8_t* token_marks);

} // namespace caflm::cuda

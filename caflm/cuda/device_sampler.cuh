#pragma once

#include "caflm/cuda/device_sampler.hpp"
#include "caflm/scheduler/ragged_batch.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

// Sampling on the GPU: the chosen token ids, their logprobs and the requested
// top logprobs are all that cross to the host. The semantics are those of the
// host sampler (sampling/sampler.hpp), value for value:
// - NaN logits count as -infinity, and are counted;
// - logprob and top logprobs come from the log-softmax of the raw logits;
// - then penalties (the spec's penalty tokens with their counts), then bans;
// - greedy (temperature <= 1e-6), or an infinite top penalized logit: the
//   argmax, ties to the lowest id;
// - otherwise top_k -> top_p -> min_p -> temperature -> the draw, walking the
//   kept tokens sorted by (penalized logit descending, id ascending) until
//   uniform * mass < cumulative mass, in double as the host does.
//
// Algorithm. Kernel one, one block of kSamplerThreads per spec: a pass over
// the raw row (max, NaN count, each thread's own top-logprob list, and the
// row's sort keys), a pass for the log-sum-exp, the penalties and bans written
// over the keys, then a pass for the penalized argmax. Greedy rows end there:
// no sort. Rows that draw are then sorted whole by cub's segmented radix
// sort over (descending key of the penalized logit, id): radix sort is
// stable and the ids go in ascending, so equal logits keep the lower id
// first, exactly the host's order. A whole-row sort rather than a top-k
// select because with neither top_k nor top_p the draw walks the whole
// vocabulary in sorted order, and the result of a stable sort is unique, so
// it is deterministic by construction. Kernel two, one block per drawing
// spec, cuts top_k, finds the top_p prefix and the min_p prefix and draws
// with block-wide scans in double over the sorted row.
//
// Determinism and batch invariance: one block per row with a block size fixed
// at compile time, every sum in a fixed strided order and then cub's fixed
// tree, no float atomics; the sort's output is unique. A row's result is
// therefore bitwise the same whatever else shares the call, and wherever.
// Exponentials are taken as float(exp(double(x))), which rounds as glibc's
// expf (the host's std::exp(float)) does in all but rare ties, and every
// other float operation is the Sampler's, rounded to nearest and never fused.

namespace caflm::cuda {

/// Threads of every sampler block; fixed, independent of the batch.
inline constexpr unsigned kSamplerThreads = 512;

/// A logit's sort key: ascending keys are descending logits (-0 counted as
/// +0, as float comparison does). Keys of non-NaN floats are below
/// kBannedKey.
__host__ __device__ inline std::uint32_t descending_logit_key(float logit) {
  if (logit == 0.0f)
    logit = 0.0f;
  std::uint32_t bits;
  std::memcpy(&bits, &logit, sizeof bits);
  return (bits & 0x80000000u) != 0 ? bits : (~bits & 0x7FFFFFFFu);
}

/// The logit of a key made by descending_logit_key.
__host__ __device__ inline float logit_of_key(std::uint32_t key) {
  const std::uint32_t bits = (key & 0x80000000u) != 0 ? key : (~key & 0x7FFFFFFFu);
  float logit;
  std::memcpy(&logit, &bits, sizeof logit);
  return logit;
}

/// The key of a banned token: after every logit's, -infinity's included.
inline constexpr std::uint32_t kBannedKey = 0xFFFFFFFFu;

/// Samples rows of device-resident logits. Allocates its device memory
/// (device_sampler_bytes) and pinned host staging once, at construction; a
/// call allocates nothing. Not thread-safe: one call at a time.
class DeviceSampler {
 public:
  /// Throws std::invalid_argument for an unusable capacity (check_capacity)
  /// and std::runtime_error when the device allocation fails.
  DeviceSampler(std::uint32_t vocab_size, std::uint32_t max_rows, std::uint32_t max_penalty_entries,
                std::uint32_t max_banned);
  ~DeviceSampler();
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  const DeviceSamplerCapacity& capacity() const { return capacity_; }

  /// Samples every spec of `batch` from its row of `logits`: uploads the
  /// specs and lists (pinned staging, async copies on `stream`), runs the
  /// kernels on `stream`, downloads the results and synchronizes `stream`
  /// before returning. Writes results[i] and the first results[i].top_count
  /// entries of top_logprobs row i for every spec i.
  /// Throws std::invalid_argument (check_sample_batch) before touching the
  /// device, std::runtime_error when a CUDA call fails.
  void sample(const float* logits /* [rows, vocab_size] device */, std::uint32_t rows,
              const RaggedSampleBatch& batch, RaggedSampleResult* results /* [spec_count] */,
              RaggedTopLogprob* top_logprobs /* [spec_count, kMaxSampleTopLogprobs] */,
              cudaStream_t stream);

 private:
  DeviceSamplerCapacity capacity_;
  DeviceSamplerLayout layout_;
  unsigned char* device_ = nullptr;              // [layout_.total_bytes]
  unsigned char* upload_staging_ = nullptr;      // pinned [layout_.upload_bytes]
  RaggedSampleResult* result_staging_ = nullptr; // pinned [max_rows]
  RaggedTopLogprob* top_staging_ = nullptr;      // pinned [max_rows, kMaxSampleTopLogprobs]
  std::vector<std::uint8_t> token_marks_;        // [vocab_size] check_sample_batch's scratch
  std::size_t sort_scratch_bytes_ = 0;
};

} // namespace caflm::cuda

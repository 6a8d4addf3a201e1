#include "caflm/cuda/device_sampler.cuh"

#include "caflm/cuda/cuda_check.hpp"

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#include <cub/util_type.cuh>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace caflm::cuda {

namespace {

constexpr std::uint32_t kNoIndex = 0xFFFFFFFFu;
/// Above every packed (key, id) of a token.
constexpr std::uint64_t kNoCandidate = ~std::uint64_t{0};

using ReduceU64 = cub::BlockReduce<std::uint64_t, kSamplerThreads>;
using ReduceU32 = cub::BlockReduce<std::uint32_t, kSamplerThreads>;
using ReduceFloat = cub::BlockReduce<float, kSamplerThreads>;
using ReduceDouble = cub::BlockReduce<double, kSamplerThreads>;
using ScanDouble = cub::BlockScan<double, kSamplerThreads>;

/// Shared memory of a sampler block: cub's scratch, reused by one collective
/// at a time, and the slots that broadcast a reduction to every thread.
struct BlockShared {
  union {
    ReduceU64::TempStorage u64;
    ReduceU32::TempStorage u32;
    ReduceFloat::TempStorage f;
    ReduceDouble::TempStorage d;
    ScanDouble::TempStorage scan;
  } temp;
  std::uint64_t u64;
  std::uint32_t u32;
  float f;
  double d;
};

struct MinimumOp {
  template <typename T>
  __device__ T operator()(const T& a, const T& b) const {
    return b < a ? b : a;
  }
};

struct MaximumOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Block-wide reductions whose result every thread receives. Each starts with
// a barrier (the scratch and the slot may still be read by the previous one)
// and ends with one (the slot is written). cub's block reductions combine the
// threads' values in a fixed tree, so each result depends on the values
// alone, never on timing.

__device__ std::uint64_t block_min(std::uint64_t value, BlockShared& shared) {
  __syncthreads();
  const std::uint64_t result = ReduceU64(shared.temp.u64).Reduce(value, MinimumOp{});
  if (threadIdx.x == 0)
    shared.u64 = result;
  __syncthreads();
  return shared.u64;
}

__device__ std::uint32_t block_min(std::uint32_t value, BlockShared& shared) {
  __syncthreads();
  const std::uint32_t result = ReduceU32(shared.temp.u32).Reduce(value, MinimumOp{});
  if (threadIdx.x == 0)
    shared.u32 = result;
  __syncthreads();
  return shared.u32;
}

__device__ std::uint32_t block_sum(std::uint32_t value, BlockShared& shared) {
  __syncthreads();
  const std::uint32_t result = ReduceU32(shared.temp.u32).Sum(value);
  if (threadIdx.x == 0)
    shared.u32 = result;
  __syncthreads();
  return shared.u32;
}

__device__ float block_max(float value, BlockShared& shared) {
  __syncthreads();
  const float result = ReduceFloat(shared.temp.f).Reduce(value, MaximumOp{});
  if (threadIdx.x == 0)
    shared.f = result;
  __syncthreads();
  return shared.f;
}

__device__ double block_sum(double value, BlockShared& shared) {
  __syncthreads();
  const double result = ReduceDouble(shared.temp.d).Sum(value);
  if (threadIdx.x == 0)
    shared.d = result;
  __syncthreads();
  return shared.d;
}

/// The first index i < count at which the running sum of weight(0..i),
/// taken in chunks of kSamplerThreads (a block scan inside a chunk, chunk
/// totals added in order), satisfies `crossed`; kNoIndex when none does.
template <typename Weight, typename Crossed>
__device__ std::uint32_t first_crossing(std::uint32_t count, Weight weight, Crossed crossed,
                                        BlockShared& shared) {
  double preceding = 0.0;
  for (std::uint32_t base = 0; base < count; base += kSamplerThreads) {
    const std::uint32_t i = base + threadIdx.x;
    const double w = i < count ? weight(i) : 0.0;
    double inclusive = 0.0;
    double chunk_total = 0.0;
    __syncthreads();
    ScanDouble(shared.temp.scan).InclusiveSum(w, inclusive, chunk_total);
    const std::uint32_t candidate = i < count && crossed(preceding + inclusive) ? i : kNoIndex;
    const std::uint32_t first = block_min(candidate, shared);
    if (first != kNoIndex)
      return first;
    preceding += chunk_total;
  }
  return kNoIndex;
}

__device__ float negative_infinity() {
  return __int_as_float(static_cast<int>(0xff800000u));
}

/// NaN counts as -infinity, as in the Sampler.
__device__ float sanitized(float logit) {
  return isnan(logit) ? negative_infinity() : logit;
}

/// expf as the host computes it: glibc's expf is evaluated in double and
/// rounded once, so rounding CUDA's double exp (1 ulp in double) to float
/// gives the same float except in the rarest ties, where CUDA's own expf
/// (2 ulp in float) would differ far more often.
__device__ float exp_as_host(float x) {
  return static_cast<float>(exp(static_cast<double>(x)));
}

/// The Sampler's penalized(): llama.cpp's repetition penalty, then frequency
/// times count and presence subtracted, each operation rounded on its own
/// (no fused multiply-add, which the host's ISO C++ build does not form).
__device__ float penalized(float logit, std::uint32_t count, const DeviceSampleSpec& spec) {
  logit = logit > 0.0f ? __fdiv_rn(logit, spec.repetition_penalty)
                       : __fmul_rn(logit, spec.repetition_penalty);
  return __fsub_rn(__fsub_rn(logit, __fmul_rn(static_cast<float>(count), spec.frequency_penalty)),
                   spec.presence_penalty);
}

/// A token's (key, id) as one number: the smaller, the more likely, ties to
/// the lower id, the Sampler's order.
__device__ std::uint64_t packed(std::uint32_t key, std::uint32_t id) {
  return (static_cast<std::uint64_t>(key) << 32) | id;
}

/// One block per spec. Computes the raw log-softmax's normalizer, NaN count
/// and top logprobs, writes the row's sort keys (penalized, bans marked) and
/// ids, and resolves every row that does not draw with its argmax.
__global__ void __launch_bounds__(kSamplerThreads)
    sample_rows_kernel(const float* __restrict__ logits /* [rows, vocab] */, std::uint32_t vocab,
                       const DeviceSampleSpec* __restrict__ specs /* [spec_count] */,
                       const TokenId* __restrict__ penalty_tokens /* [penalty_size] */,
                       const std::uint32_t* __restrict__ penalty_counts /* [penalty_size] */,
                       const TokenId* __restrict__ banned /* [banned_size] */,
                       std::uint32_t* __restrict__ keys /* [spec_count, vocab] */,
                       TokenId* __restrict__ ids /* [spec_count, vocab] */,
                       DeviceRowState* __restrict__ states /* [spec_count] */,
                       RaggedSampleResult* __restrict__ results /* [spec_count] */,
                       RaggedTopLogprob* __restrict__ top_logprobs
                       /* [spec_count, kMaxSampleTopLogprobs] */) {
  __shared__ BlockShared shared;
  const std::uint32_t index = blockIdx.x;
  const DeviceSampleSpec spec = specs[index];
  const float* row = logits + static_cast<std::size_t>(spec.item) * vocab;
  std::uint32_t* row_keys = keys + static_cast<std::size_t>(index) * vocab;
  TokenId* row_ids = ids + static_cast<std::size_t>(index) * vocab;
  const std::uint32_t top_wanted = spec.top_logprobs < vocab ? spec.top_logprobs : vocab;

  // Pass 1 over the raw row. Each thread keeps its own sorted top list of
  // packed (raw key, id); its ids arrive ascending, so the list is exact.
  float thread_max = negative_infinity();
  std::uint32_t thread_nans = 0;
  std::uint64_t top[kMaxSampleTopLogprobs];
  std::uint32_t top_filled = 0;
  for (std::uint32_t id = threadIdx.x; id < vocab; id += kSamplerThreads) {
    const float raw = row[id];
    thread_nans += isnan(raw) ? 1u : 0u;
    const float logit = sanitized(raw);
    thread_max = fmaxf(thread_max, logit);
    const std::uint32_t key = descending_logit_key(logit);
    row_keys[id] = key;
    if (spec.draws != 0)
      row_ids[id] = id;
    if (top_wanted > 0) {
      const std::uint64_t candidate = packed(key, id);
      if (top_filled < top_wanted || candidate < top[top_wanted - 1]) {
        std::uint32_t position = top_filled < top_wanted ? top_filled++ : top_wanted - 1;
        while (position > 0 && candidate < top[position - 1]) {
          top[position] = top[position - 1];
          --position;
        }
        top[position] = candidate;
      }
    }
  }
  const float max_logit = block_max(thread_max, shared);
  const std::uint32_t nan_logits = block_sum(thread_nans, shared);

  // Pass 2: the log-sum-exp, in double as the Sampler sums it.
  double thread_sum = 0.0;
  for (std::uint32_t id = threadIdx.x; id < vocab; id += kSamplerThreads)
    thread_sum += exp_as_host(__fsub_rn(sanitized(row[id]), max_logit));
  const double sum = block_sum(thread_sum, shared);
  const float log_normalizer = __fadd_rn(max_logit, static_cast<float>(log(sum)));

  // Penalties, then bans, over the keys pass 1 wrote (block_sum's barriers
  // order them). Penalty tokens are distinct per spec (checked on the host),
  // so no two threads write one key.
  for (std::uint32_t j = threadIdx.x; j < spec.penalty_count; j += kSamplerThreads) {
    const TokenId token = penalty_tokens[spec.penalty_offset + j];
    const std::uint32_t count = penalty_counts[spec.penalty_offset + j];
    if (token < vocab && count > 0)
      row_keys[token] = descending_logit_key(penalized(sanitized(row[token]), count, spec));
  }
  __syncthreads();
  for (std::uint32_t j = threadIdx.x; j < spec.banned_count; j += kSamplerThreads) {
    const TokenId token = banned[spec.banned_offset + j];
    if (token < vocab)
      row_keys[token] = kBannedKey;
  }
  __syncthreads();

  // Pass 3: the penalized argmax and the allowed count.
  std::uint64_t thread_best = kNoCandidate;
  std::uint32_t thread_allowed = 0;
  for (std::uint32_t id = threadIdx.x; id < vocab; id += kSamplerThreads) {
    const std::uint32_t key = row_keys[id];
    if (key != kBannedKey) {
      ++thread_allowed;
      const std::uint64_t candidate = packed(key, id);
      thread_best = candidate < thread_best ? candidate : thread_best;
    }
  }
  const std::uint64_t best = block_min(thread_best, shared);
  const std::uint32_t allowed = block_sum(thread_allowed, shared);

  // The top logprobs: the block's list is the first top_wanted of the union
  // of the threads' lists, taken one head at a time (packed values are
  // unique, so exactly one thread owns each winner).
  RaggedTopLogprob* row_top =
      top_logprobs + static_cast<std::size_t>(index) * kMaxSampleTopLogprobs;
  std::uint32_t consumed = 0;
  for (std::uint32_t rank = 0; rank < top_wanted; ++rank) {
    const std::uint64_t head = consumed < top_filled ? top[consumed] : kNoCandidate;
    const std::uint64_t winner = block_min(head, shared);
    if (head == winner)
      ++consumed;
    if (threadIdx.x == 0) {
      const float logit = logit_of_key(static_cast<std::uint32_t>(winner >> 32));
      row_top[rank] = {static_cast<TokenId>(winner), __fsub_rn(logit, log_normalizer)};
    }
  }

  if (threadIdx.x == 0) {
    const float best_logit = logit_of_key(static_cast<std::uint32_t>(best >> 32));
    // An infinite top logit leaves no finite distribution to draw from.
    const bool needs_draw = spec.draws != 0 && allowed > 0 && isfinite(best_logit);
    states[index] = {log_normalizer, allowed, needs_draw ? 1u : 0u, 0u};
    RaggedSampleResult& result = results[index];
    result.nan_logits = nan_logits;
    result.top_count = top_wanted;
    if (!needs_draw) {
      // allowed == 0 is refused on the host; token 0 only keeps the read in
      // bounds should it ever happen.
      const TokenId token = allowed > 0 ? static_cast<TokenId>(best) : 0;
      result.token = token;
      result.logprob = __fsub_rn(sanitized(row[token]), log_normalizer);
    }
  }
}

/// One block per spec; only those whose state says so draw. Their keys and
/// ids are sorted: most likely first, ties by lower id.
__global__ void __launch_bounds__(kSamplerThreads)
    draw_rows_kernel(const float* __restrict__ logits /* [rows, vocab] */, std::uint32_t vocab,
                     const DeviceSampleSpec* __restrict__ specs /* [spec_count] */,
                     const std::uint32_t* __restrict__ sorted_keys /* [spec_count, vocab] */,
                     const TokenId* __restrict__ sorted_ids /* [spec_count, vocab] */,
                     const DeviceRowState* __restrict__ states /* [spec_count] */,
                     RaggedSampleResult* __restrict__ results /* [spec_count] */) {
  __shared__ BlockShared shared;
  const std::uint32_t index = blockIdx.x;
  const DeviceRowState state = states[index];
  if (state.needs_draw == 0)
    return;
  const DeviceSampleSpec spec = specs[index];
  const std::uint32_t* keys = sorted_keys + static_cast<std::size_t>(index) * vocab;
  const TokenId* row_ids = sorted_ids + static_cast<std::size_t>(index) * vocab;
  const float max_logit = logit_of_key(keys[0]);

  std::uint32_t count = state.allowed;
  if (spec.top_k > 0 && static_cast<std::uint32_t>(spec.top_k) < count)
    count = static_cast<std::uint32_t>(spec.top_k);

  if (spec.top_p < 1.0f) {
    // The nucleus sees probabilities at temperature 1.
    const auto weight = [&](std::uint32_t i) {
      return static_cast<double>(exp_as_host(__fsub_rn(logit_of_key(keys[i]), max_logit)));
    };
    double thread_mass = 0.0;
    for (std::uint32_t i = threadIdx.x; i < count; i += kSamplerThreads)
      thread_mass += weight(i);
    const double nucleus_mass = static_cast<double>(spec.top_p) * block_sum(thread_mass, shared);
    const std::uint32_t last = first_crossing(
        count, weight, [nucleus_mass](double cumulative) { return cumulative >= nucleus_mass; },
        shared);
    if (last != kNoIndex)
      count = last + 1;
  }

  if (spec.min_p > 0.0f) {
    // Sorted, so the tokens kept are a prefix: count them.
    const float min_logit = __fadd_rn(max_logit, spec.log_min_p);
    std::uint32_t thread_kept = 0;
    for (std::uint32_t i = threadIdx.x; i < count; i += kSamplerThreads)
      thread_kept += logit_of_key(keys[i]) >= min_logit ? 1u : 0u;
    // The top token is always kept (min_p <= 1); the guard only keeps
    // count - 1 below in bounds.
    const std::uint32_t kept = block_sum(thread_kept, shared);
    count = kept > 0 ? kept : 1;
  }

  const auto tempered = [&](std::uint32_t i) {
    return static_cast<double>(exp_as_host(
        __fmul_rn(__fsub_rn(logit_of_key(keys[i]), max_logit), spec.inverse_temperature)));
  };
  double thread_mass = 0.0;
  for (std::uint32_t i = threadIdx.x; i < count; i += kSamplerThreads)
    thread_mass += tempered(i);
  const double target = static_cast<double>(spec.uniform) * block_sum(thread_mass, shared);
  const std::uint32_t chosen = first_crossing(
      count, tempered, [target](double cumulative) { return target < cumulative; }, shared);

  if (threadIdx.x == 0) {
    // Rounding can leave the target just past the last cumulative sum: the
    // least likely kept token, as on the host.
    const TokenId token = row_ids[chosen != kNoIndex ? chosen : count - 1];
    const float* row = logits + static_cast<std::size_t>(spec.item) * vocab;
    results[index].token = token;
    results[index].logprob = __fsub_rn(sanitized(row[token]), state.log_normalizer);
  }
}

/// The sort over the drawing rows' segments. With `scratch` null, only
/// computes the scratch bytes into `scratch_bytes`.
cudaError_t sort_segments(void* scratch, std::size_t& scratch_bytes,
                          cub::DoubleBuffer<std::uint32_t>& keys, cub::DoubleBuffer<TokenId>& ids,
                          std::uint32_t items, std::uint32_t segments, const int* begin_offsets,
                          const int* end_offsets, cudaStream_t stream) {
  return cub::DeviceSegmentedRadixSort::SortPairs(
      scratch, scratch_bytes, keys, ids, static_cast<int>(items), static_cast<int>(segments),
      begin_offsets, end_offsets, 0, static_cast<int>(8 * sizeof(std::uint32_t)), stream);
}

} // namespace

DeviceSampler::DeviceSampler(std::uint32_t vocab_size, std::uint32_t max_rows,
                             std::uint32_t max_penalty_entries, std::uint32_t max_banned)
  : capacity_{vocab_size, max_rows, max_penalty_entries, max_banned}
  , layout_(device_sampler_layout(capacity_))
  , token_marks_(vocab_size, 0) {
  cub::DoubleBuffer<std::uint32_t> keys(nullptr, nullptr);
  cub::DoubleBuffer<TokenId> ids(nullptr, nullptr);
  CAFLM_CUDA_CHECK(sort_segments(nullptr, sort_scratch_bytes_, keys, ids, max_rows * vocab_size,
                                 max_rows, nullptr, nullptr, nullptr));
  if (sort_scratch_bytes_ > kSortScratchReserve)
    throw std::runtime_error("DeviceSampler: the segmented sort asks for " +
                             std::to_string(sort_scratch_bytes_) + " bytes of scratch, over the " +
                             std::to_string(kSortScratchReserve) + " reserved");
  try {
    CAFLM_CUDA_CHECK(cudaMalloc(&device_, layout_.total_bytes));
    CAFLM_CUDA_CHECK(
        cudaMallocHost(&upload_staging_, std::max<std::uint64_t>(layout_.upload_bytes, 1)));
    CAFLM_CUDA_CHECK(cudaMallocHost(&result_staging_, max_rows * sizeof(RaggedSampleResult)));
    CAFLM_CUDA_CHECK(cudaMallocHost(&top_staging_, std::size_t{max_rows} * kMaxSampleTopLogprobs *
                                                       sizeof(RaggedTopLogprob)));
  } catch (...) {
    cudaFreeHost(top_staging_);
    cudaFreeHost(result_staging_);
    cudaFreeHost(upload_staging_);
    cudaFree(device_);
    throw;
  }
}

DeviceSampler::~DeviceSampler() {
  // Errors cannot be reported from a destructor; the frees are best effort.
  cudaFreeHost(top_staging_);
  cudaFreeHost(result_staging_);
  cudaFreeHost(upload_staging_);
  cudaFree(device_);
}

void DeviceSampler::sample(const float* logits, std::uint32_t rows, const RaggedSampleBatch& batch,
                           RaggedSampleResult* results, RaggedTopLogprob* top_logprobs,
                           cudaStream_t stream) {
  const std::uint32_t drawing = check_sample_batch(batch, rows, capacity_, token_marks_.data());
  const std::uint32_t spec_count = batch.spec_count;
  if (spec_count == 0)
    return;
  if (logits == nullptr || results == nullptr || top_logprobs == nullptr)
    throw std::invalid_argument("DeviceSampler::sample: null logits, results or top_logprobs");
  const std::uint32_t vocab = capacity_.vocab_size;

  // Stage the specs, with the values the host derives, and the lists. The
  // previous call synchronized its stream, so the staging is free.
  auto* specs = reinterpret_cast<DeviceSampleSpec*>(upload_staging_ + layout_.specs);
  auto* begin_offsets = reinterpret_cast<int*>(upload_staging_ + layout_.begin_offsets);
  auto* end_offsets = reinterpret_cast<int*>(upload_staging_ + layout_.end_offsets);
  std::uint32_t segments = 0;
  for (std::uint32_t i = 0; i < spec_count; ++i) {
    const RaggedSampleSpec& in = batch.specs[i];
    const bool draws = in.temperature > 1e-6f; // Sampler::kGreedyTemperature
    DeviceSampleSpec& out = specs[i];
    out.item = in.item;
    out.draws = draws ? 1u : 0u;
    out.inverse_temperature = draws ? 1.0f / in.temperature : 0.0f;
    out.top_k = in.top_k;
    out.top_p = in.top_p;
    out.min_p = in.min_p;
    out.log_min_p = in.min_p > 0.0f ? std::log(in.min_p) : 0.0f;
    out.repetition_penalty = in.repetition_penalty;
    out.presence_penalty = in.presence_penalty;
    out.frequency_penalty = in.frequency_penalty;
    out.uniform = in.uniform;
    out.top_logprobs = in.top_logprobs;
    out.penalty_offset = in.penalty_offset;
    out.penalty_count = in.penalty_count;
    out.banned_offset = in.banned_offset;
    out.banned_count = in.banned_count;
    if (draws) {
      // Segment i of the key rows; max_rows * vocab fits in int (check_capacity).
      begin_offsets[segments] = static_cast<int>(i * vocab);
      end_offsets[segments] = static_cast<int>((i + 1) * vocab);
      ++segments;
    }
  }
  if (segments != drawing)
    throw std::logic_error("DeviceSampler::sample: drawing specs miscounted");
  if (batch.penalty_size > 0) {
    std::memcpy(upload_staging_ + layout_.penalty_tokens, batch.penalty_tokens,
                batch.penalty_size * sizeof(TokenId));
    std::memcpy(upload_staging_ + layout_.penalty_counts, batch.penalty_counts,
                batch.penalty_size * sizeof(std::uint32_t));
  }
  if (batch.banned_size > 0)
    std::memcpy(upload_staging_ + layout_.banned, batch.banned,
                batch.banned_size * sizeof(TokenId));

  const auto upload = [&](std::uint64_t offset, std::size_t bytes) {
    if (bytes > 0)
      CAFLM_CUDA_CHECK(cudaMemcpyAsync(device_ + offset, upload_staging_ + offset, bytes,
                                       cudaMemcpyHostToDevice, stream));
  };
  upload(layout_.specs, spec_count * sizeof(DeviceSampleSpec));
  upload(layout_.begin_offsets, segments * sizeof(int));
  upload(layout_.end_offsets, segments * sizeof(int));
  upload(layout_.penalty_tokens, batch.penalty_size * sizeof(TokenId));
  upload(layout_.penalty_counts, batch.penalty_size * sizeof(std::uint32_t));
  upload(layout_.banned, batch.banned_size * sizeof(TokenId));

  const auto* device_specs = reinterpret_cast<const DeviceSampleSpec*>(device_ + layout_.specs);
  auto* states = reinterpret_cast<DeviceRowState*>(device_ + layout_.row_states);
  auto* device_results = reinterpret_cast<RaggedSampleResult*>(device_ + layout_.results);
  auto* device_top = reinterpret_cast<RaggedTopLogprob*>(device_ + layout_.top_logprobs);
  auto* keys0 = reinterpret_cast<std::uint32_t*>(device_ + layout_.keys[0]);
  auto* keys1 = reinterpret_cast<std::uint32_t*>(device_ + layout_.keys[1]);
  auto* ids0 = reinterpret_cast<TokenId*>(device_ + layout_.ids[0]);
  auto* ids1 = reinterpret_cast<TokenId*>(device_ + layout_.ids[1]);

  sample_rows_kernel<<<spec_count, kSamplerThreads, 0, stream>>>(
      logits, vocab, device_specs,
      reinterpret_cast<const TokenId*>(device_ + layout_.penalty_tokens),
      reinterpret_cast<const std::uint32_t*>(device_ + layout_.penalty_counts),
      reinterpret_cast<const TokenId*>(device_ + layout_.banned), keys0, ids0, states,
      device_results, device_top);
  CAFLM_CUDA_CHECK_LAUNCH(sample_rows_kernel);

  if (segments > 0) {
    cub::DoubleBuffer<std::uint32_t> keys(keys0, keys1);
    cub::DoubleBuffer<TokenId> ids(ids0, ids1);
    std::size_t scratch_bytes = kSortScratchReserve;
    CAFLM_CUDA_CHECK(
        sort_segments(device_ + layout_.sort_scratch, scratch_bytes, keys, ids, spec_count * vocab,
                      segments, reinterpret_cast<const int*>(device_ + layout_.begin_offsets),
                      reinterpret_cast<const int*>(device_ + layout_.end_offsets), stream));
    draw_rows_kernel<<<spec_count, kSamplerThreads, 0, stream>>>(
        logits, vocab, device_specs, keys.Current(), ids.Current(), states, device_results);
    CAFLM_CUDA_CHECK_LAUNCH(draw_rows_kernel);
  }

  CAFLM_CUDA_CHECK(cudaMemcpyAsync(result_staging_, device_results,
                                   spec_count * sizeof(RaggedSampleResult), cudaMemcpyDeviceToHost,
                                   stream));
  CAFLM_CUDA_CHECK(
      cudaMemcpyAsync(top_staging_, device_top,
                      std::size_t{spec_count} * kMaxSampleTopLogprobs * sizeof(RaggedTopLogprob),
                      cudaMemcpyDeviceToHost, stream));
  CAFLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::memcpy(results, result_staging_, spec_count * sizeof(RaggedSampleResult));
  for (std::uint32_t i = 0; i < spec_count; ++i) {
    const std::size_t row = std::size_t{i} * kMaxSampleTopLogprobs;
    std::copy(top_staging_ + row, top_staging_ + row + result_staging_[i].top_count,
              top_logprobs + row);
  }
}

} // namespace caflm::cuda

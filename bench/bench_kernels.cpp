// Throughput of the CPU kernels of caflm/cpu/cpu_matmul.hpp, cpu_kernels.hpp and
// paged_attention.hpp, with OpenBLAS's cblas_sgemm on the same shapes for comparison (caflm does
// not use it: see caflm/cpu/cpu_matmul.hpp). Run OpenBLAS and caflm benchmarks in separate
// invocations (--benchmark_filter) so one library's idle spinning threads do not slow the other.
#include "caflm/cpu/cpu_kernels.hpp"
#include "caflm/cpu/cpu_matmul.hpp"
#include "caflm/cpu/paged_attention.hpp"
#include "caflm/gguf/quantize.hpp"

#include <benchmark/benchmark.h>
#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace caflm;

namespace {

std::vector<float> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) {
    x = uniform(rng);
  }
  return v;
}

// Random weights [rows, cols] encoded as `type` (quantized types through
// ggml's reference quantizers).
std::vector<uint8_t> random_weight(TensorType type, size_t rows, size_t cols) {
  const std::vector<float> values = random_vector(rows * cols, 1);
  const size_t row_bytes = tensor_row_bytes(type, cols);
  std::vector<uint8_t> bytes(rows * row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    quantize_row_into(type, values.data() + r * cols, cols, bytes.data() + r * row_bytes);
  }
  return bytes;
}

void set_flop_counters(benchmark::State& state, size_t m, size_t n, size_t k, size_t w_bytes) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] =
      benchmark::Counter(w_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: {M, K, N}. Runs the kernels of kIsa on one weight matrix, or on
// copies of it filling at least `pool_bytes`, a call on each in turn.
template <TensorType kType, MatmulIsa kIsa>
void run_linear(benchmark::State& state, size_t pool_bytes) {
  const auto m = static_cast<size_t>(state.range(0));
  const auto k = static_cast<size_t>(state.range(1));
  const auto n = static_cast<size_t>(state.range(2));
  if (!matmul_isa_supported(kIsa)) {
    state.SkipWithError("this CPU cannot run these kernels");
    return;
  }
  const std::vector<uint8_t> w = random_weight(kType, n, k);
  const size_t copies = std::max<size_t>(1, (pool_bytes + w.size() - 1) / w.size());
  // Each copy on a 64-byte boundary, as the tensors of a GGUF file whose
  // data starts on one (general.alignment is 32: half of all files).
  const size_t stride = (w.size() + 63) / 64 * 64;
  std::vector<uint8_t> storage(copies * stride + 64);
  uint8_t* pool = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  for (size_t c = 0; c < copies; ++c)
    std::copy(w.begin(), w.end(), pool + c * stride);
  const std::vector<float> x = random_vector(m * k, 2);
  std::vector<float> y(m * n);
  size_t copy = 0;
  for (auto _ : state) {
    const WeightView view{kType, pool + copy * stride, n, k};
    linear(view, x.data(), m, y.data(), nullptr, kIsa);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    copy = (copy + 1) % copies;
  }
  set_flop_counters(state, m, n, k, w.size());
}

// The weights stay in the caches between calls.
template <TensorType kType, MatmulIsa kIsa = MatmulIsa::Avx2>
void BM_linear(benchmark::State& state) {
  run_linear<kType, kIsa>(state, 0);
}

// BM_linear with the weights out of every cache, as in a model's decode
// step, where each matrix is read once per step from memory: the calls cycle
// through copies of the weights that together outsize any last-level cache.
template <TensorType kType, MatmulIsa kIsa = MatmulIsa::Avx2>
void BM_linear_cold(benchmark::State& state) {
  run_linear<kType, kIsa>(state, size_t{512} << 20);
}

void BM_openblas_sgemm(benchmark::State& state) {
  const auto m = static_cast<int>(state.range(0));
  const auto k = static_cast<int>(state.range(1));
  const auto n = static_cast<int>(state.range(2));
  const std::vector<float> w = random_vector(static_cast<size_t>(n) * k, 1);
  const std::vector<float> x = random_vector(static_cast<size_t>(m) * k, 2);
  std::vector<float> y(static_cast<size_t>(m) * n);
  state.SetLabel(openblas_get_corename());
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, x.data(), k, w.data(), k,
                0.0f, y.data(), n);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_flop_counters(state, m, n, k, w.size() * sizeof(float));
}

void linear_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 4, 32, 128}) {
    b->Args({m, 768, 768});
    b->Args({m, 768, 2048});
  }
  // Decode on a 7B-sized projection, where the weights come from memory.
  b->Args({1, 4096, 4096});
  b->ArgNames({"M", "K", "N"})->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_linear, TensorType::F32, MatmulIsa::Avx2)->Apply(linear_shapes);
BENCHMARK_TEMPLATE(BM_linear, TensorType::F32, MatmulIsa::Avx512)->Apply(linear_shapes);
BENCHMARK_TEMPLATE(BM_linear, TensorType::F16, MatmulIsa::Avx2)->Apply(linear_shapes);
BENCHMARK_TEMPLATE(BM_linear, TensorType::F16, MatmulIsa::Avx512)->Apply(linear_shapes);
BENCHMARK_TEMPLATE(BM_linear, TensorType::BF16, MatmulIsa::Avx2)->Apply(linear_shapes);
BENCHMARK_TEMPLATE(BM_linear, TensorType::BF16, MatmulIsa::Avx512)->Apply(linear_shapes);
BENCHMARK(BM_openblas_sgemm)->Apply(linear_shapes);

void cold_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 32}) {
    b->Args({m, 768, 2048});
    b->Args({m, 2048, 768});
  }
  // One sequence's decode through a TinyLlama-sized FFN (gate or up, then
  // down), whose weights no cache holds.
  b->Args({1, 2048, 5632});
  b->Args({1, 5632, 2048});
  // Qwen2.5-0.5B's FFN (gate or up, then down) and attention output.
  b->Args({1, 896, 4864});
  b->Args({1, 4864, 896});
  b->Args({1, 896, 896});
  b->ArgNames({"M", "K", "N"})->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::F32, MatmulIsa::Avx2)->Apply(cold_shapes);
BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::F32, MatmulIsa::Avx512)->Apply(cold_shapes);
BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::F16, MatmulIsa::Avx2)->Apply(cold_shapes);
BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::F16, MatmulIsa::Avx512)->Apply(cold_shapes);

// The projections of small models (hidden 576, FFN 1536: SmolLM-135M's; the
// FFN down projection of Qwen2.5-0.5B, 4864 to 896) at decode (M = 1),
// batched decode (M = 16, 32, 64: where the AMX kernels start to pay) and
// prefill (M = 128) batch sizes, for K a whole number of the type's blocks
// (576 is not one of 256).
template <TensorType kType>
void quantized_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 16, 32, 64, 128}) {
    if (576 % tensor_block_size(kType) == 0) {
      b->Args({m, 576, 1536});
    }
    b->Args({m, 1536, 576});
    b->Args({m, 2048, 2048});
    b->Args({m, 4864, 896});
  }
  b->ArgNames({"M", "K", "N"})->UseRealTime();
}

#define CAFLM_QUANTIZED_BENCHMARKS(TYPE)                                                           \
  BENCHMARK_TEMPLATE(BM_linear, TensorType::TYPE, MatmulIsa::Avx2)                                 \
      ->Apply(quantized_shapes<TensorType::TYPE>);                                                 \
  BENCHMARK_TEMPLATE(BM_linear, TensorType::TYPE, MatmulIsa::Avx512)                               \
      ->Apply(quantized_shapes<TensorType::TYPE>);                                                 \
  BENCHMARK_TEMPLATE(BM_linear, TensorType::TYPE, MatmulIsa::Amx)                                  \
      ->Apply(quantized_shapes<TensorType::TYPE>)

CAFLM_QUANTIZED_BENCHMARKS(Q4_0);
CAFLM_QUANTIZED_BENCHMARKS(Q4_1);
CAFLM_QUANTIZED_BENCHMARKS(Q5_0);
CAFLM_QUANTIZED_BENCHMARKS(Q5_1);
CAFLM_QUANTIZED_BENCHMARKS(Q8_0);
CAFLM_QUANTIZED_BENCHMARKS(Q2_K);
CAFLM_QUANTIZED_BENCHMARKS(Q3_K);
CAFLM_QUANTIZED_BENCHMARKS(Q4_K);
CAFLM_QUANTIZED_BENCHMARKS(Q5_K);
CAFLM_QUANTIZED_BENCHMARKS(Q6_K);

// One sequence's decode (M = 1) through TinyLlama-1.1B's FFN projections
// (2048 to 5632 and back), the weights streamed from memory as in a model's
// decode step: the in-place kernels against the machine's read bandwidth.
void quantized_cold_shapes(benchmark::internal::Benchmark* b) {
  b->Args({1, 2048, 5632});
  b->Args({1, 5632, 2048});
  b->ArgNames({"M", "K", "N"})->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::Q8_0, MatmulIsa::Avx2)->Apply(quantized_cold_shapes);
BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::Q8_0, MatmulIsa::Avx512)
    ->Apply(quantized_cold_shapes);
BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::Q4_K, MatmulIsa::Avx2)->Apply(quantized_cold_shapes);
BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::Q4_K, MatmulIsa::Avx512)
    ->Apply(quantized_cold_shapes);
BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::Q6_K, MatmulIsa::Avx2)->Apply(quantized_cold_shapes);
BENCHMARK_TEMPLATE(BM_linear_cold, TensorType::Q6_K, MatmulIsa::Avx512)
    ->Apply(quantized_cold_shapes);

// Args: {M, D}.
void BM_rms_norm(benchmark::State& state) {
  const auto m = static_cast<size_t>(state.range(0));
  const auto d = static_cast<size_t>(state.range(1));
  const std::vector<float> x = random_vector(m * d, 1);
  const std::vector<float> weight = random_vector(d, 2);
  std::vector<float> out(m * d);
  for (auto _ : state) {
    rms_norm(x.data(), m, d, weight.data(), 1e-5f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * m * d));
}
BENCHMARK(BM_rms_norm)->Args({1, 4096})->Args({128, 4096})->ArgNames({"M", "D"})->UseRealTime();

// Args: {M, F}.
void BM_silu_mul(benchmark::State& state) {
  const auto m = static_cast<size_t>(state.range(0));
  const auto f = static_cast<size_t>(state.range(1));
  const std::vector<float> gate = random_vector(m * f, 1);
  const std::vector<float> up = random_vector(m * f, 2);
  std::vector<float> out(m * f);
  for (auto _ : state) {
    silu_mul(gate.data(), up.data(), m, f, out.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * m * f));
}
BENCHMARK(BM_silu_mul)->Args({1, 11008})->Args({128, 11008})->ArgNames({"M", "F"})->UseRealTime();

// Args: {M, n_heads}, head_dim 128.
void BM_rope(benchmark::State& state) {
  const auto m = static_cast<size_t>(state.range(0));
  const auto heads = static_cast<size_t>(state.range(1));
  std::vector<float> x = random_vector(m * heads * 128, 1);
  std::vector<int32_t> positions(m);
  for (size_t i = 0; i < m; ++i) {
    positions[i] = static_cast<int32_t>(i);
  }
  const RopeConfig config{RopeMode::NeoX, 128, 10000.0f};
  for (auto _ : state) {
    rope(x.data(), m, heads, positions.data(), config);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * m * heads * 128));
}
BENCHMARK(BM_rope)->Args({1, 32})->Args({128, 32})->ArgNames({"M", "heads"})->UseRealTime();

// Args: {n}.
void BM_softmax(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  const std::vector<float> input = random_vector(n, 1);
  std::vector<float> x(n);
  for (auto _ : state) {
    std::memcpy(x.data(), input.data(), n * sizeof(float));
    softmax_f32(x.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * n));
}
BENCHMARK(BM_softmax)->Arg(2048)->Arg(32000);

} // namespace

// Args: {F16 (1) or F32 (0) cache, context, query heads per KV head}; one
// token, 8 KV heads of 128, blocks of 16 scattered over a cache of 8 times
// the blocks needed. The KV bytes read per second are what attention at
// many sequences is bound by.
template <KvCacheType kType>
void BM_paged_attention(benchmark::State& state) {
  const auto context = static_cast<uint32_t>(state.range(0));
  const auto group = static_cast<uint32_t>(state.range(1));
  constexpr uint32_t kKvHeads = 8, kHeadDim = 128, kBlockSize = 16;
  const uint32_t pages = (context + kBlockSize - 1) / kBlockSize;
  const uint32_t n_blocks = 8 * pages;
  KvStorage kv(kType, 1, n_blocks, kBlockSize, kKvHeads, kHeadDim);
  const std::vector<float> row = random_vector(kHeadDim, 3);
  std::vector<BlockId> table(pages);
  for (uint32_t p = 0; p < pages; ++p)
    table[p] = (p * 7919u) % n_blocks; // spread, as a long-running pool's blocks are
  for (uint32_t pos = 0; pos < context; ++pos)
    for (uint32_t h = 0; h < kKvHeads; ++h)
      store_kv_head(kv, 0, table[pos / kBlockSize], h, pos % kBlockSize, row.data(), row.data());
  const std::vector<float> queries = random_vector(size_t{kKvHeads} * group * kHeadDim, 4);
  std::vector<float> out(queries.size()), scores(size_t{group} * context);
  for (auto _ : state) {
    for (uint32_t h = 0; h < kKvHeads; ++h)
      paged_attention(PagedKvHead{&kv, 0, h, table.data()}, context,
                      queries.data() + size_t{h} * group * kHeadDim, group,
                      1.0f / std::sqrt(float(kHeadDim)), scores.data(),
                      out.data() + size_t{h} * group * kHeadDim);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_GB/s"] =
      benchmark::Counter(2.0 * context * kKvHeads * kHeadDim * kv_element_bytes(kType) * 1e-9,
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_TEMPLATE(BM_paged_attention, KvCacheType::F32)
    ->Args({512, 1})
    ->Args({4096, 1})
    ->Args({4096, 4})
    ->ArgNames({"context", "group"})
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_paged_attention, KvCacheType::F16)
    ->Args({512, 1})
    ->Args({4096, 1})
    ->Args({4096, 4})
    ->ArgNames({"context", "group"})
    ->UseRealTime();

// A decode step's attention at many sequences, as CpuModelRunner runs it:
// 32 sequences of one token, each attending to 160 positions of its own
// blocks in every layer of a 134M-shaped cache (12 layers, 12 KV heads of
// 64, blocks of 16; 377 MB of F32, more than any cache holds), the
// (sequence, KV head) pairs spread over the OpenMP threads. Args: {KV heads
// per call, scattered}: 1 head reads one head's part of each block at a
// time, 12 a whole block, its heads side by side; a sequence's blocks have
// neighbouring ids, or (scattered) ids anywhere in the cache.
template <KvCacheType kType>
void BM_decode_attention(benchmark::State& state) {
  const auto heads_per_call = static_cast<uint32_t>(state.range(0));
  const bool scattered = state.range(1) != 0;
  constexpr uint32_t kLayers = 12, kKvHeads = 12, kHeadDim = 64, kBlockSize = 16;
  constexpr uint32_t kSequences = 32, kContext = 160, kPages = kContext / kBlockSize;
  KvStorage kv(kType, kLayers, kSequences * kPages, kBlockSize, kKvHeads, kHeadDim);
  const std::vector<float> row = random_vector(kHeadDim, 3);
  std::vector<BlockId> tables(kSequences * kPages);
  std::iota(tables.begin(), tables.end(), BlockId{0});
  // Each sequence's blocks one ascending run (a fresh pool), or anywhere (a
  // pool after much churn).
  if (scattered)
    std::shuffle(tables.begin(), tables.end(), std::mt19937(7));
  for (uint32_t layer = 0; layer < kLayers; ++layer)
    for (uint32_t b = 0; b < kSequences * kPages; ++b)
      for (uint32_t h = 0; h < kKvHeads; ++h)
        for (uint32_t cell = 0; cell < kBlockSize; ++cell)
          store_kv_head(kv, layer, b, h, cell, row.data(), row.data());
  const std::vector<float> queries = random_vector(size_t{kSequences} * kKvHeads * kHeadDim, 4);
  std::vector<float> out(queries.size());
  const int threads = omp_get_max_threads();
  std::vector<float> scores(size_t(threads) * kKvHeads * kContext);
  const auto calls = static_cast<int64_t>(kSequences * (kKvHeads / heads_per_call));
  const MatmulIsa isa = default_matmul_isa();
  for (auto _ : state) {
    for (uint32_t layer = 0; layer < kLayers; ++layer) {
#pragma omp parallel for schedule(dynamic)
      for (int64_t call = 0; call < calls; ++call) {
        const auto sequence = static_cast<uint32_t>(call / (kKvHeads / heads_per_call));
        const auto first =
            static_cast<uint32_t>(call % (kKvHeads / heads_per_call)) * heads_per_call;
        const size_t at = (size_t{sequence} * kKvHeads + first) * kHeadDim;
        paged_attention_heads(
            PagedKvHead{&kv, layer, first, &tables[sequence * kPages]}, heads_per_call, kContext,
            &queries[at], 1, 1.0f / std::sqrt(float(kHeadDim)),
            &scores[size_t(omp_get_thread_num()) * kKvHeads * kContext], &out[at], isa);
      }
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["kv_GB/s"] = benchmark::Counter(2.0 * kLayers * kSequences * kContext * kKvHeads *
                                                     kHeadDim * kv_element_bytes(kType) * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK_TEMPLATE(BM_decode_attention, KvCacheType::F32)
    ->Args({1, 0})
    ->Args({12, 0})
    ->Args({12, 1})
    ->ArgNames({"heads_per_call", "scattered"})
    ->UseRealTime();
BENCHMARK_TEMPLATE(BM_decode_attention, KvCacheType::F16)
    ->Args({1, 0})
    ->Args({12, 0})
    ->Args({12, 1})
    ->ArgNames({"heads_per_call", "scattered"})
    ->UseRealTime();

BENCHMARK_MAIN();

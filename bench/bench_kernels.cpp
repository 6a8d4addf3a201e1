// Throughput of the CPU kernels of caflm/cpu/cpu_matmul.hpp and caflm/cpu/cpu_kernels.hpp,
// with OpenBLAS's cblas_sgemm on the same shapes for comparison (caflm does not
// use it: see caflm/cpu/cpu_matmul.hpp). Run OpenBLAS and caflm benchmarks in
// separate invocations (--benchmark_filter) so one library's idle spinning
// threads do not slow the other.
#include "caflm/cpu/cpu_kernels.hpp"
#include "caflm/cpu/cpu_matmul.hpp"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstring>
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

// Random weights [rows, cols] encoded as `type`.
std::vector<uint8_t> random_weight(TensorType type, size_t rows, size_t cols) {
  const std::vector<float> values = random_vector(rows * cols, 1);
  std::vector<uint8_t> bytes(rows * tensor_row_bytes(type, cols));
  for (size_t i = 0; i < rows * cols; ++i) {
    switch (type) {
    case TensorType::F32:
      std::memcpy(bytes.data() + 4 * i, &values[i], 4);
      break;
    case TensorType::F16:
    case TensorType::BF16: {
      const uint16_t h = type == TensorType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
      break;
    }
    case TensorType::Q8_0: {
      uint8_t* block = bytes.data() + i / 32 * kQ8_0BlockBytes;
      if (i % 32 == 0) {
        const uint16_t d = f32_to_f16(1.0f / 127.0f);
        std::memcpy(block, &d, 2);
      }
      block[2 + i % 32] = static_cast<uint8_t>(static_cast<int8_t>(values[i] * 127.0f));
      break;
    }
    }
  }
  return bytes;
}

void set_flop_counters(benchmark::State& state, size_t m, size_t n, size_t k, size_t w_bytes) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_GB/s"] =
      benchmark::Counter(w_bytes * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// Args: {M, K, N}.
template <TensorType kType>
void BM_linear(benchmark::State& state) {
  const auto m = static_cast<size_t>(state.range(0));
  const auto k = static_cast<size_t>(state.range(1));
  const auto n = static_cast<size_t>(state.range(2));
  const std::vector<uint8_t> w = random_weight(kType, n, k);
  const std::vector<float> x = random_vector(m * k, 2);
  std::vector<float> y(m * n);
  const WeightView view{kType, w.data(), n, k};
  for (auto _ : state) {
    linear(view, x.data(), m, y.data(), nullptr);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  set_flop_counters(state, m, n, k, w.size());
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

BENCHMARK_TEMPLATE(BM_linear, TensorType::F32)->Apply(linear_shapes);
BENCHMARK_TEMPLATE(BM_linear, TensorType::F16)->Apply(linear_shapes);
BENCHMARK_TEMPLATE(BM_linear, TensorType::BF16)->Apply(linear_shapes);
BENCHMARK_TEMPLATE(BM_linear, TensorType::Q8_0)->Apply(linear_shapes);
BENCHMARK(BM_openblas_sgemm)->Apply(linear_shapes);

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

BENCHMARK_MAIN();

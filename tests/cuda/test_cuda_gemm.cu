// The batch-invariant GPU linear layer against a CPU reference, for every
// weight type. The launch-planning tests run anywhere; the kernel tests skip
// (with a warning naming why) where no CUDA device is present.

#include "caflm/cuda/gemm_kernels.cuh"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "caflm/cuda/programmatic_launch.cuh"
#include "caflm/gguf/quantize.hpp"
#include "tests/cuda/gpu_test.hpp"

using namespace caflm;
using namespace caflm::cuda;

using caflm::testing::DeviceArray;

namespace {

void require_cuda(cudaError_t status, const char* what) {
  INFO(what << ": " << cudaGetErrorString(status));
  REQUIRE(status == cudaSuccess);
}

/// A random [n, k] weight matrix in `type`'s GGUF bytes and its values as
/// dequantize_row decodes them.
struct RandomWeights {
  std::vector<std::uint8_t> bytes; // [n, row_bytes]
  std::vector<float> values;       // [n, k]
};

RandomWeights random_weights(TensorType type, std::size_t n, std::size_t k, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::size_t row_bytes = tensor_row_bytes(type, k);
  RandomWeights w{std::vector<std::uint8_t>(n * row_bytes), std::vector<float>(n * k)};
  std::vector<float> row(k);
  for (std::size_t i = 0; i < n; ++i) {
    // Rows of different magnitudes, so block scales differ between rows.
    const float scale = 0.05f * static_cast<float>(1 + i % 5);
    for (float& v : row)
      v = scale * normal(rng);
    quantize_row_into(type, row.data(), k, w.bytes.data() + i * row_bytes);
    dequantize_row(type, w.bytes.data() + i * row_bytes, k, w.values.data() + i * k);
  }
  return w;
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                 float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& f : v)
    f = dist(rng);
  return v;
}

/// The kernel's arithmetic for every y[r, n], run on the host: the 32 lanes
/// through detail::accumulate_lane (the kernel's own code), then the
/// butterfly the kernel does with __shfl_xor_sync, then the bias.
template <TensorType kType>
std::vector<float> emulate_linear_typed(const std::vector<std::uint8_t>& weight, std::size_t n,
                                        std::size_t k, const std::vector<float>& x, std::size_t m,
                                        const std::vector<float>* bias) {
  const std::size_t row_bytes = tensor_row_bytes(kType, k);
  std::vector<float> y(m * n);
  for (std::size_t r = 0; r < m; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      float lanes[32];
      for (std::uint32_t lane = 0; lane < 32; ++lane) {
        const float* const rows[1] = {&x[r * k]};
        const std::uint8_t* const columns[1] = {weight.data() + j * row_bytes};
        float acc[1][1] = {{0.0f}};
        detail::accumulate_lane<kType, 1, 1>(columns, rows, static_cast<std::uint32_t>(k), lane,
                                             acc);
        lanes[lane] = acc[0][0];
      }
      for (int offset = 16; offset > 0; offset /= 2) {
        float next[32];
        for (int lane = 0; lane < 32; ++lane)
          next[lane] = detail::add_rn(lanes[lane], lanes[lane ^ offset]);
        std::memcpy(lanes, next, sizeof lanes);
      }
      y[r * n + j] = bias != nullptr ? detail::add_rn(lanes[0], (*bias)[j]) : lanes[0];
    }
  }
  return y;
}

std::vector<float> emulate_linear(TensorType type, const std::vector<std::uint8_t>& weight,
                                  std::size_t n, std::size_t k, const std::vector<float>& x,
                                  std::size_t m, const std::vector<float>* bias) {
  switch (type) {
#define CAFLM_EMULATE_CASE(T)                                                                      \
  case TensorType::T:                                                                              \
    return emulate_linear_typed<TensorType::T>(weight, n, k, x, m, bias);
    CAFLM_EMULATE_CASE(F32)
    CAFLM_EMULATE_CASE(F16)
    CAFLM_EMULATE_CASE(BF16)
    CAFLM_EMULATE_CASE(Q4_0)
    CAFLM_EMULATE_CASE(Q4_1)
    CAFLM_EMULATE_CASE(Q5_0)
    CAFLM_EMULATE_CASE(Q5_1)
    CAFLM_EMULATE_CASE(Q8_0)
    CAFLM_EMULATE_CASE(Q2_K)
    CAFLM_EMULATE_CASE(Q3_K)
    CAFLM_EMULATE_CASE(Q4_K)
    CAFLM_EMULATE_CASE(Q5_K)
    CAFLM_EMULATE_CASE(Q6_K)
#undef CAFLM_EMULATE_CASE
  default:
    FAIL("no emulation for " << to_string(type));
    return {};
  }
}

/// Every decode8 of a row, as the kernel decodes it.
template <TensorType kType>
std::vector<float> decode_row_typed(const std::uint8_t* row, std::size_t k) {
  std::vector<float> out(k);
  for (std::uint32_t i = 0; i < k; i += kGemmValuesPerLane) {
    float w[kGemmValuesPerLane];
    detail::decode8<kType>(row, i, w);
    std::memcpy(&out[i], w, sizeof w);
  }
  return out;
}

std::vector<float> decode_row(TensorType type, const std::uint8_t* row, std::size_t k) {
  switch (type) {
#define CAFLM_DECODE_CASE(T)                                                                       \
  case TensorType::T:                                                                              \
    return decode_row_typed<TensorType::T>(row, k);
    CAFLM_DECODE_CASE(F32)
    CAFLM_DECODE_CASE(F16)
    CAFLM_DECODE_CASE(BF16)
    CAFLM_DECODE_CASE(Q4_0)
    CAFLM_DECODE_CASE(Q4_1)
    CAFLM_DECODE_CASE(Q5_0)
    CAFLM_DECODE_CASE(Q5_1)
    CAFLM_DECODE_CASE(Q8_0)
    CAFLM_DECODE_CASE(Q2_K)
    CAFLM_DECODE_CASE(Q3_K)
    CAFLM_DECODE_CASE(Q4_K)
    CAFLM_DECODE_CASE(Q5_K)
    CAFLM_DECODE_CASE(Q6_K)
#undef CAFLM_DECODE_CASE
  default:
    FAIL("no decoder for " << to_string(type));
    return {};
  }
}

/// Runs the GPU linear layer: y [m, y_stride] from x [m, x_stride].
std::vector<float> gpu_linear(TensorType type, const DeviceArray<std::uint8_t>& weight,
                              std::size_t n, std::size_t k, const std::vector<float>& x,
                              std::size_t x_stride, std::size_t m, const float* bias_device,
                              std::size_t y_stride, float fill = 0.0f) {
  DeviceArray<float> x_device(x);
  DeviceArray<float> y_device(std::vector<float>(m * y_stride, fill));
  launch_linear(WeightView{type, weight.get(), n, k}, x_device.get(), x_stride, m, bias_device,
                y_device.get(), y_stride, nullptr);
  require_cuda(cudaDeviceSynchronize(), "linear kernel");
  return y_device.download();
}

/// Error bound of y[r, n]. The GPU decodes each weight to exactly the value
/// dequantize_row gives (the same IEEE operations in the same order; an
/// FMA-contracted CPU decode could differ by one rounding of the weight,
/// relative error u), so the only other error is the FP32 accumulation: each
/// lane adds K / 32 products with fmaf (one rounding each) and the butterfly
/// adds 5 more levels, the bias one more. The classic bound for such a
/// summation is (chain length) * u * sum |w_k x_k| with u = 2^-24; we allow
/// twice (K / 32 + 8) * u * sum |w_k x_k| plus the rounding of the bias,
/// which holds for any inputs, not only typical ones.
double tolerance(std::size_t k, double sum_abs, double bias) {
  const double u = std::ldexp(1.0, -24);
  return 2.0 * (static_cast<double>(k) / 32.0 + 8.0) * u * sum_abs + u * std::fabs(bias) + 1e-30;
}

/// Checks y [m, n] against the double-precision product of x [m, k] and
/// the decoded weights [n, k] (plus the bias).
void check_against_reference(const std::vector<float>& y, const RandomWeights& w,
                             const std::vector<float>& x, const std::vector<float>* bias,
                             std::size_t m, std::size_t n, std::size_t k) {
  std::size_t failures = 0;
  for (std::size_t r = 0; r < m; ++r) {
    for (std::size_t j = 0; j < n; ++j) {
      double exact = 0.0;
      double sum_abs = 0.0;
      for (std::size_t i = 0; i < k; ++i) {
        const double p = static_cast<double>(w.values[j * k + i]) * x[r * k + i];
        exact += p;
        sum_abs += std::fabs(p);
      }
      const double b = bias != nullptr ? (*bias)[j] : 0.0;
      exact += b;
      const double got = y[r * n + j];
      if (!(std::fabs(got - exact) <= tolerance(k, sum_abs, b)) && failures++ < 5)
        FAIL_CHECK("y[" << r << ", " << j << "] = " << got << ", reference " << exact
                        << ", tolerance " << tolerance(k, sum_abs, b));
    }
  }
  CHECK(failures == 0);
}

/// The GPU result for random inputs: within tolerance of the reference, and
/// bitwise equal to the host emulation of the kernel's arithmetic.
void check_gpu(TensorType type, std::size_t m, std::size_t n, std::size_t k, std::uint32_t seed,
               bool with_bias) {
  INFO(to_string(type) << " m " << m << " N " << n << " K " << k << " bias " << with_bias);
  const RandomWeights w = random_weights(type, n, k, seed);
  const std::vector<float> x = random_floats(m * k, seed + 1);
  const std::vector<float> bias = random_floats(n, seed + 2);
  DeviceArray<std::uint8_t> weight_device(w.bytes);
  DeviceArray<float> bias_device(bias);
  const std::vector<float> y =
      gpu_linear(type, weight_device, n, k, x, k, m, with_bias ? bias_device.get() : nullptr, n);
  check_against_reference(y, w, x, with_bias ? &bias : nullptr, m, n, k);
  if (k <= 1024) { // keep the host emulation quick
    const auto emulated = emulate_linear(type, w.bytes, n, k, x, m, with_bias ? &bias : nullptr);
    CHECK(std::memcmp(y.data(), emulated.data(), y.size() * sizeof(float)) == 0);
  }
}

bool is_k_quant(TensorType type) {
  return tensor_block_size(type) == 256;
}

/// Lets a programmatically launched kernel start at once, spins for about
/// `spin_cycles` clock cycles, then writes x[i] = values[i]: a linear layer
/// launched after it that read x before it ended would see what x held.
__global__ void late_writer_kernel(const float* __restrict__ values /* [n] */, std::size_t n,
                                   float* __restrict__ x /* [n] */, long long spin_cycles) {
  allow_next_kernel_to_start();
  const long long start = clock64();
  while (clock64() - start < spin_cycles) {
  }
  for (std::size_t i = threadIdx.x; i < n; i += blockDim.x)
    x[i] = values[i];
}

} // namespace

TEST_CASE("the GEMM launch plan: tiles over m, warps over N, shapes checked") {
  const GemmLaunchPlan one = plan_gemm_launch(TensorType::Q4_K, 1, 4096, 4096);
  CHECK(one.rows_per_tile == 1);
  CHECK(one.columns_per_warp == gemm_columns_per_warp(1));
  CHECK(one.grid_x == 4096 / (gemm_warps_per_block(1) * gemm_columns_per_warp(1)));
  CHECK(one.grid_y == 1);
  CHECK(one.threads_per_block == 32 * gemm_warps_per_block(1));

  CHECK(plan_gemm_launch(TensorType::F32, 2, 8, 8).rows_per_tile == 2);
  CHECK(plan_gemm_launch(TensorType::F32, 3, 8, 8).rows_per_tile == 4);
  CHECK(plan_gemm_launch(TensorType::F32, 7, 8, 8).rows_per_tile == 8);
  const GemmLaunchPlan many = plan_gemm_launch(TensorType::Q8_0, 129, 37, 576);
  CHECK(many.rows_per_tile == kGemmMaxRowsPerTile);
  CHECK(many.grid_y == (129 + kGemmMaxRowsPerTile - 1) / kGemmMaxRowsPerTile);
  const std::uint32_t columns_per_block =
      gemm_warps_per_block(kGemmMaxRowsPerTile) * gemm_columns_per_warp(kGemmMaxRowsPerTile);
  CHECK(many.columns_per_warp == gemm_columns_per_warp(kGemmMaxRowsPerTile));
  CHECK(many.grid_x == (37 + columns_per_block - 1) / columns_per_block);
  CHECK(many.threads_per_block == 32 * gemm_warps_per_block(kGemmMaxRowsPerTile));
  CHECK(plan_gemm_launch(TensorType::F16, 0, 8, 8).grid_y == 0);

  for (TensorType type : kWeightTypes)
    CHECK(gemm_supports(type));
  CHECK_FALSE(gemm_supports(TensorType::Q8_K));
  CHECK_THROWS_AS(plan_gemm_launch(TensorType::Q8_K, 1, 8, 256), std::invalid_argument);
  CHECK_THROWS_AS(plan_gemm_launch(TensorType::Q4_K, 1, 8, 576), std::invalid_argument);
  CHECK_THROWS_AS(plan_gemm_launch(TensorType::Q4_0, 1, 8, 48), std::invalid_argument);
  CHECK_THROWS_AS(plan_gemm_launch(TensorType::F32, 1, 8, 12), std::invalid_argument);
  CHECK_THROWS_AS(plan_gemm_launch(TensorType::F32, 1, 0, 8), std::invalid_argument);
  CHECK_THROWS_AS(plan_gemm_launch(TensorType::F32, std::uint64_t{1} << 33, 8, 8),
                  std::invalid_argument);
}

TEST_CASE("the kernel decodes every weight type exactly as dequantize_row") {
  std::uint32_t seed = 40;
  for (TensorType type : kWeightTypes) {
    INFO(to_string(type));
    const std::size_t n = 7, k = 1024;
    const RandomWeights w = random_weights(type, n, k, seed++);
    const std::size_t row_bytes = tensor_row_bytes(type, k);
    for (std::size_t j = 0; j < n; ++j) {
      const std::vector<float> decoded = decode_row(type, w.bytes.data() + j * row_bytes, k);
      CHECK(std::memcmp(decoded.data(), &w.values[j * k], k * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("the kernel's arithmetic, emulated on the host, matches the reference") {
  // Runs without a GPU: the lanes' code is the kernel's own (host and
  // device), only the shuffles are emulated.
  std::uint32_t seed = 60;
  for (TensorType type : kWeightTypes) {
    for (std::size_t k : {256, 576, 1024}) {
      if (is_k_quant(type) && k % 256 != 0)
        continue;
      const std::size_t m = 3, n = 5;
      INFO(to_string(type) << " K " << k);
      const RandomWeights w = random_weights(type, n, k, seed++);
      const std::vector<float> x = random_floats(m * k, seed++);
      const std::vector<float> bias = random_floats(n, seed++);
      check_against_reference(emulate_linear(type, w.bytes, n, k, x, m, nullptr), w, x, nullptr, m,
                              n, k);
      check_against_reference(emulate_linear(type, w.bytes, n, k, x, m, &bias), w, x, &bias, m, n,
                              k);
    }
  }
}

TEST_CASE("the GPU GEMM matches a double-precision reference for every weight type") {
  CAFLM_REQUIRE_GPU();
  std::uint32_t seed = 100;
  for (TensorType type : kWeightTypes) {
    for (std::size_t k : {256, 576, 4096}) {
      if (is_k_quant(type) && k % 256 != 0)
        continue; // K-quant rows are whole 256-value blocks
      for (std::size_t n : {37, 64})
        for (std::size_t m : {1, 2, 7, 32, 129})
          check_gpu(type, m, n, k, seed++, false);
    }
  }
}

TEST_CASE("the GPU GEMM adds the bias") {
  CAFLM_REQUIRE_GPU();
  std::uint32_t seed = 500;
  for (TensorType type : {TensorType::F32, TensorType::BF16, TensorType::Q4_1, TensorType::Q6_K})
    for (std::size_t m : {1, 9, 33})
      check_gpu(type, m, 45, 512, seed++, true);

  // With a bias, each element is the biased-free result plus the bias, one
  // FP32 addition: bitwise.
  const std::size_t n = 29, k = 1024, m = 5;
  const RandomWeights w = random_weights(TensorType::Q8_0, n, k, 9);
  const std::vector<float> x = random_floats(m * k, 10);
  const std::vector<float> bias = random_floats(n, 11);
  DeviceArray<std::uint8_t> weight(w.bytes);
  DeviceArray<float> bias_device(bias);
  const auto plain = gpu_linear(TensorType::Q8_0, weight, n, k, x, k, m, nullptr, n);
  const auto biased = gpu_linear(TensorType::Q8_0, weight, n, k, x, k, m, bias_device.get(), n);
  for (std::size_t r = 0; r < m; ++r)
    for (std::size_t j = 0; j < n; ++j)
      CHECK(biased[r * n + j] == plain[r * n + j] + bias[j]);
}

TEST_CASE("the GPU GEMM honours row strides and writes nothing else") {
  CAFLM_REQUIRE_GPU();
  const std::size_t n = 19, k = 256, m = 6, x_stride = k + 12, y_stride = n + 5;
  const RandomWeights w = random_weights(TensorType::Q5_0, n, k, 21);
  std::vector<float> x_packed = random_floats(m * k, 22);
  std::vector<float> x_strided(m * x_stride, 1e30f); // padding that must not be read
  for (std::size_t r = 0; r < m; ++r)
    std::memcpy(&x_strided[r * x_stride], &x_packed[r * k], k * sizeof(float));
  DeviceArray<std::uint8_t> weight(w.bytes);
  const float sentinel = -12345.0f;
  const auto packed = gpu_linear(TensorType::Q5_0, weight, n, k, x_packed, k, m, nullptr, n);
  const auto strided = gpu_linear(TensorType::Q5_0, weight, n, k, x_strided, x_stride, m, nullptr,
                                  y_stride, sentinel);
  for (std::size_t r = 0; r < m; ++r) {
    for (std::size_t j = 0; j < y_stride; ++j) {
      if (j < n)
        CHECK(strided[r * y_stride + j] == packed[r * n + j]);
      else
        CHECK(strided[r * y_stride + j] == sentinel);
    }
  }
  DeviceArray<float> x_device(x_packed);
  DeviceArray<float> y_device(m * n);
  CHECK_THROWS_AS(launch_linear(WeightView{TensorType::Q5_0, weight.get(), n, k}, x_device.get(),
                                k + 2, m, nullptr, y_device.get(), n, nullptr),
                  std::invalid_argument); // stride not a multiple of 4
  CHECK_THROWS_AS(launch_linear(WeightView{TensorType::Q5_0, weight.get(), n, k},
                                x_device.get() + 1, k, m, nullptr, y_device.get(), n, nullptr),
                  std::invalid_argument); // x not 16-byte aligned
}

TEST_CASE("a row's GPU GEMM result is bitwise the same whatever batch it is in") {
  CAFLM_REQUIRE_GPU();
  // Row r alone (m = 1, the decode tile) against the same row inside batches
  // of every tile size, at the start, middle and end, among other random
  // rows: the bytes must be equal, not merely close.
  const std::size_t n = 61, k = 512;
  std::uint32_t seed = 900;
  for (TensorType type : kWeightTypes) {
    INFO(to_string(type));
    const RandomWeights w = random_weights(type, n, k, seed++);
    DeviceArray<std::uint8_t> weight(w.bytes);
    const std::vector<float> row = random_floats(k, seed++);
    const auto alone = gpu_linear(type, weight, n, k, row, k, 1, nullptr, n);
    for (std::size_t m : {2, 3, 5, 8, 9, 16, 17, 31, 64, 129}) {
      for (std::size_t position : {std::size_t{0}, m / 2, m - 1}) {
        INFO("m " << m << " position " << position);
        std::vector<float> batch = random_floats(m * k, seed++, -4.0f, 4.0f);
        std::memcpy(&batch[position * k], row.data(), k * sizeof(float));
        const auto y = gpu_linear(type, weight, n, k, batch, k, m, nullptr, n);
        CHECK(std::memcmp(&y[position * n], alone.data(), n * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE(
    "a programmatically launched GEMM reads x only once the kernel before it has written it") {
  CAFLM_REQUIRE_GPU();
  cudaStream_t stream = nullptr;
  require_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  const std::size_t n = 61, k = 512;
  std::uint32_t seed = 1300;
  for (TensorType type : {TensorType::BF16, TensorType::Q4_K, TensorType::Q8_0}) {
    const RandomWeights w = random_weights(type, n, k, seed++);
    DeviceArray<std::uint8_t> weight(w.bytes);
    for (std::size_t m : {1, 16, 33}) {
      INFO(to_string(type) << ", m " << m);
      const std::vector<float> x = random_floats(m * k, seed++);
      const auto expected = gpu_linear(type, weight, n, k, x, k, m, nullptr, n);
      DeviceArray<float> values(x);
      DeviceArray<float> x_device(std::vector<float>(m * k, 0.0f));
      DeviceArray<float> y_device(std::vector<float>(m * n, 0.0f));
      // About a millisecond at the H200's clock: far longer than the product.
      late_writer_kernel<<<1, 256, 0, stream>>>(values.get(), m * k, x_device.get(), 2'000'000);
      require_cuda(cudaGetLastError(), "late writer");
      launch_linear(WeightView{type, weight.get(), n, k}, x_device.get(), k, m, nullptr,
                    y_device.get(), n, stream, /*programmatic=*/true);
      require_cuda(cudaStreamSynchronize(stream), "programmatic linear");
      const std::vector<float> y = y_device.download();
      CHECK(std::memcmp(y.data(), expected.data(), y.size() * sizeof(float)) == 0);
    }
  }
  require_cuda(cudaStreamDestroy(stream), "stream");
}

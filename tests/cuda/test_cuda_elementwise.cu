// The CUDA elementwise kernels against caflm's CPU kernels on random inputs.
// GPU cases skip with the reason when no CUDA device is usable; the launch
// configuration and argument checks run everywhere.

#include "caflm/cpu/cpu_kernels.hpp"
#include "caflm/cuda/cuda_check.hpp"
#include "caflm/cuda/cuda_device.hpp"
#include "caflm/cuda/elementwise_kernels.cuh"
#include "caflm/gguf/quantize.hpp"
#include "tests/cuda/gpu_test.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace caflm;
using namespace caflm::cuda;

using caflm::testing::DeviceArray;

namespace {

std::vector<float> random_floats(std::size_t n, float low, float high, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(low, high);
  std::vector<float> values(n);
  for (auto& value : values) {
    value = dist(rng);
  }
  return values;
}

/// Checks |actual - expected| <= relative * |expected| + absolute elementwise,
/// reporting the first element out of tolerance.
void check_close(const std::vector<float>& actual, const std::vector<float>& expected,
                 float relative, float absolute) {
  REQUIRE(actual.size() == expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) {
    const float limit = relative * std::fabs(expected[i]) + absolute;
    if (!(std::fabs(actual[i] - expected[i]) <= limit)) {
      FAIL("element " << i << ": GPU " << actual[i] << ", CPU " << expected[i] << ", limit "
                      << limit);
    }
  }
}

/// Bitwise equality (NaN equal to NaN of the same bits).
void check_identical(const std::vector<float>& actual, const std::vector<float>& expected) {
  REQUIRE(actual.size() == expected.size());
  REQUIRE(std::memcmp(actual.data(), expected.data(), actual.size() * sizeof(float)) == 0);
}

} // namespace

// -- host-side logic: runs without a device -------------------------------------

TEST_CASE("rms_norm_threads is a power of two from 32 to 1024 chosen by the row length") {
  int previous = 0;
  for (std::size_t d :
       {1u, 2u, 31u, 64u, 128u, 129u, 576u, 896u, 2048u, 4096u, 5120u, 8192u, 65536u}) {
    const int threads = rms_norm_threads(d);
    INFO("d = " << d);
    CHECK(threads >= 32);
    CHECK(threads <= 1024);
    CHECK((threads & (threads - 1)) == 0);
    CHECK(threads >= previous);
    // About d/4 values per thread until the cap: no idle half-block.
    if (threads > 32) {
      CHECK(static_cast<std::size_t>(threads) < 4 * d);
    }
    if (threads < 1024) {
      CHECK(static_cast<std::size_t>(threads) * 4 >= d);
    }
    previous = threads;
  }
}

TEST_CASE("rope_theta_scale is the CPU rope's base^(-2/d)") {
  CHECK(rope_theta_scale(10000.0f, 128) == std::pow(10000.0f, -2.0f / 128.0f));
  CHECK(rope_theta_scale(1000000.0f, 64) == std::pow(1000000.0f, -2.0f / 64.0f));
}

TEST_CASE("launchers refuse bad shapes and types before touching the device") {
  CudaRopeConfig odd;
  odd.head_dim = 7;
  CHECK_THROWS_AS(launch_rope(nullptr, 1, 1, nullptr, odd, nullptr), std::invalid_argument);
  CHECK_THROWS_AS(launch_rms_norm(nullptr, 1, 0, nullptr, 1e-6f, nullptr, nullptr),
                  std::invalid_argument);
  CHECK_FALSE(embedding_gather_supports(TensorType::Q8_K));
  CHECK(embedding_gather_supports(TensorType::Q8_0));
  CHECK(embedding_gather_supports(TensorType::Q4_K));
  CHECK_THROWS_AS(
      launch_embedding_gather(nullptr, TensorType::Q8_K, 4, 256, nullptr, 1, nullptr, nullptr),
      std::invalid_argument);
  // A K-quant row is whole blocks of 256.
  CHECK_THROWS_AS(
      launch_embedding_gather(nullptr, TensorType::Q4_K, 4, 96, nullptr, 1, nullptr, nullptr),
      std::invalid_argument);
  CHECK_THROWS_AS(
      launch_embedding_gather(nullptr, TensorType::Q8_0, 4, 48, nullptr, 1, nullptr, nullptr),
      std::invalid_argument);
  // Empty batches enqueue nothing.
  CHECK_NOTHROW(launch_silu_mul(nullptr, nullptr, 0, 64, nullptr, nullptr));
  CHECK_NOTHROW(launch_residual_add(nullptr, nullptr, 0, nullptr, nullptr));
}

// -- GPU against CPU ----------------------------------------------------------

TEST_CASE("rms_norm on the GPU matches the CPU kernel and is batch invariant") {
  CAFLM_REQUIRE_GPU();
  const float eps = 1e-6f;
  for (std::size_t d : {1u, 7u, 64u, 576u, 4096u, 5000u}) {
    INFO("d = " << d);
    const std::size_t m = 7;
    const auto x = random_floats(m * d, -2.0f, 2.0f, 11 + static_cast<std::uint32_t>(d));
    const auto weight = random_floats(d, 0.5f, 1.5f, 12);
    std::vector<float> expected(m * d);
    rms_norm(x.data(), m, d, weight.data(), eps, expected.data());

    DeviceArray<float> dx(x), dweight(weight), dout(m * d);
    launch_rms_norm(dx.get(), m, d, dweight.get(), eps, dout.get(), nullptr);
    const auto actual = dout.download();
    // Both sum the same positive squares in different orders (CPU: 8 lanes of
    // d/8 terms then a tree; GPU: d/T terms per thread then a tree), each
    // within (terms + tree depth) * 2^-24 relative of the exact sum, at most
    // ~700 ulp for d = 5000; the 1/sqrt halves that, and scale and weight add
    // 2 ulp each. 2e-5 relative (~170 ulp) covers the realistic, far smaller
    // random-walk error with margin; the absolute term covers values near 0.
    check_close(actual, expected, 2e-5f, 1e-6f);

    // In place gives the same bits as out of place.
    launch_rms_norm(dx.get(), m, d, dweight.get(), eps, dx.get(), nullptr);
    check_identical(dx.download(), actual);

    // Batch invariance: row 3 alone gives the bits it got among 7 rows.
    DeviceArray<float> one(std::vector<float>(x.begin() + 3 * d, x.begin() + 4 * d));
    DeviceArray<float> one_out(d);
    launch_rms_norm(one.get(), 1, d, dweight.get(), eps, one_out.get(), nullptr);
    check_identical(one_out.download(),
                    std::vector<float>(actual.begin() + 3 * d, actual.begin() + 4 * d));
  }
}

TEST_CASE("per-head rms_norm normalizes each head with the shared weight") {
  CAFLM_REQUIRE_GPU();
  const std::size_t m = 5, n_heads = 6, head_dim = 128;
  const float eps = 1e-6f;
  const auto x = random_floats(m * n_heads * head_dim, -3.0f, 3.0f, 21);
  const auto weight = random_floats(head_dim, 0.5f, 1.5f, 22);
  // The CPU runner normalizes heads as rows of head_dim values.
  std::vector<float> expected(x.size());
  rms_norm(x.data(), m * n_heads, head_dim, weight.data(), eps, expected.data());

  DeviceArray<float> dx(x), dweight(weight);
  launch_head_rms_norm(dx.get(), m, n_heads, head_dim, dweight.get(), eps, dx.get(), nullptr);
  // As rms_norm above with d = 128: a few ulp of reordering; 2e-5 is ample.
  check_close(dx.download(), expected, 2e-5f, 1e-6f);
}

TEST_CASE("rope on the GPU matches the CPU kernel in both modes") {
  CAFLM_REQUIRE_GPU();
  const std::size_t m = 9, n_heads = 4;
  std::vector<std::int32_t> positions = {0, 1, 2, 17, 255, 4095, 32768, 131071, 7};
  for (const RopeMode mode : {RopeMode::Interleaved, RopeMode::NeoX}) {
    for (const bool scaled : {false, true}) {
      for (std::size_t head_dim : {64u, 96u, 128u}) {
        INFO("mode " << (mode == RopeMode::NeoX ? "neox" : "interleaved") << ", scaled " << scaled
                     << ", head_dim " << head_dim);
        const auto x = random_floats(m * n_heads * head_dim, -2.0f, 2.0f, 31);
        const auto factors = random_floats(head_dim / 2, 1.0f, 8.0f, 32);

        RopeConfig cpu_config{mode, head_dim, 500000.0f};
        CudaRopeConfig gpu_config;
        gpu_config.mode = mode;
        gpu_config.head_dim = head_dim;
        gpu_config.freq_base = 500000.0f;
        DeviceArray<float> dfactors(factors);
        if (scaled) {
          cpu_config.freq_factors = factors.data();
          cpu_config.freq_scale = gpu_config.freq_scale = 0.25f;
          cpu_config.attn_factor = gpu_config.attn_factor = 1.1f;
          gpu_config.freq_factors = dfactors.get();
        }
        std::vector<float> expected = x;
        rope(expected.data(), m, n_heads, positions.data(), cpu_config);

        DeviceArray<float> dx(x);
        DeviceArray<std::int32_t> dpositions(positions);
        launch_rope(dx.get(), m, n_heads, dpositions.get(), gpu_config, nullptr);
        // Angles are bitwise the CPU's (same float products and quotient,
        // uncontracted). cosf/sinf differ by at most 1 ulp (glibc) + 2 ulp
        // (CUDA) of values <= 1.1, i.e. ~4e-7; times |x0| + |x1| <= 4 that is
        // < 2e-6, plus up to 2 ulp(4) ~ 1e-6 from fused vs separate
        // multiply-adds. 1e-5 absolute leaves a factor of 3.
        check_close(dx.download(), expected, 0.0f, 1e-5f);
      }
    }
  }
}

TEST_CASE("silu_mul on the GPU matches the CPU kernel") {
  CAFLM_REQUIRE_GPU();
  const std::size_t m = 3, f = 1000;
  const auto gate = random_floats(m * f, -12.0f, 12.0f, 41);
  const auto up = random_floats(m * f, -2.0f, 2.0f, 42);
  std::vector<float> expected(m * f);
  silu_mul(gate.data(), up.data(), m, f, expected.data());

  DeviceArray<float> dgate(gate), dup(up), dout(m * f);
  launch_silu_mul(dgate.get(), dup.get(), m, f, dout.get(), nullptr);
  // Both exps are within 2 ulp (CPU Cephes polynomial, CUDA expf); with the
  // add, divide and multiply each result is within ~7 ulp (4e-7) of the
  // other. 2e-6 relative is 4x that.
  const auto actual = dout.download();
  check_close(actual, expected, 2e-6f, 1e-30f);

  // In place over `gate` gives the same bits.
  launch_silu_mul(dgate.get(), dup.get(), m, f, dgate.get(), nullptr);
  check_identical(dgate.download(), actual);
}

TEST_CASE("add_bias and residual_add give exactly the rounded sums") {
  CAFLM_REQUIRE_GPU();
  const std::size_t m = 6, n = 333;
  const auto x = random_floats(m * n, -5.0f, 5.0f, 51);
  const auto bias = random_floats(n, -1.0f, 1.0f, 52);
  const auto residual = random_floats(m * n, -5.0f, 5.0f, 53);
  std::vector<float> with_bias = x;
  std::vector<float> sum(m * n);
  for (std::size_t i = 0; i < m * n; ++i) {
    with_bias[i] += bias[i % n];
    sum[i] = x[i] + residual[i];
  }

  // One IEEE addition per element: the GPU's result is the same bits.
  DeviceArray<float> dx(x), dbias(bias), dresidual(residual), dsum(m * n);
  launch_residual_add(dx.get(), dresidual.get(), m * n, dsum.get(), nullptr);
  check_identical(dsum.download(), sum);
  launch_add_bias(dx.get(), m, n, dbias.get(), nullptr);
  check_identical(dx.download(), with_bias);
  // In place: the residual stream accumulates into itself.
  DeviceArray<float> stream(x);
  launch_residual_add(stream.get(), dresidual.get(), m * n, stream.get(), nullptr);
  check_identical(stream.download(), sum);
}

TEST_CASE("embedding gather dequantizes every weight type's rows as the CPU does") {
  CAFLM_REQUIRE_GPU();
  const std::size_t vocab = 50, cols = 512;
  const auto values = random_floats(vocab * cols, -1.5f, 1.5f, 61);
  const std::vector<TokenId> tokens = {0, 49, 7, 7, 23, 1};
  for (const TensorType type :
       {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
        TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1, TensorType::Q2_K, TensorType::Q3_K,
        TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    INFO("type " << caflm::to_string(type));
    const std::size_t row_bytes = tensor_row_bytes(type, cols);
    std::vector<std::uint8_t> table(vocab * row_bytes);
    for (std::size_t row = 0; row < vocab; ++row) {
      quantize_row_into(type, values.data() + row * cols, cols, table.data() + row * row_bytes);
    }
    std::vector<float> expected(tokens.size() * cols);
    embedding_lookup(WeightView{type, table.data(), vocab, cols}, tokens.data(), tokens.size(),
                     expected.data());

    DeviceArray<std::uint8_t> dtable(table);
    DeviceArray<TokenId> dtokens(tokens);
    DeviceArray<float> dout(tokens.size() * cols);
    launch_embedding_gather(dtable.get(), type, vocab, cols, dtokens.get(), tokens.size(),
                            dout.get(), nullptr);
    // Each value is one exact conversion (F32/F16/BF16) or the same rounded
    // products and sums of the block's scales and quants on both sides
    // (decode8 follows dequantize_row): identical bits.
    check_identical(dout.download(), expected);

    // A token outside the table gives a NaN row, the others are untouched.
    const std::vector<TokenId> bad = {3, static_cast<TokenId>(vocab)};
    DeviceArray<TokenId> dbad(bad);
    DeviceArray<float> dbad_out(bad.size() * cols);
    launch_embedding_gather(dtable.get(), type, vocab, cols, dbad.get(), bad.size(), dbad_out.get(),
                            nullptr);
    const auto bad_out = dbad_out.download();
    std::vector<float> row3(cols);
    embedding_lookup(WeightView{type, table.data(), vocab, cols}, bad.data(), 1, row3.data());
    check_identical(std::vector<float>(bad_out.begin(), bad_out.begin() + cols), row3);
    for (std::size_t j = cols; j < 2 * cols; ++j) {
      CHECK(std::isnan(bad_out[j]));
    }
  }
}

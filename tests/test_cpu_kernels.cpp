#include "caflm/cpu/cpu_kernels.hpp"
#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/quantize.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

#include "tests/support/omp_threads.hpp"

using namespace caflm;
using caflm::testing::OmpThreads;

namespace {

std::vector<float> random_vector(size_t n, std::mt19937& rng, float range = 2.0f) {
  std::uniform_real_distribution<float> uniform(-range, range);
  std::vector<float> v(n);
  for (float& x : v) {
    x = uniform(rng);
  }
  return v;
}

// A Q8_0 block: f16 scale bits, then 32 quants.
std::vector<uint8_t> q8_0_block(uint16_t d_bits, const std::vector<int8_t>& quants) {
  std::vector<uint8_t> block(sizeof(BlockQ8_0));
  std::memcpy(block.data(), &d_bits, 2);
  std::memcpy(block.data() + 2, quants.data(), 32);
  return block;
}

} // namespace

TEST_CASE("dequantize_row decodes known Q8_0 blocks", "[cpu_kernels]") {
  std::vector<int8_t> first(32, 0);
  first[0] = -128;
  first[1] = -1;
  first[2] = 1;
  first[3] = 127;
  first[31] = 64;
  std::vector<int8_t> second(32, 3);
  second[5] = -7;
  // Scales 0.5 (f16 0x3800) and -0.25 (f16 0xb400).
  std::vector<uint8_t> row = q8_0_block(0x3800, first);
  const std::vector<uint8_t> block2 = q8_0_block(0xb400, second);
  row.insert(row.end(), block2.begin(), block2.end());

  std::vector<float> out(64);
  dequantize_row(TensorType::Q8_0, row.data(), 64, out.data());
  CHECK(out[0] == -64.0f);
  CHECK(out[1] == -0.5f);
  CHECK(out[2] == 0.5f);
  CHECK(out[3] == 63.5f);
  CHECK(out[4] == 0.0f);
  CHECK(out[31] == 32.0f);
  CHECK(out[32] == -0.75f);
  CHECK(out[37] == 1.75f);
  CHECK(out[63] == -0.75f);

  REQUIRE_THROWS_AS(dequantize_row(TensorType::Q8_0, row.data(), 48, out.data()),
                    std::invalid_argument);
}

TEST_CASE("dequantize_row decodes known F16, BF16 and F32 values", "[cpu_kernels]") {
  // 11 values: one full chunk of 8 and a scalar tail.
  const uint16_t f16[11] = {0x3c00, 0xc000, 0x3555, 0x0001, 0x7bff, 0x8000,
                            0x3800, 0x4248, 0xfc00, 0x0400, 0xb800};
  const float f16_expected[11] = {1.0f, -2.0f,     0.333251953125f, 0x1p-24f, 65504.0f, -0.0f,
                                  0.5f, 3.140625f, -INFINITY,       0x1p-14f, -0.5f};
  std::vector<float> out(11);
  dequantize_row(TensorType::F16, f16, 11, out.data());
  for (size_t i = 0; i < 11; ++i) {
    INFO("f16 element " << i);
    CHECK(std::memcmp(&out[i], &f16_expected[i], 4) == 0);
  }

  const uint16_t bf16[11] = {0x3f80, 0xc040, 0x4049, 0x0001, 0x7f7f, 0x8000,
                             0x3f00, 0x4120, 0xff80, 0x3e80, 0xbf00};
  const float bf16_expected[11] = {1.0f, -3.0f, 3.140625f, 0x1p-133f, 0x1.fep127f, -0.0f,
                                   0.5f, 10.0f, -INFINITY, 0.25f,     -0.5f};
  dequantize_row(TensorType::BF16, bf16, 11, out.data());
  for (size_t i = 0; i < 11; ++i) {
    INFO("bf16 element " << i);
    CHECK(std::memcmp(&out[i], &bf16_expected[i], 4) == 0);
  }

  const float f32[3] = {1.5f, -0.0f, 7e-30f};
  dequantize_row(TensorType::F32, f32, 3, out.data());
  CHECK(std::memcmp(out.data(), f32, sizeof f32) == 0);
}

TEST_CASE("embedding_lookup copies each token's row for every type", "[cpu_kernels]") {
  std::mt19937 rng(5);
  constexpr uint64_t kVocab = 6;
  constexpr uint64_t kDim = 64;
  const std::vector<float> values = random_vector(kVocab * kDim, rng);
  const TokenId tokens[4] = {2, 0, 2, 5};

  for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_0}) {
    std::vector<uint8_t> bytes(kVocab * tensor_row_bytes(type, kDim));
    std::vector<float> expected_rows(kVocab * kDim);
    for (uint64_t i = 0; i < kVocab * kDim; ++i) {
      if (type == TensorType::F32) {
        std::memcpy(bytes.data() + 4 * i, &values[i], 4);
        expected_rows[i] = values[i];
      } else if (type == TensorType::F16 || type == TensorType::BF16) {
        const uint16_t h = type == TensorType::F16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
        std::memcpy(bytes.data() + 2 * i, &h, 2);
        expected_rows[i] = type == TensorType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
    }
    if (type == TensorType::Q8_0) {
      // Scale 1/64 and quants i % 255 - 127, so element i decodes to (i % 255 - 127) / 64.
      for (uint64_t block = 0; block < kVocab * kDim / 32; ++block) {
        std::vector<int8_t> quants(32);
        for (uint64_t j = 0; j < 32; ++j) {
          const uint64_t i = block * 32 + j;
          quants[j] = static_cast<int8_t>(static_cast<int>(i % 255) - 127);
          expected_rows[i] = static_cast<float>(static_cast<int>(i % 255) - 127) / 64.0f;
        }
        const std::vector<uint8_t> encoded = q8_0_block(f32_to_f16(1.0f / 64.0f), quants);
        std::memcpy(bytes.data() + block * sizeof(BlockQ8_0), encoded.data(), sizeof(BlockQ8_0));
      }
    }
    const WeightView table{type, bytes.data(), kVocab, kDim};
    std::vector<float> out(4 * kDim);
    embedding_lookup(table, tokens, 4, out.data());
    for (size_t r = 0; r < 4; ++r) {
      INFO("type " << to_string(type) << " row " << r);
      CHECK(std::memcmp(out.data() + r * kDim, expected_rows.data() + tokens[r] * kDim,
                        kDim * sizeof(float)) == 0);
    }
    const TokenId outside[1] = {kVocab};
    CHECK_THROWS_AS(embedding_lookup(table, outside, 1, out.data()), std::out_of_range);
  }
}

TEST_CASE("rms_norm matches a double-precision reference", "[cpu_kernels]") {
  std::mt19937 rng(9);
  for (size_t d : {1, 7, 8, 33, 64, 100, 4096}) {
    constexpr size_t kRows = 3;
    const std::vector<float> x = random_vector(kRows * d, rng);
    const std::vector<float> weight = random_vector(d, rng);
    const float eps = 1e-5f;
    std::vector<float> out(kRows * d);
    rms_norm(x.data(), kRows, d, weight.data(), eps, out.data());
    std::vector<float> in_place = x;
    rms_norm(in_place.data(), kRows, d, weight.data(), eps, in_place.data());
    CHECK(std::memcmp(in_place.data(), out.data(), out.size() * sizeof(float)) == 0);
    for (size_t r = 0; r < kRows; ++r) {
      double sum_squares = 0.0;
      for (size_t i = 0; i < d; ++i) {
        sum_squares += double{x[r * d + i]} * x[r * d + i];
      }
      const double scale = 1.0 / std::sqrt(sum_squares / static_cast<double>(d) + eps);
      for (size_t i = 0; i < d; ++i) {
        const double expected = x[r * d + i] * scale * weight[i];
        INFO("d " << d << " row " << r << " element " << i);
        REQUIRE(std::fabs(out[r * d + i] - expected) <= 1e-5 * std::fabs(expected) + 1e-30);
      }
    }
  }
}

TEST_CASE("rope rotates a small case computed by hand", "[cpu_kernels]") {
  // head_dim 4, base 10000: theta_scale = 10000^(-2/4) = 0.01, so pair 0
  // turns by pos radians and pair 1 by pos / 100.
  const int32_t positions[2] = {0, 3};
  const float input[2][4] = {{1.0f, 2.0f, 3.0f, 4.0f}, {1.0f, 2.0f, 3.0f, 4.0f}};
  const auto rotate = [](double a, double b, double angle, double& out_a, double& out_b) {
    out_a = a * std::cos(angle) - b * std::sin(angle);
    out_b = a * std::sin(angle) + b * std::cos(angle);
  };

  SECTION("interleaved pairs (2i, 2i+1)") {
    std::vector<float> x(&input[0][0], &input[0][0] + 8);
    rope(x.data(), 2, 1, positions, RopeConfig{RopeMode::Interleaved, 4, 10000.0f});
    for (size_t i = 0; i < 4; ++i) {
      CHECK(x[i] == input[0][i]); // position 0 is the identity
    }
    double e[4];
    rotate(1, 2, 3.0, e[0], e[1]);
    rotate(3, 4, 0.03, e[2], e[3]);
    for (size_t i = 0; i < 4; ++i) {
      INFO("element " << i);
      CHECK(x[4 + i] == Approx(e[i]).epsilon(1e-6));
    }
  }
  SECTION("NeoX pairs (i, i + d/2)") {
    std::vector<float> x(&input[0][0], &input[0][0] + 8);
    rope(x.data(), 2, 1, positions, RopeConfig{RopeMode::NeoX, 4, 10000.0f});
    for (size_t i = 0; i < 4; ++i) {
      CHECK(x[i] == input[0][i]);
    }
    double e[4];
    rotate(1, 3, 3.0, e[0], e[2]);
    rotate(2, 4, 0.03, e[1], e[3]);
    for (size_t i = 0; i < 4; ++i) {
      INFO("element " << i);
      CHECK(x[4 + i] == Approx(e[i]).epsilon(1e-6));
    }
  }
  SECTION("frequency factors divide each pair's angle") {
    std::vector<float> x(&input[1][0], &input[1][0] + 4);
    const float factors[2] = {1.0f, 3.0f};
    rope(x.data(), 1, 1, positions + 1, RopeConfig{RopeMode::Interleaved, 4, 10000.0f, factors});
    double e[4];
    rotate(1, 2, 3.0, e[0], e[1]);
    rotate(3, 4, 0.01, e[2], e[3]);
    for (size_t i = 0; i < 4; ++i) {
      INFO("element " << i);
      CHECK(x[i] == Approx(e[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("rope's vector and one-pair paths rotate alike, bit for bit", "[cpu_kernels]") {
  // Head sizes whose pairs fill whole vectors (64), leave tails of every
  // length for both modes (22, 14, 10) or have no whole vector (6).
  std::mt19937 rng(29);
  const int32_t positions[3] = {0, 7, 3001};
  for (size_t d : {64u, 22u, 14u, 10u, 6u})
    for (RopeMode mode : {RopeMode::Interleaved, RopeMode::NeoX}) {
      const RopeConfig config{mode, d, 10000.0f};
      std::vector<float> angles(3 * d);
      rope_angles(positions, 3, config, angles.data());
      const std::vector<float> input = random_vector(3 * 2 * d, rng);
      std::vector<float> x = input;
      rope_rotate(x.data(), 3, 2, angles.data(), config);
      for (size_t t = 0; t < 3; ++t)
        for (size_t h = 0; h < 2; ++h)
          for (size_t i = 0; i < d / 2; ++i) {
            const size_t a = mode == RopeMode::Interleaved ? 2 * i : i;
            const size_t b = mode == RopeMode::Interleaved ? 2 * i + 1 : i + d / 2;
            const size_t base = (t * 2 + h) * d;
            const float c = angles[t * d + i];
            const float s = angles[t * d + d / 2 + i];
            const float x0 = input[base + a];
            const float x1 = input[base + b];
            INFO("head_dim " << d << ", mode " << int(mode) << ", token " << t << ", pair " << i);
            CHECK(x[base + a] == std::fma(x0, c, -(x1 * s)));
            CHECK(x[base + b] == std::fma(x1, c, x0 * s));
          }
    }
}

TEST_CASE("rope follows ggml's angles on many heads and positions", "[cpu_kernels]") {
  std::mt19937 rng(13);
  constexpr size_t kTokens = 5;
  constexpr size_t kHeads = 3;
  constexpr size_t kDim = 128;
  const int32_t positions[kTokens] = {0, 1, 17, 1000, 4095};
  for (RopeMode mode : {RopeMode::Interleaved, RopeMode::NeoX}) {
    const std::vector<float> input = random_vector(kTokens * kHeads * kDim, rng);
    std::vector<float> x = input;
    rope(x.data(), kTokens, kHeads, positions, RopeConfig{mode, kDim, 1000000.0f});
    // ggml's angle for pair i: pos multiplied i times by powf(base, -2/d) in
    // float; the rotation itself in double.
    const float theta_scale = std::pow(1000000.0f, -2.0f / kDim);
    for (size_t t = 0; t < kTokens; ++t) {
      float theta = static_cast<float>(positions[t]);
      for (size_t i = 0; i < kDim / 2; ++i) {
        const size_t a = mode == RopeMode::Interleaved ? 2 * i : i;
        const size_t b = mode == RopeMode::Interleaved ? 2 * i + 1 : i + kDim / 2;
        for (size_t h = 0; h < kHeads; ++h) {
          const size_t base = (t * kHeads + h) * kDim;
          const double x0 = input[base + a];
          const double x1 = input[base + b];
          const double c = std::cos(double{theta});
          const double s = std::sin(double{theta});
          INFO("token " << t << " head " << h << " pair " << i);
          REQUIRE(x[base + a] == Approx(x0 * c - x1 * s).margin(2e-6));
          REQUIRE(x[base + b] == Approx(x0 * s + x1 * c).margin(2e-6));
        }
        theta *= theta_scale;
      }
    }
  }
}

TEST_CASE("silu_mul matches a double-precision reference", "[cpu_kernels]") {
  std::mt19937 rng(17);
  constexpr size_t kRows = 3;
  constexpr size_t kCols = 37; // a partial chunk at the end
  std::vector<float> gate = random_vector(kRows * kCols, rng, 12.0f);
  const std::vector<float> up = random_vector(kRows * kCols, rng);
  // Saturated and special inputs.
  gate[0] = 0.0f;
  gate[1] = -100.0f;
  gate[2] = 100.0f;
  gate[3] = -87.5f;
  gate[4] = 88.5f;
  gate[5] = -20.0f;
  std::vector<float> out(kRows * kCols);
  silu_mul(gate.data(), up.data(), kRows, kCols, out.data());
  for (size_t i = 0; i < out.size(); ++i) {
    const double g = gate[i];
    const double expected = g / (1.0 + std::exp(-g)) * up[i];
    INFO("element " << i << " gate " << g);
    REQUIRE(std::fabs(out[i] - expected) <= 2e-6 * std::fabs(expected) + 1e-30);
  }
  std::vector<float> in_place = gate;
  silu_mul(in_place.data(), up.data(), kRows, kCols, in_place.data());
  CHECK(std::memcmp(in_place.data(), out.data(), out.size() * sizeof(float)) == 0);
}

TEST_CASE("scale_f32 rounds each element once", "[cpu_kernels]") {
  std::mt19937 rng(23);
  constexpr size_t kN = 21;
  const std::vector<float> x = random_vector(kN, rng);
  std::vector<float> scaled = x;
  scale_f32(-1.7f, scaled.data(), kN);
  for (size_t i = 0; i < kN; ++i) {
    INFO("element " << i);
    CHECK(scaled[i] == -1.7f * x[i]);
  }
}

TEST_CASE("softmax_f32 finds the maximum wherever it lies", "[cpu_kernels]") {
  // One value 200 above the others: exp(-200) is 0 in f32, but with a
  // maximum taken from the wrong lanes the others come out as exp(0) over
  // exp(87) (where exp saturates), not 0.
  for (float rest : {0.0f, -std::numeric_limits<float>::infinity()}) {
    for (size_t n : {1, 7, 8, 13, 40}) {
      for (size_t at = 0; at < n; ++at) {
        std::vector<float> x(n, rest);
        x[at] = 200.0f;
        softmax_f32(x.data(), n);
        for (size_t i = 0; i < n; ++i) {
          INFO("others " << rest << " n " << n << " maximum at " << at << " element " << i);
          REQUIRE(x[i] == (i == at ? 1.0f : 0.0f));
        }
      }
    }
  }
}

TEST_CASE("softmax_f32 matches a double-precision reference", "[cpu_kernels]") {
  std::mt19937 rng(29);
  for (size_t n : {1, 5, 8, 40, 333}) {
    std::vector<float> x = random_vector(n, rng, 30.0f);
    if (n > 2) {
      x[1] = -std::numeric_limits<float>::infinity(); // a masked position
    }
    const std::vector<float> input = x;
    softmax_f32(x.data(), n);
    double max = -INFINITY;
    for (float v : input) {
      max = std::max(max, double{v});
    }
    double sum = 0.0;
    for (float v : input) {
      sum += std::exp(v - max);
    }
    for (size_t i = 0; i < n; ++i) {
      const double expected = std::exp(input[i] - max) / sum;
      INFO("n " << n << " element " << i);
      REQUIRE(std::fabs(x[i] - expected) <= 2e-6 * expected + 1e-37);
    }
    if (n > 2) {
      CHECK(x[1] == 0.0f);
    }
  }
}

TEST_CASE("row kernels are bitwise independent of batch size, position and threads",
          "[cpu_kernels][batch_invariance]") {
  std::mt19937 rng(31);
  // Wide enough rows that the larger batches run on the OpenMP team.
  constexpr size_t kPool = 70;
  constexpr size_t kDim = 1024;
  constexpr size_t kHeads = 8;
  const std::vector<float> pool = random_vector(kPool * kDim, rng);
  const std::vector<float> up = random_vector(kPool * kDim, rng);
  const std::vector<float> weight = random_vector(kDim, rng);
  std::vector<int32_t> positions(kPool);
  for (size_t i = 0; i < kPool; ++i) {
    positions[i] = static_cast<int32_t>(i * 7 % 500);
  }
  const RopeConfig rope_config{RopeMode::NeoX, kDim / kHeads, 10000.0f};

  // Each kernel applied to rows [first, first + m) of the pool.
  const auto run = [&](size_t first, size_t m) {
    std::vector<float> normed(m * kDim), swiglu(m * kDim);
    rms_norm(pool.data() + first * kDim, m, kDim, weight.data(), 1e-6f, normed.data());
    silu_mul(normed.data(), up.data() + first * kDim, m, kDim, swiglu.data());
    rope(normed.data(), m, kHeads, positions.data() + first, rope_config);
    normed.insert(normed.end(), swiglu.begin(), swiglu.end());
    return normed; // [rope(norm) rows..., swiglu rows...]
  };
  std::vector<std::vector<float>> alone(kPool);
  {
    OmpThreads one(1);
    for (size_t r = 0; r < kPool; ++r) {
      alone[r] = run(r, 1);
    }
  }
  for (int threads : {1, 2}) {
    OmpThreads team(threads);
    for (size_t m : {2, 3, 33, 64, 70}) {
      const size_t first = kPool - m;
      const std::vector<float> batch = run(first, m);
      for (size_t i = 0; i < m; ++i) {
        INFO("threads " << threads << " m " << m << " position " << i);
        REQUIRE(std::memcmp(batch.data() + i * kDim, alone[first + i].data(),
                            kDim * sizeof(float)) == 0);
        REQUIRE(std::memcmp(batch.data() + (m + i) * kDim, alone[first + i].data() + kDim,
                            kDim * sizeof(float)) == 0);
      }
    }
  }
}

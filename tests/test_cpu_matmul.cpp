#include "caflm/cpu/cpu_matmul.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/support/omp_threads.hpp"

using namespace caflm;
using caflm::testing::OmpThreads;

namespace {

// A weight matrix of random values in one storage type, with its exact f32
// values kept for the reference.
struct TestWeight {
  TensorType type;
  uint64_t rows;
  uint64_t cols;
  std::vector<uint8_t> bytes;
  std::vector<float> values; // [rows, cols] what the bytes encode

  WeightView view() const { return WeightView{type, bytes.data(), rows, cols}; }
};

TestWeight make_weight(TensorType type, uint64_t rows, uint64_t cols, std::mt19937& rng) {
  TestWeight w{type, rows, cols, {}, {}};
  w.bytes.resize(rows * tensor_row_bytes(type, cols));
  w.values.resize(rows * cols);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  if (type == TensorType::Q8_0) {
    std::uniform_int_distribution<int> quant(-128, 127); // -128 is legal in a file
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    for (uint64_t block = 0; block < rows * cols / 32; ++block) {
      uint8_t* bytes = w.bytes.data() + block * kQ8_0BlockBytes;
      const uint16_t d = f32_to_f16(scale(rng));
      std::memcpy(bytes, &d, 2);
      for (int j = 0; j < 32; ++j) {
        const auto q = static_cast<int8_t>(quant(rng));
        std::memcpy(bytes + 2 + j, &q, 1);
        w.values[block * 32 + j] = f16_to_f32(d) * q;
      }
    }
    return w;
  }
  for (uint64_t i = 0; i < rows * cols; ++i) {
    const float v = uniform(rng);
    if (type == TensorType::F32) {
      std::memcpy(w.bytes.data() + 4 * i, &v, 4);
      w.values[i] = v;
    } else {
      const uint16_t h = type == TensorType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
      std::memcpy(w.bytes.data() + 2 * i, &h, 2);
      w.values[i] = type == TensorType::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }
  }
  return w;
}

std::vector<float> random_vector(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) {
    x = uniform(rng);
  }
  return v;
}

// The activation row as the Q8_0 kernel sees it, computed the plain way:
// blocks of 32 with d = f16(max|x| / 127) and q = nearest-even(x * 127/max|x|).
std::vector<float> q8_0_round_trip(const float* x, size_t k) {
  std::vector<float> out(k);
  for (size_t b = 0; b < k / 32; ++b) {
    float max_abs = 0.0f;
    for (size_t j = 0; j < 32; ++j) {
      max_abs = std::max(max_abs, std::fabs(x[b * 32 + j]));
    }
    const float d = f16_to_f32(f32_to_f16(max_abs / 127.0f));
    const float inverse = max_abs != 0.0f ? 127.0f / max_abs : 0.0f;
    for (size_t j = 0; j < 32; ++j) {
      out[b * 32 + j] = d * std::nearbyint(x[b * 32 + j] * inverse);
    }
  }
  return out;
}

// Checks y against a double-precision product. Float weights: within
// 1e-5 * sum |x w| (rounding of a 100-term f32 chain is below 6.2e-6 of that).
// Q8_0: against the product with x round-tripped through Q8_0, within the same
// bound, and against the exact product within the quantization error of x.
void check_against_reference(const TestWeight& w, const std::vector<float>& x, size_t m,
                             const std::vector<float>& y, const float* bias) {
  const size_t k = w.cols;
  for (size_t r = 0; r < m; ++r) {
    const float* xr = x.data() + r * k;
    const std::vector<float> xq =
        w.type == TensorType::Q8_0 ? q8_0_round_trip(xr, k) : std::vector<float>(xr, xr + k);
    for (size_t n = 0; n < w.rows; ++n) {
      double exact = 0.0, seen = 0.0, magnitude = 0.0, quantization_error = 0.0;
      for (size_t i = 0; i < k; ++i) {
        const double wv = w.values[n * k + i];
        exact += wv * xr[i];
        seen += wv * xq[i];
        magnitude += std::fabs(wv * xq[i]);
        quantization_error += std::fabs(wv) * std::fabs(double{xr[i]} - xq[i]);
      }
      const double b = bias ? bias[n] : 0.0;
      const double got = y[r * w.rows + n];
      INFO("type " << to_string(w.type) << " row " << r << " col " << n << " k " << k);
      REQUIRE(std::fabs(got - (seen + b)) <= 1e-5 * magnitude + 1e-6 * std::fabs(b) + 1e-30);
      REQUIRE(std::fabs(got - (exact + b)) <=
              1e-5 * magnitude + 1e-6 * std::fabs(b) + quantization_error + 1e-30);
    }
  }
}

const TensorType kAllTypes[] = {TensorType::F32, TensorType::F16, TensorType::BF16,
                                TensorType::Q8_0};

} // namespace

TEST_CASE("linear matches a double-precision product for every weight type", "[cpu_matmul]") {
  std::mt19937 rng(7);
  struct Shape {
    size_t m, n, k;
  };
  // k = 77 and 260 leave a partial chunk of 8 (float types only); n = 101
  // crosses column tiles with a ragged edge; m covers every row-group shape.
  const Shape shapes[] = {{1, 1, 32}, {3, 101, 96}, {9, 50, 256}, {6, 7, 77}, {4, 130, 260}};
  for (TensorType type : kAllTypes) {
    for (const Shape& s : shapes) {
      if (type == TensorType::Q8_0 && s.k % 32 != 0) {
        continue;
      }
      const TestWeight w = make_weight(type, s.n, s.k, rng);
      const std::vector<float> x = random_vector(s.m * s.k, rng);
      const std::vector<float> bias = random_vector(s.n, rng);
      std::vector<float> y(s.m * s.n);
      linear(w.view(), x.data(), s.m, y.data(), nullptr);
      check_against_reference(w, x, s.m, y, nullptr);
      linear(w.view(), x.data(), s.m, y.data(), bias.data());
      check_against_reference(w, x, s.m, y, bias.data());
    }
  }
}

TEST_CASE("linear quantizes an all-zero activation block to zero", "[cpu_matmul]") {
  std::mt19937 rng(11);
  const TestWeight w = make_weight(TensorType::Q8_0, 5, 64, rng);
  std::vector<float> x = random_vector(64, rng);
  std::fill(x.begin(), x.begin() + 32, 0.0f);
  std::vector<float> y(5);
  linear(w.view(), x.data(), 1, y.data(), nullptr);
  check_against_reference(w, x, 1, y, nullptr);
}

TEST_CASE("linear rejects a Q8_0 weight whose row is not whole blocks", "[cpu_matmul]") {
  const std::vector<uint8_t> bytes(1024);
  const std::vector<float> x(40);
  std::vector<float> y(2);
  REQUIRE_THROWS_AS(
      linear(WeightView{TensorType::Q8_0, bytes.data(), 2, 40}, x.data(), 1, y.data(), nullptr),
      std::invalid_argument);
}

TEST_CASE("linear rows are bitwise independent of batch size, position and threads",
          "[cpu_matmul][batch_invariance]") {
  std::mt19937 rng(3);
  // n = 110 spans three column tiles with a ragged last one; k = 260 leaves a
  // partial chunk for the float types. The pool of distinct rows is larger
  // than any batch, so each batch takes a rotated window of it.
  constexpr size_t kPool = 520;
  constexpr size_t kN = 110;
  std::vector<size_t> batch_sizes;
  for (size_t m = 1; m <= 64; ++m) {
    batch_sizes.push_back(m);
  }
  for (size_t m : {100, 255, 257, 512}) {
    batch_sizes.push_back(m);
  }
  for (TensorType type : kAllTypes) {
    const size_t k = type == TensorType::Q8_0 ? 256 : 260;
    const TestWeight w = make_weight(type, kN, k, rng);
    const std::vector<float> pool = random_vector(kPool * k, rng);
    const std::vector<float> bias = random_vector(kN, rng);

    // Each row alone, single-threaded: the result every batch must reproduce.
    std::vector<float> alone(kPool * kN);
    {
      OmpThreads one(1);
      for (size_t r = 0; r < kPool; ++r) {
        linear(w.view(), pool.data() + r * k, 1, alone.data() + r * kN, bias.data());
      }
    }
    for (int threads : {1, 2}) {
      OmpThreads team(threads);
      for (size_t m : batch_sizes) {
        for (size_t shift : {size_t{0}, size_t{37}}) {
          std::vector<float> x(m * k);
          for (size_t i = 0; i < m; ++i) {
            const size_t source = (shift + i) % kPool;
            std::memcpy(x.data() + i * k, pool.data() + source * k, k * sizeof(float));
          }
          std::vector<float> y(m * kN);
          linear(w.view(), x.data(), m, y.data(), bias.data());
          for (size_t i = 0; i < m; ++i) {
            const size_t source = (shift + i) % kPool;
            INFO("type " << to_string(type) << " threads " << threads << " m " << m << " position "
                         << i << " source row " << source);
            REQUIRE(std::memcmp(y.data() + i * kN, alone.data() + source * kN,
                                kN * sizeof(float)) == 0);
          }
        }
      }
    }
  }
}

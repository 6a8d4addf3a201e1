#include "caflm/cpu/cpu_matmul.hpp"
#include "caflm/cpu/quantized_matmul.hpp"
#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/quantize.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
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
      uint8_t* bytes = w.bytes.data() + block * sizeof(BlockQ8_0);
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
  if (tensor_block_size(type) > 1) {
    // The other quantized types: random rows through ggml's reference
    // quantizer, the values as ggml decodes them.
    const size_t row_bytes = tensor_row_bytes(type, cols);
    std::vector<float> row(cols);
    for (uint64_t r = 0; r < rows; ++r) {
      for (float& v : row) {
        v = uniform(rng);
      }
      const std::vector<uint8_t> bytes = quantize_row(type, row.data(), cols);
      std::memcpy(w.bytes.data() + r * row_bytes, bytes.data(), row_bytes);
      dequantize_row(type, bytes.data(), cols, w.values.data() + r * cols);
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

// The activation row as a quantized kernel sees it: quantized by ggml's
// reference quantizer to the weight type's activation format (Q8_0, Q8_1 or
// Q8_K), then d * q. For Q8_1 the kernels take the weight's min m times the
// block's s, which ggml stores as f16(d * sum q) (d unrounded), not as the
// sum of d * q: `s_error` is the sum over blocks of |s - f16(d) * sum q|.
struct RoundTrip {
  std::vector<float> values;
  double s_error = 0.0;
};

RoundTrip activation_round_trip(TensorType weight_type, const float* x, size_t k) {
  const TensorType act = detail::activation_type(weight_type);
  const std::vector<uint8_t> bytes = quantize_row(act, x, k);
  RoundTrip out{std::vector<float>(k), 0.0};
  for (size_t b = 0; b < k / tensor_block_size(act); ++b) {
    const uint8_t* block = bytes.data() + b * tensor_block_bytes(act);
    if (act == TensorType::Q8_K) {
      BlockQ8_K q;
      std::memcpy(&q, block, sizeof q);
      for (size_t j = 0; j < 256; ++j) {
        out.values[b * 256 + j] = q.d * q.qs[j];
      }
      continue;
    }
    uint16_t d;
    std::memcpy(&d, block, 2);
    const size_t quants = act == TensorType::Q8_1 ? 4 : 2;
    int sum = 0;
    for (size_t j = 0; j < 32; ++j) {
      const auto q = static_cast<int8_t>(block[quants + j]);
      out.values[b * 32 + j] = f16_to_f32(d) * q;
      sum += q;
    }
    if (act == TensorType::Q8_1) {
      uint16_t s;
      std::memcpy(&s, block + 2, 2);
      out.s_error += std::fabs(double{f16_to_f32(s)} - double{f16_to_f32(d)} * sum);
    }
  }
  return out;
}

// Checks y against a double-precision product. Float weights: within
// 1e-5 * sum |x w| (rounding of a 100-term f32 chain is below 6.2e-6 of that).
// Quantized weights: against the product with x round-tripped through its
// activation format within float rounding, bounded by 1e-5 * sum |x^| * 4
// max|w| (the kernels' float terms are block sums of scale * quant * x, with
// mins d * q and m apart, each at most about 3 max|w| * |x| per value), and
// against the exact product within that plus the quantization error of x,
// sum |w| |x - x^|. Q8_1 adds the f16 rounding of its block sums (RoundTrip).
void check_against_reference(const TestWeight& w, const std::vector<float>& x, size_t m,
                             const std::vector<float>& y, const float* bias) {
  const size_t k = w.cols;
  const bool quantized = tensor_block_size(w.type) > 1;
  double w_max = 0.0;
  for (float v : w.values) {
    w_max = std::max(w_max, std::fabs(double{v}));
  }
  for (size_t r = 0; r < m; ++r) {
    const float* xr = x.data() + r * k;
    const RoundTrip trip = quantized ? activation_round_trip(w.type, xr, k)
                                     : RoundTrip{std::vector<float>(xr, xr + k), 0.0};
    const std::vector<float>& xq = trip.values;
    // A block's m (Q4_1, Q5_1) is its smallest value, so |m| <= max|w|.
    const double s_slack = w_max * trip.s_error;
    for (size_t n = 0; n < w.rows; ++n) {
      double exact = 0.0, seen = 0.0, magnitude = 0.0, quantization_error = 0.0;
      for (size_t i = 0; i < k; ++i) {
        const double wv = w.values[n * k + i];
        exact += wv * xr[i];
        seen += wv * xq[i];
        magnitude += quantized ? 4.0 * w_max * std::fabs(xq[i]) : std::fabs(wv * xq[i]);
        quantization_error += std::fabs(wv) * std::fabs(double{xr[i]} - xq[i]);
      }
      const double b = bias ? bias[n] : 0.0;
      const double got = y[r * w.rows + n];
      INFO("type " << to_string(w.type) << " row " << r << " col " << n << " k " << k);
      REQUIRE(std::fabs(got - (seen + b)) <=
              1e-5 * magnitude + 1e-6 * std::fabs(b) + s_slack + 1e-30);
      REQUIRE(std::fabs(got - (exact + b)) <=
              1e-5 * magnitude + 1e-6 * std::fabs(b) + s_slack + quantization_error + 1e-30);
    }
  }
}

// Rows of a quantized type are whole blocks of 32 or 256 values.
bool fits(TensorType type, size_t k) {
  return k % tensor_block_size(type) == 0;
}

} // namespace

// The instruction sets of the quantized kernels this CPU can run.
std::vector<MatmulIsa> supported_isas() {
  std::vector<MatmulIsa> isas;
  for (MatmulIsa isa : {MatmulIsa::Avx2, MatmulIsa::Avx512, MatmulIsa::Amx}) {
    if (matmul_isa_supported(isa)) {
      isas.push_back(isa);
    }
  }
  return isas;
}

TEST_CASE("linear matches a double-precision product for every weight type", "[cpu_matmul]") {
  std::mt19937 rng(7);
  struct Shape {
    size_t m, n, k;
  };
  // k = 77 and 260 leave a partial chunk of 8 (float types only), k = 96 and
  // 288 an odd number of 32-blocks, k = 512 and 768 several super-blocks;
  // n = 101 crosses column tiles with a ragged edge and a ragged column
  // group; m covers every row-group shape.
  // m = 16 and more fill the AMX kernels' 16-row panels (with rows left over
  // for the AVX-512 kernels at 35).
  const Shape shapes[] = {{1, 1, 32},   {3, 101, 96}, {9, 50, 256}, {6, 7, 77},    {4, 130, 260},
                          {5, 37, 512}, {2, 9, 768},  {7, 13, 288}, {16, 45, 288}, {35, 70, 512}};
  for (TensorType type : kWeightTypes) {
    for (MatmulIsa isa : supported_isas()) {
      for (const Shape& s : shapes) {
        if (!fits(type, s.k)) {
          continue;
        }
        const TestWeight w = make_weight(type, s.n, s.k, rng);
        const std::vector<float> x = random_vector(s.m * s.k, rng);
        const std::vector<float> bias = random_vector(s.n, rng);
        std::vector<float> y(s.m * s.n);
        INFO("isa " << to_string(isa));
        linear(w.view(), x.data(), s.m, y.data(), nullptr, isa);
        check_against_reference(w, x, s.m, y, nullptr);
        linear(w.view(), x.data(), s.m, y.data(), bias.data(), isa);
        check_against_reference(w, x, s.m, y, bias.data());
      }
    }
  }
}

// A quantized weight whose every quant and sub-block scale is the largest
// its type stores (all bits set; Q6_K's signed scales 127; Q8_0's quants
// -128), d (and the K-quants' dmin) `scale`.
template <typename Block>
TestWeight make_extreme_weight(TensorType type, uint64_t rows, uint64_t cols, float scale) {
  TestWeight w{type, rows, cols, {}, {}};
  // All bits set: every unsigned quant at its largest. Q8_0's signed quants
  // at -128 instead, the one magnitude above 127.
  w.bytes.assign(rows * tensor_row_bytes(type, cols),
                 std::is_same_v<Block, BlockQ8_0> ? uint8_t{0x80} : uint8_t{0xFF});
  const uint16_t d = f32_to_f16(scale);
  for (size_t b = 0; b < rows * cols / tensor_block_size(type); ++b) {
    Block block;
    std::memcpy(&block, w.bytes.data() + b * sizeof block, sizeof block);
    block.d = d;
    if constexpr (std::is_same_v<Block, BlockQ6_K>) {
      std::fill(std::begin(block.scales), std::end(block.scales), int8_t{127});
    } else if constexpr (std::is_same_v<Block, BlockQ2_K> || std::is_same_v<Block, BlockQ4_K> ||
                         std::is_same_v<Block, BlockQ5_K>) {
      block.dmin = d;
    }
    std::memcpy(w.bytes.data() + b * sizeof block, &block, sizeof block);
  }
  w.values.resize(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    dequantize_row(type, w.bytes.data() + r * tensor_row_bytes(type, cols), cols,
                   w.values.data() + r * cols);
  }
  return w;
}

// The kernels sum several quants' products in int16 lanes before a block's
// or sub-block's scale applies; the largest quants against activations that
// quantize to +-127 must not wrap or saturate there.
TEST_CASE("quantized linear holds the largest quants against the largest activations",
          "[cpu_matmul]") {
  constexpr size_t kRows = 11, kCols = 512;
  const TestWeight weights[] = {
      make_extreme_weight<BlockQ4_0>(TensorType::Q4_0, kRows, kCols, 0.01f),
      make_extreme_weight<BlockQ5_0>(TensorType::Q5_0, kRows, kCols, 0.01f),
      make_extreme_weight<BlockQ8_0>(TensorType::Q8_0, kRows, kCols, 0.01f),
      make_extreme_weight<BlockQ2_K>(TensorType::Q2_K, kRows, kCols, 0.01f),
      make_extreme_weight<BlockQ3_K>(TensorType::Q3_K, kRows, kCols, 0.01f),
      make_extreme_weight<BlockQ4_K>(TensorType::Q4_K, kRows, kCols, 0.01f),
      make_extreme_weight<BlockQ5_K>(TensorType::Q5_K, kRows, kCols, 0.01f),
      make_extreme_weight<BlockQ6_K>(TensorType::Q6_K, kRows, kCols, 0.01f)};
  for (const TestWeight& w : weights) {
    for (MatmulIsa isa : supported_isas()) {
      // m = 2 and 6 take both the decoded and the interleaved AVX2 paths.
      for (size_t m : {size_t{2}, size_t{6}}) {
        // Equal magnitudes: every activation quantizes to -127 (the first
        // value sets Q8_K's sign) or, in the alternating rows, to +-127.
        std::vector<float> x(m * kCols);
        for (size_t r = 0; r < m; ++r) {
          for (size_t i = 0; i < kCols; ++i) {
            x[r * kCols + i] = r % 2 == 0 ? 1.5f : (i % 2 == 0 ? -1.5f : 1.5f);
          }
        }
        std::vector<float> y(m * kRows);
        INFO("type " << to_string(w.type) << " isa " << to_string(isa) << " m " << m);
        linear(w.view(), x.data(), m, y.data(), nullptr, isa);
        check_against_reference(w, x, m, y, nullptr);
      }
    }
  }
}

TEST_CASE("quantized linear gives the same bits with AMX tiles as with AVX-512 alone",
          "[cpu_matmul][batch_invariance]") {
  if (!matmul_isa_supported(MatmulIsa::Amx)) {
    WARN("skipped: this CPU (or its kernel) offers no AMX-INT8 tiles to this process");
    return;
  }
  std::mt19937 rng(5);
  for (TensorType type : kWeightTypes) {
    if (tensor_block_size(type) == 1) {
      continue; // float weights take the AVX-512 kernels under both
    }
    // One to three blocks fill the tiles' pipeline only partly; 9 or more
    // run it through.
    const size_t block = tensor_block_size(type);
    for (size_t k : {block, 2 * block, 3 * block, fits(type, 288) ? size_t{288} : size_t{512}}) {
      // 64 whole columns besides a ragged group: Q8_0's whole groups take
      // the tiles from the weights in place, the others from decoded rows.
      const size_t n = k == block ? 64 : 75;
      const TestWeight w = make_weight(type, n, k, rng);
      const std::vector<float> bias = random_vector(n, rng);
      // Rows below amx_min_rows() take the AVX-512 kernels under both.
      for (size_t m : {1, 16, 35, 64, 70}) {
        const std::vector<float> x = random_vector(m * k, rng);
        std::vector<float> with_avx512(m * n);
        std::vector<float> with_amx(m * n);
        linear(w.view(), x.data(), m, with_avx512.data(), bias.data(), MatmulIsa::Avx512);
        linear(w.view(), x.data(), m, with_amx.data(), bias.data(), MatmulIsa::Amx);
        INFO("type " << to_string(type) << " k " << k << " m " << m);
        REQUIRE(std::memcmp(with_avx512.data(), with_amx.data(), m * n * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("linear_shared_input gives every weight the bits of its own linear()",
          "[cpu_matmul][batch_invariance]") {
  // Q4_K_M-like mixes (Q4_K with Q6_K: one Q8_K quantization for both),
  // legacy formats with and without a min, a float weight among them, and
  // the same format twice with something else between; float weights of one
  // type (computed in one parallel loop) and of several.
  const std::vector<std::vector<TensorType>> groups = {
      {TensorType::Q4_K, TensorType::Q4_K, TensorType::Q6_K},
      {TensorType::Q8_0, TensorType::Q4_1, TensorType::F16, TensorType::Q8_0},
      {TensorType::Q5_K, TensorType::Q5_0, TensorType::Q2_K, TensorType::Q5_1},
      {TensorType::F32, TensorType::F32, TensorType::F32},
      {TensorType::F16, TensorType::BF16, TensorType::BF16, TensorType::F32}};
  std::mt19937 rng(23);
  constexpr size_t k = 512;
  // 70 rows: every K kind on the AMX tiles (from 64 rows), the products of
  // one activation format in one call, and rows after the last panel.
  for (const std::vector<TensorType>& types : groups)
    for (MatmulIsa isa : supported_isas())
      for (size_t m : {1, 16, 35, 70}) {
        std::vector<TestWeight> weights;
        std::vector<std::vector<float>> biases, shared, alone;
        for (TensorType type : types) {
          // 1, 2, 3 and 3 tiles of 48 columns.
          const size_t n = 40 + 29 * weights.size();
          weights.push_back(make_weight(type, n, k, rng));
          biases.push_back(random_vector(n, rng));
          shared.emplace_back(m * n, -1.0f);
          alone.emplace_back(m * n, -2.0f);
        }
        const std::vector<float> x = random_vector(m * k, rng);
        std::vector<WeightView> views;
        for (const TestWeight& w : weights)
          views.push_back(w.view());
        switch (types.size()) {
        case 3:
          linear_shared_input(x.data(), m,
                              {{&views[0], shared[0].data(), biases[0].data()},
                               {&views[1], shared[1].data(), nullptr},
                               {&views[2], shared[2].data(), biases[2].data()}},
                              isa);
          break;
        default:
          linear_shared_input(x.data(), m,
                              {{&views[0], shared[0].data(), biases[0].data()},
                               {&views[1], shared[1].data(), nullptr},
                               {&views[2], shared[2].data(), biases[2].data()},
                               {&views[3], shared[3].data(), nullptr}},
                              isa);
          break;
        }
        for (size_t i = 0; i < weights.size(); ++i) {
          linear(views[i], x.data(), m, alone[i].data(), i % 2 == 0 ? biases[i].data() : nullptr,
                 isa);
          INFO(to_string(isa) << ", m " << m << ", weight " << i << " " << to_string(types[i]));
          CHECK(std::memcmp(shared[i].data(), alone[i].data(), alone[i].size() * sizeof(float)) ==
                0);
        }
      }
  // A weight whose rows are not whole blocks is refused, as linear() does.
  const std::vector<uint8_t> bytes(4096);
  const WeightView ragged{TensorType::Q4_K, bytes.data(), 2, 320};
  std::vector<float> y(2);
  const std::vector<float> x(320);
  REQUIRE_THROWS_AS(linear_shared_input(x.data(), 1, {{&ragged, y.data(), nullptr}}),
                    std::invalid_argument);
}

TEST_CASE("linear_shared_input requantizes x for a weight of another width only after the "
          "weights waiting on the old rows ran",
          "[cpu_matmul][batch_invariance]") {
  // Two Q8_0 weights of 512 inputs, then one of 256 that takes x as
  // [m, 256]: the same activation format at another width, whose quantized
  // rows replace the shared ones.
  std::mt19937 rng(29);
  for (MatmulIsa isa : supported_isas())
    for (size_t m : {1, 16}) {
      const TestWeight a = make_weight(TensorType::Q8_0, 70, 512, rng);
      const TestWeight b = make_weight(TensorType::Q8_0, 50, 512, rng);
      const TestWeight c = make_weight(TensorType::Q8_0, 60, 256, rng);
      const WeightView va = a.view(), vb = b.view(), vc = c.view();
      const std::vector<float> x = random_vector(m * 512, rng);
      std::vector<float> ya(m * 70), yb(m * 50), yc(m * 60);
      linear_shared_input(
          x.data(), m,
          {{&va, ya.data(), nullptr}, {&vb, yb.data(), nullptr}, {&vc, yc.data(), nullptr}}, isa);
      std::vector<float> alone_a(ya.size()), alone_b(yb.size()), alone_c(yc.size());
      linear(va, x.data(), m, alone_a.data(), nullptr, isa);
      linear(vb, x.data(), m, alone_b.data(), nullptr, isa);
      linear(vc, x.data(), m, alone_c.data(), nullptr, isa);
      INFO(to_string(isa) << ", m " << m);
      CHECK(std::memcmp(ya.data(), alone_a.data(), ya.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(yb.data(), alone_b.data(), yb.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(yc.data(), alone_c.data(), yc.size() * sizeof(float)) == 0);
    }
}

TEST_CASE("linear quantizes an all-zero activation block to zero", "[cpu_matmul]") {
  std::mt19937 rng(11);
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_1, TensorType::Q4_K}) {
    for (MatmulIsa isa : supported_isas()) {
      const TestWeight w = make_weight(type, 5, 512, rng);
      std::vector<float> x = random_vector(512, rng);
      std::fill(x.begin(), x.begin() + 256, 0.0f);
      std::vector<float> y(5);
      INFO("isa " << to_string(isa));
      linear(w.view(), x.data(), 1, y.data(), nullptr, isa);
      check_against_reference(w, x, 1, y, nullptr);
    }
  }
}

TEST_CASE("linear rejects a quantized weight whose row is not whole blocks", "[cpu_matmul]") {
  const std::vector<uint8_t> bytes(4096);
  const std::vector<float> x(320);
  std::vector<float> y(2);
  REQUIRE_THROWS_AS(
      linear(WeightView{TensorType::Q8_0, bytes.data(), 2, 40}, x.data(), 1, y.data(), nullptr),
      std::invalid_argument);
  REQUIRE_THROWS_AS(
      linear(WeightView{TensorType::Q4_K, bytes.data(), 2, 320}, x.data(), 1, y.data(), nullptr),
      std::invalid_argument);
}

TEST_CASE("linear names the type it cannot compute with", "[cpu_matmul]") {
  const std::vector<uint8_t> bytes(4096);
  const std::vector<float> x(256);
  std::vector<float> y(2);
  for (TensorType type : {TensorType::Q8_1, TensorType::Q8_K}) {
    try {
      linear(WeightView{type, bytes.data(), 2, 256}, x.data(), 1, y.data(), nullptr);
      FAIL("no exception for " << to_string(type));
    } catch (const std::invalid_argument& e) {
      REQUIRE(std::string(e.what()).find(to_string(type)) != std::string::npos);
    }
  }
}

TEST_CASE("linear rows are bitwise independent of batch size, position and threads",
          "[cpu_matmul][batch_invariance]") {
  std::mt19937 rng(3);
  // n = 110 spans three column tiles with a ragged last one and a ragged
  // column group; k = 260 leaves a partial chunk for the float types, k = 288
  // an odd number of blocks for the legacy quants, k = 512 two super-blocks
  // for the K-quants. The pool of distinct rows is larger than any batch, so
  // each batch takes a rotated window of it.
  constexpr size_t kPool = 520;
  constexpr size_t kN = 110;
  std::vector<size_t> batch_sizes;
  for (size_t m = 1; m <= 64; ++m) {
    batch_sizes.push_back(m);
  }
  for (size_t m : {100, 255, 257, 512}) {
    batch_sizes.push_back(m);
  }
  for (TensorType type : kWeightTypes) {
    for (MatmulIsa isa : supported_isas()) {
      const size_t k = fits(type, 260) ? 260 : fits(type, 288) ? 288 : 512;
      const TestWeight w = make_weight(type, kN, k, rng);
      const std::vector<float> pool = random_vector(kPool * k, rng);
      const std::vector<float> bias = random_vector(kN, rng);

      // Each row alone, single-threaded: the result every batch must reproduce.
      std::vector<float> alone(kPool * kN);
      {
        OmpThreads one(1);
        for (size_t r = 0; r < kPool; ++r) {
          linear(w.view(), pool.data() + r * k, 1, alone.data() + r * kN, bias.data(), isa);
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
            linear(w.view(), x.data(), m, y.data(), bias.data(), isa);
            for (size_t i = 0; i < m; ++i) {
              const size_t source = (shift + i) % kPool;
              INFO("type " << to_string(type) << " isa " << to_string(isa) << " threads " << threads
                           << " m " << m << " position " << i << " source row " << source);
              REQUIRE(std::memcmp(y.data() + i * kN, alone.data() + source * kN,
                                  kN * sizeof(float)) == 0);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("F32 weights give the same bits on a 64-byte boundary and off it",
          "[cpu_matmul][batch_invariance]") {
  // A GGUF file aligns its tensors to 32 bytes: the same matrix may start on
  // a cache line or half way along one, and rows of K = 272 floats are whole
  // lines. Kernels that load whole lines where they can must compute what the
  // others do, for one row (streamed) and for blocks of several.
  std::mt19937 rng(5);
  constexpr size_t kN = 100, kK = 272;
  const TestWeight w = make_weight(TensorType::F32, kN, kK, rng);
  std::vector<uint8_t> storage(w.bytes.size() + 128);
  uint8_t* on_line = storage.data() + (64 - reinterpret_cast<uintptr_t>(storage.data()) % 64) % 64;
  for (MatmulIsa isa : supported_isas()) {
    for (size_t m : {1, 2, 5, 32}) {
      const std::vector<float> x = random_vector(m * kK, rng);
      std::vector<std::vector<float>> results;
      for (uint8_t* at : {on_line, on_line + 32}) {
        std::memcpy(at, w.bytes.data(), w.bytes.size());
        std::vector<float> y(m * kN);
        linear(WeightView{TensorType::F32, at, kN, kK}, x.data(), m, y.data(), nullptr, isa);
        results.push_back(std::move(y));
      }
      INFO("isa " << to_string(isa) << ", " << m << " rows");
      REQUIRE(std::memcmp(results[0].data(), results[1].data(), m * kN * sizeof(float)) == 0);
    }
  }
}

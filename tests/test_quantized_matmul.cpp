#include "caflm/cpu/quantized_matmul.hpp"
#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/quantize.hpp"

#include <catch2/catch.hpp>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace caflm;
using namespace caflm::detail;

namespace {

// One row quantized by quantize_activation_row, packed back into ggml's block
// bytes (the f32 scales of Q8_0/Q8_1 are f16 values, so the packing is exact).
std::vector<uint8_t> quantize_and_pack(TensorType act, const std::vector<float>& x) {
  const size_t k = x.size();
  const size_t block = tensor_block_size(act);
  std::vector<int8_t> q(k);
  std::vector<float> d(k / block);
  std::vector<float> s(k / 32);
  std::vector<int16_t> bsums(k / 16);
  quantize_activation_row(act, x.data(), k,
                          ActivationRow{q.data(), d.data(), s.data(), bsums.data()});
  if (act == TensorType::Q8_0) {
    // Each block's quant sum, for the Q4_0 and Q5_0 kernels' offsets.
    for (size_t b = 0; b < k / 32; ++b) {
      int sum = 0;
      for (size_t i = 0; i < 32; ++i)
        sum += q[32 * b + i];
      REQUIRE(bsums[b] == sum);
    }
  }
  std::vector<uint8_t> bytes(tensor_row_bytes(act, k));
  for (size_t b = 0; b < k / block; ++b) {
    uint8_t* out = bytes.data() + b * tensor_block_bytes(act);
    if (act == TensorType::Q8_K) {
      BlockQ8_K packed{};
      packed.d = d[b];
      std::memcpy(packed.qs, q.data() + 256 * b, 256);
      std::memcpy(packed.bsums, bsums.data() + 16 * b, sizeof packed.bsums);
      std::memcpy(out, &packed, sizeof packed);
    } else {
      const uint16_t d16 = f32_to_f16(d[b]);
      REQUIRE(f16_to_f32(d16) == d[b]); // the scale is an f16 value
      std::memcpy(out, &d16, 2);
      size_t quants = 2;
      if (act == TensorType::Q8_1) {
        const uint16_t s16 = f32_to_f16(s[b]);
        REQUIRE(f16_to_f32(s16) == s[b]);
        std::memcpy(out + 2, &s16, 2);
        quants = 4;
      }
      std::memcpy(out + quants, q.data() + 32 * b, 32);
    }
  }
  return bytes;
}

void require_same_bytes(TensorType act, const std::vector<float>& x) {
  const std::vector<uint8_t> expected = quantize_row(act, x.data(), x.size());
  const std::vector<uint8_t> got = quantize_and_pack(act, x);
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(to_string(act) << " byte " << i << " of block " << i / tensor_block_bytes(act));
    REQUIRE(static_cast<int>(got[i]) == static_cast<int>(expected[i]));
  }
}

} // namespace

TEST_CASE("activation quantization matches ggml's reference quantizers byte for byte",
          "[quantized_matmul]") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::uniform_real_distribution<float> magnitude(-30.0f, 10.0f);
  for (TensorType act : {TensorType::Q8_0, TensorType::Q8_1, TensorType::Q8_K}) {
    for (int trial = 0; trial < 200; ++trial) {
      std::vector<float> x(512);
      // Values over many orders of magnitude, in rows of one scale each.
      const float scale = std::exp2(magnitude(rng));
      for (float& v : x) {
        v = uniform(rng) * scale;
      }
      require_same_bytes(act, x);
    }
  }
}

TEST_CASE("activation quantization matches ggml's for rows of any whole number of blocks",
          "[quantized_matmul]") {
  // The AVX-512 quantizer takes 16 blocks of 32 at a time: rows of fewer,
  // of a multiple, and of a multiple and a few more.
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  for (size_t k : {32, 64, 480, 512, 576, 1056, 2048}) {
    for (TensorType act : {TensorType::Q8_0, TensorType::Q8_1, TensorType::Q8_K}) {
      if (k % tensor_block_size(act) != 0)
        continue;
      std::vector<float> x(k);
      for (size_t i = 0; i < k; ++i)
        x[i] = uniform(rng) * (1.0f + static_cast<float>(i / 32 % 5));
      INFO(to_string(act) << " k " << k);
      require_same_bytes(act, x);
    }
  }
}

TEST_CASE("activation quantization matches on ties, zeros and equal maxima", "[quantized_matmul]") {
  for (TensorType act : {TensorType::Q8_0, TensorType::Q8_1, TensorType::Q8_K}) {
    std::vector<float> x(512, 0.0f);
    SECTION("an all-zero row") {
      require_same_bytes(act, x);
    }
    SECTION("halves: roundf takes ties away from zero, nearest_int to even") {
      // With a block maximum of 127 the scale is 1, so x * (1 / d) is x itself.
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = static_cast<float>(static_cast<int>(i % 61) - 30) + 0.5f;
      }
      for (size_t b = 0; b < x.size(); b += 32) {
        x[b + 7] = (b / 32) % 2 ? -127.0f : 127.0f;
      }
      require_same_bytes(act, x);
    }
    SECTION("equal magnitudes of both signs: the first one sets Q8_K's sign") {
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = 0.25f * static_cast<float>(static_cast<int>(i % 9) - 4);
      }
      x[3] = -1.5f;
      x[200] = 1.5f;
      x[256 + 10] = 1.5f;
      x[256 + 11] = -1.5f;
      require_same_bytes(act, x);
    }
    SECTION("one zero block between others") {
      std::mt19937 rng(9);
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = i / 256 == 1 ? 0.0f : uniform(rng);
      }
      require_same_bytes(act, x);
    }
  }
}

TEST_CASE("each quantized weight type takes llama.cpp's activation format", "[quantized_matmul]") {
  REQUIRE(activation_type(TensorType::Q4_0) == TensorType::Q8_0);
  REQUIRE(activation_type(TensorType::Q5_0) == TensorType::Q8_0);
  REQUIRE(activation_type(TensorType::Q8_0) == TensorType::Q8_0);
  REQUIRE(activation_type(TensorType::Q4_1) == TensorType::Q8_1);
  REQUIRE(activation_type(TensorType::Q5_1) == TensorType::Q8_1);
  for (TensorType type :
       {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    REQUIRE(activation_type(type) == TensorType::Q8_K);
  }
  for (TensorType type :
       {TensorType::F32, TensorType::F16, TensorType::BF16, TensorType::Q8_1, TensorType::Q8_K}) {
    REQUIRE_THROWS_WITH(activation_type(type), Catch::Contains(to_string(type)));
  }
}

TEST_CASE("decoded weight rows give back ggml's dequantized values", "[quantized_matmul]") {
  // Every quant times its (sub-)block scale, minus the min, is the value ggml
  // decodes, up to the rounding of ggml's own float products.
  std::mt19937 rng(13);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  constexpr size_t k = 512;
  for (TensorType type : kWeightTypes) {
    if (tensor_block_size(type) == 1) {
      continue;
    }
    std::vector<float> row(k);
    for (float& v : row) {
      v = uniform(rng);
    }
    const std::vector<uint8_t> bytes = quantize_row(type, row.data(), k);
    std::vector<float> expected(k);
    dequantize_row(type, bytes.data(), k, expected.data());
    std::vector<uint8_t> q(k);
    std::vector<float> d(k / 32), m(k / 32);
    std::vector<int8_t> scales(k / 16);
    std::vector<int16_t> mins(k / 16);
    decode_weight_row(type, bytes.data(), k, 0, q.data(), d.data(), m.data(), scales.data(),
                      mins.data());
    const QuantKind kind = quant_kind(type);
    for (size_t i = 0; i < k; ++i) {
      double value = 0.0;
      switch (kind) {
      case QuantKind::kLegacySigned:
        value = double{d[i / 32]} * static_cast<int8_t>(q[i]);
        break;
      case QuantKind::kLegacyOffset:
        value = double{d[i / 32]} * (q[i] - stored_offset(type));
        break;
      case QuantKind::kLegacyWithMin:
        value = double{d[i / 32]} * q[i] + m[i / 32];
        break;
      case QuantKind::kSuperWithMin:
        value = double{d[i / 256]} * scales[i / 16] * q[i] - double{m[i / 256]} * mins[i / 16];
        break;
      case QuantKind::kSuperOffset:
        // mins = offset * scale; the offset is mins / scales (4 or 32).
        value = double{d[i / 256]} * (static_cast<double>(scales[i / 16]) * q[i] - mins[i / 16]);
        break;
      }
      INFO(to_string(type) << " value " << i);
      REQUIRE(value == Approx(expected[i]).margin(1e-6).epsilon(1e-6));
    }
  }
}

TEST_CASE("embedding_lookup decodes rows of every quantized type as ggml does",
          "[quantized_matmul]") {
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  constexpr uint64_t kVocab = 5;
  constexpr uint64_t kDim = 512;
  const TokenId tokens[3] = {4, 0, 4};
  for (TensorType type : kWeightTypes) {
    const size_t row_bytes = tensor_row_bytes(type, kDim);
    std::vector<uint8_t> table(kVocab * row_bytes);
    std::vector<float> rows(kVocab * kDim);
    for (uint64_t r = 0; r < kVocab; ++r) {
      std::vector<float> values(kDim);
      for (float& v : values) {
        v = uniform(rng);
      }
      quantize_row_into(type, values.data(), kDim, table.data() + r * row_bytes);
      dequantize_row(type, table.data() + r * row_bytes, kDim, rows.data() + r * kDim);
    }
    std::vector<float> out(3 * kDim);
    embedding_lookup(WeightView{type, table.data(), kVocab, kDim}, tokens, 3, out.data());
    for (size_t i = 0; i < 3; ++i) {
      INFO(to_string(type) << " token " << tokens[i]);
      REQUIRE(std::memcmp(out.data() + i * kDim, rows.data() + tokens[i] * kDim,
                          kDim * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("column tiles cover every column once, evenly across the team", "[quantized_matmul]") {
  for (size_t threads : {1, 2, 3, 8, 16}) {
    for (size_t group_cols : {kGroupCols, kLaneGroupCols, kAmxGroupCols}) {
      for (size_t n : {0, 1, 7, 64, 192, 576, 768, 1000, 1536, 2048, 32000}) {
        const ColumnTiles tiles = quantized_column_tiles(n, group_cols, threads);
        INFO(n << " columns in groups of " << group_cols << " on " << threads << " threads");
        REQUIRE(tiles.begin(0) == 0);
        REQUIRE(tiles.begin(tiles.tiles) == n);
        size_t fewest = SIZE_MAX, most = 0;
        for (size_t t = 0; t < tiles.tiles; ++t) {
          const size_t begin = tiles.begin(t), end = tiles.begin(t + 1);
          REQUIRE(begin <= end);
          REQUIRE(begin % group_cols == 0);
          REQUIRE(end - begin <= std::max<size_t>(64, group_cols));
          const size_t groups = (end - begin + group_cols - 1) / group_cols;
          fewest = std::min(fewest, groups);
          most = std::max(most, groups);
        }
        if (n == 0)
          continue;
        // Never an empty tile, and one group at most between any two: no
        // thread is left with a whole tile to itself while the others wait.
        REQUIRE(fewest >= 1);
        REQUIRE(most - fewest <= 1);
        // Whole rounds of the team, unless every tile is one group.
        REQUIRE((tiles.tiles % threads == 0 || most == 1));
      }
    }
  }
}

TEST_CASE("each thread's column groups name the group it computes next", "[quantized_matmul]") {
  // The kernels ask the caches for next_col0's rows while they compute a
  // group: it must be the group the same thread runs next, even across
  // tiles that the team takes in any order.
  struct Call {
    size_t col0, cols, next_col0;
  };
  for (int threads : {1, 2, 4}) {
    for (size_t group_cols : {kGroupCols, kLaneGroupCols}) {
      for (size_t n : {0, 7, 576, 2048, 5632}) {
        INFO(n << " columns in groups of " << group_cols << " on " << threads << " threads");
        const ColumnTiles tiles = quantized_column_tiles(n, group_cols, threads);
        std::atomic<size_t> next_tile{0};
        std::vector<std::vector<Call>> calls(threads);
#pragma omp parallel num_threads(threads)
        run_claimed_tiles(tiles, next_tile, [&](size_t col0, size_t cols, size_t next_col0) {
          calls[omp_get_thread_num()].push_back({col0, cols, next_col0});
        });
        std::vector<int> computed(n, 0);
        for (const std::vector<Call>& thread_calls : calls) {
          for (size_t i = 0; i < thread_calls.size(); ++i) {
            const Call& call = thread_calls[i];
            REQUIRE(call.col0 % group_cols == 0);
            REQUIRE(call.cols >= 1);
            REQUIRE(call.cols <= group_cols);
            REQUIRE(call.col0 + call.cols <= n);
            for (size_t col = call.col0; col < call.col0 + call.cols; ++col)
              ++computed[col];
            const size_t next = i + 1 < thread_calls.size() ? thread_calls[i + 1].col0 : n;
            REQUIRE(call.next_col0 == next);
          }
        }
        REQUIRE(std::count(computed.begin(), computed.end(), 1) == static_cast<ptrdiff_t>(n));
      }
    }
  }
}

// The lane kernels (every type but Q4_1 and Q5_1: AVX-512's from
// kInterleaveMinRows rows, AVX2's below that and on AVX2 machines) must give
// the bits of the AVX-512 column kernels, which still take the AMX kernels'
// leftover rows and share their float steps with the AMX kernels: a
// sequence's logits must depend neither on which of them its batch picked
// nor on its replica's CPU.
TEST_CASE("AVX-512 and AVX2 lane kernels give the bits of the AVX-512 column kernels",
          "[quantized_matmul][batch_invariance]") {
  if (!matmul_isa_supported(MatmulIsa::Avx512)) {
    WARN("skipped: this CPU has no AVX-512 VNNI");
    return;
  }
  std::mt19937 rng(29);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  // n = 37: two whole groups of 16 and a ragged one; k = 288: an odd number
  // of blocks (512 for the K-quants: two super-blocks); m crosses the
  // in-place rows (AVX-512's Q4_K, Q5_K and Q6_K in blocks of 3 up to
  // kSuperRowsMaxRows), the AVX-512 kernels' 8-row blocks and their
  // remainders.
  constexpr size_t n = 37;
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q5_0, TensorType::Q2_K,
                          TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K}) {
    const size_t k = tensor_block_size(type) == 256 ? 512 : 288;
    std::vector<float> values(n * k);
    for (float& v : values)
      v = uniform(rng);
    const std::vector<uint8_t> bytes = quantize_row(type, values.data(), n * k);
    const size_t row_bytes = tensor_row_bytes(type, k);
    std::vector<float> bias(n);
    for (float& v : bias)
      v = uniform(rng);
    const WeightView w{type, bytes.data(), n, k};
    for (size_t m : {1, 2, 3, 4, 5, 7, 8, 13, 16, 21}) {
      std::vector<float> x(m * k);
      for (float& v : x)
        v = uniform(rng);
      std::vector<float> lanes(m * n);
      quantized_linear(MatmulIsa::Avx512, w, x.data(), m, lanes.data(), bias.data());
      std::vector<float> avx2_lanes(m * n);
      quantized_linear(MatmulIsa::Avx2, w, x.data(), m, avx2_lanes.data(), bias.data());

      QuantizedActivations act;
      act.quantize(activation_type(type), x.data(), m, k);
      const QuantizedRows rows = act.rows();
      std::vector<float> columns(m * n);
      std::vector<uint8_t> q(kGroupCols * k);
      std::vector<float> d(kGroupCols * k / 32), mm(kGroupCols * k / 32);
      std::vector<int8_t> scales(kGroupCols * k / 16);
      std::vector<int16_t> mins(kGroupCols * k / 16);
      for (size_t col0 = 0; col0 < n; col0 += kGroupCols) {
        const size_t cols = std::min(kGroupCols, n - col0);
        for (size_t j = 0; j < cols; ++j)
          decode_weight_row(type, bytes.data() + (col0 + j) * row_bytes, k, j, q.data(), d.data(),
                            mm.data(), scales.data(), mins.data());
        GroupProblem p{};
        p.kind = quant_kind(type);
        p.k = k;
        p.m = m;
        p.x_q = rows.q;
        p.x_d = rows.d;
        p.x_s = rows.s;
        p.x_bsums = rows.bsums;
        p.w = DecodedColumns{q.data(), d.data(), mm.data(), scales.data(), mins.data()};
        p.offset = stored_offset(type);
        p.cols = cols;
        p.y = columns.data() + col0;
        p.y_stride = n;
        p.bias = bias.data() + col0;
        dot_group_avx512(p);
      }
      INFO(to_string(type) << " m " << m);
      REQUIRE(std::memcmp(lanes.data(), columns.data(), m * n * sizeof(float)) == 0);
      REQUIRE(std::memcmp(avx2_lanes.data(), columns.data(), m * n * sizeof(float)) == 0);
    }
  }
}

namespace {

// Value i (< 32) of a Q8_0, Q4_0 or Q5_0 block as the wide lane kernels take
// it, from ggml's block layout: Q8_0's quant plus 128, the others' stored
// nibble (and fifth bit).
int unsigned_quant(TensorType type, const uint8_t* block, size_t i) {
  if (type == TensorType::Q8_0) {
    BlockQ8_0 b;
    std::memcpy(&b, block, sizeof b);
    return b.qs[i] + 128;
  }
  if (type == TensorType::Q4_0) {
    BlockQ4_0 b;
    std::memcpy(&b, block, sizeof b);
    return i < 16 ? b.qs[i] & 0x0F : b.qs[i - 16] >> 4;
  }
  BlockQ5_0 b;
  std::memcpy(&b, block, sizeof b);
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof qh);
  const int low = i < 16 ? b.qs[i] & 0x0F : b.qs[i - 16] >> 4;
  return low | static_cast<int>((qh >> i) & 1u) << 4;
}

} // namespace

TEST_CASE("interleave_unsigned puts quad t of 16 columns side by side, zeros past the last",
          "[quantized_matmul]") {
  if (!matmul_isa_supported(MatmulIsa::Avx512)) {
    WARN("skipped: this CPU has no AVX-512 VNNI");
    return;
  }
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  constexpr size_t k = 96; // 3 blocks
  for (TensorType type : {TensorType::Q8_0, TensorType::Q4_0, TensorType::Q5_0}) {
    for (size_t cols : {16, 9, 1}) {
      std::vector<float> values(cols * k);
      for (float& v : values)
        v = uniform(rng);
      const std::vector<uint8_t> bytes = quantize_row(type, values.data(), cols * k);
      const size_t row_bytes = tensor_row_bytes(type, k);
      const size_t block_bytes = tensor_block_bytes(type);
      // Filled with a value the interleave must overwrite everywhere.
      std::vector<uint8_t> q(kWideLaneGroupCols * k, 0xAB);
      std::vector<float> d(kWideLaneGroupCols * k / 32, -1.0f);
      interleave_unsigned(type, bytes.data(), row_bytes, cols, k, q.data(), d.data());
      INFO(to_string(type) << ", " << cols << " columns");
      for (size_t j = 0; j < kWideLaneGroupCols; ++j) {
        for (size_t b = 0; b < k / 32; ++b) {
          const uint8_t* block = bytes.data() + j * row_bytes + b * block_bytes;
          uint16_t d16 = 0;
          if (j < cols)
            std::memcpy(&d16, block, sizeof d16);
          REQUIRE(d[kWideLaneGroupCols * b + j] == (j < cols ? f16_to_f32(d16) : 0.0f));
          for (size_t i = 0; i < 32; ++i) {
            const size_t quad = 8 * b + i / 4;
            INFO("column " << j << ", value " << 32 * b + i);
            REQUIRE(static_cast<int>(q[(quad * kWideLaneGroupCols + j) * 4 + i % 4]) ==
                    (j < cols ? unsigned_quant(type, block, i) : 0));
          }
        }
      }
    }
  }
}

namespace {

/// `cols` random rows of a K-quant weight, and each column decoded on its
/// own (checked against ggml's values above) into a group of `group_cols`,
/// zeros past the last: the reference of the interleaves' layouts.
struct DecodedReference {
  static constexpr size_t k = 512; // 2 super-blocks
  static constexpr size_t subs = k / 16;
  std::vector<uint8_t> bytes;
  size_t row_bytes;
  std::vector<uint8_t> q;
  std::vector<int8_t> scales;
  std::vector<int16_t> mins;
  std::vector<float> d, dmin;

  DecodedReference(TensorType type, size_t cols, size_t group_cols, std::mt19937& rng)
    : row_bytes(tensor_row_bytes(type, k))
    , q(group_cols * k, 0)
    , scales(group_cols * subs, 0)
    , mins(group_cols * subs, 0)
    , d(group_cols * k / 256, 0.0f)
    , dmin(d.size(), 0.0f) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values(cols * k);
    for (float& v : values)
      v = uniform(rng);
    bytes = quantize_row(type, values.data(), cols * k);
    for (size_t j = 0; j < cols; ++j)
      decode_weight_row(type, bytes.data() + j * row_bytes, k, j, q.data(), d.data(), dmin.data(),
                        scales.data(), mins.data());
  }

  // decode_weight_row puts column j's super-block b at [j * k / 256 + b].
  float d_of(size_t j, size_t b) const { return d[j * (k / 256) + b]; }
  float dmin_of(size_t j, size_t b) const { return dmin[j * (k / 256) + b]; }
};

constexpr TensorType kSuperTypes[] = {TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K,
                                      TensorType::Q5_K, TensorType::Q6_K};

} // namespace

TEST_CASE("interleave_super lays out the decoded columns of every K-quant, zeros past the last",
          "[quantized_matmul]") {
  std::mt19937 rng(41);
  constexpr size_t k = DecodedReference::k, subs = DecodedReference::subs;
  for (TensorType type : kSuperTypes) {
    for (size_t cols : {8, 5, 1}) {
      const DecodedReference ref(type, cols, kLaneGroupCols, rng);
      // Filled with values the interleave must overwrite everywhere.
      std::vector<uint8_t> q(kLaneGroupCols * k, 0xAB);
      std::vector<int16_t> scales(2 * kLaneGroupCols * subs, -7);
      std::vector<int16_t> mins(kLaneGroupCols * subs, -7);
      std::vector<float> d(kLaneGroupCols * k / 256, -1.0f), dmin(d.size(), -1.0f);
      interleave_super(type, ref.bytes.data(), ref.row_bytes, cols, k,
                       {q.data(), scales.data(), mins.data(), d.data(), dmin.data()});
      const bool with_min = quant_kind(type) == QuantKind::kSuperWithMin;
      INFO(to_string(type) << ", " << cols << " columns");
      for (size_t j = 0; j < kLaneGroupCols; ++j) {
        INFO("column " << j);
        for (size_t b = 0; b < k / 256; ++b) {
          REQUIRE(d[kLaneGroupCols * b + j] == ref.d_of(j, b));
          REQUIRE(dmin[kLaneGroupCols * b + j] == (with_min ? ref.dmin_of(j, b) : 0.0f));
        }
        for (size_t i = 0; i < k; ++i)
          REQUIRE(q[(i / 4 * kLaneGroupCols + j) * 4 + i % 4] == ref.q[j * k + i]);
        for (size_t s = 0; s < subs; ++s) {
          // The scale twice: one int32 lane for madd_epi16.
          REQUIRE(scales[2 * (s * kLaneGroupCols + j)] == ref.scales[j * subs + s]);
          REQUIRE(scales[2 * (s * kLaneGroupCols + j) + 1] == ref.scales[j * subs + s]);
          REQUIRE(mins[2 * (s / 2 * kLaneGroupCols + j) + s % 2] == ref.mins[j * subs + s]);
        }
      }
    }
  }
}

TEST_CASE(
    "interleave_super_wide lays out the decoded columns of every K-quant, zeros past the last",
    "[quantized_matmul]") {
  if (!matmul_isa_supported(MatmulIsa::Avx512)) {
    WARN("skipped: this CPU has no AVX-512 VNNI");
    return;
  }
  std::mt19937 rng(37);
  constexpr size_t k = DecodedReference::k, subs = DecodedReference::subs;
  for (TensorType type : kSuperTypes) {
    for (size_t cols : {16, 11, 1}) {
      const DecodedReference ref(type, cols, kWideLaneGroupCols, rng);
      // Filled with values the interleave must overwrite everywhere.
      std::vector<uint8_t> q(kWideLaneGroupCols * k, 0xAB);
      std::vector<int32_t> scales(kWideLaneGroupCols * subs, -7);
      std::vector<int16_t> mins(kWideLaneGroupCols * subs, -7);
      std::vector<float> d(kWideLaneGroupCols * k / 256, -1.0f), dmin(d.size(), -1.0f);
      interleave_super_wide(type, ref.bytes.data(), ref.row_bytes, cols, k,
                            {q.data(), scales.data(), mins.data(), d.data(), dmin.data()});
      const bool with_min = quant_kind(type) == QuantKind::kSuperWithMin;
      INFO(to_string(type) << ", " << cols << " columns");
      for (size_t j = 0; j < kWideLaneGroupCols; ++j) {
        INFO("column " << j);
        for (size_t b = 0; b < k / 256; ++b) {
          REQUIRE(d[kWideLaneGroupCols * b + j] == ref.d_of(j, b));
          REQUIRE(dmin[kWideLaneGroupCols * b + j] == (with_min ? ref.dmin_of(j, b) : 0.0f));
        }
        for (size_t i = 0; i < k; ++i)
          REQUIRE(q[(i / 4 * kWideLaneGroupCols + j) * 4 + i % 4] == ref.q[j * k + i]);
        for (size_t s = 0; s < subs; ++s) {
          REQUIRE(scales[s * kWideLaneGroupCols + j] == ref.scales[j * subs + s]);
          REQUIRE(mins[2 * (s / 2 * kWideLaneGroupCols + j) + s % 2] == ref.mins[j * subs + s]);
        }
      }
    }
  }
}

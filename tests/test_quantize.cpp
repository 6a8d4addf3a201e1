// Block quantization formats (caflm/gguf/quantize.hpp): decoding hand-built
// blocks, agreement with llama.cpp's reference quantizer, error bounds,
// exact grids, zero blocks, non-finite input and bad lengths.

#include "caflm/gguf/quant_blocks.hpp"
#include "caflm/gguf/quantize.hpp"
#include "caflm/gguf/tensor_type.hpp"

#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

using namespace caflm;

namespace {

constexpr TensorType kBlockTypes[] = {
    TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
    TensorType::Q8_0, TensorType::Q8_1, TensorType::Q2_K, TensorType::Q3_K,
    TensorType::Q4_K, TensorType::Q5_K, TensorType::Q6_K, TensorType::Q8_K,
};

constexpr TensorType kLegacyWeightTypes[] = {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0,
                                             TensorType::Q5_1, TensorType::Q8_0};

// f16 bit patterns of a few exact values.
constexpr uint16_t kHalfOne = 0x3c00;      // 1
constexpr uint16_t kHalfHalf = 0x3800;     // 0.5
constexpr uint16_t kHalfQuarter = 0x3400;  // 0.25
constexpr uint16_t kHalfMinusOne = 0xbc00; // -1
constexpr uint16_t kHalfTwo = 0x4000;      // 2
constexpr uint16_t kHalfEighth = 0x3000;   // 0.125

/// A small deterministic generator whose floats are the same on every
/// platform (integer arithmetic and exact conversions only).
class Lcg {
 public:
  explicit Lcg(uint32_t seed)
    : state_(seed) {}
  uint32_t next() {
    state_ = state_ * 1664525u + 1013904223u;
    return state_;
  }
  uint8_t byte() { return static_cast<uint8_t>(next() >> 24); }
  /// Uniform in [-1, 1), a multiple of 2^-23.
  float uniform() {
    const int centred = static_cast<int>(next() >> 8) - (1 << 23);
    return static_cast<float>(centred) / 8388608.0f;
  }

 private:
  uint32_t state_;
};

template <typename Block>
std::vector<float> decode(TensorType type, const Block& block) {
  std::vector<float> out(tensor_block_size(type));
  dequantize_row(type, &block, out.size(), out.data());
  return out;
}

template <typename Block>
Block random_block(Lcg& rng) {
  Block block;
  auto* bytes = reinterpret_cast<uint8_t*>(&block);
  for (size_t i = 0; i < sizeof block; ++i)
    bytes[i] = rng.byte();
  return block;
}

// Q4_K/Q5_K sub-block s's 6-bit scale and min, straight from the layout:
// s < 4 in the low 6 bits of bytes s and s + 4; s >= 4 with the low nibble
// and high nibble of byte s + 4 and the top bits of bytes s - 4 and s.
void k4_scale_min(const uint8_t* packed, int s, int& scale, int& min) {
  if (s < 4) {
    scale = packed[s] & 0x3f;
    min = packed[s + 4] & 0x3f;
  } else {
    scale = (packed[s + 4] & 0x0f) | ((packed[s - 4] >> 6) << 4);
    min = (packed[s + 4] >> 4) | ((packed[s] >> 6) << 4);
  }
}

/// FNV-1a, 64 bits.
uint64_t fnv1a(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t hash = 14695981039346656037ull;
  for (size_t i = 0; i < n; ++i) {
    hash ^= p[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

double rms_error(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double diff = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    sum += diff * diff;
  }
  return std::sqrt(sum / static_cast<double>(a.size()));
}

std::vector<float> round_trip(TensorType type, const std::vector<float>& x) {
  const std::vector<uint8_t> bytes = quantize_row(type, x.data(), x.size());
  std::vector<float> y(x.size());
  dequantize_row(type, bytes.data(), y.size(), y.data());
  return y;
}

} // namespace

// ---- hand-built blocks ----

TEST_CASE("Q4_0 keeps values j and j + 16 in the low and high nibble of byte j", "[quantize]") {
  BlockQ4_0 block{};
  block.d = kHalfHalf;
  for (int j = 0; j < 16; ++j)
    block.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const std::vector<float> out = decode(TensorType::Q4_0, block);
  CHECK(out[0] == -4.0f);  // (0 - 8) * 0.5
  CHECK(out[15] == 3.5f);  // (15 - 8) * 0.5
  CHECK(out[16] == 3.5f);  // high nibble of byte 0 is 15
  CHECK(out[31] == -4.0f); // high nibble of byte 15 is 0
  for (int j = 0; j < 16; ++j) {
    CHECK(out[j] == static_cast<float>(j - 8) * 0.5f);
    CHECK(out[j + 16] == static_cast<float>(7 - j) * 0.5f);
  }
}

TEST_CASE("Q4_1 adds its min to d times the nibble", "[quantize]") {
  BlockQ4_1 block{};
  block.d = kHalfQuarter;
  block.m = kHalfMinusOne;
  for (int j = 0; j < 16; ++j)
    block.qs[j] = static_cast<uint8_t>(j | (3 << 4));
  const std::vector<float> out = decode(TensorType::Q4_1, block);
  CHECK(out[0] == -1.0f);
  CHECK(out[4] == 0.0f);
  CHECK(out[15] == 2.75f);
  CHECK(out[16] == -0.25f);
  CHECK(out[31] == -0.25f);
}

TEST_CASE("Q5_0 takes the fifth bit of value j from bit j of qh", "[quantize]") {
  BlockQ5_0 block{};
  block.d = kHalfOne;
  std::memset(block.qs, 0x00, sizeof block.qs);
  block.qs[1] = 0x5a;              // value 1: 0xa, value 17: 0x5
  const uint32_t qh = 0x80020002u; // bits 1, 17 and 31
  std::memcpy(block.qh, &qh, 4);
  const std::vector<float> out = decode(TensorType::Q5_0, block);
  CHECK(out[0] == -16.0f); // 0 - 16
  CHECK(out[1] == 10.0f);  // (16 + 10) - 16
  CHECK(out[17] == 5.0f);  // (16 + 5) - 16
  CHECK(out[31] == 0.0f);  // (16 + 0) - 16
  CHECK(out[16] == -16.0f);
}

TEST_CASE("Q5_1 adds its min to d times the five-bit value", "[quantize]") {
  BlockQ5_1 block{};
  block.d = kHalfHalf;
  block.m = kHalfTwo;
  std::memset(block.qs, 0xff, sizeof block.qs);
  const uint32_t qh = 0x00010001u; // values 0 and 16 get the fifth bit
  std::memcpy(block.qh, &qh, 4);
  const std::vector<float> out = decode(TensorType::Q5_1, block);
  CHECK(out[0] == 31 * 0.5f + 2.0f);
  CHECK(out[1] == 15 * 0.5f + 2.0f);
  CHECK(out[16] == 31 * 0.5f + 2.0f);
  CHECK(out[17] == 15 * 0.5f + 2.0f);
}

TEST_CASE("Q8_0, Q8_1 and Q8_K are d times the signed byte", "[quantize]") {
  BlockQ8_0 q8_0{};
  q8_0.d = kHalfQuarter;
  BlockQ8_1 q8_1{};
  q8_1.d = kHalfQuarter;
  q8_1.s = 0x7bff; // the stored sum does not enter the values
  for (int j = 0; j < 32; ++j)
    q8_0.qs[j] = q8_1.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const std::vector<float> out0 = decode(TensorType::Q8_0, q8_0);
  const std::vector<float> out1 = decode(TensorType::Q8_1, q8_1);
  CHECK(out0[0] == -32.0f);
  CHECK(out0[31] == 30.0f);
  CHECK(out0 == out1);

  BlockQ8_K q8_k{};
  q8_k.d = 0.1f;
  for (int j = 0; j < kQK_K; ++j)
    q8_k.qs[j] = static_cast<int8_t>(j - 128);
  const std::vector<float> outk = decode(TensorType::Q8_K, q8_k);
  for (int j = 0; j < kQK_K; ++j)
    CHECK(outk[j] == 0.1f * static_cast<float>(j - 128));
}

TEST_CASE("Q2_K packs values l, l+32, l+64, l+96 of each 128 into byte l", "[quantize]") {
  BlockQ2_K block{};
  block.d = kHalfOne;
  block.dmin = kHalfHalf;
  for (int s = 0; s < 16; ++s)
    block.scales[s] = static_cast<uint8_t>((s + 1) | ((15 - s) << 4)); // scale s+1, min 15-s
  block.qs[0] = 0b11100100;      // values 0, 32, 64, 96 are 0, 1, 2, 3
  block.qs[32 + 5] = 0b00000011; // value 128 + 5 is 3
  const std::vector<float> out = decode(TensorType::Q2_K, block);
  CHECK(out[0] == 1 * 0 - 0.5f * 15);  // sub-block 0: scale 1, min 15
  CHECK(out[32] == 3 * 1 - 0.5f * 13); // sub-block 2
  CHECK(out[64] == 5 * 2 - 0.5f * 11); // sub-block 4
  CHECK(out[96] == 7 * 3 - 0.5f * 9);  // sub-block 6
  CHECK(out[133] == 9 * 3 - 0.5f * 7); // sub-block 8
  CHECK(out[1] == -0.5f * 15);

  // Every value of a random block against the layout written out per value.
  Lcg rng(2);
  for (int trial = 0; trial < 8; ++trial) {
    BlockQ2_K b = random_block<BlockQ2_K>(rng);
    b.d = kHalfQuarter;
    b.dmin = kHalfEighth;
    const std::vector<float> values = decode(TensorType::Q2_K, b);
    for (int k = 0; k < kQK_K; ++k) {
      const int s = k / 16;
      const int q = (b.qs[(k / 128) * 32 + k % 32] >> (2 * ((k % 128) / 32))) & 3;
      const float expected = 0.25f * static_cast<float>(b.scales[s] & 0xf) * static_cast<float>(q) -
                             0.125f * static_cast<float>(b.scales[s] >> 4);
      REQUIRE(values[k] == expected);
    }
  }
}

TEST_CASE("Q3_K unpacks 6-bit scales and the hmask high bit", "[quantize]") {
  BlockQ3_K block{};
  block.d = kHalfOne;
  // Scale 0: low nibble 1 of byte 0, top bits 0 -> 1 - 32 = -31.
  // Scale 8: high nibble 2 of byte 0, top bits 3 from bits 4-5 of byte 8 -> 50 - 32 = 18.
  // Scale 15: high nibble of byte 7 = 0xf, top bits from bits 6-7 of byte 11 = 2 -> 47 - 32 = 15.
  block.scales[0] = 0x21;
  block.scales[8] = 0x30;
  block.scales[7] = 0xf0;
  block.scales[11] = 0x80;
  block.qs[0] = 0x03;       // value 0: low bits 3
  block.hmask[0] = 0x01;    // value 0: high bit set, so no -4
  block.qs[32] = 0x01;      // value 128: low bits 1, high bit clear -> 1 - 4
  block.qs[32 + 31] = 0xc0; // value 128 + 96 + 31 = 255: low bits 3, high bit clear
  block.hmask[31] = 0x80;   // value 7 * 32 + 31 = 255: high bit set
  const std::vector<float> out = decode(TensorType::Q3_K, block);
  CHECK(out[0] == -31.0f * 3);
  CHECK(out[1] == -31.0f * -4);  // all-zero bits: 0 - 4
  CHECK(out[128] == 18.0f * -3); // sub-block 8
  CHECK(out[255] == 15.0f * 3);  // sub-block 15

  Lcg rng(3);
  for (int trial = 0; trial < 8; ++trial) {
    BlockQ3_K b = random_block<BlockQ3_K>(rng);
    b.d = kHalfQuarter;
    const std::vector<float> values = decode(TensorType::Q3_K, b);
    for (int k = 0; k < kQK_K; ++k) {
      const int s = k / 16;
      const int low = s < 8 ? b.scales[s] & 0xf : b.scales[s - 8] >> 4;
      const int high = (b.scales[8 + s % 4] >> (2 * (s / 4))) & 3;
      const int scale = (low | (high << 4)) - 32;
      const int q2 = (b.qs[(k / 128) * 32 + k % 32] >> (2 * ((k % 128) / 32))) & 3;
      const bool high_bit = (b.hmask[k % 32] >> (k / 32)) & 1;
      const int q = q2 - (high_bit ? 0 : 4);
      REQUIRE(values[k] == 0.25f * static_cast<float>(scale) * static_cast<float>(q));
    }
  }
}

TEST_CASE("Q4_K unpacks its 6-bit scales and mins and nibbles per 64 values", "[quantize]") {
  BlockQ4_K block{};
  block.d = kHalfHalf;
  block.dmin = kHalfQuarter;
  // Sub-block 1: scale 5 (byte 1), min 9 (byte 5).
  block.scales[1] = 5;
  block.scales[5] = 9;
  // Sub-block 6: scale 0x2a = 42 (low nibble 0xa in byte 10, top bits 2 in byte 2),
  // min 0x13 = 19 (high nibble 3 in byte 10, top bits 1 in byte 6).
  block.scales[10] = 0x3a;
  block.scales[2] = 0x80;
  block.scales[6] = 0x40;
  block.qs[0] = 0x70;      // value 32 (sub-block 1, high nibble of byte 0) = 7
  block.qs[96 + 4] = 0x0b; // value 192 + 4 (sub-block 6, low nibble) = 11
  const std::vector<float> out = decode(TensorType::Q4_K, block);
  CHECK(out[32] == 0.5f * 5 * 7 - 0.25f * 9);
  CHECK(out[33] == -0.25f * 9);
  CHECK(out[196] == 0.5f * 42 * 11 - 0.25f * 19);
  CHECK(out[0] == 0.0f); // sub-block 0: scale and min 0
  CHECK(out[128] == 0.0f);

  Lcg rng(4);
  for (int trial = 0; trial < 8; ++trial) {
    BlockQ4_K b = random_block<BlockQ4_K>(rng);
    b.d = kHalfQuarter;
    b.dmin = kHalfEighth;
    const std::vector<float> values = decode(TensorType::Q4_K, b);
    for (int k = 0; k < kQK_K; ++k) {
      int scale, min;
      k4_scale_min(b.scales, k / 32, scale, min);
      const uint8_t byte = b.qs[(k / 64) * 32 + k % 32];
      const int q = (k % 64) < 32 ? byte & 0xf : byte >> 4;
      const float expected = 0.25f * static_cast<float>(scale) * static_cast<float>(q) -
                             0.125f * static_cast<float>(min);
      REQUIRE(values[k] == expected);
    }
  }
}

TEST_CASE("Q5_K takes the fifth bit of value k from bit k / 32 of qh[k % 32]", "[quantize]") {
  BlockQ5_K block{};
  block.d = kHalfOne;
  block.dmin = kHalfOne;
  block.scales[0] = 1;     // sub-block 0: scale 1, min 0
  block.scales[3] = 2;     // sub-block 3: scale 2, min 0
  block.qs[5] = 0x03;      // value 5 low bits 3
  block.qh[5] = 0x01;      // value 5 fifth bit (bit 0)
  block.qh[9] = 0x08;      // value 3 * 32 + 9 = 105 fifth bit (bit 3)
  block.qs[32 + 9] = 0x40; // value 105 high nibble 4
  const std::vector<float> out = decode(TensorType::Q5_K, block);
  CHECK(out[5] == 19.0f);       // 1 * (16 + 3)
  CHECK(out[105] == 2.0f * 20); // 2 * (16 + 4)
  CHECK(out[6] == 0.0f);

  Lcg rng(5);
  for (int trial = 0; trial < 8; ++trial) {
    BlockQ5_K b = random_block<BlockQ5_K>(rng);
    b.d = kHalfQuarter;
    b.dmin = kHalfEighth;
    const std::vector<float> values = decode(TensorType::Q5_K, b);
    for (int k = 0; k < kQK_K; ++k) {
      int scale, min;
      k4_scale_min(b.scales, k / 32, scale, min);
      const uint8_t byte = b.qs[(k / 64) * 32 + k % 32];
      const int low = (k % 64) < 32 ? byte & 0xf : byte >> 4;
      const int q = low + (((b.qh[k % 32] >> (k / 32)) & 1) << 4);
      const float expected = 0.25f * static_cast<float>(scale) * static_cast<float>(q) -
                             0.125f * static_cast<float>(min);
      REQUIRE(values[k] == expected);
    }
  }
}

TEST_CASE("Q6_K splits values into ql nibbles and qh bit pairs", "[quantize]") {
  BlockQ6_K block{};
  block.d = kHalfHalf;
  for (int s = 0; s < 16; ++s)
    block.scales[s] = static_cast<int8_t>(s - 8);
  // Value 64 + 3 (sub-block 4): high nibble of ql[3], bits 4-5 of qh[3].
  block.ql[3] = 0x50;
  block.qh[3] = 0x20; // top bits 2 -> q = 0x25 - 32 = 5
  // Value 128 + 96 + 31 = 255 (sub-block 15): high nibble of ql[64 + 32 + 31], bits 6-7 of qh[32 +
  // 31].
  block.ql[127] = 0xf0;
  block.qh[63] = 0xc0; // q = 63 - 32 = 31
  const std::vector<float> out = decode(TensorType::Q6_K, block);
  CHECK(out[67] == 0.5f * -4 * 5);
  CHECK(out[255] == 0.5f * 7 * 31);
  CHECK(out[0] == 0.5f * -8 * -32);

  Lcg rng(6);
  for (int trial = 0; trial < 8; ++trial) {
    BlockQ6_K b = random_block<BlockQ6_K>(rng);
    b.d = kHalfQuarter;
    const std::vector<float> values = decode(TensorType::Q6_K, b);
    for (int k = 0; k < kQK_K; ++k) {
      const int chunk = k / 128, group = (k % 128) / 32, l = k % 32;
      const uint8_t low_byte = b.ql[chunk * 64 + (group & 1) * 32 + l];
      const int low = group < 2 ? low_byte & 0xf : low_byte >> 4;
      const int high = (b.qh[chunk * 32 + l] >> (2 * group)) & 3;
      const int q = (low | (high << 4)) - 32;
      REQUIRE(values[k] == 0.25f * static_cast<float>(b.scales[k / 16]) * static_cast<float>(q));
    }
  }
}

// ---- agreement with llama.cpp ----

TEST_CASE("quantize_row writes the bytes of llama.cpp's reference quantizers", "[quantize]") {
  // 8 super-blocks of varied shapes: block b spans [-4^-b, 4^-b) (down to
  // f16-subnormal scales), block 2 is non-negative, block 3 has outliers,
  // block 5 is all zero, block 6 holds two constants.
  std::vector<float> x(8 * kQK_K);
  Lcg rng(12345u);
  for (int b = 0; b < 8; ++b) {
    const float scale = 1.0f / static_cast<float>(1u << (2 * b));
    for (int i = 0; i < kQK_K; ++i) {
      float v = rng.uniform() * scale;
      if (b == 2)
        v = std::fabs(v);
      if (b == 3 && i % 29 == 0)
        v *= 64.0f;
      if (b == 5)
        v = 0.0f;
      if (b == 6)
        v = i < 128 ? 0.375f : -0.375f;
      x[b * kQK_K + i] = v;
    }
  }
  // FNV-1a hashes of the bytes llama.cpp's quantize_row_<type>_ref writes for
  // x, and of the floats its dequantize_row_<type> makes of them (0: ggml has
  // no Q8_1 decoder), from a release build of llama.cpp's ggml (ggml-base,
  // x86-64, no FMA). A mismatch means caflm's files differ from llama.cpp's.
  struct Expected {
    TensorType type;
    uint64_t bytes_hash;
    uint64_t values_hash;
  };
  const Expected expected[] = {
      {TensorType::Q4_0, 0x0cd3d55bfeb5c6ebull, 0xbdec3ba67e077535ull},
      {TensorType::Q4_1, 0xdf5a8e1b0212e3a5ull, 0x479466baa9a917f4ull},
      {TensorType::Q5_0, 0xee1a6ce4ec0e3b5aull, 0xa8370a2d6ef8a9caull},
      {TensorType::Q5_1, 0x0a3c7374a1825095ull, 0x06c85fbb12601337ull},
      {TensorType::Q8_0, 0xe2c82dc4a8db37cbull, 0x81335d6f394351d4ull},
      {TensorType::Q8_1, 0xfcbeb07cb2655d6bull, 0x0000000000000000ull},
      {TensorType::Q2_K, 0x6155e147b3a19a42ull, 0xb211c3b375f1f2b5ull},
      {TensorType::Q3_K, 0x72c380107dc1e9f1ull, 0x4ba74aa3d2f2952dull},
      {TensorType::Q4_K, 0x58b9562875f36fe5ull, 0x555c5be638bde0ddull},
      {TensorType::Q5_K, 0xfe6834822ab11feeull, 0x075a62e97d619e89ull},
      {TensorType::Q6_K, 0x4a8595fd0118e3adull, 0x8fe56e7f25365353ull},
      {TensorType::Q8_K, 0x9d4166b74f7a388bull, 0xf56db26ea5228bb5ull},
  };
  for (const Expected& e : expected) {
    INFO(to_string(e.type));
    const std::vector<uint8_t> bytes = quantize_row(e.type, x.data(), x.size());
    CHECK(fnv1a(bytes.data(), bytes.size()) == e.bytes_hash);
    if (e.values_hash != 0) {
      std::vector<float> values(x.size());
      dequantize_row(e.type, bytes.data(), values.size(), values.data());
      CHECK(fnv1a(values.data(), values.size() * sizeof(float)) == e.values_hash);
    }
  }
}

// ---- error bounds ----

TEST_CASE("round trips stay within llama.cpp's test-quantize-fns bounds", "[quantize]") {
  // test-quantize-fns's data and metric: x = 0.1 + 2 cos(i + offset) over
  // 4096 values, error sqrt(sum of squared differences) / n.
  constexpr size_t n = 4096;
  for (TensorType type : kBlockTypes) {
    INFO(to_string(type));
    const double bound = type == TensorType::Q2_K   ? 0.0075
                         : type == TensorType::Q3_K ? 0.0040
                                                    : 0.002;
    for (float offset : {0.0f, 0.5f, 7.25f}) {
      std::vector<float> x(n);
      for (size_t i = 0; i < n; ++i)
        x[i] = 0.1f + 2 * std::cos(static_cast<float>(i) + offset);
      const std::vector<float> y = round_trip(type, x);
      double sum = 0;
      for (size_t i = 0; i < n; ++i)
        sum += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
      CHECK(std::sqrt(sum) / n < bound);
    }
  }
}

TEST_CASE("round trips of uniform data keep each type's RMS error", "[quantize]") {
  // RMS error per value on uniform [-1, 1) data. A uniform quantizer of step
  // h has RMS error h / sqrt(12): Q8_0's step 1/127 gives 0.0023, Q4_0's 1/8
  // gives 0.036; the bounds leave about 20% over what the types achieve.
  struct Bound {
    TensorType type;
    double rms;
  };
  const Bound bounds[] = {
      {TensorType::Q4_0, 0.045}, {TensorType::Q4_1, 0.042},  {TensorType::Q5_0, 0.022},
      {TensorType::Q5_1, 0.021}, {TensorType::Q8_0, 0.0026}, {TensorType::Q8_1, 0.0026},
      {TensorType::Q2_K, 0.16},  {TensorType::Q3_K, 0.088},  {TensorType::Q4_K, 0.038},
      {TensorType::Q5_K, 0.019}, {TensorType::Q6_K, 0.0093}, {TensorType::Q8_K, 0.0027},
  };
  Lcg rng(99);
  std::vector<float> x(16 * kQK_K);
  for (float& v : x)
    v = rng.uniform();
  for (const Bound& b : bounds) {
    INFO(to_string(b.type));
    const std::vector<float> y = round_trip(b.type, x);
    CHECK(rms_error(x, y) < b.rms);
    // Scaling the data scales the error: the formats are scale-free.
    std::vector<float> small(x);
    for (float& v : small)
      v *= 1.0f / 64;
    CHECK(rms_error(small, round_trip(b.type, small)) < b.rms / 64);
  }
}

// ---- exact grids, zeros, idempotence ----

TEST_CASE("values on a legacy type's grid come back exactly", "[quantize]") {
  Lcg rng(7);
  const float d = 0.0625f;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<float> q8(64), q4(64), q4_1(64), q5(64), q5_1(64);
    for (int b = 0; b < 2; ++b) {
      for (int j = 0; j < 32; ++j) {
        const uint32_t r = rng.next() >> 8;
        q8[b * 32 + j] = d * static_cast<float>(static_cast<int>(r % 255) - 127);
        q4[b * 32 + j] = d * static_cast<float>(static_cast<int>(r % 16) - 8);
        q5[b * 32 + j] = d * static_cast<float>(static_cast<int>(r % 32) - 16);
        q4_1[b * 32 + j] = 1.5f + d * static_cast<float>(r % 16);
        q5_1[b * 32 + j] = -3.0f + d * static_cast<float>(r % 32);
      }
      // Pin each block's extremes so the encoder's scale is exactly d.
      q8[b * 32] = -127 * d;
      q4[b * 32] = -8 * d;
      q5[b * 32] = -16 * d;
      q4_1[b * 32] = 1.5f;
      q4_1[b * 32 + 1] = 1.5f + 15 * d;
      q5_1[b * 32] = -3.0f;
      q5_1[b * 32 + 1] = -3.0f + 31 * d;
    }
    CHECK(round_trip(TensorType::Q8_0, q8) == q8);
    CHECK(round_trip(TensorType::Q8_1, q8) == q8);
    CHECK(round_trip(TensorType::Q4_0, q4) == q4);
    CHECK(round_trip(TensorType::Q5_0, q5) == q5);
    CHECK(round_trip(TensorType::Q4_1, q4_1) == q4_1);
    CHECK(round_trip(TensorType::Q5_1, q5_1) == q5_1);
  }
  // Q8_0 of multiples of d: the quants are the multiples themselves.
  std::vector<float> multiples(32);
  for (int j = 0; j < 32; ++j)
    multiples[j] = 0.5f * static_cast<float>(j * 8 - 127);
  const std::vector<uint8_t> bytes = quantize_row(TensorType::Q8_0, multiples.data(), 32);
  BlockQ8_0 block;
  std::memcpy(&block, bytes.data(), sizeof block);
  CHECK(block.d == kHalfHalf);
  for (int j = 0; j < 32; ++j)
    CHECK(block.qs[j] == j * 8 - 127);
}

TEST_CASE("all-zero rows encode to zero scales and decode to zeros", "[quantize]") {
  const std::vector<float> zeros(2 * kQK_K, 0.0f);
  for (TensorType type : kBlockTypes) {
    INFO(to_string(type));
    const std::vector<uint8_t> bytes = quantize_row(type, zeros.data(), zeros.size());
    std::vector<float> out(zeros.size(), 1.0f);
    dequantize_row(type, bytes.data(), out.size(), out.data());
    CHECK(out == zeros);
  }
  // Spot checks of the stored scales and quants.
  BlockQ4_0 q4_0;
  std::memcpy(&q4_0, quantize_row(TensorType::Q4_0, zeros.data(), 32).data(), sizeof q4_0);
  CHECK(f16_to_f32(q4_0.d) == 0.0f); // -0: ggml divides 0 by -8
  CHECK(q4_0.qs[0] == 0x88);         // x * 0 + 8.5 truncates to 8 in both nibbles
  BlockQ6_K q6_k;
  std::memcpy(&q6_k, quantize_row(TensorType::Q6_K, zeros.data(), kQK_K).data(), sizeof q6_k);
  CHECK(q6_k.d == 0);
  CHECK(q6_k.scales[0] == 0);
  BlockQ8_K q8_k;
  std::memcpy(&q8_k, quantize_row(TensorType::Q8_K, zeros.data(), kQK_K).data(), sizeof q8_k);
  CHECK(q8_k.d == 0.0f);
  CHECK(q8_k.bsums[15] == 0);
}

TEST_CASE("Q8_K stores the sums of each 16 quants", "[quantize]") {
  Lcg rng(8);
  std::vector<float> x(2 * kQK_K);
  for (float& v : x)
    v = rng.uniform() * 3.0f;
  const std::vector<uint8_t> bytes = quantize_row(TensorType::Q8_K, x.data(), x.size());
  for (int b = 0; b < 2; ++b) {
    BlockQ8_K block;
    std::memcpy(&block, bytes.data() + b * sizeof block, sizeof block);
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j)
        sum += block.qs[g * 16 + j];
      CHECK(block.bsums[g] == sum);
    }
  }
}

TEST_CASE("legacy types re-encode their own output unchanged", "[quantize]") {
  Lcg rng(9);
  std::vector<float> x(8 * 32);
  for (float& v : x)
    v = rng.uniform() * 2.5f;
  for (TensorType type : {TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                          TensorType::Q8_0, TensorType::Q8_1}) {
    INFO(to_string(type));
    const std::vector<float> once = round_trip(type, x);
    const std::vector<float> twice = round_trip(type, once);
    CHECK(twice == once);
  }
  for (TensorType type : kLegacyWeightTypes) {
    INFO(to_string(type));
    const std::vector<uint8_t> first = quantize_row(type, x.data(), x.size());
    const std::vector<float> once = round_trip(type, x);
    CHECK(quantize_row(type, once.data(), once.size()) == first);
  }
}

// ---- invalid input ----

TEST_CASE("non-finite values are refused by the block encoders", "[quantize]") {
  for (TensorType type : kBlockTypes) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
          -std::numeric_limits<float>::infinity()}) {
      std::vector<float> x(kQK_K, 0.5f);
      x[37] = bad;
      INFO(to_string(type) << " " << bad);
      CHECK_THROWS_WITH(quantize_row(type, x.data(), x.size()),
                        Catch::Contains(to_string(type)) && Catch::Contains("index 37"));
    }
  }
  // F32/F16/BF16 carry them.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::BF16}) {
    float out = 0;
    dequantize_row(type, quantize_row(type, &nan, 1).data(), 1, &out);
    CHECK(std::isnan(out));
  }
}

TEST_CASE("rows that are not whole blocks are refused, naming the type", "[quantize]") {
  std::vector<float> values(kQK_K + 32, 0.25f);
  std::vector<uint8_t> bytes(4096, 0);
  for (TensorType type : kBlockTypes) {
    const size_t bad = tensor_block_size(type) == 32 ? 48 : kQK_K + 32;
    INFO(to_string(type));
    CHECK_THROWS_WITH(quantize_row(type, values.data(), bad),
                      Catch::Contains(to_string(type)) && Catch::Contains("block size"));
    CHECK_THROWS_AS(quantize_row(type, values.data(), bad), std::invalid_argument);
    CHECK_THROWS_WITH(dequantize_row(type, bytes.data(), bad, values.data()),
                      Catch::Contains(std::string("dequantize_row: ") + to_string(type)));
    CHECK_THROWS_AS(dequantize_row(type, bytes.data(), bad, values.data()), std::invalid_argument);
  }
}

TEST_CASE("quantize_row_into writes what quantize_row returns", "[quantize]") {
  Lcg rng(10);
  std::vector<float> x(2 * kQK_K);
  for (float& v : x)
    v = rng.uniform();
  for (TensorType type : kBlockTypes) {
    INFO(to_string(type));
    const std::vector<uint8_t> expected = quantize_row(type, x.data(), x.size());
    std::vector<uint32_t> storage(expected.size() / 4 + 1, 0xdeadbeef); // 4-byte aligned
    quantize_row_into(type, x.data(), x.size(), storage.data());
    CHECK(std::memcmp(storage.data(), expected.data(), expected.size()) == 0);
  }
}

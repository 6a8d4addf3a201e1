#pragma once

#include <cstdint>

// The block quantization formats of ggml, byte for byte as GGUF files store
// them (ggml-common.h). A row of a quantized tensor is a sequence of blocks;
// each block holds `kBlockSize` consecutive values of the row. Halves are IEEE
// binary16 bit patterns (see f16_to_f32).
//
// Legacy formats (32 values per block): value = d * q (+ m), with q the
// unsigned nibble (minus 8 when there is no m) or the signed byte.
// K-quants (256 values per block, "super-blocks"): 8 or 16 sub-blocks, each
// with its own quantized scale (and min), scaled again by d (and dmin).

namespace caflm {

inline constexpr int kQK4_0 = 32;
inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK8_0 = 32;
inline constexpr int kQK8_1 = 32;
/// Values per K-quant super-block.
inline constexpr int kQK_K = 256;
/// Bytes of the packed 6-bit scales and mins of Q4_K and Q5_K (and of Q3_K's
/// 6-bit scales).
inline constexpr int kKScaleSize = 12;

/// x[j] = d * ((qs[j] & 0xF) - 8), x[j + 16] = d * ((qs[j] >> 4) - 8).
struct BlockQ4_0 {
  std::uint16_t d;
  std::uint8_t qs[kQK4_0 / 2];
};

/// x[j] = d * (qs[j] & 0xF) + m, x[j + 16] = d * (qs[j] >> 4) + m.
struct BlockQ4_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qs[kQK4_1 / 2];
};

/// As Q4_0 with a fifth bit: bit j of qh (little-endian uint32) is the high
/// bit of x[j]; values are q - 16.
struct BlockQ5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK5_0 / 2];
};

/// As Q4_1 with a fifth bit from qh.
struct BlockQ5_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qh[4];
  std::uint8_t qs[kQK5_1 / 2];
};

/// x[j] = d * qs[j].
struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[kQK8_0];
};

/// Activations for Q4_1/Q5_1 dot products: Q8_0 plus s = d * sum(qs).
struct BlockQ8_1 {
  std::uint16_t d;
  std::uint16_t s;
  std::int8_t qs[kQK8_1];
};

/// 2-bit quants in 16 sub-blocks of 16; scales[i] holds a 4-bit scale (low
/// nibble) and a 4-bit min (high nibble): x = d * sc * q - dmin * m.
struct BlockQ2_K {
  std::uint8_t scales[kQK_K / 16];
  std::uint8_t qs[kQK_K / 4];
  std::uint16_t d;
  std::uint16_t dmin;
};

/// 3-bit quants: low 2 bits in qs, high bit in hmask (set means no -4
/// offset); 16 sub-blocks with 6-bit scales packed in 12 bytes, biased by 32.
struct BlockQ3_K {
  std::uint8_t hmask[kQK_K / 8];
  std::uint8_t qs[kQK_K / 4];
  std::uint8_t scales[kKScaleSize];
  std::uint16_t d;
};

/// 4-bit quants in 8 sub-blocks of 32 with 6-bit scales and mins packed in
/// 12 bytes: x = d * sc * q - dmin * m.
struct BlockQ4_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[kKScaleSize];
  std::uint8_t qs[kQK_K / 2];
};

/// As Q4_K with a fifth bit per value in qh.
struct BlockQ5_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[kKScaleSize];
  std::uint8_t qh[kQK_K / 8];
  std::uint8_t qs[kQK_K / 2];
};

/// 6-bit quants (4 low bits in ql, 2 high in qh) minus 32, in 16 sub-blocks
/// of 16 with signed 8-bit scales: x = d * scales[i] * q.
struct BlockQ6_K {
  std::uint8_t ql[kQK_K / 2];
  std::uint8_t qh[kQK_K / 4];
  std::int8_t scales[kQK_K / 16];
  std::uint16_t d;
};

/// Activations for K-quant dot products: a float scale, 256 int8 quants and
/// the sums of each group of 16 quants.
struct BlockQ8_K {
  float d;
  std::int8_t qs[kQK_K];
  std::int16_t bsums[kQK_K / 16];
};

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);
static_assert(sizeof(BlockQ8_K) == 292);

} // namespace caflm

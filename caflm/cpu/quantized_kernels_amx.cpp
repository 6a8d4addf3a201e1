// The AMX (AMX-TILE, AMX-INT8, with AVX-512 around them) kernels of quantized
// linear layers (see quantized_matmul.hpp). This file alone is compiled with
// AMX enabled (caflm/cpu/CMakeLists.txt), and its functions run only where
// the CPU has AMX and the kernel let this process use it (MatmulIsa::Amx).
// Internal linkage and no library templates that emit code, as in
// quantized_kernels_avx512.cpp, so that no AMX or AVX-512 instruction can
// leak into a function another translation unit shares through the linker.
//
// A tile multiply-add takes the integer dot products of 16 weight columns
// (tile A: one decoded weight row per tile row) with 16 rows of x (tile B:
// the x panel of AmxActivations) over 64 values at once, exactly, into 16 x
// 16 int32 sums (tile C: a weight column per tile row, a row of x per lane).
// The float parts are AVX-512, one lane per row of x, and so are, per output
// element, these operations:
// - legacy kinds: per block b of 32, S = the exact integer w . x of the
//   block (stored quants less the offset times sum(x)); acc = fma(float(S) *
//   d_x, d_w, acc), block by block; with a min, also summ = fma(m_w, s_x,
//   summ); then y = acc (+ summ) (+ bias).
// - K kinds: per super-block, S = the exact sum over its values of (scale *
//   (quant - offset)) * x (the products split as 128 * high + low, both
//   int8, each half a tile multiply-add of its own; the offset of Q3_K and
//   Q6_K taken out, so that S is S - M of quantized_kernels_avx512.cpp);
//   offset kinds acc = fma(float(S) * d_x, d_w, acc); kinds with a min also
//   M = the exact x . (each value's sub-block min), a third multiply-add,
//   and acc = fma(float(S) * d_x, d_w, acc), then acc = fnmadd(float(M) *
//   d_x, dmin_w, acc); y = acc (+ bias).
// None of it depends on the batch size, the element's row or column, or the
// thread: a row of x is bitwise the same alone or among others.
#include "caflm/cpu/quantized_matmul.hpp"

#include "caflm/cpu/avx512_intrinsics.hpp"
#include "caflm/cpu/super_block_readers.hpp"
#include "caflm/gguf/quant_blocks.hpp"

#include <cstddef>

namespace caflm::detail {

namespace {

// Tile registers, as macros: GCC's tile intrinsics paste their register
// operands into the assembly text. The legacy kinds': four C, so that
// three blocks' products are in flight while one block's sums are read out,
// and two A and B, so that a block's tiles load while the block before's
// multiply-add still reads the others.
#define CAFLM_TILE_L_C0 0
#define CAFLM_TILE_L_C1 1
#define CAFLM_TILE_L_C2 2
#define CAFLM_TILE_L_C3 3
#define CAFLM_TILE_L_A0 4
#define CAFLM_TILE_L_A1 5
#define CAFLM_TILE_L_B0 6
#define CAFLM_TILE_L_B1 7
// The K kinds': the sums of the low and high halves and of the mins (C),
// the weights' low and high halves and mins (A), and x (B).
#define CAFLM_TILE_S_LOW 0
#define CAFLM_TILE_S_HIGH 1
#define CAFLM_TILE_S_MIN 2
#define CAFLM_TILE_S_A 3
#define CAFLM_TILE_S_A_HIGH 4
#define CAFLM_TILE_S_A_MIN 5
#define CAFLM_TILE_S_B 6

// LDTILECFG's 64-byte operand, palette 1.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr size_t kLanes = 16;

inline __m512 broadcast(float v) {
  return _mm512_set1_ps(v);
}

// Columns of a group of `cols` in its 16-column half `half`.
inline size_t columns_in_half(size_t cols, size_t half) {
  const size_t left = cols - kLanes * half;
  return left < kLanes ? left : kLanes;
}

// out[r] lane j = in[j] lane r: pairs, then quads within 128-bit lanes,
// then lanes. Always inlined, so that both arrays stay in registers.
inline __attribute__((always_inline)) void transpose_16x16(const __m512 (&in)[kLanes],
                                                           __m512 (&out)[kLanes]) {
  __m512 pairs[kLanes];
  for (size_t i = 0; i < kLanes; i += 2) {
    pairs[i] = _mm512_unpacklo_ps(in[i], in[i + 1]);
    pairs[i + 1] = _mm512_unpackhi_ps(in[i], in[i + 1]);
  }
  // quads[4i + c], 128-bit lane L: row 4L + c, columns 4i .. 4i + 3.
  __m512 quads[kLanes];
  for (size_t i = 0; i < kLanes; i += 4) {
    quads[i] = _mm512_shuffle_ps(pairs[i], pairs[i + 2], 0x44);
    quads[i + 1] = _mm512_shuffle_ps(pairs[i], pairs[i + 2], 0xEE);
    quads[i + 2] = _mm512_shuffle_ps(pairs[i + 1], pairs[i + 3], 0x44);
    quads[i + 3] = _mm512_shuffle_ps(pairs[i + 1], pairs[i + 3], 0xEE);
  }
  for (size_t c = 0; c < 4; ++c) {
    const __m512 even_low = _mm512_shuffle_f32x4(quads[c], quads[4 + c], 0x88);
    const __m512 odd_low = _mm512_shuffle_f32x4(quads[c], quads[4 + c], 0xDD);
    const __m512 even_high = _mm512_shuffle_f32x4(quads[8 + c], quads[12 + c], 0x88);
    const __m512 odd_high = _mm512_shuffle_f32x4(quads[8 + c], quads[12 + c], 0xDD);
    out[c] = _mm512_shuffle_f32x4(even_low, even_high, 0x88);
    out[8 + c] = _mm512_shuffle_f32x4(even_low, even_high, 0xDD);
    out[4 + c] = _mm512_shuffle_f32x4(odd_low, odd_high, 0x88);
    out[12 + c] = _mm512_shuffle_f32x4(odd_low, odd_high, 0xDD);
  }
}

// Writes a 16 x 16 block held column by column (block[j] lane r: row r of column j) to y row by
// row: row r's first `cols` values at y + r * y_stride, each + its column's bias where there is
// one (no bias adds nothing: not + 0, which would turn -0 into +0). Whole rows, so that each store
// fills cache lines instead of touching 16 of them a column at a time.
inline void store_block(__m512 (&block)[kLanes], float* y, size_t y_stride, size_t cols,
                        const float* bias) {
  __m512 out[kLanes];
  transpose_16x16(block, out);
  const __mmask16 valid = static_cast<__mmask16>((1u << cols) - 1);
  const __m512 biases = bias != nullptr ? _mm512_maskz_loadu_ps(valid, bias) : _mm512_setzero_ps();
  for (size_t r = 0; r < kLanes; ++r) {
    _mm512_mask_storeu_ps(y + r * y_stride, valid,
                          bias != nullptr ? _mm512_add_ps(out[r], biases) : out[r]);
  }
}

// Transposes `count` <= 16 values of each of 16 rows (row r's at in + r *
// in_stride, 4 bytes each) into count vectors of 16, one per value, stored
// 64 bytes apart from out.
inline void transpose_rows(const void* in, size_t in_stride, size_t count, void* out) {
  const auto valid = static_cast<__mmask16>((1u << count) - 1u);
  __m512 rows[kLanes];
  for (size_t r = 0; r < kLanes; ++r) {
    rows[r] = _mm512_maskz_loadu_ps(valid, static_cast<const uint8_t*>(in) + r * in_stride);
  }
  __m512 columns[kLanes];
  transpose_16x16(rows, columns);
  for (size_t c = 0; c < count; ++c) {
    _mm512_storeu_ps(static_cast<uint8_t*>(out) + 64 * c, columns[c]);
  }
}

// A kernel call's share of AmxGroupProblem::next_weights: `per_step`
// lines asked of L2 at each of its steps. Read from memory by the pass that
// first touches them (Q8_0's scales, a decode or a split), the weights
// stalled that pass on every line, one group's few KiB of rows being too
// short a stream for the hardware prefetchers; asked for while the tiles
// work from L1 and L2, they are at hand.
struct NextWeights {
  const uint8_t* line = nullptr;
  const uint8_t* end = nullptr;
  size_t per_step = 0;

  /// Call `call` of `calls` over `steps` steps each.
  NextWeights(const AmxGroupProblem& p, size_t call, size_t calls, size_t steps) {
    if (p.next_weights == nullptr || steps == 0) {
      return;
    }
    const size_t lines = (p.next_weights_bytes + 63) / 64;
    const size_t first = lines * call / calls;
    const size_t last = lines * (call + 1) / calls;
    line = p.next_weights + 64 * first;
    end = p.next_weights + 64 * last;
    per_step = (last - first + steps - 1) / steps;
  }

  void step() {
    for (size_t i = 0; i < per_step && line < end; ++i, line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
    }
  }
};

// How far a legacy kernel issues a block's products ahead of reading them
// out (one C tile per block in flight besides the one read out), and how
// many blocks' sums it keeps in memory: a block's sums are read out one
// block before they are scaled, so that the vector loads do not wait for the
// tile store.
constexpr size_t kLegacyLead = 3;
constexpr size_t kLegacySumBuffers = 2;
// C tiles a legacy kernel cycles through: the blocks in flight and the one
// read out. issue() and read_out() name each of them.
constexpr size_t kLegacyCTiles = kLegacyLead + 1;
static_assert(kLegacyCTiles == 4, "legacy_half's switches name four C tiles");

// One block's products into tile C: C zeroed, then A's 16 rows of 32
// weights (at a_block, rows a_stride apart) times B's 8 x 64 bytes of x (at
// b_block); signed weights (Q8_0) or unsigned ones (stored with an offset or
// a min). A macro, as the tile registers must be.
#define CAFLM_LEGACY_PRODUCTS(signed_weights, c, a, b, a_block, a_stride, b_block)                 \
  do {                                                                                             \
    _tile_loadd(a, a_block, a_stride);                                                             \
    _tile_loadd(b, b_block, 64);                                                                   \
    _tile_zero(c);                                                                                 \
    if constexpr (signed_weights) {                                                                \
      _tile_dpbssd(c, a, b);                                                                       \
    } else {                                                                                       \
      _tile_dpbusd(c, a, b);                                                                       \
    }                                                                                              \
  } while (false)

// One 16-column half of a legacy group against one x panel.
template <QuantKind kKind>
void legacy_half(const AmxGroupProblem& p, size_t half, size_t panel, NextWeights next) {
  constexpr bool kSigned = kKind == QuantKind::kLegacySigned;
  constexpr bool kOffset = kKind == QuantKind::kLegacyOffset;
  constexpr bool kWithMin = kKind == QuantKind::kLegacyWithMin;
  const size_t k = p.k;
  const size_t nb = k / 32;
  const uint8_t* a = p.quants + kLanes * half * p.quants_stride; // 16 weight rows
  const int8_t* b = p.x.q + panel * (k / 4) * 64;                // [k / 4, 16 x 4]
  const float* x_d = p.x.d + panel * nb * kLanes;                // [nb, 16]
  const int32_t* x_sums = kOffset ? p.x.sums + panel * nb * kLanes : nullptr;
  const float* w_d = p.w.d + kLanes * half * nb; // [16, nb]
  alignas(64) int32_t sums[kLegacySumBuffers][kLanes][kLanes];
  // Block blk's products into C tile blk % kLegacyCTiles, from A and B
  // tiles blk % 2.
  const auto issue = [&](size_t blk) {
    const uint8_t* a_block = a + p.quants_block_stride * blk;
    const int8_t* b_block = b + blk * 8 * 64;
    switch (blk % kLegacyCTiles) {
    case 0:
      CAFLM_LEGACY_PRODUCTS(kSigned, CAFLM_TILE_L_C0, CAFLM_TILE_L_A0, CAFLM_TILE_L_B0, a_block,
                            p.quants_stride, b_block);
      break;
    case 1:
      CAFLM_LEGACY_PRODUCTS(kSigned, CAFLM_TILE_L_C1, CAFLM_TILE_L_A1, CAFLM_TILE_L_B1, a_block,
                            p.quants_stride, b_block);
      break;
    case 2:
      CAFLM_LEGACY_PRODUCTS(kSigned, CAFLM_TILE_L_C2, CAFLM_TILE_L_A0, CAFLM_TILE_L_B0, a_block,
                            p.quants_stride, b_block);
      break;
    default:
      CAFLM_LEGACY_PRODUCTS(kSigned, CAFLM_TILE_L_C3, CAFLM_TILE_L_A1, CAFLM_TILE_L_B1, a_block,
                            p.quants_stride, b_block);
      break;
    }
  };
  const auto read_out = [&](size_t blk) {
    void* out = sums[blk % kLegacySumBuffers];
    switch (blk % kLegacyCTiles) {
    case 0:
      _tile_stored(CAFLM_TILE_L_C0, out, 64);
      break;
    case 1:
      _tile_stored(CAFLM_TILE_L_C1, out, 64);
      break;
    case 2:
      _tile_stored(CAFLM_TILE_L_C2, out, 64);
      break;
    default:
      _tile_stored(CAFLM_TILE_L_C3, out, 64);
      break;
    }
  };
  // Block blk is issued kLegacyLead blocks ahead of its read-out, and scaled
  // one block after it.
  for (size_t blk = 0; blk < kLegacyLead && blk < nb; ++blk) {
    issue(blk);
  }
  read_out(0);
  // Every loop over acc unrolled, so that it can stay in registers.
  __m512 acc[kLanes];
#pragma GCC unroll 16
  for (size_t j = 0; j < kLanes; ++j) {
    acc[j] = _mm512_setzero_ps();
  }
  for (size_t blk = 0; blk < nb; ++blk) {
    if (blk + 1 < nb) {
      read_out(blk + 1);
    }
    if (blk + kLegacyLead < nb) {
      issue(blk + kLegacyLead);
    }
    next.step();
    const __m512 d = _mm512_loadu_ps(x_d + kLanes * blk);
    __m512i correction = _mm512_setzero_si512();
    if constexpr (kOffset) {
      correction = _mm512_mullo_epi32(_mm512_set1_epi32(p.offset),
                                      _mm512_loadu_si512(x_sums + kLanes * blk));
    }
    const int32_t(*block_sums)[kLanes] = sums[blk % kLegacySumBuffers];
#pragma GCC unroll 16
    for (size_t j = 0; j < kLanes; ++j) {
      __m512i s = _mm512_load_si512(block_sums[j]);
      if constexpr (kOffset) {
        s = _mm512_sub_epi32(s, correction);
      }
      acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), d),
                               broadcast(w_d[j * nb + blk]), acc[j]);
    }
  }
  // The mins' sums in a pass of their own, so that neither pass has more
  // accumulators than registers; each sum is the same, and y = acc + summ.
  __m512 out[kLanes];
  if constexpr (kWithMin) {
    const float* x_s = p.x.s + panel * nb * kLanes; // [nb, 16]
    const float* w_m = p.w.m + kLanes * half * nb;  // [16, nb]
    __m512 summ[kLanes];
#pragma GCC unroll 16
    for (size_t j = 0; j < kLanes; ++j) {
      summ[j] = _mm512_setzero_ps();
    }
    for (size_t blk = 0; blk < nb; ++blk) {
      const __m512 s = _mm512_loadu_ps(x_s + kLanes * blk);
#pragma GCC unroll 16
      for (size_t j = 0; j < kLanes; ++j) {
        summ[j] = _mm512_fmadd_ps(broadcast(w_m[j * nb + blk]), s, summ[j]);
      }
    }
#pragma GCC unroll 16
    for (size_t j = 0; j < kLanes; ++j) {
      out[j] = _mm512_add_ps(acc[j], summ[j]);
    }
  } else {
#pragma GCC unroll 16
    for (size_t j = 0; j < kLanes; ++j) {
      out[j] = acc[j];
    }
  }
  const size_t col0 = kLanes * half;
  store_block(out, p.y + kLanes * panel * p.y_stride + col0, p.y_stride,
              columns_in_half(p.cols, half), p.bias != nullptr ? p.bias + col0 : nullptr);
}

// Panels a kernel call walks together: their accumulators live in memory
// (16 KiB at most), and each weight tile meets all of them while in L1.
constexpr size_t kPanelRun = 8;

// One 16-column half of a K group against `panels` (<= kPanelRun) x panels
// from `panel0`: super-block by super-block, each against every panel, so
// that a super-block's weight tiles are read from L2 once, not once a panel.
template <QuantKind kKind>
void super_half(const AmxGroupProblem& p, size_t half, size_t panel0, size_t panels,
                NextWeights next) {
  constexpr bool kOffset = kKind == QuantKind::kSuperOffset;
  const size_t k = p.k;
  const size_t nsb = k / 256;
  const size_t pitch = amx_split_pitch(k);
  const int8_t* low = p.low + kLanes * half * pitch;   // [16, pitch]
  const int8_t* high = p.high + kLanes * half * pitch; // [16, pitch]
  const size_t col0 = kLanes * half;
  alignas(64) int32_t sums[2][3][kLanes][kLanes]; // [slot][low, high, min]
  __m512 acc[kPanelRun][kLanes];
  for (size_t panel = 0; panel < panels; ++panel) {
    for (size_t j = 0; j < kLanes; ++j) {
      acc[panel][j] = _mm512_setzero_ps();
    }
  }
  // Step t: super-block t / panels against panel panel0 + t % panels.
  const size_t steps = nsb * panels;
  const int8_t* min_rows = kOffset ? nullptr : p.mins + kLanes * half * pitch; // [16, pitch]
  const auto issue = [&](size_t t) {
    const size_t sb = t / panels;
    const int8_t* b = p.x.q + (panel0 + t % panels) * (k / 4) * 64; // [k / 4, 16 x 4]
    _tile_zero(CAFLM_TILE_S_LOW);
    _tile_zero(CAFLM_TILE_S_HIGH);
    if constexpr (!kOffset) {
      _tile_zero(CAFLM_TILE_S_MIN);
    }
    for (size_t c = 0; c < 4; ++c) {
      const size_t v = 256 * sb + 64 * c;
      _tile_loadd(CAFLM_TILE_S_B, b + (v / 4) * 64, 64);
      _tile_loadd(CAFLM_TILE_S_A, low + v, pitch);
      _tile_loadd(CAFLM_TILE_S_A_HIGH, high + v, pitch);
      _tile_dpbssd(CAFLM_TILE_S_LOW, CAFLM_TILE_S_A, CAFLM_TILE_S_B);
      _tile_dpbssd(CAFLM_TILE_S_HIGH, CAFLM_TILE_S_A_HIGH, CAFLM_TILE_S_B);
      if constexpr (!kOffset) {
        _tile_loadd(CAFLM_TILE_S_A_MIN, min_rows + v, pitch);
        _tile_dpbssd(CAFLM_TILE_S_MIN, CAFLM_TILE_S_A_MIN, CAFLM_TILE_S_B);
      }
    }
  };
  const auto read_out = [&](size_t t) {
    _tile_stored(CAFLM_TILE_S_LOW, sums[t % 2][0], 64);
    _tile_stored(CAFLM_TILE_S_HIGH, sums[t % 2][1], 64);
    if constexpr (!kOffset) {
      _tile_stored(CAFLM_TILE_S_MIN, sums[t % 2][2], 64);
    }
  };
  // The next step's products run while this one's are scaled.
  issue(0);
  for (size_t t = 0; t < steps; ++t) {
    read_out(t);
    if (t + 1 < steps) {
      issue(t + 1);
    }
    next.step();
    const size_t sb = t / panels;
    const size_t panel = panel0 + t % panels;
    __m512(&panel_acc)[kLanes] = acc[t % panels];
    const __m512 d = _mm512_loadu_ps(p.x.d + (panel * nsb + sb) * kLanes);
#pragma GCC unroll 16
    for (size_t j = 0; j < kLanes; ++j) {
      const size_t col = col0 + j;
      const __m512i s =
          _mm512_add_epi32(_mm512_load_si512(sums[t % 2][0][j]),
                           _mm512_slli_epi32(_mm512_load_si512(sums[t % 2][1][j]), 7));
      const __m512 w_d = broadcast(p.w.d[col * nsb + sb]);
      if constexpr (kOffset) {
        // The products were split from the signed quants: s is S - M.
        panel_acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), d), w_d, panel_acc[j]);
      } else {
        const __m512i min_sums = _mm512_load_si512(sums[t % 2][2][j]);
        panel_acc[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(s), d), w_d, panel_acc[j]);
        panel_acc[j] = _mm512_fnmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(min_sums), d),
                                        broadcast(p.w.m[col * nsb + sb]), panel_acc[j]);
      }
    }
    // A panel's block goes out after its last super-block, while the other
    // panels' still compute: stored all together at the end, the 16 x 128
    // rows' lines (a stride of n floats apart) filled the store buffer and
    // stalled the core (store_block 8% of a Q4_K_M prefill in perf).
    if (sb + 1 == nsb) {
      store_block(panel_acc, p.y + kLanes * panel * p.y_stride + col0, p.y_stride,
                  columns_in_half(p.cols, half), p.bias != nullptr ? p.bias + col0 : nullptr);
    }
  }
}

// The K kinds' products scale * (quant - offset) (at most 63 * 128 in
// magnitude) as 128 * high + low, low in 0..127 and high signed, both int8.
// With the offset taken out here (Q3_K, Q6_K), a super-block's S is already
// S - M: the same integer.

// Byte index 4 * pair + L in each byte of 128-bit lane L: for a vector of
// the 64 values from 64 * pair within a super-block, the sub-block (of 16)
// of each value, as _mm512_shuffle_epi8 takes it from a super-block's 16
// sub-block bytes in every lane.
inline __m512i sub_block_of_values(size_t pair) {
  return _mm512_add_epi8(_mm512_set_epi32(0x03030303, 0x03030303, 0x03030303, 0x03030303,
                                          0x02020202, 0x02020202, 0x02020202, 0x02020202,
                                          0x01010101, 0x01010101, 0x01010101, 0x01010101, 0, 0, 0,
                                          0),
                         _mm512_set1_epi8(static_cast<char>(4 * pair)));
}

// Splits 64 values of one super-block: `quants` as stored, the scale of
// each value in its byte of `scales` (int8), and its sub-block min in its
// byte of `mins` (stored to min_row where not null: the kinds with a min,
// whose M is then x . mins; anything otherwise). The products are formed in
// 16 bits, even and odd values apart: vpmaddubsw of the unsigned quants with
// the signed scales of one parity (the other's zero, so nothing saturates),
// then put back byte by byte.
inline void split_values(__m512i quants, __m512i scales, __m512i mins, int offset, int8_t* low,
                         int8_t* high, int8_t* min_row) {
  const __m512i even_bytes = _mm512_set1_epi16(0x00FF);
  __m512i even = _mm512_maddubs_epi16(quants, _mm512_and_si512(scales, even_bytes));
  __m512i odd = _mm512_maddubs_epi16(quants, _mm512_andnot_si512(even_bytes, scales));
  if (offset != 0) {
    // (quant - offset) * scale, the scales sign-extended from their bytes.
    const __m512i offsets = _mm512_set1_epi16(static_cast<int16_t>(offset));
    even = _mm512_sub_epi16(
        even, _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(scales, 8), 8), offsets));
    odd = _mm512_sub_epi16(odd, _mm512_mullo_epi16(_mm512_srai_epi16(scales, 8), offsets));
  }
  const __m512i low7 = _mm512_set1_epi16(127);
  _mm512_storeu_si512(low, _mm512_or_si512(_mm512_and_si512(even, low7),
                                           _mm512_slli_epi16(_mm512_and_si512(odd, low7), 8)));
  _mm512_storeu_si512(high,
                      _mm512_or_si512(_mm512_and_si512(_mm512_srai_epi16(even, 7), even_bytes),
                                      _mm512_slli_epi16(_mm512_srai_epi16(odd, 7), 8)));
  if (min_row != nullptr) {
    _mm512_storeu_si512(min_row, mins);
  }
}

// A super-block's 16 sub-block scales (int8) and mins (int16, at most 63)
// as bytes in every 128-bit lane, for _mm512_shuffle_epi8.
struct SubBlockBytes {
  __m512i scales;
  __m512i mins;

  SubBlockBytes(const int8_t* scales16, const int16_t* mins16)
    : scales(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales16))))
    , mins(_mm512_broadcast_i32x4(
          _mm256_cvtepi16_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(mins16))))) {}

  // Values 64 * pair .. + 63: scales, then mins, a byte a value.
  __m512i scales_of(size_t pair) const {
    return _mm512_shuffle_epi8(scales, sub_block_of_values(pair));
  }
  __m512i mins_of(size_t pair) const {
    return _mm512_shuffle_epi8(mins, sub_block_of_values(pair));
  }
};

// The split products of the group's decoded columns.
void split_products(const AmxGroupProblem& p) {
  const size_t k = p.k;
  const size_t pitch = amx_split_pitch(k);
  for (size_t col = 0; col < p.cols; ++col) {
    const uint8_t* q = p.w.q + col * k;
    int8_t* min_row = p.mins != nullptr ? p.mins + col * pitch : nullptr;
    for (size_t sb = 0; sb < k / 256; ++sb) {
      const SubBlockBytes sub(p.w.scales + col * (k / 16) + 16 * sb,
                              p.w.mins + col * (k / 16) + 16 * sb);
      for (size_t pair = 0; pair < 4; ++pair) {
        const size_t v = 256 * sb + 64 * pair;
        const __m512i quants = _mm512_loadu_si512(q + v);
        split_values(quants, sub.scales_of(pair), min_row != nullptr ? sub.mins_of(pair) : quants,
                     p.offset, p.low + col * pitch + v, p.high + col * pitch + v,
                     min_row != nullptr ? min_row + v : nullptr);
      }
    }
  }
}

// The split products of one weight row of kType straight from its blocks
// (the same quants, scales and mins as decode_super_row's), and its
// super-blocks' d and dmin at d[b] and dmin[b].
template <TensorType kType>
void split_super_row(const uint8_t* row, size_t k, int offset, int8_t* low, int8_t* high,
                     int8_t* min_row, float* d, float* dmin) {
  using Blocks = SuperBlocks<kType>;
  for (size_t b = 0; b < k / 256; ++b) {
    const uint8_t* block = block_at<typename Blocks::Block>(row, b);
    alignas(16) int8_t scales[16];
    alignas(32) int16_t mins[16];
    Blocks::scales(block, scales, mins, d + b, dmin + b);
    const SubBlockBytes sub(scales, mins);
#pragma GCC unroll 4
    for (int pair = 0; pair < 4; ++pair) {
      const size_t v = 256 * b + 64 * static_cast<size_t>(pair);
      const __m512i quants =
          _mm512_inserti64x4(_mm512_castsi256_si512(Blocks::quants(block, 2 * pair)),
                             Blocks::quants(block, 2 * pair + 1), 1);
      split_values(quants, sub.scales_of(static_cast<size_t>(pair)),
                   min_row != nullptr ? sub.mins_of(static_cast<size_t>(pair)) : quants, offset,
                   low + v, high + v, min_row != nullptr ? min_row + v : nullptr);
    }
  }
}

template <QuantKind kKind>
void legacy_group(const AmxGroupProblem& p) {
  const size_t halves = (p.cols + kLanes - 1) / kLanes;
  const size_t calls = p.x.panels * halves;
  for (size_t panel = 0; panel < p.x.panels; ++panel) {
    for (size_t half = 0; half < halves; ++half) {
      legacy_half<kKind>(p, half, panel, NextWeights(p, panel * halves + half, calls, p.k / 32));
    }
  }
}

template <QuantKind kKind>
void super_group(const AmxGroupProblem& p) {
  if (!p.split) {
    split_products(p);
  }
  const size_t halves = (p.cols + kLanes - 1) / kLanes;
  const size_t runs = (p.x.panels + kPanelRun - 1) / kPanelRun;
  for (size_t run = 0; run < runs; ++run) {
    const size_t panel0 = run * kPanelRun;
    const size_t panels = p.x.panels - panel0 < kPanelRun ? p.x.panels - panel0 : kPanelRun;
    for (size_t half = 0; half < halves; ++half) {
      super_half<kKind>(p, half, panel0, panels,
                        NextWeights(p, run * halves + half, runs * halves, p.k / 256 * panels));
    }
  }
}

} // namespace

void amx_begin(QuantKind kind) {
  TileConfig config;
  const auto shape = [&config](int tile, int rows, int bytes) {
    config.rows[tile] = static_cast<uint8_t>(rows);
    config.colsb[tile] = static_cast<uint16_t>(bytes);
  };
  if (is_super_kind(kind)) {
    // 16 x 16 int32 sums; 64 values a multiply-add: 16 weight rows x 64
    // bytes, 16 x 64 of x.
    for (int t = CAFLM_TILE_S_LOW; t <= CAFLM_TILE_S_B; ++t) {
      shape(t, 16, 64);
    }
  } else {
    // 16 x 16 int32 sums; one block of 32: 16 weight rows x 32 bytes, 8 x 64
    // of x.
    shape(CAFLM_TILE_L_C0, 16, 64);
    shape(CAFLM_TILE_L_C1, 16, 64);
    shape(CAFLM_TILE_L_C2, 16, 64);
    shape(CAFLM_TILE_L_C3, 16, 64);
    shape(CAFLM_TILE_L_A0, 16, 32);
    shape(CAFLM_TILE_L_A1, 16, 32);
    shape(CAFLM_TILE_L_B0, 8, 64);
    shape(CAFLM_TILE_L_B1, 8, 64);
  }
  // Not _tile_loadconfig: GCC 12's declares only 8 bytes of its operand read
  // and drops the stores to the rest.
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

void amx_end() {
  _tile_release();
}

void dot_group_amx(const AmxGroupProblem& p) {
  switch (p.kind) {
  case QuantKind::kLegacySigned:
    return legacy_group<QuantKind::kLegacySigned>(p);
  case QuantKind::kLegacyOffset:
    return legacy_group<QuantKind::kLegacyOffset>(p);
  case QuantKind::kLegacyWithMin:
    return legacy_group<QuantKind::kLegacyWithMin>(p);
  case QuantKind::kSuperWithMin:
    return super_group<QuantKind::kSuperWithMin>(p);
  case QuantKind::kSuperOffset:
    return super_group<QuantKind::kSuperOffset>(p);
  }
}

void pack_panel_amx(const QuantizedRows& x, size_t k, size_t blocks, size_t panel,
                    const AmxPanelsOut& out) {
  const size_t row0 = kLanes * panel;
  // Quants 4 at a time, 16 groups of 4 per pass.
  int8_t* q = out.q + panel * (k / 4) * 64;
  for (size_t g = 0; g < k / 4; g += kLanes) {
    const size_t count = k / 4 - g < kLanes ? k / 4 - g : kLanes;
    transpose_rows(x.q + row0 * k + 4 * g, k, count, q + 64 * g);
  }
  // Each block's scale (and Q8_1's d * sum), 16 blocks per pass.
  const size_t at = panel * blocks * kLanes;
  for (size_t b = 0; b < blocks; b += kLanes) {
    const size_t count = blocks - b < kLanes ? blocks - b : kLanes;
    transpose_rows(x.d + row0 * blocks + b, 4 * blocks, count, out.d + at + b * kLanes);
    if (out.s != nullptr) {
      transpose_rows(x.s + row0 * blocks + b, 4 * blocks, count, out.s + at + b * kLanes);
    }
  }
  if (out.sums != nullptr) {
    // The sums of each block's quants, as the quantizer kept them (Q8_0).
    for (size_t b = 0; b < blocks; ++b) {
      for (size_t lane = 0; lane < kLanes; ++lane) {
        out.sums[at + b * kLanes + lane] = x.bsums[(row0 + lane) * blocks + b];
      }
    }
  }
}

void q8_0_scales_amx(const uint8_t* rows, size_t row_bytes, size_t cols, size_t blocks, float* d) {
  // 16 blocks' f16 scales of a row in one gather, 34 bytes apart.
  const __m512i offsets =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(static_cast<int>(sizeof(BlockQ8_0))));
  for (size_t col = 0; col < cols; ++col) {
    const uint8_t* row = rows + col * row_bytes + offsetof(BlockQ8_0, d);
    for (size_t b = 0; b < blocks; b += kLanes) {
      const size_t count = blocks - b < kLanes ? blocks - b : kLanes;
      const auto valid = static_cast<__mmask16>((1u << count) - 1u);
      const __m512i words = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, offsets,
                                                        row + b * sizeof(BlockQ8_0), 1);
      _mm512_mask_storeu_ps(d + col * blocks + b, valid,
                            _mm512_cvtph_ps(_mm512_cvtepi32_epi16(words)));
    }
  }
}

void split_super_rows_amx(TensorType type, const uint8_t* rows, size_t row_bytes,
                          const AmxGroupProblem& p, float* d, float* dmin) {
  const size_t k = p.k;
  const size_t nb = k / 256;
  const size_t pitch = amx_split_pitch(k);
  visit_super_type(type, "linear: weight type", [&](auto kType) {
    for (size_t col = 0; col < p.cols; ++col) {
      split_super_row<decltype(kType)::value>(
          rows + col * row_bytes, k, p.offset, p.low + col * pitch, p.high + col * pitch,
          p.mins != nullptr ? p.mins + col * pitch : nullptr, d + col * nb, dmin + col * nb);
    }
  });
}

} // namespace caflm::detail

#undef CAFLM_LEGACY_PRODUCTS
#undef CAFLM_TILE_L_C0
#undef CAFLM_TILE_L_C2
#undef CAFLM_TILE_L_C3
#undef CAFLM_TILE_L_C1
#undef CAFLM_TILE_L_A0
#undef CAFLM_TILE_L_A1
#undef CAFLM_TILE_L_B0
#undef CAFLM_TILE_L_B1
#undef CAFLM_TILE_S_LOW
#undef CAFLM_TILE_S_HIGH
#undef CAFLM_TILE_S_MIN
#undef CAFLM_TILE_S_A
#undef CAFLM_TILE_S_A_HIGH
#undef CAFLM_TILE_S_A_MIN
#undef CAFLM_TILE_S_B

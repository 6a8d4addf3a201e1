#pragma once

#include "caflm/cpu/cache_line_vector.hpp"
#include "caflm/cpu/cpu_matmul.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

// Internals of linear() for quantized weights (caflm::detail, not a stable
// API; the tests use them to check each piece on its own).
//
// As llama.cpp does, each row of x is quantized on its own to the activation
// format of the weight type (activation_type()), and every weight block meets
// its activation block in an exact integer dot product, scaled in float.
//
// The weights stay where they are (the memory-mapped file). For each group of
// up to kGroupCols output columns, their rows are unpacked into a small
// per-thread scratch (DecodedColumns: one byte per quant, scales as the dot
// kernels want them) which then meets every row of x. So the unpacking cost is
// shared by the whole batch, and the dot kernels are one per family of types
// and instruction set: "legacy" (blocks of 32 with a float scale: Q4_0, Q4_1,
// Q5_0, Q5_1, Q8_0) and "K" (super-blocks of 256 with integer sub-block scales:
// Q2_K..Q6_K).
//
// Batch invariance: the integer parts are exact, so only the float operations
// decide a result's bits, and for every output element they are one fixed
// sequence that depends on K and the instruction set alone (see the kernel
// files), whatever the batch size, the element's position or the thread count.

namespace caflm::detail {

/// Output columns unpacked together (tile widths are multiples of it).
inline constexpr size_t kGroupCols = 4;

/// How the dot kernels combine a weight row with a row of activations.
enum class QuantKind {
  /// Q8_0 against Q8_0: signed quants, y = sum_b d_w d_x (w . x).
  kLegacySigned,
  /// Q4_0, Q5_0 against Q8_0: quants stored as q + offset (unsigned, offset
  /// 8 or 16), y = sum_b d_w d_x ((w + offset) . x - offset sum(x)).
  kLegacyOffset,
  /// Q4_1, Q5_1 against Q8_1: unsigned quants, y = sum_b d_w d_x (w . x) + m_w s_x.
  kLegacyWithMin,
  /// Q2_K, Q4_K, Q5_K against Q8_K: unsigned quants with sub-block scales and
  /// mins, y = sum_b d_x (d_w sum_s sc_s (w . x)_s - dmin_w sum_s min_s bsum_s).
  kSuperWithMin,
  /// Q3_K, Q6_K against Q8_K: quants stored as q + offset (unsigned), the
  /// offset taken back through the block sums of x: min_s = offset * sc_s and
  /// y = sum_b d_x d_w (sum_s sc_s (w . x)_s - sum_s min_s bsum_s).
  kSuperOffset,
};

/// Whether a kind is one of the K-quants' (super-blocks of 256).
inline bool is_super_kind(QuantKind kind) {
  return kind == QuantKind::kSuperWithMin || kind == QuantKind::kSuperOffset;
}

/// The family of a weight type; throws std::invalid_argument naming any type
/// that is not a quantized weight type.
QuantKind quant_kind(TensorType weight_type);

/// The activation format llama.cpp pairs with a weight type: Q8_0, Q8_1 or Q8_K.
TensorType activation_type(TensorType weight_type);

/// One row of activations quantized (ggml's formats, fields unpacked).
struct ActivationRow {
  int8_t* q; // [k]
  float* d;  // [k / block] the scale as the dot uses it (f32 of the f16 for Q8_0/Q8_1)
  float* s;  // [k / 32] Q8_1 only: f32 of the f16 d * sum(q)
  // Sums of the quants: Q8_K's of each 16 ([k / 16]); Q8_0's of each block
  // ([k / 32]: Q4_0 and Q5_0 weights take their offset back with them), or
  // null where not wanted.
  int16_t* bsums;
};

/// Quantizes `x` (k values, a whole number of blocks) to `act_type` (Q8_0,
/// Q8_1 or Q8_K) with the semantics of ggml's reference quantizers, byte for
/// byte (AVX2).
void quantize_activation_row(TensorType act_type, const float* __restrict__ x, size_t k,
                             const ActivationRow& out);

/// quantize_activation_row for Q8_0 and Q8_1 (k a multiple of 32) with
/// AVX-512 F, BW and VL (quantized_activations_avx512.cpp): the same bytes
/// for finite values.
void quantize_q8_row_avx512(TensorType act_type, const float* __restrict__ x, size_t k,
                            const ActivationRow& out);

/// Unpacked weight rows of one column group, `k` values each. Which arrays are
/// used depends on the kind.
struct DecodedColumns {
  const uint8_t* q;     // [cols, k] quants: int8 (signed legacy) or uint8
  const float* d;       // [cols, k / block] block or super-block scale
  const float* m;       // [cols, k / block] legacy min m, or K-quant dmin
  const int8_t* scales; // [cols, k / 16] sub-block scales (one per 16 values)
  const int16_t* mins;  // [cols, k / 16] sub-block mins (or offset * scale)
};

/// The offset a type's decoded quants are stored with, above ggml's signed
/// ones: 8 for Q4_0, 16 for Q5_0 (kLegacyOffset), 4 for Q3_K, 32 for Q6_K
/// (kSuperOffset, whose mins are the offset times the scales); 0 for every
/// other type.
int stored_offset(TensorType weight_type);

/// Unpacks one weight row of `type` (k values) into column `col` of the
/// group scratch whose arrays are laid out as DecodedColumns describes.
void decode_weight_row(TensorType type, const uint8_t* __restrict__ row, size_t k, size_t col,
                       uint8_t* q, float* d, float* m, int8_t* scales, int16_t* mins);

/// One K-quant row of `type` into column `col` of a decoded group (q, scales
/// and mins as DecodedColumns lays them out); d and dmin of super-block b at
/// d[b * scale_stride] and dmin[b * scale_stride].
void decode_super_row(TensorType type, const uint8_t* row, size_t k, size_t col, uint8_t* q,
                      int8_t* scales, int16_t* mins, float* d, float* dmin, size_t scale_stride);

/// Everything a dot kernel needs for one column group against all rows.
struct GroupProblem {
  QuantKind kind;
  size_t k;
  size_t m;               // rows of x
  const int8_t* x_q;      // [m, k]
  const float* x_d;       // [m, k / block]
  const float* x_s;       // [m, k / 32] (kLegacyWithMin)
  const int16_t* x_bsums; // [m, k / 16] (K kinds)
  DecodedColumns w;
  int offset;  // kLegacyOffset: stored_offset()
  size_t cols; // 1..kGroupCols
  float* y;    // y[r * y_stride + j] for column j of the group
  size_t y_stride;
  const float* bias; // [cols] or null
};

/// Output columns the AVX2 Q8_0 and K-quant kernels take together: one per
/// int32 lane.
inline constexpr size_t kLaneGroupCols = 8;

/// Q8_0 weight rows of one AVX2 column group, interleaved so that one vector
/// holds the same 4 quants of all kLaneGroupCols columns: each product of a
/// row of x with the group's columns then costs one set of integer
/// operations for all 8, and one float epilogue per block for all 8 (the
/// float part, per block and output, is what bounds a kernel that keeps
/// each column in lanes of its own).
struct InterleavedQ8_0 {
  const uint8_t* q_abs; // [k / 4, kLaneGroupCols, 4] |q| (Q8_0)
  const int8_t* q;      // [k / 4, kLaneGroupCols, 4] q (Q8_0), or the stored q + offset
  const float* d;       // [k / 32, kLaneGroupCols] block scales
};

/// Interleaves the rows `rows + j * row_bytes` (j < cols, each k values) of
/// a Q8_0, Q4_0 or Q5_0 weight into InterleavedQ8_0's layout: Q8_0's quants
/// and their magnitudes, or Q4_0's and Q5_0's stored quants (unsigned, with
/// their offset; no q_abs). Columns past `cols` get zero quants and scales.
void interleave_q8_0(TensorType type, const uint8_t* __restrict__ rows, size_t row_bytes,
                     size_t cols, size_t k, uint8_t* __restrict__ q_abs, int8_t* __restrict__ q,
                     float* __restrict__ d);

/// Below this many rows of x an AVX2 lane group (Q8_0, Q4_0, Q5_0, the
/// K-quants) is not interleaved: interleaving costs more than it saves a row
/// or three. Q8_0, Q4_0, Q5_0, Q4_K and Q6_K then read their blocks in place,
/// the other K-quants their decoded columns.
inline constexpr size_t kInterleaveMinRows = 4;

/// One AVX2 column group of Q8_0 (or Q4_0 or Q5_0, whose quants less their
/// offset are Q8_0 quants) against all rows of x. Per output element: the
/// exact integer dot product s_b of each block, then acc = fma(cvt(s_b) *
/// d_x, d_w, acc) block after block, then + bias (the steps of the AVX-512
/// and AMX kernels, so the same bits as theirs). Fewer than
/// kInterleaveMinRows rows read the weight rows in place (the same integers,
/// summed another way, so the same bits); more take them interleaved.
struct LaneGroupProblem {
  TensorType type; // Q8_0, Q4_0 or Q5_0: the blocks of `rows`
  size_t k;
  size_t m;
  const int8_t* x_q;     // [m, k]
  const float* x_d;      // [m, k / 32]
  const int16_t* x_sums; // [m, k / 32] sums of each block's quants (Q4_0, Q5_0)
  const uint8_t* rows;   // the group's weight rows, row_bytes apart
  size_t row_bytes;
  InterleavedQ8_0 w; // interleaved quants and scales (m >= kInterleaveMinRows)
  size_t cols;       // 1..kLaneGroupCols
  float* y;          // y[r * y_stride + j] for column j of the group
  size_t y_stride;
  const float* bias; // [cols] or null
  // The next group's rows (next_bytes from next, or none), asked for a
  // slice per block while the first rows of this group compute, so that
  // they arrive before that group starts.
  const uint8_t* next;
  size_t next_bytes;
};
void dot_q8_0_lanes_avx2(const LaneGroupProblem& p);
/// dot_q8_0_lanes_avx2's in-place path (1 to 3 rows) with vpdpbusd, the same
/// bits (quantized_rows_avx512.cpp): the CPU must have AVX-512 VNNI.
void dot_q8_0_rows_avx512(const LaneGroupProblem& p);

/// K-quant weight rows of one AVX2 column group (kLaneGroupCols columns,
/// interleaved): one vector holds the same
/// 4 quants of all 8 columns, as in InterleavedQ8_0, and each sub-block's
/// scales and each pair of sub-blocks' mins sit in the int32 lanes of their
/// columns, ready for _mm256_madd_epi16.
struct InterleavedSuper {
  const uint8_t* q;      // [k / 4, kLaneGroupCols, 4] stored quants
  const int16_t* scales; // [k / 16, kLaneGroupCols, 2] scale of sub-block s, twice
  const int16_t* mins;   // [k / 32, kLaneGroupCols, 2] mins of sub-blocks 2t and 2t + 1
};

/// Where interleave_super writes: InterleavedSuper's arrays, and each
/// super-block's d and dmin in their columns' lanes.
struct InterleavedSuperOut {
  uint8_t* q;      // [k / 4, kLaneGroupCols, 4]
  int16_t* scales; // [k / 16, kLaneGroupCols, 2]
  int16_t* mins;   // [k / 32, kLaneGroupCols, 2]
  float* d;        // [k / 256, kLaneGroupCols]
  float* dmin;     // [k / 256, kLaneGroupCols] (zeros for Q3_K and Q6_K)
};

/// Interleaves the rows `rows + j * row_bytes` (j < cols, each k values) of
/// a K-quant weight into InterleavedSuper's layout, straight from their
/// blocks. Columns past `cols` get zeros.
void interleave_super(TensorType type, const uint8_t* __restrict__ rows, size_t row_bytes,
                      size_t cols, size_t k, const InterleavedSuperOut& out);

/// The most quants whose maddubs products one int16 lane can sum before a
/// sub-block's scale is applied: 4 (a whole sub-block of 16), or 2 for
/// stored quants above 31 (Q6_K's 0..63), since 2 * 128 * 63 * 2 is the most
/// that fits under 32767.
int super_quads_per_chain(TensorType weight_type);

/// One AVX2 K-quant column group against all rows of x. Per output element
/// and super-block b: the exact integer sums s_b = sum_s sc_s (w . x)_s and
/// n_b = sum_s min_s bsum_s, then acc = fma(cvt(s_b) * d_x, d_w, acc) and
/// acc = fnmadd(cvt(n_b) * d_x, dmin_w, acc) (kSuperWithMin), or acc =
/// fma(cvt(s_b - n_b) * d_x, d_w, acc) (kSuperOffset), block after block;
/// then + bias. Fewer than kInterleaveMinRows rows read the decoded columns,
/// more the interleaved ones: the same integers summed another way, so the
/// same bits.
struct SuperLaneGroupProblem {
  QuantKind kind;  // kSuperWithMin or kSuperOffset
  TensorType type; // the weight's
  size_t k;
  size_t m;
  const int8_t* x_q;      // [m, k]
  const float* x_d;       // [m, k / 256]
  const int16_t* x_bsums; // [m, k / 16]
  // The group's weight rows, row_bytes apart: Q4_K and Q6_K read them in
  // place below kInterleaveMinRows rows (no decoded columns, d or dmin then).
  const uint8_t* rows;
  size_t row_bytes;
  DecodedColumns decoded; // q, scales, mins of all 8 columns, zeros past cols
  InterleavedSuper w;     // the same interleaved (m >= kInterleaveMinRows)
  const float* d;         // [k / 256, kLaneGroupCols] block b's at d[b * 8 + j]
  const float* dmin;      // [k / 256, kLaneGroupCols] (kSuperWithMin)
  int quads_per_chain;    // super_quads_per_chain(): 2 or 4
  size_t cols;            // 1..kLaneGroupCols
  float* y;               // y[r * y_stride + j] for column j of the group
  size_t y_stride;
  const float* bias;   // [cols] or null
  const uint8_t* next; // as LaneGroupProblem's
  size_t next_bytes;
};
void dot_super_lanes_avx2(const SuperLaneGroupProblem& p);
/// Whether dot_super_rows_avx512 reads `type`'s blocks.
inline bool super_rows_avx512_takes(TensorType type) {
  return type == TensorType::Q4_K || type == TensorType::Q5_K || type == TensorType::Q6_K;
}
/// Rows of x below which AVX-512 machines read Q4_K, Q5_K and Q6_K weights
/// in place (dot_super_rows_avx512) rather than interleave them.
inline constexpr size_t kSuperRowsMaxRows = 8;
/// Fewer than kSuperRowsMaxRows rows of x against a lane group of Q4_K,
/// Q5_K or Q6_K weight rows read in place (p.rows; p.decoded, p.w, p.d and
/// p.dmin unused), the bits of the other lane kernels
/// (quantized_super_rows_avx512.cpp): the CPU must have AVX-512 VNNI.
void dot_super_rows_avx512(const SuperLaneGroupProblem& p);

/// Output columns the AVX-512 lane kernels take together: one per int32
/// lane of a 512-bit vector.
inline constexpr size_t kWideLaneGroupCols = 16;

/// Q8_0, Q4_0 or Q5_0 weight rows of one AVX-512 column group, interleaved
/// as InterleavedQ8_0 is but kWideLaneGroupCols wide and unsigned, as
/// vpdpbusd takes them: Q8_0's quants plus 128, Q4_0's and Q5_0's stored
/// ones. Their offset (128, 8 or 16) comes back through sum(x).
struct InterleavedUnsigned {
  const uint8_t* q; // [k / 4, kWideLaneGroupCols, 4]
  const float* d;   // [k / 32, kWideLaneGroupCols] block scales
};

/// The offset of InterleavedUnsigned's quants: 128 for Q8_0, else
/// stored_offset(). Throws std::invalid_argument for other types.
int unsigned_offset(TensorType type);

/// Interleaves the rows `rows + j * row_bytes` (j < cols, each k values) of
/// a Q8_0, Q4_0 or Q5_0 weight into InterleavedUnsigned's layout. Columns
/// past `cols` get zero quants and scales. AVX-512
/// (quantized_interleave_avx512.cpp): the CPU must have AVX-512 F and BW.
void interleave_unsigned(TensorType type, const uint8_t* __restrict__ rows, size_t row_bytes,
                         size_t cols, size_t k, uint8_t* __restrict__ q, float* __restrict__ d);

/// One AVX-512 column group of Q8_0, Q4_0 or Q5_0 against at least
/// kInterleaveMinRows rows of x. Per output element the float operations of
/// dot_group_avx512 (and so of the AMX kernels): the exact integer dot
/// product s_b of each block, then acc = fma(cvt(s_b) * d_x, d_w, acc) block
/// after block, then + bias.
struct WideLaneGroupProblem {
  int offset; // unsigned_offset()
  size_t k;
  size_t m;
  const int8_t* x_q;     // [m, k]
  const float* x_d;      // [m, k / 32]
  const int16_t* x_sums; // [m, k / 32] sums of each block's quants
  InterleavedUnsigned w;
  size_t cols; // 1..kWideLaneGroupCols
  float* y;    // y[r * y_stride + j] for column j of the group
  size_t y_stride;
  const float* bias;   // [cols] or null
  const uint8_t* next; // as LaneGroupProblem's
  size_t next_bytes;
};
void dot_q8_0_lanes_avx512(const WideLaneGroupProblem& p);

/// K-quant weight rows of one AVX-512 column group (kWideLaneGroupCols
/// columns, interleaved): one vector holds
/// the same 4 stored quants of all 16 columns, each 16 values' scale sits
/// in its column's int32 lane, and each pair of 16s' mins in its column's
/// int32 lane as two int16s.
struct InterleavedSuperWide {
  const uint8_t* q;      // [k / 4, kWideLaneGroupCols, 4] stored quants
  const int32_t* scales; // [k / 16, kWideLaneGroupCols] scale of each 16 values
  const int16_t* mins;   // [k / 32, kWideLaneGroupCols, 2] mins of 16s 2t and 2t + 1
};

/// Where interleave_super_wide writes: InterleavedSuperWide's arrays, and
/// each super-block's d and dmin in their columns' lanes.
struct InterleavedSuperWideOut {
  uint8_t* q;      // [k / 4, kWideLaneGroupCols, 4]
  int32_t* scales; // [k / 16, kWideLaneGroupCols]
  int16_t* mins;   // [k / 32, kWideLaneGroupCols, 2]
  float* d;        // [k / 256, kWideLaneGroupCols]
  float* dmin;     // [k / 256, kWideLaneGroupCols] (zeros for Q3_K and Q6_K)
};

/// Interleaves the rows `rows + j * row_bytes` (j < cols, each k values) of
/// a K-quant weight into InterleavedSuperWide's layout, straight from their
/// blocks. Columns past `cols` get zeros. AVX-512
/// (quantized_interleave_avx512.cpp): the CPU must have AVX-512 F and BW.
void interleave_super_wide(TensorType type, const uint8_t* __restrict__ rows, size_t row_bytes,
                           size_t cols, size_t k, const InterleavedSuperWideOut& out);

/// One AVX-512 K-quant column group against at least kInterleaveMinRows
/// rows of x. Per output element the float operations of dot_group_avx512
/// (and so of the AMX kernels): per super-block the exact integer sums S =
/// sum_s sc_s (w . x)_s and M = sum_s min_s bsum_s, then acc = fma(cvt(S -
/// M) * d_x, d_w, acc) (kSuperOffset), or acc = fma(cvt(S) * d_x, d_w, acc)
/// and acc = fnmadd(cvt(M) * d_x, dmin_w, acc) (kSuperWithMin); then + bias.
struct WideSuperLaneGroupProblem {
  QuantKind kind; // kSuperWithMin or kSuperOffset
  size_t k;
  size_t m;
  const int8_t* x_q;      // [m, k]
  const float* x_d;       // [m, k / 256]
  const int16_t* x_bsums; // [m, k / 16]
  InterleavedSuperWide w;
  const float* d;    // [k / 256, kWideLaneGroupCols]
  const float* dmin; // [k / 256, kWideLaneGroupCols] (kSuperWithMin)
  int scale_quads;   // quads under one scale: 8 (Q4_K, Q5_K: sub-blocks of 32) or 4
  size_t cols;       // 1..kWideLaneGroupCols
  float* y;          // y[r * y_stride + j] for column j of the group
  size_t y_stride;
  const float* bias;   // [cols] or null
  const uint8_t* next; // as LaneGroupProblem's
  size_t next_bytes;
};
void dot_super_lanes_avx512(const WideSuperLaneGroupProblem& p);

/// The dot kernels, one per instruction set (the AVX-512 and AMX ones live
/// in translation units of their own, compiled with those enabled, and are
/// only called when the CPU has them). On AVX2 only Q4_1 and Q5_1 take
/// dot_group_avx2; the others take the lane kernels above. On AVX-512 the
/// wide lane kernels take kInterleaveMinRows rows and more of every type
/// but Q4_1 and Q5_1, and the AVX2 lane kernels fewer (whose in-place reads
/// beat AVX-512's decoding pass at a row or three); dot_group_avx512 takes
/// Q4_1, Q5_1 and the AMX kernels' leftover rows. All of them give the same
/// bits.
void dot_group_avx2(const GroupProblem& p);
void dot_group_avx512(const GroupProblem& p);

/// Output columns a group of the AMX kernels takes: two tile rows of 16.
inline constexpr size_t kAmxGroupCols = 32;

/// Rows of x from which the AMX kernels take a product of `kind` (fewer take
/// the AVX-512 kernels, with the same bits). A whole 16-row panel, except
/// for the K kinds with mins: every column group of those is split into
/// three int8 rows a value for the tiles, a cost the tiles repay only over
/// several panels. On a Sapphire Rapids class Xeon, bench_kernels' Q4_K
/// shapes (K 1536 and 2048) ran at 0.94-0.98x the AVX-512 kernels' rate at
/// 16 rows and 1.02-1.41x at 32 to 64, but a Q4_K_M 134M Llama (K 768 and
/// 2048) decoded 32 sequences 2-7% slower with the tiles from 32 rows than
/// from 64.
inline size_t amx_min_rows(QuantKind kind) {
  return kind == QuantKind::kSuperWithMin ? 64 : 16;
}

/// Whole 16-row panels of x, as the AMX kernels' B tiles and AVX-512 lanes
/// take them (rows after the last whole panel go to the AVX-512 kernels).
struct AmxActivations {
  size_t panels;
  const int8_t* q;     // [panels, k / 4, 16, 4]: quants 4 at a time, row after row
  const float* d;      // [panels, k / block, 16]
  const float* s;      // [panels, k / 32, 16] (kLegacyWithMin)
  const int32_t* sums; // [panels, k / 32, 16] (kLegacyOffset): sum of each block's quants
};

/// Row pitch of the AMX kernels' split products: k and a cache line, so
/// that a tile's 16 rows do not crowd into a few L1 sets when k is a power
/// of 2.
inline size_t amx_split_pitch(size_t k) {
  return k + 64;
}

/// Everything an AMX kernel needs for one group of up to kAmxGroupCols
/// columns against all rows.
struct AmxGroupProblem {
  QuantKind kind;
  size_t k;
  AmxActivations x; // all of x's rows the tiles take (m / 16 whole panels)
  DecodedColumns w; // kAmxGroupCols decoded rows (unused ones any finite value)
  // The legacy kinds' quants as the A tiles read them: column j's block b
  // at quants + j * quants_stride + b * quants_block_stride. The decoded
  // rows (w.q, k, 32), or Q8_0's blocks in place (2-byte scale, then the 32
  // quants).
  const uint8_t* quants;
  size_t quants_stride;
  size_t quants_block_stride;
  int8_t* low;  // [kAmxGroupCols, amx_split_pitch(k)] scratch for the K kinds' split products
  int8_t* high; // [kAmxGroupCols, amx_split_pitch(k)]
  int8_t* mins; // [kAmxGroupCols, amx_split_pitch(k)] kSuperWithMin: each value's sub-block min
  bool split;   // K kinds: low, high and mins already hold the group's split products
  int offset;   // stored_offset()
  size_t cols;  // 1..kAmxGroupCols
  float* y;
  size_t y_stride;
  const float* bias;
  // The weight bytes the thread reads after this group (its next group's
  // rows, contiguous), asked of L2 a few lines at a time while this group
  // computes; none where null.
  const uint8_t* next_weights;
  size_t next_weights_bytes;
};

/// Loads the tile configuration of `kind`'s AMX kernels on the calling
/// thread; amx_end() releases it. dot_group_amx runs between the two.
void amx_begin(QuantKind kind);
void amx_end();
void dot_group_amx(const AmxGroupProblem& p);

/// Splits the products of p.cols K-quant weight rows of `type` (at `rows`,
/// row_bytes apart) into p.low, p.high and p.mins straight from their
/// blocks, as dot_group_amx does from decoded columns, and writes each
/// column's d and dmin at d[col * k / 256 + b] and dmin[...]. For a group
/// with no rows left for the AVX-512 kernels, which read decoded columns:
/// one pass over the weights instead of decoding, then splitting.
void split_super_rows_amx(TensorType type, const uint8_t* rows, size_t row_bytes,
                          const AmxGroupProblem& p, float* d, float* dmin);

/// The rows of x quantized by quantized_linear (row-major, ActivationRow's
/// arrays for all rows).
struct QuantizedRows {
  const int8_t* q;
  const float* d;
  const float* s;
  const int16_t* bsums;
};

/// Rows of x quantized to one activation format (activation_type()), kept so
/// that every weight taking that format can use them: quantizing is the
/// same work whichever weight comes next.
class QuantizedActivations {
 public:
  /// Quantizes the `m` rows of `x` ([m, k]) to `act`; k a whole number of
  /// act's blocks.
  void quantize(TensorType act, const float* __restrict__ x, size_t m, size_t k);

  TensorType act() const { return act_; }
  size_t m() const { return m_; }
  size_t k() const { return k_; }
  QuantizedRows rows() const;

 private:
  TensorType act_ = TensorType::Q8_0;
  size_t m_ = 0;
  size_t k_ = 0;
  CacheLineVector<int8_t> q_;
  CacheLineVector<float> d_;
  CacheLineVector<float> s_;
  CacheLineVector<int16_t> bsums_;
};

/// The writable arrays of AmxActivations.
struct AmxPanelsOut {
  int8_t* q;
  float* d;
  float* s;      // or null: x has no s
  int32_t* sums; // or null: no kLegacyOffset weight
};

/// Lays out the 16 rows of x from 16 * panel in panel `panel` of `out`
/// (AmxActivations' layout; x's rows of k values and `blocks` scales, and
/// where out.sums is not null x.bsums, Q8_0's block sums, which
/// QuantizedActivations always keeps).
void pack_panel_amx(const QuantizedRows& x, size_t k, size_t blocks, size_t panel,
                    const AmxPanelsOut& out);

/// The f32 scales of `cols` Q8_0 rows (row_bytes apart from rows) of
/// `blocks` blocks each: d[col * blocks + b].
void q8_0_scales_amx(const uint8_t* rows, size_t row_bytes, size_t cols, size_t blocks, float* d);

/// One product of quantized_linear_amx: the weight, its kind, y ([m,
/// w->rows]) and the bias ([w->rows] or null).
struct AmxProduct {
  const WeightView* w;
  QuantKind kind;
  float* y;
  const float* bias;
};

/// Most products one quantized_linear_amx call takes.
inline constexpr size_t kMaxAmxProducts = 4;

/// quantized_linear's column loop on the AMX kernels for `count` products of
/// the same m rows of x (quantized to `act`, every product's activation
/// format), each with m >= amx_min_rows(kind): x in 16-row panels once, the
/// products' groups of kAmxGroupCols columns in one parallel region
/// (quantized_matmul_amx.cpp).
void quantized_linear_amx(const AmxProduct* products, size_t count, TensorType act,
                          const QuantizedRows& x, size_t m);

/// Below this many multiply-adds a quantized linear runs on the calling
/// thread.
inline constexpr size_t kParallelMinMacs = size_t{1} << 18;

/// How quantized_linear shares an n-column product out among an OpenMP team
/// of `threads`: whole groups of `group_cols` columns in tiles of nearly equal
/// size (their group counts differ by one at most), at most 64 columns each,
/// about 4 tiles per thread and a multiple of the thread count. Handing them
/// out one at a time then evens out a thread slowed by other work, while
/// equal threads finish together: a last tile left to one thread alone idles
/// the rest (9 tiles of 8 groups on 2 threads idled one for a ninth of a
/// 576-column product). Which thread computes a column, and in which tile,
/// never changes its bits: the tiling is free to follow the thread count.
struct ColumnTiles {
  size_t n = 0;
  size_t group_cols = 0;
  size_t groups = 0; // ceil(n / group_cols)
  size_t tiles = 0;

  /// The first column of tile t (n for t == tiles).
  size_t begin(size_t t) const { return std::min(n, t * groups / tiles * group_cols); }
};

ColumnTiles quantized_column_tiles(size_t n, size_t group_cols, size_t threads);

/// One thread's part of a product's column loop: takes tiles from
/// `next_tile`, shared by the team, until none is left, and calls
/// group(col0, cols, next_col0) for each of their groups. next_col0 is the
/// first column of the group this thread computes next (n after its last):
/// the next tile is taken as the last group of the current one starts, so
/// that the kernel can ask the caches for its rows in time. (Asking for the
/// group after a tile's last, whose tile as often as not went to another
/// thread, left each tile's first group to come in cold: one sequence's
/// decode of a TinyLlama-shaped Q4_K_M model on a 2-core Zen 5 ran 4-12%
/// slower. An interleaved static share, which knows the next tile too, lost
/// more than that to threads finishing apart.)
template <typename GroupFn>
void run_claimed_tiles(const ColumnTiles& tiles, std::atomic<size_t>& next_tile, GroupFn&& group) {
  size_t tile = next_tile.fetch_add(1, std::memory_order_relaxed);
  while (tile < tiles.tiles) {
    const size_t col_end = tiles.begin(tile + 1);
    size_t col0 = tiles.begin(tile);
    for (; col0 + tiles.group_cols < col_end; col0 += tiles.group_cols)
      group(col0, tiles.group_cols, col0 + tiles.group_cols);
    tile = next_tile.fetch_add(1, std::memory_order_relaxed);
    if (col0 < col_end) // else the one empty tile of n == 0
      group(col0, col_end - col0, tiles.begin(std::min(tile, tiles.tiles)));
  }
}

/// Throws std::invalid_argument, naming the type, when `w`'s rows are not
/// whole blocks of its type.
void check_quantized_weight(const WeightView& w);

/// linear() for a quantized weight type with the kernels of `isa`.
void quantized_linear(MatmulIsa isa, const WeightView& w, const float* __restrict__ x, size_t m,
                      float* __restrict__ y, const float* __restrict__ bias);

/// quantized_linear over rows already quantized to activation_type(w.type)
/// (y: [x.m(), w.rows]). Throws std::invalid_argument when `x` is of
/// another format or width.
void quantized_linear(MatmulIsa isa, const WeightView& w, const QuantizedActivations& x,
                      float* __restrict__ y, const float* __restrict__ bias);

/// One product of quantized_linear_shared.
struct QuantizedOutput {
  const WeightView* w;
  const QuantizedActivations* x; // rows quantized to activation_type(w->type)
  float* y;                      // [x->m(), w->rows]
  const float* bias;             // [w->rows] or null
};

/// quantized_linear for each of `count` outputs, with each output's bits,
/// their column loops in one parallel region with no join between them (the
/// AMX kernels, which split their own work, one after another). Checks every
/// output before computing any, and throws as quantized_linear does.
void quantized_linear_shared(MatmulIsa isa, const QuantizedOutput* outputs, size_t count);

} // namespace caflm::detail

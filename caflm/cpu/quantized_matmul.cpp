// quantized_linear(): how a quantized weight's columns are grouped and
// tiled across threads, and which kernel each instruction set runs on each
// group (the activation quantizer, the decoders and the interleavers are
// quantized_activations.cpp, quantized_decode.cpp and
// quantized_interleave.cpp).
#include "caflm/cpu/quantized_matmul.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

namespace caflm::detail {

namespace {

// Output columns per parallel work item, at most (a multiple of both group
// widths).
constexpr size_t kMaxTileCols = 64;
static_assert(kMaxTileCols % kGroupCols == 0 && kMaxTileCols % kAmxGroupCols == 0);

} // namespace

ColumnTiles quantized_column_tiles(size_t n, size_t group_cols, size_t threads) {
  threads = std::max<size_t>(1, threads);
  ColumnTiles t;
  t.n = n;
  t.group_cols = group_cols;
  t.groups = (n + group_cols - 1) / group_cols;
  const size_t max_groups = std::max<size_t>(1, kMaxTileCols / group_cols);
  const size_t wanted = std::max(4 * threads, (t.groups + max_groups - 1) / max_groups);
  // Rounded up to whole rounds of the team; never a tile without a group.
  t.tiles = std::max<size_t>(1, std::min(t.groups, (wanted + threads - 1) / threads * threads));
  return t;
}

QuantKind quant_kind(TensorType weight_type) {
  switch (weight_type) {
  case TensorType::Q8_0:
    return QuantKind::kLegacySigned;
  case TensorType::Q4_0:
  case TensorType::Q5_0:
    return QuantKind::kLegacyOffset;
  case TensorType::Q4_1:
  case TensorType::Q5_1:
    return QuantKind::kLegacyWithMin;
  case TensorType::Q2_K:
  case TensorType::Q4_K:
  case TensorType::Q5_K:
    return QuantKind::kSuperWithMin;
  case TensorType::Q3_K:
  case TensorType::Q6_K:
    return QuantKind::kSuperOffset;
  default:
    break;
  }
  throw std::invalid_argument(std::string("linear: weight type ") + to_string(weight_type) +
                              " is not supported");
}

int stored_offset(TensorType weight_type) {
  switch (weight_type) {
  case TensorType::Q4_0:
    return 8;
  case TensorType::Q5_0:
    return 16;
  case TensorType::Q3_K:
    return 4;
  case TensorType::Q6_K:
    return 32;
  default:
    return 0;
  }
}

TensorType activation_type(TensorType weight_type) {
  switch (quant_kind(weight_type)) {
  case QuantKind::kLegacySigned:
  case QuantKind::kLegacyOffset:
    return TensorType::Q8_0;
  case QuantKind::kLegacyWithMin:
    return TensorType::Q8_1;
  case QuantKind::kSuperWithMin:
  case QuantKind::kSuperOffset:
    break;
  }
  return TensorType::Q8_K;
}

int super_quads_per_chain(TensorType weight_type) {
  return weight_type == TensorType::Q6_K ? 2 : 4;
}

void check_quantized_weight(const WeightView& w) {
  const size_t block = tensor_block_size(w.type);
  if (w.cols % block != 0) {
    throw std::invalid_argument(std::string("linear: a ") + to_string(w.type) +
                                " weight needs rows of a multiple of " + std::to_string(block) +
                                " values, not " + std::to_string(w.cols));
  }
}

namespace {

// Set while this thread is one of the team quantized_linear_shared opened,
// to the team's tile counter for the product it is on: the column loops of
// its products then share that team.
thread_local std::atomic<size_t>* shared_tile_counter = nullptr;

// Calls group(col0, cols, next_col0) for every group of `group_cols` output
// columns of an n-column product against m rows of k values: the tiles of
// quantized_column_tiles taken one at a time by the OpenMP team
// (run_claimed_tiles), or all by the calling thread below kParallelMinMacs
// multiply-adds. Inside quantized_linear_shared's team, every thread calls
// this for the same products in the same order, each product's tiles
// counted by its own shared_tile_counter, and a thread moves on to the next
// product as soon as it finds none of this one's tiles left.
template <typename GroupFn>
void for_each_column_group(size_t n, size_t group_cols, size_t m, size_t k, GroupFn&& group) {
  const size_t team = static_cast<size_t>(shared_tile_counter != nullptr ? omp_get_num_threads()
                                                                         : omp_get_max_threads());
  const ColumnTiles tiles = quantized_column_tiles(n, group_cols, team);
  if (shared_tile_counter != nullptr) {
    run_claimed_tiles(tiles, *shared_tile_counter, group);
    return;
  }
  std::atomic<size_t> next_tile{0};
#pragma omp parallel if (m * n * k >= kParallelMinMacs)
  run_claimed_tiles(tiles, next_tile, group);
}

// The weight rows of the column group from next_col0 of an n-column weight
// in groups of group_cols: where they start, and their bytes (0 when
// next_col0 is n).
std::pair<const uint8_t*, size_t> next_group_rows(const uint8_t* w_bytes, size_t w_row_bytes,
                                                  size_t n, size_t next_col0, size_t group_cols) {
  return {w_bytes + next_col0 * w_row_bytes,
          next_col0 < n ? std::min(group_cols, n - next_col0) * w_row_bytes : 0};
}

// Q8_0, Q4_0 and Q5_0 on AVX2: groups of kLaneGroupCols columns,
// interleaved as Q8_0 quants, against all rows of x. `avx512_rows`: 1 to 3
// rows take the in-place kernel's vpdpbusd form (the CPU has AVX-512 VNNI).
void q8_0_linear_avx2(TensorType type, const uint8_t* w_bytes, size_t w_row_bytes, size_t n,
                      size_t k, const QuantizedRows& rows, size_t m, float* __restrict__ y,
                      const float* __restrict__ bias, bool avx512_rows) {
  for_each_column_group(n, kLaneGroupCols, m, k, [&](size_t col0, size_t cols, size_t next_col0) {
    // This thread's interleaved column group, grown once.
    thread_local CacheLineVector<uint8_t> q_abs;
    thread_local CacheLineVector<int8_t> q;
    thread_local CacheLineVector<float> d;
    q_abs.resize(kLaneGroupCols * k);
    q.resize(kLaneGroupCols * k);
    d.resize(kLaneGroupCols * (k / 32));
    const uint8_t* group_rows = w_bytes + col0 * w_row_bytes;
    if (m >= kInterleaveMinRows)
      interleave_q8_0(type, group_rows, w_row_bytes, cols, k, q_abs.data(), q.data(), d.data());
    LaneGroupProblem p{};
    p.type = type;
    p.rows = group_rows;
    p.row_bytes = w_row_bytes;
    p.k = k;
    p.m = m;
    p.x_q = rows.q;
    p.x_d = rows.d;
    p.x_sums = rows.bsums;
    p.w = InterleavedQ8_0{q_abs.data(), q.data(), d.data()};
    p.cols = cols;
    p.y = y + col0;
    p.y_stride = n;
    p.bias = bias != nullptr ? bias + col0 : nullptr;
    std::tie(p.next, p.next_bytes) =
        next_group_rows(w_bytes, w_row_bytes, n, next_col0, kLaneGroupCols);
    if (avx512_rows && m < kInterleaveMinRows)
      dot_q8_0_rows_avx512(p);
    else
      dot_q8_0_lanes_avx2(p);
  });
}

// A K-quant lane group of kCols columns of k values, decoded as
// DecodedColumns lays them out, with d and dmin in lanes: those of
// super-block b at d[b * kCols + col].
template <size_t kCols>
struct DecodedSuperGroup {
  size_t k = 0;
  CacheLineVector<uint8_t> q;     // [kCols, k]
  CacheLineVector<int8_t> scales; // [kCols, k / 16]
  CacheLineVector<int16_t> mins;  // [kCols, k / 16]
  CacheLineVector<float> d;       // [k / 256, kCols]
  CacheLineVector<float> dmin;    // [k / 256, kCols]

  void fit(size_t columns_k) {
    k = columns_k;
    q.resize(kCols * k);
    scales.resize(kCols * k / 16);
    mins.resize(kCols * k / 16);
    d.resize(kCols * k / 256);
    dmin.resize(kCols * k / 256);
  }

  /// Decodes the `cols` rows `rows + j * row_bytes` of a `type` weight into
  /// columns 0..cols - 1 and zeroes the rest (a ragged last group), which
  /// the kernels then read as they read the others.
  void decode(TensorType type, const uint8_t* rows, size_t row_bytes, size_t cols) {
    for (size_t j = 0; j < cols; ++j)
      decode_super_row(type, rows + j * row_bytes, k, j, q.data(), scales.data(), mins.data(),
                       d.data() + j, dmin.data() + j, kCols);
    if (cols == kCols)
      return;
    std::fill(q.begin() + cols * k, q.end(), uint8_t{0});
    std::fill(scales.begin() + cols * (k / 16), scales.end(), int8_t{0});
    std::fill(mins.begin() + cols * (k / 16), mins.end(), int16_t{0});
    for (size_t b = 0; b < k / 256; ++b)
      for (size_t j = cols; j < kCols; ++j) {
        d[kCols * b + j] = 0.0f;
        dmin[kCols * b + j] = 0.0f;
      }
  }

  DecodedColumns columns() const {
    return DecodedColumns{q.data(), nullptr, nullptr, scales.data(), mins.data()};
  }
};

// One thread's scratch for a K-quant lane group of k-value columns.
struct SuperLaneScratch {
  DecodedSuperGroup<kLaneGroupCols> decoded;
  CacheLineVector<uint8_t> lane_q; // interleaved: InterleavedSuper's arrays
  CacheLineVector<int16_t> lane_scales;
  CacheLineVector<int16_t> lane_mins;

  void fit(size_t k) {
    if (decoded.k == k)
      return;
    decoded.fit(k);
    lane_q.resize(kLaneGroupCols * k);
    lane_scales.resize(2 * kLaneGroupCols * k / 16);
    lane_mins.resize(kLaneGroupCols * k / 16);
  }
};

// Q8_0, Q4_0 and Q5_0 on AVX-512 from kInterleaveMinRows rows: groups of
// kWideLaneGroupCols columns, interleaved unsigned, against all rows of x.
void q8_0_linear_avx512(TensorType type, const uint8_t* w_bytes, size_t w_row_bytes, size_t n,
                        size_t k, const QuantizedRows& rows, size_t m, float* __restrict__ y,
                        const float* __restrict__ bias) {
  for_each_column_group(
      n, kWideLaneGroupCols, m, k, [&](size_t col0, size_t cols, size_t next_col0) {
        // This thread's interleaved column group, grown once.
        thread_local CacheLineVector<uint8_t> q;
        thread_local CacheLineVector<float> d;
        q.resize(kWideLaneGroupCols * k);
        d.resize(kWideLaneGroupCols * (k / 32));
        interleave_unsigned(type, w_bytes + col0 * w_row_bytes, w_row_bytes, cols, k, q.data(),
                            d.data());
        WideLaneGroupProblem p{};
        p.offset = unsigned_offset(type);
        p.k = k;
        p.m = m;
        p.x_q = rows.q;
        p.x_d = rows.d;
        p.x_sums = rows.bsums;
        p.w = InterleavedUnsigned{q.data(), d.data()};
        p.cols = cols;
        p.y = y + col0;
        p.y_stride = n;
        p.bias = bias != nullptr ? bias + col0 : nullptr;
        std::tie(p.next, p.next_bytes) =
            next_group_rows(w_bytes, w_row_bytes, n, next_col0, kWideLaneGroupCols);
        dot_q8_0_lanes_avx512(p);
      });
}

// One thread's scratch for an AVX-512 K-quant lane group of k-value
// columns: InterleavedSuperWideOut's arrays.
struct WideSuperLaneScratch {
  size_t k = 0;
  CacheLineVector<uint8_t> q;
  CacheLineVector<int32_t> scales;
  CacheLineVector<int16_t> mins;
  CacheLineVector<float> d;
  CacheLineVector<float> dmin;

  void fit(size_t columns_k) {
    if (k == columns_k)
      return;
    k = columns_k;
    q.resize(kWideLaneGroupCols * k);
    scales.resize(kWideLaneGroupCols * k / 16);
    mins.resize(kWideLaneGroupCols * k / 16);
    d.resize(kWideLaneGroupCols * k / 256);
    dmin.resize(kWideLaneGroupCols * k / 256);
  }
};

// The K-quants on AVX-512 from kInterleaveMinRows rows: groups of
// kWideLaneGroupCols columns, decoded and interleaved, against all rows of x.
void super_linear_avx512(const WeightView& w, size_t w_row_bytes, QuantKind kind,
                         const QuantizedRows& rows, size_t m, float* __restrict__ y,
                         const float* __restrict__ bias) {
  const size_t k = w.cols;
  const size_t n = w.rows;
  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  for_each_column_group(
      n, kWideLaneGroupCols, m, k, [&](size_t col0, size_t cols, size_t next_col0) {
        thread_local WideSuperLaneScratch scratch; // grown once per width
        scratch.fit(k);
        interleave_super_wide(w.type, w_bytes + col0 * w_row_bytes, w_row_bytes, cols, k,
                              {scratch.q.data(), scratch.scales.data(), scratch.mins.data(),
                               scratch.d.data(), scratch.dmin.data()});
        WideSuperLaneGroupProblem p{};
        p.kind = kind;
        p.k = k;
        p.m = m;
        p.x_q = rows.q;
        p.x_d = rows.d;
        p.x_bsums = rows.bsums;
        p.w = InterleavedSuperWide{scratch.q.data(), scratch.scales.data(), scratch.mins.data()};
        p.d = scratch.d.data();
        p.dmin = scratch.dmin.data();
        p.scale_quads = w.type == TensorType::Q4_K || w.type == TensorType::Q5_K ? 8 : 4;
        p.cols = cols;
        p.y = y + col0;
        p.y_stride = n;
        p.bias = bias != nullptr ? bias + col0 : nullptr;
        std::tie(p.next, p.next_bytes) =
            next_group_rows(w_bytes, w_row_bytes, n, next_col0, kWideLaneGroupCols);
        dot_super_lanes_avx512(p);
      });
}

// A K-quant lane group's problem as every path starts it: its weight rows
// in place, x, its outputs and bias, and the rows of the group this thread
// computes next, from next_col0.
SuperLaneGroupProblem super_group_problem(const WeightView& w, size_t w_row_bytes, QuantKind kind,
                                          const QuantizedRows& rows, size_t m, float* y,
                                          const float* bias, size_t col0, size_t cols,
                                          size_t next_col0) {
  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  SuperLaneGroupProblem p{};
  p.kind = kind;
  p.type = w.type;
  p.rows = w_bytes + col0 * w_row_bytes;
  p.row_bytes = w_row_bytes;
  p.k = w.cols;
  p.m = m;
  p.x_q = rows.q;
  p.x_d = rows.d;
  p.x_bsums = rows.bsums;
  p.cols = cols;
  p.y = y + col0;
  p.y_stride = w.rows;
  p.bias = bias != nullptr ? bias + col0 : nullptr;
  std::tie(p.next, p.next_bytes) =
      next_group_rows(w_bytes, w_row_bytes, w.rows, next_col0, kLaneGroupCols);
  return p;
}

// Q4_K, Q5_K and Q6_K on AVX-512 below kSuperRowsMaxRows rows: groups of
// kLaneGroupCols columns read in place, with no decoding or interleaving.
void super_rows_linear_avx512(const WeightView& w, size_t w_row_bytes, QuantKind kind,
                              const QuantizedRows& rows, size_t m, float* __restrict__ y,
                              const float* __restrict__ bias) {
  for_each_column_group(
      w.rows, kLaneGroupCols, m, w.cols, [&](size_t col0, size_t cols, size_t next_col0) {
        dot_super_rows_avx512(
            super_group_problem(w, w_row_bytes, kind, rows, m, y, bias, col0, cols, next_col0));
      });
}

// The K-quants on AVX2: groups of kLaneGroupCols columns, decoded, then
// interleaved where enough rows of x share the cost, against all rows of x.
void super_linear_avx2(const WeightView& w, size_t w_row_bytes, QuantKind kind,
                       const QuantizedRows& rows, size_t m, float* __restrict__ y,
                       const float* __restrict__ bias) {
  const size_t k = w.cols;
  const size_t n = w.rows;
  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  // Q4_K's and Q6_K's kernels for 1-3 rows read the blocks in place.
  const bool in_place =
      (w.type == TensorType::Q4_K || w.type == TensorType::Q6_K) && m < kInterleaveMinRows;
  for_each_column_group(n, kLaneGroupCols, m, k, [&](size_t col0, size_t cols, size_t next_col0) {
    thread_local SuperLaneScratch scratch; // grown once per width
    scratch.fit(k);
    // 1-3 rows read the decoded columns (or, in place, the blocks), more
    // the interleaved ones, which come straight from the blocks.
    if (m >= kInterleaveMinRows)
      interleave_super(w.type, w_bytes + col0 * w_row_bytes, w_row_bytes, cols, k,
                       {scratch.lane_q.data(), scratch.lane_scales.data(), scratch.lane_mins.data(),
                        scratch.decoded.d.data(), scratch.decoded.dmin.data()});
    else if (!in_place)
      scratch.decoded.decode(w.type, w_bytes + col0 * w_row_bytes, w_row_bytes, cols);
    const DecodedColumns decoded = scratch.decoded.columns();
    SuperLaneGroupProblem p =
        super_group_problem(w, w_row_bytes, kind, rows, m, y, bias, col0, cols, next_col0);
    p.decoded = decoded;
    p.w = InterleavedSuper{scratch.lane_q.data(), scratch.lane_scales.data(),
                           scratch.lane_mins.data()};
    p.d = scratch.decoded.d.data();
    p.dmin = scratch.decoded.dmin.data();
    p.quads_per_chain = super_quads_per_chain(w.type);
    dot_super_lanes_avx2(p);
  });
}

} // namespace

void quantized_linear(MatmulIsa isa, const WeightView& w, const float* __restrict__ x, size_t m,
                      float* __restrict__ y, const float* __restrict__ bias) {
  check_quantized_weight(w);
  if (m == 0 || w.rows == 0) {
    return;
  }
  // The caller thread's activation scratch, grown once to the largest call.
  thread_local QuantizedActivations activations;
  activations.quantize(activation_type(w.type), x, m, w.cols);
  quantized_linear(isa, w, activations, y, bias);
}

namespace {

/// Throws std::invalid_argument unless `x` can meet `w`.
void check_quantized_operands(const WeightView& w, const QuantizedActivations& x) {
  check_quantized_weight(w);
  if (x.act() != activation_type(w.type) || x.k() != w.cols) {
    throw std::invalid_argument(std::string("linear: a ") + to_string(w.type) + " weight of " +
                                std::to_string(w.cols) + " inputs cannot take rows of " +
                                std::to_string(x.k()) + " quantized to " + to_string(x.act()));
  }
}

} // namespace

void quantized_linear(MatmulIsa isa, const WeightView& w, const QuantizedActivations& x,
                      float* __restrict__ y, const float* __restrict__ bias) {
  check_quantized_operands(w, x);
  const QuantKind kind = quant_kind(w.type);
  const TensorType act = activation_type(w.type);
  const size_t k = w.cols;
  const size_t n = w.rows;
  const size_t m = x.m();
  if (m == 0 || n == 0) {
    return;
  }
  const size_t w_row_bytes = tensor_row_bytes(w.type, k);
  const QuantizedRows rows = x.rows();
  const int8_t* const xq = rows.q;
  const float* const xd = rows.d;
  const float* const xs = rows.s;
  const int16_t* const xb = rows.bsums;

  // Fewer rows take the AVX-512 kernels, which give the same bits.
  if (isa == MatmulIsa::Amx && m >= amx_min_rows(kind)) {
    const AmxProduct product{&w, kind, y, bias};
    quantized_linear_amx(&product, 1, act, rows, m);
    return;
  }
  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  // AVX-512 (or AMX below a whole panel) takes the AVX2 lane kernels below
  // kInterleaveMinRows rows: their in-place reads, with the same bits.
  const bool avx2_lanes = isa == MatmulIsa::Avx2 || m < kInterleaveMinRows;
  if (kind == QuantKind::kLegacySigned || kind == QuantKind::kLegacyOffset) {
    if (avx2_lanes)
      q8_0_linear_avx2(w.type, w_bytes, w_row_bytes, n, k, rows, m, y, bias,
                       isa != MatmulIsa::Avx2);
    else
      q8_0_linear_avx512(w.type, w_bytes, w_row_bytes, n, k, rows, m, y, bias);
    return;
  }
  if (is_super_kind(kind)) {
    if (isa != MatmulIsa::Avx2 && m < kSuperRowsMaxRows && super_rows_avx512_takes(w.type))
      super_rows_linear_avx512(w, w_row_bytes, kind, rows, m, y, bias);
    else if (avx2_lanes)
      super_linear_avx2(w, w_row_bytes, kind, rows, m, y, bias);
    else
      super_linear_avx512(w, w_row_bytes, kind, rows, m, y, bias);
    return;
  }
  // Q4_1 and Q5_1: decoded column groups.
  for_each_column_group(n, kGroupCols, m, k, [&](size_t col0, size_t cols, size_t /*next_col0*/) {
    // This thread's unpacked column group, grown once.
    thread_local CacheLineVector<uint8_t> q;
    thread_local CacheLineVector<float> d;
    thread_local CacheLineVector<float> mm;
    q.resize(kGroupCols * k);
    d.resize(kGroupCols * (k / 32));
    mm.resize(kGroupCols * (k / 32));
    for (size_t j = 0; j < cols; ++j) {
      decode_weight_row(w.type, w_bytes + (col0 + j) * w_row_bytes, k, j, q.data(), d.data(),
                        mm.data(), nullptr, nullptr);
    }
    GroupProblem p{};
    p.kind = kind;
    p.k = k;
    p.m = m;
    p.x_q = xq;
    p.x_d = xd;
    p.x_s = xs;
    p.x_bsums = xb;
    p.w = DecodedColumns{q.data(), d.data(), mm.data(), nullptr, nullptr};
    p.offset = stored_offset(w.type);
    p.cols = cols;
    p.y = y + col0;
    p.y_stride = n;
    p.bias = bias != nullptr ? bias + col0 : nullptr;
    if (isa != MatmulIsa::Avx2) {
      dot_group_avx512(p);
    } else {
      dot_group_avx2(p);
    }
  });
}

void quantized_linear_shared(MatmulIsa isa, const QuantizedOutput* outputs, size_t count) {
  size_t macs = 0;
  bool amx = false;
  for (size_t i = 0; i < count; ++i) {
    const QuantizedOutput& out = outputs[i];
    check_quantized_operands(*out.w, *out.x);
    macs += out.x->m() * out.w->rows * out.w->cols;
    amx = amx || (isa == MatmulIsa::Amx && out.x->m() >= amx_min_rows(quant_kind(out.w->type)));
  }
  if (amx && count <= kMaxAmxProducts) {
    // The outputs the tiles take, by the rows they share, each set in one
    // call (x laid out once, one parallel region); the others alone.
    bool done[kMaxAmxProducts] = {};
    for (size_t i = 0; i < count; ++i) {
      if (done[i])
        continue;
      const QuantizedActivations& x = *outputs[i].x;
      if (x.m() < amx_min_rows(quant_kind(outputs[i].w->type))) {
        quantized_linear(isa, *outputs[i].w, x, outputs[i].y, outputs[i].bias);
        continue;
      }
      AmxProduct products[kMaxAmxProducts];
      size_t n_products = 0;
      for (size_t j = i; j < count; ++j) {
        const QuantKind kind = quant_kind(outputs[j].w->type);
        if (done[j] || outputs[j].x != &x || x.m() < amx_min_rows(kind))
          continue;
        products[n_products++] = AmxProduct{outputs[j].w, kind, outputs[j].y, outputs[j].bias};
        done[j] = true;
      }
      quantized_linear_amx(products, n_products, x.act(), x.rows(), x.m());
    }
    return;
  }
  if (amx || count < 2) {
    for (size_t i = 0; i < count; ++i)
      quantized_linear(isa, *outputs[i].w, *outputs[i].x, outputs[i].y, outputs[i].bias);
    return;
  }
  // One tile counter per product, for the whole team.
  std::unique_ptr<std::atomic<size_t>[]> next_tiles(new std::atomic<size_t>[count]);
  for (size_t i = 0; i < count; ++i)
    next_tiles[i].store(0, std::memory_order_relaxed);
#pragma omp parallel if (macs >= kParallelMinMacs)
  {
    for (size_t i = 0; i < count; ++i) {
      shared_tile_counter = &next_tiles[i];
      quantized_linear(isa, *outputs[i].w, *outputs[i].x, outputs[i].y, outputs[i].bias);
    }
    shared_tile_counter = nullptr;
  }
}

} // namespace caflm::detail

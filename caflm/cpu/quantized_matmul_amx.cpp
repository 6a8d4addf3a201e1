// quantized_linear's column loop for the AMX kernels (quantized_kernels_amx.cpp):
// x laid out in 16-row panels once per call, then for each group of
// kAmxGroupCols columns the decoded weights against every panel, and the
// rows after the last panel through the AVX-512 kernels. Compiled for the
// build's baseline: the tile and AVX-512 instructions are all in the kernel
// files.
#include "caflm/cpu/quantized_matmul.hpp"

#include "caflm/gguf/quant_blocks.hpp"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace caflm::detail {

namespace {

/// One thread's decoded column group for quantized_linear_amx, grown to the
/// largest a call needs and never shrunk: products of several kinds take
/// turns on it.
struct AmxGroupScratch {
  CacheLineVector<uint8_t> q;
  CacheLineVector<float> d;
  CacheLineVector<float> m;
  CacheLineVector<int8_t> scales;
  CacheLineVector<int16_t> mins;
  CacheLineVector<int8_t> low;
  CacheLineVector<int8_t> high;
  CacheLineVector<int8_t> min_rows;

  void fit(QuantKind kind, size_t k) {
    const auto grow = [](auto& v, size_t size) {
      if (v.size() < size)
        v.resize(size);
    };
    const bool super = is_super_kind(kind);
    grow(q, kAmxGroupCols * k);
    grow(d, kAmxGroupCols * (k / 32));
    grow(m, kAmxGroupCols * (k / 32));
    if (super) {
      grow(scales, kAmxGroupCols * k / 16);
      grow(mins, kAmxGroupCols * k / 16);
      grow(low, kAmxGroupCols * amx_split_pitch(k));
      grow(high, kAmxGroupCols * amx_split_pitch(k));
    }
    if (kind == QuantKind::kSuperWithMin)
      grow(min_rows, kAmxGroupCols * amx_split_pitch(k));
  }

  /// The decoded columns from `first` on, for a weight of `type` and rows
  /// of k values.
  DecodedColumns columns(size_t first, TensorType type, size_t k) const {
    const size_t blocks = k / tensor_block_size(type);
    const bool super = is_super_kind(quant_kind(type));
    return DecodedColumns{q.data() + first * k, d.data() + first * blocks,
                          m.data() + first * blocks,
                          super ? scales.data() + first * (k / 16) : nullptr,
                          super ? mins.data() + first * (k / 16) : nullptr};
  }
};

/// One column group of product `p` (columns col0 .. col0 + cols) against
/// every panel of x, and the rows after the last panel through the AVX-512
/// kernels; `next` is the weight bytes the thread reads after it.
void amx_column_group(const AmxProduct& p, TensorType act, const QuantizedRows& x, size_t m,
                      const AmxActivations& panelled, size_t col0, AmxGroupScratch& scratch,
                      const uint8_t* next, size_t next_bytes) {
  const WeightView& w = *p.w;
  const QuantKind kind = p.kind;
  const size_t k = w.cols;
  const size_t n = w.rows;
  const size_t blocks = k / tensor_block_size(act);
  const size_t tile_rows = 16 * panelled.panels;
  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  const size_t w_row_bytes = tensor_row_bytes(w.type, k);
  const size_t cols = std::min(kAmxGroupCols, n - col0);
  // A whole group of Q8_0 with no rows left for the AVX-512 kernels feeds
  // its blocks to the tiles where they lie; only the scales are decoded. (A
  // ragged group would have the tiles read rows past the tensor.)
  const bool in_place = w.type == TensorType::Q8_0 && cols == kAmxGroupCols && tile_rows == m;
  // Likewise, with no rows left for the AVX-512 kernels (which read decoded
  // columns), the K kinds' products are split straight from the weights
  // (split_super_rows_amx, below) without decoding them.
  const bool split_in_place = is_super_kind(kind) && tile_rows == m;
  scratch.fit(kind, k);
  if (in_place) {
    q8_0_scales_amx(w_bytes + col0 * w_row_bytes, w_row_bytes, cols, k / 32, scratch.d.data());
  } else if (!split_in_place) {
    for (size_t j = 0; j < cols; ++j) {
      decode_weight_row(w.type, w_bytes + (col0 + j) * w_row_bytes, k, j, scratch.q.data(),
                        scratch.d.data(), scratch.m.data(), scratch.scales.data(),
                        scratch.mins.data());
    }
  }
  AmxGroupProblem tiles{};
  tiles.kind = kind;
  tiles.k = k;
  tiles.x = panelled;
  tiles.w = scratch.columns(0, w.type, k);
  if (in_place) {
    tiles.quants = w_bytes + col0 * w_row_bytes + offsetof(BlockQ8_0, qs);
    tiles.quants_stride = w_row_bytes;
    tiles.quants_block_stride = sizeof(BlockQ8_0);
  } else {
    tiles.quants = scratch.q.data();
    tiles.quants_stride = k;
    tiles.quants_block_stride = 32;
  }
  tiles.low = scratch.low.data();
  tiles.high = scratch.high.data();
  tiles.mins = kind == QuantKind::kSuperWithMin ? scratch.min_rows.data() : nullptr;
  tiles.offset = stored_offset(w.type);
  tiles.cols = cols;
  tiles.y = p.y + col0;
  tiles.y_stride = n;
  tiles.bias = p.bias != nullptr ? p.bias + col0 : nullptr;
  tiles.next_weights = next;
  tiles.next_weights_bytes = next_bytes;
  if (split_in_place) {
    split_super_rows_amx(w.type, w_bytes + col0 * w_row_bytes, w_row_bytes, tiles, scratch.d.data(),
                         scratch.m.data());
    tiles.split = true;
  }
  dot_group_amx(tiles);
  // The rows after the last panel: the decoded group in column groups of
  // kGroupCols, as the AVX-512 kernels take them.
  for (size_t sub = 0; tile_rows < m && sub < cols; sub += kGroupCols) {
    GroupProblem rest{};
    rest.kind = kind;
    rest.k = k;
    rest.m = m - tile_rows;
    rest.x_q = x.q + tile_rows * k;
    rest.x_d = x.d + tile_rows * blocks;
    rest.x_s = x.s != nullptr ? x.s + tile_rows * blocks : nullptr;
    // Only the K kinds read sums (Q8_K's, one per 16 values).
    rest.x_bsums = act == TensorType::Q8_K ? x.bsums + tile_rows * (k / 16) : nullptr;
    rest.w = scratch.columns(sub, w.type, k);
    rest.offset = stored_offset(w.type);
    rest.cols = std::min(kGroupCols, cols - sub);
    rest.y = p.y + tile_rows * n + col0 + sub;
    rest.y_stride = n;
    rest.bias = p.bias != nullptr ? p.bias + col0 + sub : nullptr;
    dot_group_avx512(rest);
  }
}

} // namespace

void quantized_linear_amx(const AmxProduct* products, size_t count, TensorType act,
                          const QuantizedRows& x, size_t m) {
  if (count == 0 || count > kMaxAmxProducts) {
    throw std::invalid_argument("quantized_linear_amx: 1 to " + std::to_string(kMaxAmxProducts) +
                                " products");
  }
  const size_t k = products[0].w->cols;
  const size_t blocks = k / tensor_block_size(act);
  bool offset_kind = false;
  size_t first_group[kMaxAmxProducts + 1] = {};
  size_t macs = 0;
  for (size_t i = 0; i < count; ++i) {
    offset_kind = offset_kind || products[i].kind == QuantKind::kLegacyOffset;
    first_group[i + 1] = first_group[i] + (products[i].w->rows + kAmxGroupCols - 1) / kAmxGroupCols;
    macs += m * products[i].w->rows * k;
  }
  const size_t groups = first_group[count];
  // Whole panels of 16 rows go through the tiles, the rows after them
  // through the AVX-512 kernels, which compute the same bits. x is laid out
  // once for all the products.
  const size_t panels = m / 16;
  thread_local CacheLineVector<int8_t> panel_q;
  thread_local CacheLineVector<float> panel_d;
  thread_local CacheLineVector<float> panel_s;
  thread_local CacheLineVector<int32_t> panel_sums;
  panel_q.resize(panels * 16 * k);
  panel_d.resize(panels * 16 * blocks);
  panel_s.resize(x.s != nullptr ? panels * 16 * blocks : 0);
  panel_sums.resize(offset_kind ? panels * 16 * blocks : 0);
  int8_t* const pq = panel_q.data();
  float* const pd = panel_d.data();
  float* const ps = x.s != nullptr ? panel_s.data() : nullptr;
  int32_t* const psums = offset_kind ? panel_sums.data() : nullptr;
  const auto n_panels = static_cast<ptrdiff_t>(panels);
#pragma omp parallel for schedule(static) if (m * k >= kParallelMinMacs / 8)
  for (ptrdiff_t panel = 0; panel < n_panels; ++panel) {
    pack_panel_amx(x, k, blocks, static_cast<size_t>(panel), AmxPanelsOut{pq, pd, ps, psums});
  }
  const AmxActivations panelled{panels, pq, pd, ps, psums};

  // The product and first column of group g of all the products' groups.
  const auto locate = [&](size_t g) {
    size_t i = 0;
    while (g >= first_group[i + 1])
      ++i;
    return std::make_pair(&products[i], (g - first_group[i]) * kAmxGroupCols);
  };
  // Groups are claimed from a shared counter, each thread's next one as it
  // starts the current one, so that the kernels can ask L2 for the next
  // group's weights while they compute (AmxGroupProblem::next_weights); all
  // the products' groups in one parallel region, so that no thread waits
  // for the others between them. Which thread computes a group never
  // changes its bits.
  std::atomic<size_t> next_group{0};
#pragma omp parallel if (macs >= kParallelMinMacs)
  {
    thread_local AmxGroupScratch scratch;
    bool configured = false;
    bool super_tiles = false;
    size_t group = next_group.fetch_add(1, std::memory_order_relaxed);
    while (group < groups) {
      const size_t following = next_group.fetch_add(1, std::memory_order_relaxed);
      const auto [product, col0] = locate(group);
      // The legacy and the K kinds configure the tiles differently.
      if (!configured || is_super_kind(product->kind) != super_tiles) {
        if (configured)
          amx_end();
        amx_begin(product->kind);
        configured = true;
        super_tiles = is_super_kind(product->kind);
      }
      const uint8_t* next = nullptr;
      size_t next_bytes = 0;
      if (following < groups) {
        const auto [next_product, next_col0] = locate(following);
        const WeightView& next_w = *next_product->w;
        const size_t row_bytes = tensor_row_bytes(next_w.type, next_w.cols);
        next = static_cast<const uint8_t*>(next_w.data) + next_col0 * row_bytes;
        next_bytes = std::min(kAmxGroupCols, next_w.rows - next_col0) * row_bytes;
      }
      amx_column_group(*product, act, x, m, panelled, col0, scratch, next, next_bytes);
      group = following;
    }
    if (configured)
      amx_end();
  }
}

} // namespace caflm::detail

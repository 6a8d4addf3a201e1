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
#include <vector>

namespace caflm::detail {

namespace {

/// One thread's decoded column group for amx_linear, grown once.
struct AmxGroupScratch {
  CacheLineVector<uint8_t> q;
  CacheLineVector<float> d;
  CacheLineVector<float> m;
  CacheLineVector<int8_t> scales;
  CacheLineVector<int16_t> mins;
  CacheLineVector<int8_t> low;
  CacheLineVector<int8_t> high;
  CacheLineVector<int8_t> min_rows;

  void resize(QuantKind kind, size_t k) {
    const bool super = is_super_kind(kind);
    q.resize(kAmxGroupCols * k);
    d.resize(kAmxGroupCols * (k / 32));
    m.resize(kAmxGroupCols * (k / 32));
    scales.resize(super ? kAmxGroupCols * k / 16 : 0);
    mins.resize(super ? kAmxGroupCols * k / 16 : 0);
    low.resize(super ? kAmxGroupCols * amx_split_pitch(k) : 0);
    high.resize(super ? kAmxGroupCols * amx_split_pitch(k) : 0);
    min_rows.resize(kind == QuantKind::kSuperWithMin ? kAmxGroupCols * amx_split_pitch(k) : 0);
  }

  /// The decoded columns from `first` on, for a weight of `type` and rows
  /// of k values.
  DecodedColumns columns(size_t first, TensorType type, size_t k) const {
    const size_t blocks = k / tensor_block_size(type);
    const bool super = !scales.empty();
    return DecodedColumns{q.data() + first * k, d.data() + first * blocks,
                          m.data() + first * blocks,
                          super ? scales.data() + first * (k / 16) : nullptr,
                          super ? mins.data() + first * (k / 16) : nullptr};
  }
};

} // namespace

void quantized_linear_amx(const WeightView& w, QuantKind kind, TensorType act,
                          const QuantizedRows& x, size_t m, float* __restrict__ y,
                          const float* __restrict__ bias) {
  const size_t k = w.cols;
  const size_t n = w.rows;
  const size_t blocks = k / tensor_block_size(act);
  // Whole panels of 16 rows go through the tiles, the rows after them
  // through the AVX-512 kernels, which compute the same bits.
  const size_t panels = m / 16;
  const size_t tile_rows = 16 * panels;
  thread_local CacheLineVector<int8_t> panel_q;
  thread_local CacheLineVector<float> panel_d;
  thread_local CacheLineVector<float> panel_s;
  thread_local CacheLineVector<int32_t> panel_sums;
  panel_q.resize(panels * 16 * k);
  panel_d.resize(panels * 16 * blocks);
  panel_s.resize(x.s != nullptr ? panels * 16 * blocks : 0);
  panel_sums.resize(kind == QuantKind::kLegacyOffset ? panels * 16 * blocks : 0);
  int8_t* const pq = panel_q.data();
  float* const pd = panel_d.data();
  float* const ps = x.s != nullptr ? panel_s.data() : nullptr;
  int32_t* const psums = kind == QuantKind::kLegacyOffset ? panel_sums.data() : nullptr;
  const auto n_panels = static_cast<ptrdiff_t>(panels);
#pragma omp parallel for schedule(static) if (m * k >= kParallelMinMacs / 8)
  for (ptrdiff_t panel = 0; panel < n_panels; ++panel) {
    pack_panel_amx(x, k, blocks, static_cast<size_t>(panel), AmxPanelsOut{pq, pd, ps, psums});
  }
  const AmxActivations panelled{panels, pq, pd, ps, psums};

  const auto* w_bytes = static_cast<const uint8_t*>(w.data);
  const size_t w_row_bytes = tensor_row_bytes(w.type, k);
  // Groups are claimed from a shared counter, each thread's next one as it
  // starts the current one, so that the kernels can ask L2 for the next
  // group's weights while they compute (AmxGroupProblem::next_weights).
  // Which thread computes a group never changes its bits.
  const size_t groups = (n + kAmxGroupCols - 1) / kAmxGroupCols;
  std::atomic<size_t> next_group{0};
#pragma omp parallel if (m * n * k >= kParallelMinMacs)
  {
    amx_begin(kind);
    thread_local AmxGroupScratch scratch;
    scratch.resize(kind, k);
    size_t group = next_group.fetch_add(1, std::memory_order_relaxed);
    while (group < groups) {
      const size_t following = next_group.fetch_add(1, std::memory_order_relaxed);
      const size_t col0 = group * kAmxGroupCols;
      const size_t cols = std::min(kAmxGroupCols, n - col0);
      // A whole group of Q8_0 with no rows left for the AVX-512 kernels
      // feeds its blocks to the tiles where they lie; only the scales are
      // decoded. (A ragged group would have the tiles read rows past the
      // tensor.)
      const bool in_place = w.type == TensorType::Q8_0 && cols == kAmxGroupCols && tile_rows == m;
      // Likewise, with no rows left for the AVX-512 kernels (which read
      // decoded columns), the K kinds' products are split straight from
      // the weights (split_super_rows_amx, below) without decoding them.
      const bool split_in_place = is_super_kind(kind) && tile_rows == m;
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
      tiles.y = y + col0;
      tiles.y_stride = n;
      tiles.bias = bias != nullptr ? bias + col0 : nullptr;
      if (following < groups) {
        const size_t next_col0 = following * kAmxGroupCols;
        tiles.next_weights = w_bytes + next_col0 * w_row_bytes;
        tiles.next_weights_bytes =
            (std::min(n, next_col0 + kAmxGroupCols) - next_col0) * w_row_bytes;
      }
      if (split_in_place) {
        split_super_rows_amx(w.type, w_bytes + col0 * w_row_bytes, w_row_bytes, tiles,
                             scratch.d.data(), scratch.m.data());
        tiles.split = true;
      }
      dot_group_amx(tiles);
      // The rows after the last panel: the decoded group in column groups
      // of kGroupCols, as the AVX-512 kernels take them.
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
        rest.y = y + tile_rows * n + col0 + sub;
        rest.y_stride = n;
        rest.bias = bias != nullptr ? bias + col0 + sub : nullptr;
        dot_group_avx512(rest);
      }
      group = following;
    }
    amx_end();
  }
}

} // namespace caflm::detail

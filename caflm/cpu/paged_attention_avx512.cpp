// paged_attention's kernels with 16 lanes: a block of 16 positions is one
// vector of scores, 16 dimensions one vector of the weighted sum. Every lane
// takes the operations paged_attention.hpp lays down, in its order, so the
// bits are those of the 8-lane kernels. The only file compiled with AVX-512
// for attention; it runs only where the CPU has it.

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "caflm/cpu/paged_attention_kernels.hpp"

namespace caflm {

namespace {

// GCC 12 takes the self-initialised "undefined" pass-through operand inside
// _mm512_cvtph_ps for a use of an uninitialised value once the call is
// inlined into an unrolled loop; the instruction never reads it.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
__m512 load16(const std::uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}
#pragma GCC diagnostic pop

__m512 load16(const float* p) {
  return _mm512_loadu_ps(p);
}

// The kernels below index their accumulator arrays only in loops of
// constant trip counts that GCC unrolls fully, so that the arrays live in
// registers.

/// Scores of 16 positions of one block, from column `first` of its
/// transposed keys `keys_t` ([head_dim, block_size]), for `kGroup` query
/// heads at once: each vector of keys is converted once and meets every
/// head's query. Stores the first `count` of each head's 16. With kOwnKeys,
/// query head g reads the keys `keys_apart` elements on from keys_t instead
/// (the g-th KV head of the block: one query head per KV head, several KV
/// heads' chains of fmas in flight).
/// - queries: [kGroup, head_dim]; scores: kGroup rows `score_stride` apart
template <typename E, int kGroup, bool kOwnKeys = false>
void score_chunk(const typename E::T* __restrict__ keys_t, std::size_t block_size,
                 std::size_t first, const float* __restrict__ queries, std::size_t head_dim,
                 float scale, float* __restrict__ scores, std::size_t score_stride,
                 std::size_t count, std::size_t keys_apart = 0) {
  __m512 acc[kGroup][4];
#pragma GCC unroll 16
  for (int g = 0; g < kGroup; ++g)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      acc[g][j] = _mm512_setzero_ps();
  const typename E::T* column = keys_t + first;
  std::size_t d = 0;
  for (; d + 4 <= head_dim; d += 4)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512 k = load16(column + (d + j) * block_size);
#pragma GCC unroll 4
      for (int g = 0; g < kGroup; ++g)
        acc[g][j] = _mm512_fmadd_ps(
            _mm512_set1_ps(queries[g * head_dim + d + j]),
            kOwnKeys ? load16(column + g * keys_apart + (d + j) * block_size) : k, acc[g][j]);
    }
    // The last head_dim % 4 dimensions: accumulators 0, 1, 2 in turn.
#pragma GCC unroll 3
  for (int j = 0; j < 3; ++j)
    if (d + j < head_dim) {
      const __m512 k = load16(column + (d + j) * block_size);
#pragma GCC unroll 4
      for (int g = 0; g < kGroup; ++g)
        acc[g][j] = _mm512_fmadd_ps(
            _mm512_set1_ps(queries[g * head_dim + d + j]),
            kOwnKeys ? load16(column + g * keys_apart + (d + j) * block_size) : k, acc[g][j]);
    }
  const __m512 vscale = _mm512_set1_ps(scale);
  const auto lanes = static_cast<__mmask16>((1u << std::min<std::size_t>(16, count)) - 1u);
#pragma GCC unroll 4
  for (int g = 0; g < kGroup; ++g) {
    const __m512 sum =
        _mm512_add_ps(_mm512_add_ps(acc[g][0], acc[g][1]), _mm512_add_ps(acc[g][2], acc[g][3]));
    _mm512_mask_storeu_ps(scores + g * score_stride, lanes, _mm512_mul_ps(sum, vscale));
  }
}

/// out[g][d0, d0 + 16 * kVectors) += the weighted value rows of cells
/// [first_cell, end_cell) of one block for `kGroup` query rows, one fma per
/// cell in cell order; each value row is converted once for all of them.
/// With kOwnValues, row g reads the value rows `rows_apart` elements on from
/// `rows` instead (the g-th KV head of the block, as in score_chunk).
/// - probs: kGroup rows `prob_stride` apart; out: [kGroup, head_dim]
template <typename E, int kGroup, int kVectors, bool kOwnValues = false>
void add_weighted_rows(const typename E::T* __restrict__ rows, std::size_t head_dim,
                       std::size_t first_cell, std::size_t end_cell,
                       const float* __restrict__ probs, std::size_t prob_stride, std::size_t d0,
                       float* __restrict__ out, std::size_t rows_apart = 0) {
  __m512 acc[kGroup][kVectors];
#pragma GCC unroll 4
  for (int g = 0; g < kGroup; ++g)
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v)
      acc[g][v] = _mm512_loadu_ps(out + g * head_dim + d0 + 16 * v);
  for (std::size_t cell = first_cell; cell < end_cell; ++cell) {
    const typename E::T* row = rows + cell * head_dim + d0;
    __m512 value[kVectors];
    if constexpr (!kOwnValues)
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v)
        value[v] = load16(row + 16 * v);
#pragma GCC unroll 4
    for (int g = 0; g < kGroup; ++g) {
      const __m512 p = _mm512_set1_ps(probs[g * prob_stride + cell]);
#pragma GCC unroll 4
      for (int v = 0; v < kVectors; ++v)
        acc[g][v] = _mm512_fmadd_ps(
            p, kOwnValues ? load16(row + g * rows_apart + 16 * v) : value[v], acc[g][v]);
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < kGroup; ++g)
#pragma GCC unroll 4
    for (int v = 0; v < kVectors; ++v)
      _mm512_storeu_ps(out + g * head_dim + d0 + 16 * v, acc[g][v]);
}

/// Calls f(first_head, std::integral_constant<int, n>) over the group's heads
/// in runs of 4, then 2, then 1: 4 x 4 accumulators and the keys' or the
/// values' vectors stay within the 32 registers.
template <typename F>
void for_group_runs(std::uint32_t group, F f) {
  std::uint32_t g = 0;
  for (; g + 4 <= group; g += 4)
    f(g, std::integral_constant<int, 4>{});
  for (; g + 2 <= group; g += 2)
    f(g, std::integral_constant<int, 2>{});
  for (; g < group; ++g)
    f(g, std::integral_constant<int, 1>{});
}

/// Query heads per KV head below which a decode token's attention takes a
/// block's KV heads together, kHeadsTogether at a time, each with its own
/// query: with one query head per KV head, each head's block alone is a
/// chain of fmas per accumulator too short to keep the core busy while the
/// next block arrives.
constexpr std::uint32_t kHeadsTogetherBelowGroup = 2;

/// KV heads taken together: the longest run for_group_runs makes.
constexpr std::uint32_t kHeadsTogether = 4;

template <typename E>
void score_positions(const PagedKvHead& h, std::uint32_t heads, std::uint32_t context,
                     const float* __restrict__ queries, std::uint32_t group, float scale,
                     float* __restrict__ scores) {
  const std::size_t block_size = h.kv->block_size();
  const std::size_t head_dim = h.kv->head_dim();
  const std::size_t head_elements = block_size * head_dim;
  // Runs of a block's KV heads (one query head each), or of a KV head's
  // query heads: either way row g of a run has its query and its scores g
  // rows on from the run's first.
  const bool heads_together = group < kHeadsTogetherBelowGroup && heads > 1;
  for_each_block<E>(
      h, heads, context, keys_of<E>,
      [&](const typename E::T* keys_t, std::size_t start, std::uint32_t i) {
        const std::uint32_t rows = heads_together ? std::min(kHeadsTogether, heads - i) : group;
        const std::size_t valid = std::min<std::size_t>(block_size, context - start);
        const float* run_queries = queries + std::size_t{i} * group * head_dim;
        float* run_scores = scores + std::size_t{i} * group * context;
        // Lanes past `valid` read cells of this block that hold no key yet;
        // their scores are computed and dropped.
        for (std::size_t first = 0; first < valid; first += 16)
          for_group_runs(rows, [&](std::uint32_t g, auto run) {
            constexpr int kRows = decltype(run)::value;
            const float* row_queries = run_queries + g * head_dim;
            float* row_scores = run_scores + g * context + start + first;
            if (heads_together)
              score_chunk<E, kRows, true>(keys_t + g * head_elements, block_size, first,
                                          row_queries, head_dim, scale, row_scores, context,
                                          valid - first, head_elements);
            else
              score_chunk<E, kRows>(keys_t, block_size, first, row_queries, head_dim, scale,
                                    row_scores, context, valid - first);
          });
      },
      heads_together ? kHeadsTogether : 1);
}

/// Adds cells [first_cell, end_cell) of one block's value `rows` to
/// `kGroup` query rows' outputs, every dimension; with kOwnValues, row g
/// reads the value rows `rows_apart` elements on (add_weighted_rows).
/// - p: kGroup rows `prob_stride` apart, at the block's first position; out: [kGroup, head_dim]
template <typename E, int kGroup, bool kOwnValues = false>
void add_cells(const typename E::T* __restrict__ rows, std::size_t head_dim, std::size_t first_cell,
               std::size_t end_cell, const float* __restrict__ p, std::size_t prob_stride,
               float* __restrict__ out, std::size_t rows_apart = 0) {
  std::size_t d = 0;
  for (; d + 64 <= head_dim; d += 64)
    add_weighted_rows<E, kGroup, 4, kOwnValues>(rows, head_dim, first_cell, end_cell, p,
                                                prob_stride, d, out, rows_apart);
  for (; d + 16 <= head_dim; d += 16)
    add_weighted_rows<E, kGroup, 1, kOwnValues>(rows, head_dim, first_cell, end_cell, p,
                                                prob_stride, d, out, rows_apart);
  for (int i = 0; i < kGroup; ++i) {
    const typename E::T* own = rows + (kOwnValues ? i * rows_apart : 0);
    for (std::size_t e = d; e < head_dim; ++e)
      for (std::size_t cell = first_cell; cell < end_cell; ++cell)
        out[i * head_dim + e] = std::fma(
            p[i * prob_stride + cell], E::load1(own + cell * head_dim + e), out[i * head_dim + e]);
  }
}

template <typename E>
void weighted_values(const PagedKvHead& h, std::uint32_t heads, std::uint32_t first_context,
                     std::uint32_t rows_per_context, const float* __restrict__ probs,
                     std::uint32_t n_rows, float* __restrict__ out) {
  const std::size_t block_size = h.kv->block_size();
  const std::size_t head_dim = h.kv->head_dim();
  // Row r attends to first_context + r / rows_per_context positions; the
  // last row's context is the longest, and the stride of `probs`.
  const std::size_t context = first_context + (n_rows - 1) / rows_per_context;
  std::fill_n(out, std::size_t{heads} * n_rows * head_dim, 0.0f);
  const std::size_t head_elements = block_size * head_dim;
  // A decode token with one query head per KV head: the block's KV heads
  // kHeadsTogether at a time (as score_positions), each its own row.
  if (n_rows < kHeadsTogetherBelowGroup && heads > 1) {
    for_each_block<E>(
        h, heads, context, values_of<E>,
        [&](const typename E::T* rows, std::size_t start, std::uint32_t i) {
          const std::size_t valid = std::min<std::size_t>(block_size, context - start);
          const float* run_probs = probs + std::size_t{i} * context + start;
          float* run_out = out + std::size_t{i} * head_dim;
          for_group_runs(std::min(kHeadsTogether, heads - i), [&](std::uint32_t g, auto run) {
            add_cells<E, decltype(run)::value, true>(rows + g * head_elements, head_dim, 0, valid,
                                                     run_probs + g * context, context,
                                                     run_out + g * head_dim, head_elements);
          });
        },
        kHeadsTogether);
    return;
  }
  for_each_block<E>(h, heads, context, values_of<E>,
                    [&](const typename E::T* rows, std::size_t start, std::uint32_t i) {
                      const auto valid = [&](std::uint32_t row) -> std::size_t {
                        const std::size_t own = first_context + row / rows_per_context;
                        return own > start ? std::min(block_size, own - start) : 0;
                      };
                      const float* head_probs = probs + std::size_t{i} * n_rows * context;
                      float* head_out = out + std::size_t{i} * n_rows * head_dim;
                      for_group_runs(n_rows, [&](std::uint32_t g, auto run) {
                        constexpr int kGroup = decltype(run)::value;
                        const float* p = head_probs + std::size_t{g} * context + start;
                        float* run_out = head_out + std::size_t{g} * head_dim;
                        // Contexts grow with the row: the run's first row has the fewest
                        // cells, which all its rows take together; each row then takes
                        // the rest of its own, still in cell order.
                        const std::size_t shared = valid(g);
                        add_cells<E, kGroup>(rows, head_dim, 0, shared, p, context, run_out);
                        for (int r = 0; r < kGroup; ++r) {
                          const std::size_t own = valid(g + r);
                          if (own > shared)
                            add_cells<E, 1>(rows, head_dim, shared, own, p + r * context, context,
                                            run_out + r * head_dim);
                        }
                      });
                    });
}

} // namespace

void detail::score_positions_avx512(const PagedKvHead& head, std::uint32_t heads,
                                    std::uint32_t context, const float* __restrict__ queries,
                                    std::uint32_t group, float scale, float* __restrict__ scores) {
  if (head.kv->type() == KvCacheType::F16)
    score_positions<F16Elements>(head, heads, context, queries, group, scale, scores);
  else
    score_positions<F32Elements>(head, heads, context, queries, group, scale, scores);
}

void detail::weighted_values_avx512(const PagedKvHead& head, std::uint32_t heads,
                                    std::uint32_t first_context, std::uint32_t rows_per_context,
                                    const float* __restrict__ probs, std::uint32_t rows,
                                    float* __restrict__ out) {
  if (head.kv->type() == KvCacheType::F16)
    weighted_values<F16Elements>(head, heads, first_context, rows_per_context, probs, rows, out);
  else
    weighted_values<F32Elements>(head, heads, first_context, rows_per_context, probs, rows, out);
}

} // namespace caflm

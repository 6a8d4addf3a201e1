#include "caflm/cpu/paged_attention.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "caflm/cpu/cache_line_vector.hpp"
#include "caflm/cpu/cpu_kernels.hpp"
#include "caflm/cpu/cpu_matmul.hpp"
#include "caflm/cpu/paged_attention_kernels.hpp"
#include "caflm/cpu/simd_helpers.hpp"

namespace caflm {

namespace {

__m256 load8(const std::uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

__m256 load8(const float* p) {
  return _mm256_loadu_ps(p);
}

/// Scores of `kChunks` runs of 8 positions of one block whose transposed
/// keys `keys_t` ([head_dim, block_size]) start at column `first`; stores the
/// first `count` of them.
template <typename E, int kChunks>
void score_chunks(const typename E::T* __restrict__ keys_t, std::size_t block_size,
                  std::size_t first, const float* __restrict__ query, std::size_t head_dim,
                  float scale, float* __restrict__ scores, std::size_t count) {
  __m256 acc[kChunks][4];
#pragma GCC unroll 2
  for (int c = 0; c < kChunks; ++c)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j)
      acc[c][j] = _mm256_setzero_ps();
  const typename E::T* column = keys_t + first;
  std::size_t d = 0;
  for (; d + 4 <= head_dim; d += 4)
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m256 q = _mm256_set1_ps(query[d + j]);
#pragma GCC unroll 2
      for (int c = 0; c < kChunks; ++c)
        acc[c][j] = _mm256_fmadd_ps(q, load8(column + (d + j) * block_size + 8 * c), acc[c][j]);
    }
  for (int j = 0; d < head_dim; ++d, ++j) {
    const __m256 q = _mm256_set1_ps(query[d]);
#pragma GCC unroll 2
    for (int c = 0; c < kChunks; ++c)
      acc[c][j] = _mm256_fmadd_ps(q, load8(column + d * block_size + 8 * c), acc[c][j]);
  }
  const __m256 vscale = _mm256_set1_ps(scale);
  for (int c = 0; c < kChunks && 8 * std::size_t(c) < count; ++c) {
    const __m256 sum =
        _mm256_add_ps(_mm256_add_ps(acc[c][0], acc[c][1]), _mm256_add_ps(acc[c][2], acc[c][3]));
    store_lanes(scores + 8 * c, std::min<std::size_t>(8, count - 8 * c),
                _mm256_mul_ps(sum, vscale));
  }
}

/// score_chunks one position at a time: the same operations per lane.
template <typename E>
float score_one(const typename E::T* __restrict__ keys_t, std::size_t block_size, std::size_t cell,
                const float* __restrict__ query, std::size_t head_dim, float scale) {
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (std::size_t d = 0; d < head_dim; ++d)
    acc[d % 4] = std::fma(query[d], E::load1(keys_t + d * block_size + cell), acc[d % 4]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) * scale;
}

/// scores[(i * group + g) * context + pos] for each of the `heads` KV heads
/// i from h.kv_head, every query head g < group and pos < context: each
/// block's keys meet all the group's queries while in L1.
template <typename E>
void score_positions(const PagedKvHead& h, std::uint32_t heads, std::uint32_t context,
                     const float* __restrict__ queries, std::uint32_t group, float scale,
                     float* __restrict__ scores) {
  const std::size_t block_size = h.kv->block_size();
  const std::size_t head_dim = h.kv->head_dim();
  for_each_block<E>(h, heads, context, keys_of<E>,
                    [&](const typename E::T* keys_t, std::size_t start, std::uint32_t i) {
                      const std::size_t valid = std::min<std::size_t>(block_size, context - start);
                      for (std::uint32_t g = 0; g < group; ++g) {
                        const std::size_t row = std::size_t{i} * group + g;
                        const float* query = queries + row * head_dim;
                        float* out = scores + row * context + start;
                        if (block_size % 8 != 0) {
                          for (std::size_t cell = 0; cell < valid; ++cell)
                            out[cell] =
                                score_one<E>(keys_t, block_size, cell, query, head_dim, scale);
                          continue;
                        }
                        // Lanes past `valid` read cells of this block that hold no key
                        // yet; their scores are computed and dropped.
                        std::size_t first = 0;
                        for (; first + 16 <= block_size && first < valid; first += 16)
                          score_chunks<E, 2>(keys_t, block_size, first, query, head_dim, scale,
                                             out + first, valid - first);
                        if (first < valid)
                          score_chunks<E, 1>(keys_t, block_size, first, query, head_dim, scale,
                                             out + first, valid - first);
                      }
                    });
}

/// out[d0, d0 + 8 * kVectors) += the weighted value rows of one block's
/// `valid` cells, one fma per cell in cell order.
template <typename E, int kVectors>
void add_weighted_rows(const typename E::T* __restrict__ rows, std::size_t head_dim,
                       std::size_t valid, const float* __restrict__ probs, std::size_t d0,
                       float* __restrict__ out) {
  __m256 acc[kVectors];
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v)
    acc[v] = _mm256_loadu_ps(out + d0 + 8 * v);
  for (std::size_t cell = 0; cell < valid; ++cell) {
    const __m256 p = _mm256_set1_ps(probs[cell]);
    const typename E::T* row = rows + cell * head_dim + d0;
#pragma GCC unroll 8
    for (int v = 0; v < kVectors; ++v)
      acc[v] = _mm256_fmadd_ps(p, load8(row + 8 * v), acc[v]);
  }
#pragma GCC unroll 8
  for (int v = 0; v < kVectors; ++v)
    _mm256_storeu_ps(out + d0 + 8 * v, acc[v]);
}

/// out[i][g] = sum over pos of probs[i][g][pos] * v_i[pos], for each of the
/// `heads` KV heads i from h.kv_head and every query head g: each block's
/// value rows meet all the group's weights while in L1. Every out[i][g][d]
/// takes its fmas in position order (kept in memory between blocks, which
/// changes no bit).
template <typename E>
void weighted_values(const PagedKvHead& h, std::uint32_t heads, std::uint32_t context,
                     const float* __restrict__ probs, std::uint32_t group,
                     float* __restrict__ out) {
  const std::size_t block_size = h.kv->block_size();
  const std::size_t head_dim = h.kv->head_dim();
  std::fill_n(out, std::size_t{heads} * group * head_dim, 0.0f);
  for_each_block<E>(h, heads, context, values_of<E>,
                    [&](const typename E::T* rows, std::size_t start, std::uint32_t i) {
                      const std::size_t valid = std::min<std::size_t>(block_size, context - start);
                      for (std::uint32_t g = 0; g < group; ++g) {
                        const std::size_t row = std::size_t{i} * group + g;
                        const float* p = probs + row * context + start;
                        float* head_out = out + row * head_dim;
                        // Eight accumulators at a time keep the rows' loads ahead of the
                        // fmas without spilling.
                        std::size_t d = 0;
                        for (; d + 64 <= head_dim; d += 64)
                          add_weighted_rows<E, 8>(rows, head_dim, valid, p, d, head_out);
                        for (; d + 32 <= head_dim; d += 32)
                          add_weighted_rows<E, 4>(rows, head_dim, valid, p, d, head_out);
                        for (; d + 8 <= head_dim; d += 8)
                          add_weighted_rows<E, 1>(rows, head_dim, valid, p, d, head_out);
                        for (; d < head_dim; ++d)
                          for (std::size_t cell = 0; cell < valid; ++cell)
                            head_out[d] = std::fma(p[cell], E::load1(rows + cell * head_dim + d),
                                                   head_out[d]);
                      }
                    });
}

/// Attention of one token for `heads` KV heads from h.kv_head.
template <typename E>
void attend(const PagedKvHead& h, std::uint32_t heads, std::uint32_t context,
            const float* __restrict__ queries, std::uint32_t group, float scale,
            float* __restrict__ scores, float* __restrict__ out, bool avx512) {
  if (avx512) {
    detail::score_positions_avx512(h, heads, context, queries, group, scale, scores);
  } else {
    score_positions<E>(h, heads, context, queries, group, scale, scores);
  }
  for (std::uint32_t row = 0; row < heads * group; ++row)
    softmax_f32(scores + std::size_t{row} * context, context);
  if (avx512) {
    detail::weighted_values_avx512(h, heads, context, group, scores, group, out);
  } else {
    weighted_values<E>(h, heads, context, scores, group, out);
  }
}

/// Throws std::invalid_argument when this CPU cannot run `isa`.
void require_isa(MatmulIsa isa) {
  if (!matmul_isa_supported(isa))
    throw std::invalid_argument(std::string("paged_attention: this CPU cannot run the ") +
                                to_string(isa) + " kernels");
}

/// Rounds to nearest even, as ggml's GGML_FP32_TO_FP16.
std::uint16_t to_half(float x) {
  return static_cast<std::uint16_t>(
      _mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x), _MM_FROUND_TO_NEAREST_INT), 0));
}

} // namespace

void paged_attention(const PagedKvHead& head, std::uint32_t context,
                     const float* __restrict__ queries, std::uint32_t group, float scale,
                     float* __restrict__ scores, float* __restrict__ out) {
  paged_attention(head, context, queries, group, scale, scores, out, default_matmul_isa());
}

void paged_attention(const PagedKvHead& head, std::uint32_t context,
                     const float* __restrict__ queries, std::uint32_t group, float scale,
                     float* __restrict__ scores, float* __restrict__ out, MatmulIsa isa) {
  paged_attention_heads(head, 1, context, queries, group, scale, scores, out, isa);
}

void paged_attention_heads(const PagedKvHead& first, std::uint32_t kv_heads, std::uint32_t context,
                           const float* __restrict__ queries, std::uint32_t group, float scale,
                           float* __restrict__ scores, float* __restrict__ out, MatmulIsa isa) {
  require_isa(isa);
  // The 16-lane kernels take whole vectors of a block's positions.
  const bool avx512 = isa != MatmulIsa::Avx2 && first.kv->block_size() % 16 == 0;
  if (first.kv->type() == KvCacheType::F16)
    attend<F16Elements>(first, kv_heads, context, queries, group, scale, scores, out, avx512);
  else
    attend<F32Elements>(first, kv_heads, context, queries, group, scale, scores, out, avx512);
}

void paged_attention_tokens(const PagedKvHead& head, std::uint32_t first_context,
                            std::uint32_t tokens, const float* __restrict__ queries,
                            std::size_t token_stride, std::uint32_t group, float scale,
                            float* __restrict__ scores, float* __restrict__ out, MatmulIsa isa) {
  require_isa(isa);
  if (tokens == 0)
    return;
  if (tokens == 1 || isa == MatmulIsa::Avx2 || head.kv->block_size() % 16 != 0) {
    for (std::uint32_t t = 0; t < tokens; ++t)
      paged_attention(head, first_context + t, queries + t * token_stride, group, scale, scores,
                      out + t * token_stride, isa);
    return;
  }
  // The tokens' query rows side by side, [tokens * group, head_dim], so that
  // the kernels see one run of rows; their outputs likewise.
  const std::size_t head_dim = head.kv->head_dim();
  const std::uint32_t rows = tokens * group;
  const std::size_t row_floats = std::size_t{group} * head_dim;
  thread_local CacheLineVector<float> gathered, results;
  gathered.resize(rows * head_dim);
  results.resize(rows * head_dim);
  for (std::uint32_t t = 0; t < tokens; ++t)
    std::copy_n(queries + t * token_stride, row_floats, gathered.data() + t * row_floats);
  const std::uint32_t last_context = first_context + tokens - 1;
  detail::score_positions_avx512(head, 1, last_context, gathered.data(), rows, scale, scores);
  for (std::uint32_t r = 0; r < rows; ++r)
    softmax_f32(scores + std::size_t{r} * last_context, first_context + r / group);
  detail::weighted_values_avx512(head, 1, first_context, group, scores, rows, results.data());
  for (std::uint32_t t = 0; t < tokens; ++t)
    std::copy_n(results.data() + t * row_floats, row_floats, out + t * token_stride);
}

void store_kv_head(KvStorage& kv, std::uint32_t layer, BlockId block, std::uint32_t kv_head,
                   std::uint32_t cell, const float* __restrict__ key,
                   const float* __restrict__ value) {
  const std::size_t block_size = kv.block_size();
  const std::size_t head_dim = kv.head_dim();
  if (kv.type() == KvCacheType::F16) {
    auto* keys_t = reinterpret_cast<std::uint16_t*>(kv.keys(layer, block, kv_head));
    auto* row = reinterpret_cast<std::uint16_t*>(kv.values(layer, block, kv_head)) +
                std::size_t{cell} * head_dim;
    std::size_t d = 0;
    // Eight at a time, rounded as to_half rounds one.
    for (; d + 8 <= head_dim; d += 8) {
      alignas(16) std::uint16_t halves[8];
      _mm_store_si128(reinterpret_cast<__m128i*>(halves),
                      _mm256_cvtps_ph(_mm256_loadu_ps(key + d), _MM_FROUND_TO_NEAREST_INT));
      for (std::size_t i = 0; i < 8; ++i)
        keys_t[(d + i) * block_size + cell] = halves[i];
      _mm_storeu_si128(reinterpret_cast<__m128i*>(row + d),
                       _mm256_cvtps_ph(_mm256_loadu_ps(value + d), _MM_FROUND_TO_NEAREST_INT));
    }
    for (; d < head_dim; ++d) {
      keys_t[d * block_size + cell] = to_half(key[d]);
      row[d] = to_half(value[d]);
    }
    return;
  }
  auto* keys_t = reinterpret_cast<float*>(kv.keys(layer, block, kv_head));
  for (std::size_t d = 0; d < head_dim; ++d)
    keys_t[d * block_size + cell] = key[d];
  std::copy_n(value, head_dim,
              reinterpret_cast<float*>(kv.values(layer, block, kv_head)) +
                  std::size_t{cell} * head_dim);
}

} // namespace caflm

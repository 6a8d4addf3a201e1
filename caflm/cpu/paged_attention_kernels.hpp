#pragma once

// What paged_attention.cpp (AVX2) and paged_attention_avx512.cpp share: the
// cache's element types and where a head's blocks lie. Internal linkage, as
// in simd_helpers.hpp, so that each file keeps its own machine code.
// Internals of caflm/cpu; include nowhere else.

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "caflm/cpu/paged_attention.hpp"

namespace caflm::detail {

/// paged_attention's scores and weighted sum with 16-lane AVX-512 kernels
/// (paged_attention_avx512.cpp): the operations of the 8-lane ones, so the
/// same bits. The CPU must have AVX-512 F and the block size must be a
/// multiple of 16. Both take `heads` consecutive KV heads from
/// head.kv_head, each block's heads together.
/// - queries: [heads, group, head_dim]; scores: [heads, group, context]
void score_positions_avx512(const PagedKvHead& head, std::uint32_t heads, std::uint32_t context,
                            const float* __restrict__ queries, std::uint32_t group, float scale,
                            float* __restrict__ scores);
/// For query rows of consecutive tokens (a prefill's), row r attends to
/// first_context + r / rows_per_context positions; scores are computed up to
/// the last row's context for all rows, and each row's weighted sum takes
/// only its own positions.
/// - probs: [heads, rows, last row's context]; out: [heads, rows, head_dim]
void weighted_values_avx512(const PagedKvHead& head, std::uint32_t heads,
                            std::uint32_t first_context, std::uint32_t rows_per_context,
                            const float* __restrict__ probs, std::uint32_t rows,
                            float* __restrict__ out);

} // namespace caflm::detail

namespace caflm {
namespace {

/// Asks for the `bytes` from `p` on in L2 ahead of their use: where a
/// sequence's next block lies elsewhere in the cache, the hardware
/// prefetchers, which follow one stream, stall at the boundary. L2, not
/// L1: two F32 blocks are 128 lines, more misses than L1 keeps outstanding,
/// and the demand loads of the block in use then wait behind them (measured
/// on a 2-core Zen 4, 32 sequences' decode attention over 160 positions: 18
/// GB/s with L1 as the target, 25 with L2).
inline void prefetch_bytes(const void* p, std::size_t bytes) {
  const char* at = static_cast<const char*>(p);
  for (std::size_t line = 0; line < bytes; line += 64)
    _mm_prefetch(at + line, _MM_HINT_T1);
}

/// How many blocks ahead of the one in use the walks prefetch: one block of
/// a 64-wide head (4 KiB of F32 keys) is less work than a fetch from memory
/// takes.
constexpr std::size_t kPrefetchBlocks = 2;

/// Prefetches for a walk over `pages` blocks now at block `page` the block
/// kPrefetchBlocks on (at page 0, every block up to it), unless it starts
/// where the block before it ends: the hardware prefetchers stream a rising
/// run of adjacent blocks (BlockPool hands them out lowest first), and
/// asking for it again on top slowed them (Zen 5, BM_decode_attention over
/// adjacent blocks: F16 26-27 GB/s with, 31-36 without). `block_at(i)`: the
/// first byte of block i.
template <typename BlockAt>
inline void prefetch_ahead(BlockAt block_at, std::size_t page, std::size_t pages,
                           std::size_t block_bytes) {
  const std::size_t first = page == 0 ? 1 : page + kPrefetchBlocks;
  for (std::size_t next = first; next <= page + kPrefetchBlocks && next < pages; ++next) {
    const auto* at = reinterpret_cast<const char*>(block_at(next));
    if (at != reinterpret_cast<const char*>(block_at(next - 1)) + block_bytes)
      prefetch_bytes(at, block_bytes);
  }
}

/// Cache elements stored as IEEE half.
struct F16Elements {
  using T = std::uint16_t;
  static float load1(const T* p) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(*p))); }
};

/// Cache elements stored as f32.
struct F32Elements {
  using T = float;
  static float load1(const T* p) { return *p; }
};

template <typename E>
const typename E::T* keys_of(const PagedKvHead& h, BlockId block) {
  return reinterpret_cast<const typename E::T*>(h.kv->keys(h.layer, block, h.kv_head));
}

template <typename E>
const typename E::T* values_of(const PagedKvHead& h, BlockId block) {
  return reinterpret_cast<const typename E::T*>(h.kv->values(h.layer, block, h.kv_head));
}

/// Calls body(block, start, i) for each block holding positions [0, context)
/// of the `heads` KV heads from h.kv_head, in position order and, within a
/// block, head order: `block` is head h.kv_head + i's part of it (keys_of or
/// values_of), `start` its first position. With `heads_per_call` above 1, i
/// steps by it and the body takes heads i to i + heads_per_call - 1 (fewer
/// at the end), which follow head i's part a head apart. A block's heads lie
/// side by side (kv_storage.hpp), so each block is one run of bytes.
/// Prefetches kPrefetchBlocks ahead.
template <typename E, typename Body>
void for_each_block(const PagedKvHead& h, std::uint32_t heads, std::size_t context,
                    const typename E::T* (*block_of)(const PagedKvHead&, BlockId), Body body,
                    std::uint32_t heads_per_call = 1) {
  const std::size_t block_size = h.kv->block_size();
  const std::size_t head_elements = block_size * h.kv->head_dim();
  const std::size_t pages = (context + block_size - 1) / block_size;
  const auto block_at = [&](std::size_t page) { return block_of(h, h.pages[page]); };
  for (std::size_t start = 0, page = 0; start < context; start += block_size, ++page) {
    prefetch_ahead(block_at, page, pages, heads * head_elements * sizeof(typename E::T));
    const typename E::T* first_head = block_at(page);
    for (std::uint32_t i = 0; i < heads; i += heads_per_call)
      body(first_head + i * head_elements, start, i);
  }
}

} // namespace
} // namespace caflm

#pragma once

#include <cstddef>
#include <cstdint>

#include "caflm/cpu/cpu_matmul.hpp"
#include "caflm/kv/kv_storage.hpp"

// Attention over the paged CPU KV cache (caflm/kv/kv_storage.hpp), F16 or F32.
//
// One call handles one token and one KV head, or a run of KV heads: each
// block of a head's cache meets all `group` query heads that share it
// (grouped-query attention) while it is in L1, so the cache is read from
// memory once per token, not once per query head; a run of heads reads
// each block's heads together, one run of bytes.
//
// Batch invariance: every result depends only on the token's query, its own
// sequence's cache and the context length, in one fixed order:
// - score[pos] = ((a0 + a1) + (a2 + a3)) * scale, where each a_j starts at 0
//   and takes fma(q[d], k[pos][d], a_j) for d = j, j + 4, j + 8, ... in order;
// - the scores pass through softmax_f32 (caflm/cpu/cpu_kernels.hpp);
// - out[d] starts at 0 and takes fma(p[pos], v[pos][d], out[d]) for
//   pos = 0, 1, ... in order.
// The vector kernels put positions (scores) or dimensions (the weighted sum)
// in lanes and the scalar tails run the same operations one lane at a time,
// so the bits depend neither on the block size nor on the instruction set
// (8 lanes with AVX2, 16 with AVX-512 where blocks are whole vectors of 16).

namespace caflm {

/// Where one sequence's cache lies for one layer and KV head.
struct PagedKvHead {
  const KvStorage* kv;
  std::uint32_t layer;
  std::uint32_t kv_head;
  const BlockId* pages; // [ceil(context / block_size)] the sequence's block table
};

/// Attention of `group` consecutive query heads to positions [0, context) of
/// the cache `head`: softmax(q · K^T * scale) · V for each, with the kernels
/// of default_matmul_isa().
/// - queries: [group, head_dim]; scores: scratch of [group, context]; out: [group, head_dim]
void paged_attention(const PagedKvHead& head, std::uint32_t context,
                     const float* __restrict__ queries, std::uint32_t group, float scale,
                     float* __restrict__ scores, float* __restrict__ out);

/// paged_attention with the kernels of `isa` (Amx's are Avx512's), so that
/// tests and benchmarks can run each. Throws std::invalid_argument when this
/// CPU cannot run `isa`.
void paged_attention(const PagedKvHead& head, std::uint32_t context,
                     const float* __restrict__ queries, std::uint32_t group, float scale,
                     float* __restrict__ scores, float* __restrict__ out, MatmulIsa isa);

/// paged_attention of one token for `kv_heads` consecutive KV heads from
/// first.kv_head, with the kernels of `isa`: each block's heads are read
/// together, one run of the cache (kv_storage.hpp), and each head's result
/// has the bits of its own paged_attention call.
/// - queries: [kv_heads * group, head_dim]; scores: scratch of [kv_heads * group, context];
///   out: [kv_heads * group, head_dim]
void paged_attention_heads(const PagedKvHead& first, std::uint32_t kv_heads, std::uint32_t context,
                           const float* __restrict__ queries, std::uint32_t group, float scale,
                           float* __restrict__ scores, float* __restrict__ out, MatmulIsa isa);

/// paged_attention of `tokens` consecutive tokens of one sequence, token t
/// attending to first_context + t positions (a prefill's causal rows): each
/// token's result has the bits of its own paged_attention call, while the
/// AVX-512 kernels read each block once for all of them.
/// - queries, out: token t's [group, head_dim] at t * token_stride
/// - scores: scratch of [tokens * group, first_context + tokens - 1]
void paged_attention_tokens(const PagedKvHead& head, std::uint32_t first_context,
                            std::uint32_t tokens, const float* __restrict__ queries,
                            std::size_t token_stride, std::uint32_t group, float scale,
                            float* __restrict__ scores, float* __restrict__ out, MatmulIsa isa);

/// Writes one token's key and value of one KV head into `cell` of `block`,
/// converted to the cache's type (F16: round to nearest even, as ggml does).
/// - key, value: [head_dim]
void store_kv_head(KvStorage& kv, std::uint32_t layer, BlockId block, std::uint32_t kv_head,
                   std::uint32_t cell, const float* __restrict__ key,
                   const float* __restrict__ value);

} // namespace caflm

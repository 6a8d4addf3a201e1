// Attention over the paged CPU KV cache (caflm/cpu/paged_attention.hpp):
// against a double-precision pass over the same stored keys and values, and
// bitwise the same whatever the block size, the block table's order in
// memory and how many query and KV heads share the call.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "caflm/cpu/paged_attention.hpp"
#include "caflm/gguf/tensor_type.hpp"

using namespace caflm;

namespace {

/// One sequence's keys and values ([context, n_kv_heads, head_dim]) and the
/// queries of one token ([n_heads, head_dim]).
struct Sequence {
  std::uint32_t n_heads, n_kv_heads, head_dim, context;
  std::vector<float> keys, values, queries;
};

Sequence random_sequence(std::uint32_t n_heads, std::uint32_t n_kv_heads, std::uint32_t head_dim,
                         std::uint32_t context, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  Sequence s{n_heads, n_kv_heads, head_dim, context, {}, {}, {}};
  s.keys.resize(std::size_t{context} * n_kv_heads * head_dim);
  s.values.resize(s.keys.size());
  s.queries.resize(std::size_t{n_heads} * head_dim);
  for (auto* v : {&s.keys, &s.values, &s.queries})
    for (float& x : *v)
      x = uniform(rng);
  return s;
}

/// A cache of `n_blocks` blocks holding `s` in the blocks of `pages`, every
/// other cell of the cache filled with noise (stale entries of other
/// sequences).
KvStorage filled_cache(const Sequence& s, KvCacheType type, std::uint32_t block_size,
                       const std::vector<BlockId>& pages, std::uint32_t n_blocks) {
  KvStorage kv(type, 1, n_blocks, block_size, s.n_kv_heads, s.head_dim);
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> noise(-50.0f, 50.0f);
  std::vector<float> junk(s.head_dim);
  for (BlockId b = 0; b < n_blocks; ++b)
    for (std::uint32_t h = 0; h < s.n_kv_heads; ++h)
      for (std::uint32_t cell = 0; cell < block_size; ++cell) {
        for (float& x : junk)
          x = noise(rng);
        store_kv_head(kv, 0, b, h, cell, junk.data(), junk.data());
      }
  for (std::uint32_t pos = 0; pos < s.context; ++pos)
    for (std::uint32_t h = 0; h < s.n_kv_heads; ++h) {
      const std::size_t at = (std::size_t{pos} * s.n_kv_heads + h) * s.head_dim;
      store_kv_head(kv, 0, pages[pos / block_size], h, pos % block_size, &s.keys[at],
                    &s.values[at]);
    }
  return kv;
}

/// The attention output of all heads of `s` over filled_cache(s, ...),
/// computed with the kernels of `isa`. // [n_heads, head_dim]
std::vector<float> attend(const Sequence& s, KvCacheType type, std::uint32_t block_size,
                          const std::vector<BlockId>& pages, std::uint32_t n_blocks,
                          std::uint32_t heads_per_call, MatmulIsa isa = default_matmul_isa()) {
  const KvStorage kv = filled_cache(s, type, block_size, pages, n_blocks);
  const std::uint32_t group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  std::vector<float> out(s.queries.size()), scores(std::size_t{heads_per_call} * s.context);
  for (std::uint32_t h = 0; h < s.n_kv_heads; ++h)
    for (std::uint32_t g = 0; g < group; g += heads_per_call) {
      const std::size_t first = (std::size_t{h} * group + g) * s.head_dim;
      paged_attention(PagedKvHead{&kv, 0, h, pages.data()}, s.context, &s.queries[first],
                      heads_per_call, scale, scores.data(), &out[first], isa);
    }
  return out;
}

/// attend() with paged_attention_heads: `kv_heads_per_call` KV heads at a
/// time (the last call takes what is left), each with its whole group.
std::vector<float> attend_heads(const Sequence& s, KvCacheType type, std::uint32_t block_size,
                                const std::vector<BlockId>& pages, std::uint32_t n_blocks,
                                std::uint32_t kv_heads_per_call, MatmulIsa isa) {
  const KvStorage kv = filled_cache(s, type, block_size, pages, n_blocks);
  const std::uint32_t group = s.n_heads / s.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  std::vector<float> out(s.queries.size(), -1.0f), scores(std::size_t{s.n_heads} * s.context);
  for (std::uint32_t h = 0; h < s.n_kv_heads; h += kv_heads_per_call) {
    const std::size_t first = std::size_t{h} * group * s.head_dim;
    paged_attention_heads(PagedKvHead{&kv, 0, h, pages.data()},
                          std::min(kv_heads_per_call, s.n_kv_heads - h), s.context,
                          &s.queries[first], group, scale, scores.data(), &out[first], isa);
  }
  return out;
}

/// Block table of `context` positions in blocks of `block_size`, the blocks
/// taken from the end of the cache backwards (not in memory order).
std::vector<BlockId> pages_for(std::uint32_t context, std::uint32_t block_size,
                               std::uint32_t n_blocks) {
  std::vector<BlockId> pages((context + block_size - 1) / block_size);
  for (std::size_t i = 0; i < pages.size(); ++i)
    pages[i] = static_cast<BlockId>(n_blocks - 1 - 2 * i);
  return pages;
}

float rounded(float x, KvCacheType type) {
  return type == KvCacheType::F16 ? f16_to_f32(f32_to_f16(x)) : x;
}

/// Attention in double over the keys and values as the cache stores them.
std::vector<double> reference(const Sequence& s, KvCacheType type) {
  const std::uint32_t group = s.n_heads / s.n_kv_heads;
  std::vector<double> out(s.queries.size());
  for (std::uint32_t head = 0; head < s.n_heads; ++head) {
    const std::uint32_t kv_head = head / group;
    std::vector<double> scores(s.context);
    double max_score = -INFINITY;
    for (std::uint32_t pos = 0; pos < s.context; ++pos) {
      double dot = 0.0;
      for (std::uint32_t d = 0; d < s.head_dim; ++d)
        dot += double(s.queries[head * s.head_dim + d]) *
               rounded(s.keys[(std::size_t{pos} * s.n_kv_heads + kv_head) * s.head_dim + d], type);
      scores[pos] = dot / std::sqrt(double(s.head_dim));
      max_score = std::max(max_score, scores[pos]);
    }
    double sum = 0.0;
    for (double& x : scores)
      sum += (x = std::exp(x - max_score));
    for (std::uint32_t d = 0; d < s.head_dim; ++d) {
      double acc = 0.0;
      for (std::uint32_t pos = 0; pos < s.context; ++pos)
        acc +=
            scores[pos] / sum *
            rounded(s.values[(std::size_t{pos} * s.n_kv_heads + kv_head) * s.head_dim + d], type);
      out[std::size_t{head} * s.head_dim + d] = acc;
    }
  }
  return out;
}

} // namespace

TEST_CASE("paged attention matches a double-precision pass, bitwise the same for any block size") {
  // Head sizes of real models (64, 80, 128) and odd ones for the tails;
  // grouped-query attention (4 and 7 query heads per KV head); contexts that
  // end inside a block, on its edge and inside the 8 lanes.
  auto [n_heads, n_kv_heads, head_dim, context] =
      GENERATE(table<std::uint32_t, std::uint32_t, std::uint32_t, std::uint32_t>({
          {4, 4, 64, 1},
          {8, 2, 64, 37},
          {14, 2, 80, 48},
          {4, 1, 128, 100},
          {3, 3, 13, 29},
          {2, 2, 2, 17},
      }));
  const KvCacheType type = GENERATE(KvCacheType::F32, KvCacheType::F16);
  INFO(n_heads << " heads over " << n_kv_heads << " of " << head_dim << ", context " << context
               << ", cache " << to_string(type));
  const Sequence s = random_sequence(n_heads, n_kv_heads, head_dim, context, context + head_dim);
  const std::uint32_t group = n_heads / n_kv_heads;

  // Blocks of 16 and 32 run the vector code, 4 and 24 partly the one-lane code.
  const std::uint32_t n_blocks = 2 * context + 4;
  const std::vector<float> base =
      attend(s, type, 16, pages_for(context, 16, n_blocks), n_blocks, group);
  const std::vector<double> expected = reference(s, type);
  double worst = 0.0;
  for (std::size_t i = 0; i < base.size(); ++i)
    worst = std::max(worst, std::fabs(base[i] - expected[i]));
  CHECK(worst < 2e-5);

  for (std::uint32_t block_size : {4u, 8u, 24u, 32u}) {
    INFO("blocks of " << block_size);
    const std::vector<float> other =
        attend(s, type, block_size, pages_for(context, block_size, n_blocks), n_blocks, group);
    CHECK(std::memcmp(other.data(), base.data(), base.size() * sizeof(float)) == 0);
  }
  // One query head per call gives the bits of the whole group at once.
  const std::vector<float> one_by_one =
      attend(s, type, 16, pages_for(context, 16, n_blocks), n_blocks, 1);
  CHECK(std::memcmp(one_by_one.data(), base.data(), base.size() * sizeof(float)) == 0);

  // The 8-lane AVX2 and the 16-lane AVX-512 kernels: the same bits, whole
  // groups or one head at a time.
  for (MatmulIsa isa : {MatmulIsa::Avx2, MatmulIsa::Avx512}) {
    if (!matmul_isa_supported(isa)) {
      WARN("this CPU cannot run the " << to_string(isa) << " kernels: not compared");
      continue;
    }
    for (std::uint32_t heads_per_call : {group, 1u}) {
      INFO(to_string(isa) << " kernels, " << heads_per_call << " heads per call");
      const std::vector<float> other =
          attend(s, type, 16, pages_for(context, 16, n_blocks), n_blocks, heads_per_call, isa);
      CHECK(std::memcmp(other.data(), base.data(), base.size() * sizeof(float)) == 0);
    }
    // Several KV heads per call, each block's heads read together: every
    // head's bits as alone, with blocks of 16 and of 24 (one-lane tails).
    for (std::uint32_t block_size : {16u, 24u})
      for (std::uint32_t kv_heads_per_call : {n_kv_heads, 2u}) {
        INFO(to_string(isa) << " kernels, " << kv_heads_per_call << " KV heads per call, blocks of "
                            << block_size);
        const std::vector<float> other =
            attend_heads(s, type, block_size, pages_for(context, block_size, n_blocks), n_blocks,
                         kv_heads_per_call, isa);
        CHECK(std::memcmp(other.data(), base.data(), base.size() * sizeof(float)) == 0);
      }
  }
}

TEST_CASE("a run of a prefill's tokens gives each token the bits of its own attention") {
  auto [n_heads, n_kv_heads, head_dim] =
      GENERATE(table<std::uint32_t, std::uint32_t, std::uint32_t>({
          {4, 4, 64},  // one query head per KV head
          {8, 2, 64},  // runs of 4 query rows
          {14, 2, 80}, // 7 per KV head: rows in runs of 4, 2 and 1, tokens straddling them
          {3, 3, 13},  // scalar tails
      }));
  const KvCacheType type = GENERATE(KvCacheType::F32, KvCacheType::F16);
  const std::uint32_t block_size = GENERATE(16u, 32u, 8u);
  // The run's first token at the start of the cache, inside a block and
  // just before a block's end, so that runs cross into the next block.
  const std::uint32_t first_context = GENERATE(1u, 20u, 31u);
  constexpr std::uint32_t kTokens = 5;
  const std::uint32_t context = first_context + kTokens - 1;
  INFO(n_heads << " heads over " << n_kv_heads << " of " << head_dim << ", blocks of " << block_size
               << ", first context " << first_context << ", cache " << to_string(type));
  const Sequence s = random_sequence(n_heads, n_kv_heads, head_dim, context, head_dim + context);
  // Each token its own queries: [kTokens, n_heads, head_dim].
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  std::vector<float> queries(std::size_t{kTokens} * n_heads * head_dim);
  for (float& x : queries)
    x = uniform(rng);
  const std::uint32_t n_blocks = 2 * context + 4;
  const std::vector<BlockId> pages = pages_for(context, block_size, n_blocks);
  const KvStorage kv = filled_cache(s, type, block_size, pages, n_blocks);
  const std::uint32_t group = n_heads / n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const std::size_t token_stride = std::size_t{n_heads} * head_dim;

  for (MatmulIsa isa : {MatmulIsa::Avx2, MatmulIsa::Avx512}) {
    if (!matmul_isa_supported(isa))
      continue;
    INFO(to_string(isa) << " kernels");
    for (std::uint32_t h = 0; h < n_kv_heads; ++h) {
      const PagedKvHead head{&kv, 0, h, pages.data()};
      const std::size_t first = std::size_t{h} * group * head_dim;
      std::vector<float> alone(queries.size()), run(queries.size());
      std::vector<float> scores(std::size_t{kTokens} * group * context);
      for (std::uint32_t t = 0; t < kTokens; ++t)
        paged_attention(head, first_context + t, &queries[t * token_stride + first], group, scale,
                        scores.data(), &alone[t * token_stride + first], isa);
      // Runs of every length up to all five tokens, from the first one.
      for (std::uint32_t tokens = 1; tokens <= kTokens; ++tokens) {
        INFO("KV head " << h << ", a run of " << tokens);
        std::fill(run.begin(), run.end(), -1.0f);
        paged_attention_tokens(head, first_context, tokens, &queries[first], token_stride, group,
                               scale, scores.data(), &run[first], isa);
        for (std::uint32_t t = 0; t < tokens; ++t)
          CHECK(std::memcmp(&run[t * token_stride + first], &alone[t * token_stride + first],
                            std::size_t{group} * head_dim * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("an F16 cache stores keys and values rounded to nearest even") {
  KvStorage kv(KvCacheType::F16, 2, 3, 4, 2, 3);
  const float key[3] = {1.0f + 1.0f / 2048.0f, -65504.0f, 3.0e-6f};
  const float value[3] = {0.1f, 1.0f + 3.0f / 4096.0f, -2.5f};
  store_kv_head(kv, 1, 2, 1, 3, key, value);
  const auto* keys_t = reinterpret_cast<const std::uint16_t*>(kv.keys(1, 2, 1));
  const auto* row = reinterpret_cast<const std::uint16_t*>(kv.values(1, 2, 1)) + 3 * 3;
  for (int d = 0; d < 3; ++d) {
    CHECK(keys_t[d * 4 + 3] == f32_to_f16(key[d])); // transposed: one row per dimension
    CHECK(row[d] == f32_to_f16(value[d]));
  }
  CHECK(f16_to_f32(keys_t[3]) == 1.0f);               // a tie rounds to even
  CHECK(f16_to_f32(row[1]) == 1.0f + 4.0f / 4096.0f); // and this one up
  CHECK(kv.bytes() == 2 * std::size_t{2} * 3 * 2 * 4 * 3 * 2);

  SECTION("eight at a time and one at a time round alike") {
    // 19 dimensions: two runs of eight, then three one by one; ties, halves
    // below the normal range and values past the largest half among them.
    constexpr std::uint32_t kHeadDim = 19, kBlockSize = 16;
    KvStorage wide(KvCacheType::F16, 1, 2, kBlockSize, 3, kHeadDim);
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
    std::vector<float> k(kHeadDim), v(kHeadDim);
    for (std::uint32_t cell = 0; cell < kBlockSize; ++cell) {
      for (std::uint32_t d = 0; d < kHeadDim; ++d) {
        k[d] = uniform(rng);
        v[d] = uniform(rng) * 1e-6f;
      }
      k[cell % kHeadDim] = 1.0f + 1.0f / 2048.0f;
      v[(cell + 3) % kHeadDim] = 70000.0f;
      store_kv_head(wide, 0, 1, 2, cell, k.data(), v.data());
      const auto* stored_keys = reinterpret_cast<const std::uint16_t*>(wide.keys(0, 1, 2));
      const auto* stored_row =
          reinterpret_cast<const std::uint16_t*>(wide.values(0, 1, 2)) + cell * kHeadDim;
      for (std::uint32_t d = 0; d < kHeadDim; ++d) {
        INFO("cell " << cell << ", dimension " << d);
        CHECK(stored_keys[d * kBlockSize + cell] == f32_to_f16(k[d]));
        CHECK(stored_row[d] == f32_to_f16(v[d]));
      }
    }
  }
}

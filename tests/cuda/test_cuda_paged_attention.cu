// GPU tests of the paged KV store, paged attention and block copies
// (caflm/cuda/paged_attention.cu) against plain CPU references. Without a
// usable device each test passes with a warning "skipped: <reason>".

#include "caflm/cuda/block_table_upload.hpp"
#include "caflm/cuda/cuda_check.hpp"
#include "caflm/cuda/cuda_device.hpp"
#include "caflm/cuda/paged_attention.cuh"
#include "tests/cuda/gpu_test.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using caflm::BlockCopy;
using caflm::BlockId;
using caflm::RaggedBatch;
using caflm::RaggedBatchItem;
using caflm::TokenId;
using caflm::cuda::PagedKvGeometry;

using caflm::testing::DeviceArray;

namespace {

/// One sequence's share of a step: `query_length` new tokens from `start`.
struct SequenceSpec {
  std::uint32_t start;
  std::uint32_t query_length;
};

/// A ragged step with everything the kernels read: a KV cache full of random
/// values (earlier steps' keys, and garbage where nothing was written, which
/// attention must never read), the step's new q, k and v rows, and the items'
/// block tables over disjoint random pages.
struct Problem {
  PagedKvGeometry geometry;
  std::uint32_t n_heads = 0;
  std::uint32_t layer = 0; // the layer the step stores into and attends over
  std::vector<RaggedBatchItem> items;
  std::vector<TokenId> tokens;
  std::vector<BlockId> tables;
  std::vector<BlockCopy> copies;
  std::vector<float> key_cache;   // [n_layers, n_blocks, n_kv_heads, block_size, head_dim]
  std::vector<float> value_cache; // same
  std::vector<float> q;           // [n_tokens, n_heads * head_dim]
  std::vector<float> k;           // [n_tokens, kv_dim]
  std::vector<float> v;           // [n_tokens, kv_dim]

  std::uint32_t token_count() const { return static_cast<std::uint32_t>(tokens.size()); }
  std::size_t q_dim() const { return std::size_t{n_heads} * geometry.head_dim; }
  std::uint32_t max_context() const {
    std::uint32_t context = 1;
    for (const auto& item : items)
      context = std::max(context, item.position + item.query_length);
    return context;
  }
  RaggedBatch batch() const {
    return RaggedBatch{items.data(),  static_cast<std::uint32_t>(items.size()),
                       tokens.data(), token_count(),
                       tables.data(), static_cast<std::uint32_t>(tables.size()),
                       copies.data(), static_cast<std::uint32_t>(copies.size())};
  }
};

void fill_uniform(std::vector<float>& values, std::mt19937& rng) {
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& x : values)
    x = uniform(rng);
}

Problem make_problem(const PagedKvGeometry& geometry, std::uint32_t n_heads, std::uint32_t layer,
                     const std::vector<SequenceSpec>& sequences, std::uint32_t seed) {
  std::mt19937 rng(seed);
  Problem p;
  p.geometry = geometry;
  p.n_heads = n_heads;
  p.layer = layer;
  std::vector<BlockId> free_blocks(geometry.n_blocks);
  std::iota(free_blocks.begin(), free_blocks.end(), 0u);
  std::shuffle(free_blocks.begin(), free_blocks.end(), rng);
  std::size_t next_free = 0;
  std::uint32_t token_offset = 0;
  for (std::size_t s = 0; s < sequences.size(); ++s) {
    const SequenceSpec& spec = sequences[s];
    const std::uint32_t end = spec.start + spec.query_length;
    const std::uint32_t pages = (end + geometry.block_size - 1) / geometry.block_size;
    REQUIRE(next_free + pages <= free_blocks.size());
    RaggedBatchItem item{};
    item.request_id = 100 + s;
    item.slot = static_cast<std::uint32_t>(s);
    item.token_offset = token_offset;
    item.position = spec.start;
    item.block_table_offset = static_cast<std::uint32_t>(p.tables.size());
    item.page_count = pages;
    item.query_length = spec.query_length;
    p.items.push_back(item);
    for (std::uint32_t i = 0; i < pages; ++i)
      p.tables.push_back(free_blocks[next_free++]);
    for (std::uint32_t t = 0; t < spec.query_length; ++t)
      p.tokens.push_back(static_cast<TokenId>(token_offset + t));
    token_offset += spec.query_length;
  }
  p.key_cache.resize(geometry.cache_floats());
  p.value_cache.resize(geometry.cache_floats());
  fill_uniform(p.key_cache, rng);
  fill_uniform(p.value_cache, rng);
  p.q.resize(std::size_t{token_offset} * p.q_dim());
  p.k.resize(std::size_t{token_offset} * geometry.kv_dim());
  p.v.resize(p.k.size());
  fill_uniform(p.q, rng);
  fill_uniform(p.k, rng);
  fill_uniform(p.v, rng);
  return p;
}

/// Index of (layer, block, head, cell) in a whole device cache.
std::size_t cache_index(const PagedKvGeometry& g, std::uint32_t layer, BlockId block,
                        std::uint32_t head, std::uint32_t cell) {
  return (((std::size_t{layer} * g.n_blocks + block) * g.n_kv_heads + head) * g.block_size + cell) *
         g.head_dim;
}

/// Applies `copies` one after another, each a whole block of every layer,
/// as the CPU runner's KvStorage::copy_block does.
void copy_blocks_in_order(const PagedKvGeometry& g, const std::vector<BlockCopy>& copies,
                          std::vector<float>& keys, std::vector<float>& values) {
  for (const BlockCopy& copy : copies)
    for (std::uint32_t layer = 0; layer < g.n_layers; ++layer) {
      std::copy_n(keys.begin() + cache_index(g, layer, copy.source, 0, 0), g.block_floats(),
                  keys.begin() + cache_index(g, layer, copy.destination, 0, 0));
      std::copy_n(values.begin() + cache_index(g, layer, copy.source, 0, 0), g.block_floats(),
                  values.begin() + cache_index(g, layer, copy.destination, 0, 0));
    }
}

/// The caches after the step's copies (in order) and KV stores.
void reference_store(const Problem& p, std::vector<float>& keys, std::vector<float>& values) {
  const PagedKvGeometry& g = p.geometry;
  keys = p.key_cache;
  values = p.value_cache;
  copy_blocks_in_order(g, p.copies, keys, values);
  for (const RaggedBatchItem& item : p.items)
    for (std::uint32_t t = 0; t < item.query_length; ++t) {
      const std::uint32_t row = item.token_offset + t;
      const std::uint32_t pos = item.position + t;
      const BlockId block = p.tables[item.block_table_offset + pos / g.block_size];
      for (std::uint32_t h = 0; h < g.n_kv_heads; ++h) {
        const std::size_t cell = cache_index(g, p.layer, block, h, pos % g.block_size);
        const std::size_t src = row * g.kv_dim() + std::size_t{h} * g.head_dim;
        std::copy_n(p.k.begin() + src, g.head_dim, keys.begin() + cell);
        std::copy_n(p.v.begin() + src, g.head_dim, values.begin() + cell);
      }
    }
}

/// Attention in double precision over the stored caches: softmax over
/// positions 0..position of each token's sequence, query head h on KV head
/// h / (n_heads / n_kv_heads), scale 1/sqrt(head_dim). `magnitude` gets, per
/// output element, sum_p softmax_p * |v_p|: the size of the terms the GPU
/// adds, against which its rounding is measured.
void reference_attention(const Problem& p, const std::vector<float>& keys,
                         const std::vector<float>& values, std::vector<double>& out,
                         std::vector<double>& magnitude) {
  const PagedKvGeometry& g = p.geometry;
  const std::uint32_t group = p.n_heads / g.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(g.head_dim));
  out.assign(p.q.size(), 0.0);
  magnitude.assign(p.q.size(), 0.0);
  std::vector<double> weights;
  for (const RaggedBatchItem& item : p.items)
    for (std::uint32_t t = 0; t < item.query_length; ++t) {
      const std::uint32_t row = item.token_offset + t;
      const std::uint32_t context = item.position + t + 1;
      const BlockId* pages = p.tables.data() + item.block_table_offset;
      weights.assign(context, 0.0);
      for (std::uint32_t h = 0; h < p.n_heads; ++h) {
        const std::uint32_t kv_head = h / group;
        const float* query = p.q.data() + row * p.q_dim() + std::size_t{h} * g.head_dim;
        double max = -INFINITY;
        for (std::uint32_t pos = 0; pos < context; ++pos) {
          const float* key = keys.data() + cache_index(g, p.layer, pages[pos / g.block_size],
                                                       kv_head, pos % g.block_size);
          double dot = 0.0;
          for (std::uint32_t d = 0; d < g.head_dim; ++d)
            dot += double{query[d]} * double{key[d]};
          weights[pos] = dot * scale;
          max = std::max(max, weights[pos]);
        }
        double sum = 0.0;
        for (std::uint32_t pos = 0; pos < context; ++pos) {
          weights[pos] = std::exp(weights[pos] - max);
          sum += weights[pos];
        }
        double* o = out.data() + row * p.q_dim() + std::size_t{h} * g.head_dim;
        double* m = magnitude.data() + row * p.q_dim() + std::size_t{h} * g.head_dim;
        for (std::uint32_t pos = 0; pos < context; ++pos) {
          const float* value = values.data() + cache_index(g, p.layer, pages[pos / g.block_size],
                                                           kv_head, pos % g.block_size);
          for (std::uint32_t d = 0; d < g.head_dim; ++d) {
            o[d] += weights[pos] / sum * double{value[d]};
            m[d] += weights[pos] / sum * std::fabs(double{value[d]});
          }
        }
      }
    }
}

struct GpuResult {
  std::vector<float> out;
  std::vector<float> key_cache;
  std::vector<float> value_cache;
};

/// Runs the step as a CUDA runner would for one layer: one upload of the
/// packed metadata, the copies, the KV store, then attention, on one stream.
GpuResult run_on_gpu(const Problem& p) {
  const PagedKvGeometry& g = p.geometry;
  caflm::cuda::RaggedStepPacker packer(std::max(p.token_count(), 1u),
                                       static_cast<std::uint32_t>(p.tables.size()),
                                       static_cast<std::uint32_t>(p.copies.size()));
  const auto& sections = packer.pack(p.batch(), g, p.max_context());
  DeviceArray<std::uint32_t> words(packer.capacity_words());
  words.upload(packer.words(), sections.total);
  const caflm::cuda::DeviceRaggedStep step = caflm::cuda::device_step(sections, words.get());

  DeviceArray<float> keys(p.key_cache);
  DeviceArray<float> values(p.value_cache);
  DeviceArray<float> q(p.q);
  DeviceArray<float> k(p.k);
  DeviceArray<float> v(p.v);
  DeviceArray<float> out(p.q.size());
  // NaN everywhere first, so an output the kernel skips cannot pass.
  CAFLM_CUDA_CHECK(cudaMemset(out.get(), 0xff, p.q.size() * sizeof(float)));

  cudaStream_t stream = nullptr;
  CAFLM_CUDA_CHECK(cudaStreamCreate(&stream));
  const std::size_t layer_offset = std::size_t{p.layer} * g.layer_floats();
  caflm::cuda::launch_copy_blocks(keys.get(), values.get(), step, packer.copy_wave_ends(), g,
                                  stream);
  caflm::cuda::launch_store_kv(k.get(), v.get(), keys.get() + layer_offset,
                               values.get() + layer_offset, step, g, stream);
  caflm::cuda::launch_paged_attention(q.get(), keys.get() + layer_offset,
                                      values.get() + layer_offset, out.get(), p.n_heads, step, g,
                                      stream);
  CAFLM_CUDA_CHECK(cudaStreamSynchronize(stream));
  CAFLM_CUDA_CHECK(cudaStreamDestroy(stream));
  return GpuResult{out.download(), keys.download(), values.download()};
}

PagedKvGeometry make_geometry(std::uint32_t n_layers, std::uint32_t n_blocks,
                              std::uint32_t block_size, std::uint32_t n_kv_heads,
                              std::uint32_t head_dim) {
  PagedKvGeometry g;
  g.n_layers = n_layers;
  g.n_blocks = n_blocks;
  g.block_size = block_size;
  g.n_kv_heads = n_kv_heads;
  g.head_dim = head_dim;
  return g;
}

/// Runs `p` on the GPU and checks the caches bitwise and the outputs against
/// the double reference.
///
/// Tolerance: each output is sum_p w_p v_p / sum_p w_p computed in FP32. The
/// scores carry a relative error of a few ulp per FMA chain (head_dim <= 256
/// terms, |q_d k_d| <= 1, so |score| <= 16 and its absolute error stays near
/// 1e-6 at worst, ~1e-7 typically), which expf turns into a relative error of
/// the same size in each weight; the exp-sum and the V sum then add one
/// rounding per position, random in sign, ~sqrt(context) * 6e-8. For the
/// contexts here (up to ~9000) that is below 1e-5 of sum_p w_p |v_p|, the
/// size of the terms added, which bounds |out| from above; an error measured
/// against |out| alone would be meaningless where the terms cancel.
void check_against_reference(const Problem& p) {
  std::vector<float> keys;
  std::vector<float> values;
  reference_store(p, keys, values);
  std::vector<double> expected;
  std::vector<double> magnitude;
  reference_attention(p, keys, values, expected, magnitude);
  const GpuResult gpu = run_on_gpu(p);

  CHECK(gpu.key_cache == keys);
  CHECK(gpu.value_cache == values);
  REQUIRE(gpu.out.size() == expected.size());
  std::size_t failures = 0;
  double worst = 0.0;
  for (std::size_t e = 0; e < expected.size(); ++e) {
    const double error = std::fabs(double{gpu.out[e]} - expected[e]);
    const double relative = error / magnitude[e];
    worst = std::max(worst, std::isnan(relative) ? INFINITY : relative);
    if (!(relative <= 1e-5) && failures++ < 5) {
      const std::size_t row = e / p.q_dim();
      const std::size_t head = e % p.q_dim() / p.geometry.head_dim;
      FAIL_CHECK("token " << row << " head " << head << " dim " << e % p.geometry.head_dim
                          << ": gpu " << gpu.out[e] << " reference " << expected[e] << " magnitude "
                          << magnitude[e]);
    }
  }
  INFO("worst error relative to sum_p w_p |v_p|: " << worst);
  CHECK(failures == 0);
  CHECK(worst <= 1e-5);
}

} // namespace

TEST_CASE("paged attention over a ragged step matches a double-precision reference") {
  CAFLM_REQUIRE_GPU();
  // Prefill from 0, chunks at nonzero starts crossing and starting on block
  // boundaries, and decodes; block size 16.
  const std::vector<SequenceSpec> sequences{{0, 13},  {37, 20}, {100, 1},
                                            {16, 16}, {5, 1},   {64, 33}};
  struct HeadConfig {
    std::uint32_t n_heads;
    std::uint32_t n_kv_heads;
  };
  std::uint32_t seed = 1;
  for (const std::uint32_t head_dim : {64u, 96u, 128u, 256u})
    for (const HeadConfig heads : {HeadConfig{8, 2}, HeadConfig{4, 4}}) {
      INFO("head_dim " << head_dim << ", " << heads.n_heads << " heads on " << heads.n_kv_heads
                       << " KV heads");
      const PagedKvGeometry g = make_geometry(3, 64, 16, heads.n_kv_heads, head_dim);
      check_against_reference(make_problem(g, heads.n_heads, 1, sequences, seed++));
    }
}

TEST_CASE("paged attention handles odd block sizes and a head_dim of 2") {
  CAFLM_REQUIRE_GPU();
  const std::vector<SequenceSpec> sequences{{0, 7}, {11, 5}, {29, 1}};
  check_against_reference(make_problem(make_geometry(2, 40, 5, 1, 2), 3, 0, sequences, 77));
  check_against_reference(make_problem(make_geometry(2, 40, 3, 2, 96), 8, 1, sequences, 78));
}

TEST_CASE("paged attention over contexts longer than one score tile") {
  CAFLM_REQUIRE_GPU();
  static_assert(caflm::cuda::kAttentionScoreTile == 4096, "the positions below straddle it");
  // Contexts 4095..4098 straddle the first tile's end; 5001..5003 and 9001
  // take the online rescaling across two and three tiles.
  const std::vector<SequenceSpec> sequences{{4094, 4}, {5000, 3}, {9000, 1}};
  const PagedKvGeometry g = make_geometry(1, 600, 32, 1, 64);
  check_against_reference(make_problem(g, 4, 0, sequences, 99));
}

TEST_CASE("a sequence's attention is bitwise the same alone and inside a larger step") {
  CAFLM_REQUIRE_GPU();
  for (const std::uint32_t head_dim : {96u, 128u}) {
    INFO("head_dim " << head_dim);
    const PagedKvGeometry g = make_geometry(2, 96, 16, 2, head_dim);
    // Sequence 2 (a chunk at 45) and sequence 4 (a decode at 70) are the
    // ones extracted below.
    const Problem full =
        make_problem(g, 8, 1, {{0, 30}, {200, 1}, {45, 12}, {3, 9}, {70, 1}, {130, 40}}, head_dim);
    const GpuResult together = run_on_gpu(full);

    for (const std::size_t chosen : {std::size_t{2}, std::size_t{4}}) {
      const RaggedBatchItem& item = full.items[chosen];
      INFO("item " << chosen);
      // The same sequence alone: same cache, pages, q, k, v rows; its token
      // and table offsets become 0.
      Problem alone = full;
      alone.items = {item};
      alone.items[0].token_offset = 0;
      alone.items[0].block_table_offset = 0;
      alone.tables.assign(full.tables.begin() + item.block_table_offset,
                          full.tables.begin() + item.block_table_offset + item.page_count);
      alone.tokens.assign(full.tokens.begin() + item.token_offset,
                          full.tokens.begin() + item.token_offset + item.query_length);
      const auto rows = [&](const std::vector<float>& all, std::size_t width) {
        return std::vector<float>(all.begin() + item.token_offset * width,
                                  all.begin() + (item.token_offset + item.query_length) * width);
      };
      alone.q = rows(full.q, full.q_dim());
      alone.k = rows(full.k, g.kv_dim());
      alone.v = rows(full.v, g.kv_dim());
      const GpuResult single = run_on_gpu(alone);

      // The same sequence last, after everything else, at new offsets.
      Problem reordered = full;
      std::rotate(reordered.items.begin(), reordered.items.begin() + chosen + 1,
                  reordered.items.end());
      std::uint32_t offset = 0;
      std::vector<float> q;
      std::vector<float> k;
      std::vector<float> v;
      for (RaggedBatchItem& moved : reordered.items) {
        const auto append = [&](std::vector<float>& to, const std::vector<float>& from,
                                std::size_t width) {
          to.insert(to.end(), from.begin() + moved.token_offset * width,
                    from.begin() + (moved.token_offset + moved.query_length) * width);
        };
        append(q, full.q, full.q_dim());
        append(k, full.k, g.kv_dim());
        append(v, full.v, g.kv_dim());
        moved.token_offset = offset;
        offset += moved.query_length;
      }
      reordered.q = q;
      reordered.k = k;
      reordered.v = v;
      const GpuResult last = run_on_gpu(reordered);
      const std::size_t last_offset = offset - item.query_length;

      const std::size_t floats = std::size_t{item.query_length} * full.q_dim();
      const float* in_full = together.out.data() + item.token_offset * full.q_dim();
      const float* in_last = last.out.data() + last_offset * full.q_dim();
      REQUIRE(single.out.size() == floats);
      CHECK(std::memcmp(single.out.data(), in_full, floats * sizeof(float)) == 0);
      CHECK(std::memcmp(single.out.data(), in_last, floats * sizeof(float)) == 0);
      // Not vacuous: every output was written (the buffer starts as NaN).
      CHECK(std::none_of(single.out.begin(), single.out.end(),
                         [](float x) { return std::isnan(x); }));
    }
  }
}

TEST_CASE("block copies on the device are applied in order, as on the CPU") {
  CAFLM_REQUIRE_GPU();
  const PagedKvGeometry g = make_geometry(3, 12, 8, 2, 64);
  std::vector<float> host_key_cache(g.cache_floats()), host_value_cache(g.cache_floats());
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (std::size_t e = 0; e < g.cache_floats(); ++e) {
    host_key_cache[e] = uniform(rng);
    host_value_cache[e] = uniform(rng);
  }
  float* host_keys = host_key_cache.data();
  float* host_values = host_value_cache.data();

  SECTION("a chain, a self copy and an overwritten source keep their sequential meaning") {
    // 7 must end with block 2's old content (through 5), 9 with 8's old
    // content before 8 takes 1's.
    const std::vector<BlockCopy> copies{{2, 5}, {5, 7}, {8, 9}, {3, 3}, {1, 8}};
    Problem p;
    p.geometry = g;
    p.n_heads = g.n_kv_heads;
    p.copies = copies;
    p.key_cache.assign(host_keys, host_keys + g.cache_floats());
    p.value_cache.assign(host_values, host_values + g.cache_floats());
    caflm::cuda::RaggedStepPacker packer(1, 1, static_cast<std::uint32_t>(copies.size()));
    packer.pack(p.batch(), g, 1);
    REQUIRE(packer.copy_wave_ends().size() == 3);
    const GpuResult gpu = run_on_gpu(p);
    copy_blocks_in_order(g, copies, host_key_cache, host_value_cache);
    CHECK(std::memcmp(gpu.key_cache.data(), host_keys, g.cache_floats() * sizeof(float)) == 0);
    CHECK(std::memcmp(gpu.value_cache.data(), host_values, g.cache_floats() * sizeof(float)) == 0);
    CHECK(std::memcmp(host_keys + cache_index(g, 2, 7, 0, 0),
                      p.key_cache.data() + cache_index(g, 2, 2, 0, 0),
                      g.block_floats() * sizeof(float)) == 0);
  }

  SECTION("a decode writes into its copied block and leaves the shared one as it was") {
    // The sequence's second page was shared as block 4; the scheduler gave
    // it block 10 and asks for the copy before the decode at position 13
    // writes cell 5 of it.
    Problem p = make_problem(g, 4, 2, {{13, 1}}, 6);
    p.tables = {0, 10};
    p.copies = {{4, 10}};
    p.key_cache.assign(host_keys, host_keys + g.cache_floats());
    p.value_cache.assign(host_values, host_values + g.cache_floats());
    const GpuResult gpu = run_on_gpu(p);
    copy_blocks_in_order(g, p.copies, host_key_cache, host_value_cache);
    for (std::uint32_t h = 0; h < g.n_kv_heads; ++h) {
      std::copy_n(p.k.begin() + std::size_t{h} * g.head_dim, g.head_dim,
                  host_keys + cache_index(g, 2, 10, h, 5));
      std::copy_n(p.v.begin() + std::size_t{h} * g.head_dim, g.head_dim,
                  host_values + cache_index(g, 2, 10, h, 5));
    }
    CHECK(std::memcmp(gpu.key_cache.data(), host_keys, g.cache_floats() * sizeof(float)) == 0);
    CHECK(std::memcmp(gpu.value_cache.data(), host_values, g.cache_floats() * sizeof(float)) == 0);
    // And attention read the copy: the double reference over the same step agrees.
    check_against_reference(p);
  }
}

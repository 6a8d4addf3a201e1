// A randomized soak of the scheduler against simple models: a shadow KV
// store checks that every step reads exactly the tokens its sequence holds
// (through paging, prefix sharing, copy-on-write, forks and preemption),
// and a reference count model checks the pool after every operation.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <vector>

#include "caflm/scheduler/step.hpp"

using namespace caflm;

namespace {

/// Keeps, for every KV cell, the token that was written there, and checks
/// each item's context against the sequence the table says it has.
class ShadowKvBackend : public RaggedBackend {
 public:
  ShadowKvBackend(const RequestTable& table, std::uint32_t blocks, std::uint32_t block_size)
    : table_(table)
    , block_size_(block_size)
    , cells_(std::size_t{blocks} * block_size, empty) {}

  std::uint32_t vocab_size() const override { return 64; }

  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override {
    for (std::uint32_t c = 0; c < batch.copy_count; ++c)
      std::copy_n(&cells_[batch.copies[c].source * block_size_], block_size_,
                  &cells_[batch.copies[c].destination * block_size_]);
    // Writes of one step never land in a block another item reads.
    for (std::uint32_t i = 0; i < batch.item_count; ++i) {
      const RaggedBatchItem& item = batch.items[i];
      const BlockId* pages = batch.block_tables + item.block_table_offset;
      const TokenId* sequence = table_.tokens(item.slot);
      for (std::uint32_t pos = 0; pos < item.position; ++pos)
        if (cell(pages, pos) != sequence[pos])
          ++context_errors;
      for (std::uint32_t t = 0; t < item.query_length; ++t)
        cell(pages, item.position + t) = batch.tokens[item.token_offset + t];
      outputs[i] = RaggedBatchOutput{item.request_id, item.slot, item.query_length};
      float* row = logits + std::size_t{i} * 64;
      std::fill(row, row + 64, 0.0f);
      row[(item.position * 5 + 3) % 64] = 1.0f;
    }
    return RaggedBatchReceipt{batch.item_count, 1, batch.token_count};
  }

  long context_errors = 0;

 private:
  static constexpr TokenId empty = UINT32_MAX;

  TokenId& cell(const BlockId* pages, std::uint32_t pos) {
    return cells_[pages[pos / block_size_] * block_size_ + pos % block_size_];
  }

  const RequestTable& table_;
  std::uint32_t block_size_;
  std::vector<TokenId> cells_; // [blocks, block_size]
};

/// Every block's count equals its holders: block tables and the cache; and
/// the pool's count of blocks only the cache holds is right.
void check_refcounts(const RequestTable& table, const PrefixCache& cache, const BlockPool& pool) {
  std::vector<unsigned> expected(pool.block_count(), 0);
  for (std::uint32_t slot = 0; slot < table.capacity(); ++slot) {
    const BlockTable& blocks = table.block_table(slot);
    for (std::uint32_t p = 0; p < blocks.page_count(); ++p)
      ++expected[blocks[p]];
  }
  std::vector<bool> cached(pool.block_count(), false);
  cache.for_each_block([&](BlockId b) {
    ++expected[b];
    cached[b] = true;
  });
  std::uint32_t free = 0;
  std::uint32_t cached_only = 0;
  bool all_match = true;
  for (BlockId b = 0; b < pool.block_count(); ++b) {
    all_match = all_match && pool.refcount(b) == expected[b];
    free += expected[b] == 0;
    cached_only += cached[b] && expected[b] == 1;
  }
  REQUIRE(all_match);
  REQUIRE(pool.free_count() == free);
  // What load reports keep count of rather than walk the cache for.
  REQUIRE(pool.cached_only_count() == cached_only);
}

/// The shape of one soak: its RNG seed and the prompts it admits.
struct SoakShape {
  std::uint32_t seed;
  /// Length of the shared system prompts that make prefix hits common.
  std::uint32_t stem_length;
  std::uint32_t min_prompt;
  std::uint32_t max_prompt;
};

/// Admits, steps, finishes, cancels, preempts and forks at random with
/// prefix caching on, checking after every operation that each request holds
/// exactly its tokens, that every block's count equals its holders, and
/// that no request that fits in the pool alone is ever called unfittable.
void soak(const SoakShape& shape) {
  INFO("seed " << shape.seed);
  SchedulerConfig cfg;
  cfg.max_requests = 12;
  cfg.max_context = 96;
  cfg.block_size = 4;
  cfg.token_budget = 40;
  cfg.max_running = 8;
  const std::uint32_t blocks = 48;
  BlockPool pool(blocks);
  PrefixCache cache(blocks, cfg.block_size, 5);
  RequestTable table(cfg, pool, &cache);
  StepPlanner planner(cfg);
  StepPlan plan(cfg.max_requests);
  RaggedBatchBuffers buffers(cfg.max_requests, cfg.token_budget, cfg.max_requests * cfg.max_pages(),
                             64);
  ShadowKvBackend backend(table, blocks, cfg.block_size);

  std::mt19937 rng(shape.seed);
  auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };
  std::vector<std::vector<TokenId>> stems(3);
  for (auto& stem : stems)
    for (std::uint32_t i = 0; i < shape.stem_length; ++i)
      stem.push_back(uniform(0, 63));

  std::map<std::uint64_t, std::uint32_t> expected_length; // id -> token count
  std::uint64_t next_id = 1;
  long steps = 0, preemptions = 0, forks = 0, copies = 0;

  for (int op = 0; op < 6000; ++op) {
    std::uint32_t choice = uniform(0, 99);
    if (choice < 20) {
      std::vector<TokenId> prompt = stems[uniform(0, 2)];
      prompt.resize(uniform(shape.min_prompt, shape.max_prompt));
      for (std::size_t i = shape.stem_length; i < prompt.size(); ++i)
        prompt[i] = uniform(0, 63);
      auto admitted =
          table.admit(next_id, prompt.data(), static_cast<std::uint32_t>(prompt.size()));
      if (admitted)
        expected_length[next_id] = static_cast<std::uint32_t>(prompt.size());
      else
        REQUIRE(admitted.error() == SchedulerError::Full);
      ++next_id;
    } else if (choice < 75) {
      auto receipt = run_step(table, planner, backend, plan, buffers);
      REQUIRE(receipt);
      ++steps;
      preemptions += plan.preempted_count;
      copies += buffers.copy_count;
      // Every sequence fits in the pool alone (max_context 96 tokens is 24
      // of its 48 blocks), so none may ever be reported unfittable, however
      // many cached or waiting requests hold blocks.
      REQUIRE(plan.unfittable_count == 0);
      for (std::uint32_t i = 0; i < buffers.item_count; ++i) {
        std::uint32_t slot = buffers.items[i].slot;
        RequestView v = table.view(slot);
        if (v.state == RequestState::Empty || !v.awaiting_token)
          continue;
        if (v.token_count == cfg.max_context) {
          REQUIRE(table.finish(v.request_id));
          expected_length.erase(v.request_id);
          continue;
        }
        REQUIRE(table.append_token(slot, uniform(0, 63)));
        ++expected_length[v.request_id];
      }
    } else if (choice < 85 && !expected_length.empty()) {
      auto it = std::next(expected_length.begin(), uniform(0, expected_length.size() - 1));
      REQUIRE((choice % 2 ? table.finish(it->first) : table.cancel(it->first)));
      expected_length.erase(it);
    } else if (choice < 92 && !expected_length.empty()) {
      auto it = std::next(expected_length.begin(), uniform(0, expected_length.size() - 1));
      std::uint32_t slot = table.find(it->first);
      if (table.view(slot).running && !table.view(slot).awaiting_token) {
        REQUIRE(table.preempt(slot));
        ++preemptions;
      }
    } else if (!expected_length.empty()) {
      auto it = std::next(expected_length.begin(), uniform(0, expected_length.size() - 1));
      auto child = table.fork(it->first, next_id);
      if (child) {
        expected_length[next_id] = it->second;
        ++forks;
      }
      ++next_id;
    }
    for (const auto& [id, length] : expected_length) {
      std::uint32_t slot = table.find(id);
      REQUIRE(slot != RequestTable::no_slot);
      REQUIRE(table.view(slot).token_count == length);
    }
    REQUIRE(table.active_count() == expected_length.size());
    check_refcounts(table, cache, pool);
  }

  CHECK(backend.context_errors == 0);
  CHECK(steps > 2000);
  CHECK(preemptions > 0);
  CHECK(forks > 0);
  CHECK(copies > 0);
  CHECK(cache.hits() > 0);
  for (const auto& entry : expected_length)
    REQUIRE(table.finish(entry.first));
  cache.clear(pool);
  CHECK(pool.free_count() == pool.block_count());
}

} // namespace

TEST_CASE("thousands of random operations on short prompts leak nothing and keep every count "
          "right") {
  soak(SoakShape{20261130, 12, 1, 30});
}

TEST_CASE("long prompts that share prefixes under a tight pool: no request that fits alone is "
          "ever unfittable") {
  // Prompts of 40 to 90 tokens (10 to 23 of the 48 blocks) over stems of 32:
  // two or three fit at once, cached prefixes are everywhere, and steps
  // preempt constantly.
  for (std::uint32_t seed : {1u, 2u, 3u, 4u, 5u})
    soak(SoakShape{seed, 32, 40, 90});
}

// Admit, plan, lower, commit and finish must not allocate after start-up:
// the test program counts every heap allocation (allocation_counter.hpp).
#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "caflm/scheduler/step.hpp"
#include "tests/support/allocation_counter.hpp"

using namespace caflm;

namespace {

/// Echoes identities and writes a one-hot logits row, allocating nothing.
class EchoBackend : public RaggedBackend {
 public:
  std::uint32_t vocab_size() const override { return 16; }
  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override {
    for (std::uint32_t i = 0; i < batch.item_count; ++i) {
      const RaggedBatchItem& item = batch.items[i];
      outputs[i] = RaggedBatchOutput{item.request_id, item.slot, item.query_length};
      float* row = logits + i * 16;
      for (std::uint32_t v = 0; v < 16; ++v)
        row[v] = v == (item.position + item.query_length) % 16 ? 1.0f : 0.0f;
    }
    return RaggedBatchReceipt{batch.item_count, 1, 0};
  }
};

} // namespace

TEST_CASE("admit, plan, lower, commit and finish allocate nothing after start-up") {
  SchedulerConfig cfg;
  cfg.max_requests = 8;
  cfg.max_context = 128;
  cfg.block_size = 4;
  cfg.token_budget = 64;
  cfg.max_running = 4;
  BlockPool pool(40);
  PrefixCache cache(40, cfg.block_size, 99);
  RequestTable table(cfg, pool, &cache);
  StepPlanner planner(cfg);
  StepPlan plan(cfg.max_requests);
  RaggedBatchBuffers buffers(cfg.max_requests, cfg.token_budget, cfg.max_requests * cfg.max_pages(),
                             16);
  EchoBackend backend;
  std::vector<TokenId> prompt(24);
  std::iota(prompt.begin(), prompt.end(), 1);

  long steps = 0;
  const std::size_t allocations_before = test::heap_allocations.load();
  for (std::uint64_t round = 0; round < 20; ++round) {
    for (std::uint64_t r = 0; r < 6; ++r)
      (void)table.admit(round * 10 + r, prompt.data(), 12 + static_cast<std::uint32_t>(r * 2));
    for (int s = 0; s < 12; ++s) {
      if (!run_step(table, planner, backend, plan, buffers))
        break;
      ++steps;
      for (std::uint32_t i = 0; i < buffers.item_count; ++i)
        if (table.view(buffers.items[i].slot).awaiting_token)
          (void)table.append_token(buffers.items[i].slot, 3);
    }
    (void)table.fork(round * 10, round * 10 + 9);
    for (std::uint64_t r = 0; r < 10; ++r)
      (void)(r % 2 ? table.finish(round * 10 + r) : table.cancel(round * 10 + r));
  }
  const std::size_t allocations = test::heap_allocations.load() - allocations_before;
  CHECK(steps > 100);
  CHECK(cache.hits() > 0);
  if (test::counts_allocations)
    CHECK(allocations == 0);
  else
    WARN("allocations not counted under ThreadSanitizer");
}

// A tour of caflm's memory core without a model: three requests share a
// system prompt through the prefix cache, run together in ragged steps,
// and finish; the pool is full again at the end.
//
// The "model" here is a stand-in backend that predicts token (last + 1);
// `caflm generate` runs real models on the same scheduler.
#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "caflm/scheduler/step.hpp"

using namespace caflm;

namespace {

/// Predicts token `last + 1` for every sequence; one launch per step.
class CountingBackend : public RaggedBackend {
 public:
  std::uint32_t vocab_size() const override { return 1000; }

  Expected<RaggedBatchReceipt, BackendError>
  execute(const RaggedBatch& batch, RaggedBatchOutput* outputs, float* logits) override {
    for (std::uint32_t i = 0; i < batch.item_count; ++i) {
      const RaggedBatchItem& item = batch.items[i];
      outputs[i] = RaggedBatchOutput{item.request_id, item.slot, item.query_length};
      TokenId last = batch.tokens[item.token_offset + item.query_length - 1];
      float* row = logits + std::size_t{i} * vocab_size();
      std::fill(row, row + vocab_size(), 0.0f);
      row[(last + 1) % vocab_size()] = 1.0f;
    }
    return RaggedBatchReceipt{batch.item_count, 1, batch.token_count};
  }
};

TokenId argmax(const float* row, std::uint32_t n) {
  return static_cast<TokenId>(std::max_element(row, row + n) - row);
}

} // namespace

int main() {
  SchedulerConfig config;
  config.max_requests = 4;
  config.max_context = 128;
  config.block_size = 8;
  config.token_budget = 64;
  config.max_running = 4;
  const std::uint32_t block_count = 24;

  BlockPool pool(block_count);
  PrefixCache cache(block_count, config.block_size, /*model_salt=*/1);
  RequestTable table(config, pool, &cache);
  StepPlanner planner(config);
  StepPlan plan(config.max_requests);
  CountingBackend backend;
  RaggedBatchBuffers buffers(config.max_requests, config.token_budget,
                             config.max_requests * config.max_pages(), backend.vocab_size());

  std::printf("A pool of %u KV blocks of %u tokens each.\n\n", block_count, config.block_size);

  // Every prompt starts with the same 24-token "system prompt".
  std::vector<TokenId> system_prompt(24);
  std::iota(system_prompt.begin(), system_prompt.end(), 100);
  auto prompt_for = [&](TokenId question_start, std::uint32_t question_length) {
    std::vector<TokenId> prompt = system_prompt;
    for (std::uint32_t i = 0; i < question_length; ++i)
      prompt.push_back(question_start + i);
    return prompt;
  };

  auto admit = [&](std::uint64_t id, const std::vector<TokenId>& prompt) {
    auto slot = table.admit(id, prompt.data(), static_cast<std::uint32_t>(prompt.size()));
    if (!slot) {
      std::printf("request %llu refused: %s\n", static_cast<unsigned long long>(id),
                  to_string(slot.error()));
      return;
    }
    RequestView v = table.view(*slot);
    std::printf("request %llu admitted to slot %u: %u prompt tokens, %u already in the "
                "prefix cache\n",
                static_cast<unsigned long long>(id), *slot, v.prompt_length,
                v.cached_prompt_tokens);
  };

  auto step = [&](int number) {
    auto receipt = run_step(table, planner, backend, plan, buffers);
    if (!receipt) {
      std::printf("step %d failed: %s\n", number, to_string(receipt.error()));
      return;
    }
    std::printf("step %d: one backend launch for %u sequence(s), %u token(s)", number,
                receipt->batch_size, receipt->tokens);
    if (buffers.copy_count > 0)
      std::printf(", %u copy-on-write block copies", buffers.copy_count);
    std::printf("\n");
    for (std::uint32_t i = 0; i < buffers.item_count; ++i) {
      const RaggedBatchItem& item = buffers.items[i];
      RequestView v = table.view(item.slot);
      if (item.query_length > 1)
        std::printf("  request %llu: prefill of %u tokens at positions %u-%u",
                    static_cast<unsigned long long>(item.request_id), item.query_length,
                    item.position, item.position + item.query_length - 1);
      else
        std::printf("  request %llu: decode at position %u",
                    static_cast<unsigned long long>(item.request_id), item.position);
      if (v.awaiting_token) {
        TokenId next = argmax(buffers.logits_row(i), buffers.vocab_size);
        (void)table.append_token(item.slot, next);
        std::printf(" -> generated token %u", next);
      }
      std::printf("\n");
    }
    std::printf("  pool: %u of %u blocks in use, %u cached\n", pool.used_count(), block_count,
                cache.size());
  };

  admit(1, prompt_for(500, 5));
  step(1);
  std::printf("\nRequest 1's prompt is now in the prefix cache; requests 2 and 3 reuse it.\n");
  admit(2, prompt_for(600, 3));
  admit(3, prompt_for(700, 9));
  BlockId shared = table.block_table(table.find(1))[0];
  std::printf("the first system-prompt block is held %u times: by request 1, the cache, and "
              "requests 2 and 3\n\n",
              pool.refcount(shared));
  for (int n = 2; n <= 4; ++n)
    step(n);

  std::printf("\nRequest 4 forks from request 3 (parallel sampling): it shares all of 3's "
              "pages until one of them writes.\n");
  if (auto child = table.fork(3, 4); child)
    std::printf("request 4 forked into slot %u\n", *child);
  step(5);

  std::printf("\n");
  for (std::uint64_t id = 1; id <= 4; ++id) {
    std::uint32_t slot = table.find(id);
    RequestView v = table.view(slot);
    bool cancel = id == 2;
    std::printf("request %llu %s after %u generated tokens\n", static_cast<unsigned long long>(id),
                cancel ? "cancelled" : "finished", v.token_count - v.prompt_length);
    (void)(cancel ? table.cancel(id) : table.finish(id));
  }
  std::printf("pool: %u blocks in use, all held by the prefix cache (%u cached)\n",
              pool.used_count(), cache.size());
  cache.clear(pool);
  std::printf("after clearing the cache: %u of %u blocks free\n", pool.free_count(), block_count);
  return pool.free_count() == block_count ? 0 : 1;
}

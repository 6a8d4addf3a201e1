#include <catch2/catch.hpp>

#include <numeric>
#include <vector>

#include "support/fake_backend.hpp"

using namespace caflm;
using caflm::testing::SchedulerRig;

namespace {

SchedulerConfig small_config() {
  SchedulerConfig cfg;
  cfg.max_requests = 4;
  cfg.max_context = 64;
  cfg.block_size = 4;
  cfg.token_budget = 32;
  cfg.max_running = 4;
  return cfg;
}

std::vector<TokenId> prompt_of(std::size_t length, TokenId first = 1) {
  std::vector<TokenId> tokens(length);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

std::uint32_t admit(RequestTable& table, std::uint64_t id, const std::vector<TokenId>& prompt) {
  auto slot = table.admit(id, prompt.data(), static_cast<std::uint32_t>(prompt.size()));
  REQUIRE(slot);
  return *slot;
}

/// Pool and table state that a release must restore exactly.
std::vector<unsigned> refcounts(const BlockPool& pool) {
  std::vector<unsigned> counts;
  for (BlockId b = 0; b < pool.block_count(); ++b)
    counts.push_back(pool.refcount(b));
  return counts;
}

bool same_view(const RequestView& a, const RequestView& b) {
  return a.request_id == b.request_id && a.state == b.state && a.running == b.running &&
         a.awaiting_token == b.awaiting_token && a.token_count == b.token_count &&
         a.computed == b.computed;
}

} // namespace

TEST_CASE("the ragged ABI records have their fixed sizes") {
  CHECK(sizeof(RaggedBatchItem) == 32);
  CHECK(sizeof(RaggedBatchOutput) == 16);
  CHECK(std::is_standard_layout_v<RaggedBatchItem>);
  CHECK(std::is_standard_layout_v<RaggedBatchOutput>);
}

TEST_CASE("a prompt is prefilled, then decoded one token per step") {
  SchedulerRig rig(small_config(), 32);
  auto prompt = prompt_of(6);
  std::uint32_t slot = admit(rig.table, 1, prompt);
  REQUIRE(rig.step());
  CHECK(rig.backend.last_items.size() == 1);
  CHECK(rig.backend.last_items[0].query_length == 6);
  RequestView v = rig.table.view(slot);
  CHECK(v.state == RequestState::Decode);
  CHECK(v.token_count == 7); // counted once, when appended
  CHECK(v.computed == 6);
  CHECK(rig.table.tokens(slot)[6] == rig.backend.next_token(6, 5));
  REQUIRE(rig.step());
  CHECK(rig.backend.last_items[0].query_length == 1);
  CHECK(rig.backend.last_items[0].position == 6);
  CHECK(rig.table.view(slot).token_count == 8);
  CHECK(rig.table.view(slot).computed == 7);
}

TEST_CASE("a published block is held by producer, cache and a new request") {
  SchedulerRig rig(small_config(), 32);
  auto prompt = prompt_of(9); // two full blocks and one token
  std::uint32_t producer = admit(rig.table, 1, prompt);
  REQUIRE(rig.step()); // prefill completes and publishes
  BlockId shared = rig.table.block_table(producer)[0];
  CHECK(rig.pool.refcount(shared) == 2);

  // A waiting request holds no block: it attaches the cached prefix when a
  // step starts it, so it never pins blocks that running requests need.
  std::uint32_t consumer = admit(rig.table, 2, prompt);
  CHECK(rig.pool.refcount(shared) == 2);
  CHECK(rig.table.block_table(consumer).empty());
  REQUIRE(rig.step());
  CHECK(rig.pool.refcount(shared) == 3);
  CHECK(rig.table.view(consumer).cached_prompt_tokens == 8);
  REQUIRE(rig.table.finish(2));
  CHECK(rig.pool.refcount(shared) == 2);
}

TEST_CASE("a partial prefix hit prefills only the rest") {
  SchedulerRig rig(small_config(), 32);
  REQUIRE(rig.table.admit(1, prompt_of(8).data(), 8));
  REQUIRE(rig.step());
  auto longer = prompt_of(13); // shares the two cached blocks
  std::uint32_t slot = admit(rig.table, 2, longer);
  CHECK(rig.table.view(slot).computed == 0);
  CHECK(rig.table.view(slot).state == RequestState::Prefill);
  REQUIRE(rig.step());
  CHECK(rig.table.view(slot).cached_prompt_tokens == 8);
  const RaggedBatchItem* item = nullptr;
  for (const auto& it : rig.backend.last_items)
    if (it.request_id == 2)
      item = &it;
  REQUIRE(item != nullptr);
  CHECK(item->position == 8);
  CHECK(item->query_length == 5);
  CHECK(rig.table.view(slot).token_count == 14);
}

TEST_CASE("a fully cached prompt still computes its last token") {
  SchedulerRig rig(small_config(), 32);
  auto prompt = prompt_of(8);
  REQUIRE(rig.table.admit(1, prompt.data(), 8));
  REQUIRE(rig.step());
  std::uint32_t slot = admit(rig.table, 2, prompt);
  REQUIRE(rig.step());
  // One cached block of the two: the last token's logits give the next.
  CHECK(rig.table.view(slot).cached_prompt_tokens == 4);
  for (const auto& item : rig.backend.last_items)
    if (item.request_id == 2)
      CHECK(item.position == 4);
  CHECK(rig.table.view(slot).state == RequestState::Decode);
  CHECK(rig.table.view(slot).token_count == 9);
}

TEST_CASE("cancel and completion release identically") {
  auto run = [](bool cancel) {
    SchedulerRig rig(small_config(), 32);
    REQUIRE(rig.table.admit(1, prompt_of(9).data(), 9));
    REQUIRE(rig.table.admit(2, prompt_of(10, 50).data(), 10));
    REQUIRE(rig.step());
    REQUIRE(rig.step());
    REQUIRE((cancel ? rig.table.cancel(2) : rig.table.finish(2)));
    CHECK(rig.table.find(2) == RequestTable::no_slot);
    return std::make_tuple(refcounts(rig.pool), rig.pool.free_count(), rig.cache.size(),
                           rig.table.active_count(), rig.table.running_count());
  };
  CHECK(run(true) == run(false));
}

TEST_CASE("a duplicate id and a full table fail closed") {
  SchedulerRig rig(small_config(), 32);
  auto prompt = prompt_of(5);
  for (std::uint64_t id = 1; id <= 4; ++id)
    admit(rig.table, id, prompt);
  auto free_before = rig.pool.free_count();
  auto dup = rig.table.admit(3, prompt.data(), 5);
  REQUIRE_FALSE(dup);
  CHECK(dup.error() == SchedulerError::DuplicateRequest);
  auto full = rig.table.admit(9, prompt.data(), 5);
  REQUIRE_FALSE(full);
  CHECK(full.error() == SchedulerError::Full);
  CHECK(rig.table.active_count() == 4);
  CHECK(rig.pool.free_count() == free_before);
  CHECK(rig.table.admit(10, prompt.data(), 0).error() == SchedulerError::EmptyPrompt);
  CHECK(rig.table.admit(11, prompt.data(), 65).error() == SchedulerError::ContextOverflow);
  CHECK(rig.table.finish(77).error() == SchedulerError::UnknownRequest);
  CHECK(rig.table.cancel(77).error() == SchedulerError::UnknownRequest);
}

TEST_CASE("two decodes run as one backend call in slot order") {
  SchedulerRig rig(small_config(), 32);
  std::uint32_t a = admit(rig.table, 10, prompt_of(5));
  std::uint32_t b = admit(rig.table, 20, prompt_of(6, 40));
  REQUIRE(rig.step()); // both prefills, one batch
  CHECK(rig.backend.launches == 1);
  REQUIRE(rig.step());
  CHECK(rig.backend.launches == 2);
  REQUIRE(rig.backend.last_items.size() == 2);
  const auto& first = rig.backend.last_items[0];
  const auto& second = rig.backend.last_items[1];
  CHECK(first.slot == a);
  CHECK(second.slot == b);
  CHECK(first.request_id == 10);
  CHECK(second.request_id == 20);
  CHECK(first.query_length == 1);
  CHECK(second.query_length == 1);
  CHECK(first.position == 5);
  CHECK(second.position == 6);
  // Each table is the sequence's pages, concatenated in item order.
  CHECK(first.block_table_offset == 0);
  CHECK(first.page_count == 2);
  CHECK(second.block_table_offset == 2);
  CHECK(second.page_count == 2);
  const auto& tables = rig.backend.last_tables;
  REQUIRE(tables.size() == 4);
  CHECK(tables[0] == rig.table.block_table(a)[0]);
  CHECK(tables[1] == rig.table.block_table(a)[1]);
  CHECK(tables[2] == rig.table.block_table(b)[0]);
  CHECK(tables[3] == rig.table.block_table(b)[1]);
}

TEST_CASE("a corrupted output identity fails the step and changes nothing") {
  SchedulerRig rig(small_config(), 32);
  std::uint32_t a = admit(rig.table, 10, prompt_of(5));
  std::uint32_t b = admit(rig.table, 20, prompt_of(6, 40));
  REQUIRE(rig.step());
  RequestView before_a = rig.table.view(a);
  RequestView before_b = rig.table.view(b);
  auto free_before = rig.pool.free_count();
  rig.backend.corrupt_next = true;
  auto step = rig.step();
  REQUIRE_FALSE(step);
  CHECK(step.error() == SchedulerError::OutputMismatch);
  CHECK(same_view(rig.table.view(a), before_a));
  CHECK(same_view(rig.table.view(b), before_b));
  CHECK(rig.pool.free_count() == free_before);
  // The next step runs as if the failed one never happened.
  REQUIRE(rig.step());
  CHECK(rig.table.view(a).token_count == before_a.token_count + 1);
}

TEST_CASE("a backend failure changes no counter") {
  SchedulerRig rig(small_config(), 32);
  std::uint32_t a = admit(rig.table, 10, prompt_of(5));
  REQUIRE(rig.step());
  RequestView before = rig.table.view(a);
  rig.backend.fail_next = true;
  auto step = rig.step();
  REQUIRE_FALSE(step);
  CHECK(step.error() == SchedulerError::BackendFailed);
  CHECK(same_view(rig.table.view(a), before));
}

TEST_CASE("a request with no input token is skipped, not fatal to the step") {
  SchedulerRig rig(small_config(), 32);
  std::uint32_t a = admit(rig.table, 1, prompt_of(5));
  std::uint32_t b = admit(rig.table, 2, prompt_of(5, 30));
  REQUIRE(run_step(rig.table, rig.planner, rig.backend, rig.plan, rig.buffers));
  // Only `a` gets its sampled token; `b` awaits one.
  REQUIRE(rig.table.append_token(a, 3));
  REQUIRE(rig.step());
  REQUIRE(rig.backend.last_items.size() == 1);
  CHECK(rig.backend.last_items[0].slot == a);
  CHECK(rig.table.view(b).awaiting_token);
  CHECK(rig.table.append_token(a, 3).error() == SchedulerError::NotAwaitingToken);
}

TEST_CASE("lowering a step is all or nothing: a failure undoes the copies it set up") {
  // A fork of a request in mid-prefill shares its partial page. The child's
  // next chunk copies that page (the pool's last free block), then needs a
  // fresh page and finds none. The copy must be undone: otherwise the
  // child's table points at a block the backend never filled, and its KV is
  // silently wrong from then on.
  SchedulerConfig cfg = small_config();
  cfg.token_budget = 6;
  SchedulerRig rig(cfg, 3, /*with_cache=*/false);
  admit(rig.table, 1, prompt_of(13));
  REQUIRE(rig.step()); // positions 0-5: a full page and a partial one
  auto child = rig.table.fork(1, 2);
  REQUIRE(child);
  const std::vector<BlockId> pages(rig.table.block_table(*child).blocks(),
                                   rig.table.block_table(*child).blocks() + 2);
  const auto counts = refcounts(rig.pool);
  const RequestView before = rig.table.view(*child);

  PlannedItem item{*child, 6}; // positions 6-11: pages 1 (shared) and 2
  auto lowered = rig.table.lower(&item, 1, rig.buffers);
  REQUIRE_FALSE(lowered);
  CHECK(lowered.error() == SchedulerError::Kv);
  CHECK(rig.table.block_table(*child).page_count() == 2);
  CHECK(std::equal(pages.begin(), pages.end(), rig.table.block_table(*child).blocks()));
  CHECK(refcounts(rig.pool) == counts);
  CHECK(rig.pool.free_count() == 1);
  CHECK(same_view(rig.table.view(*child), before));
  CHECK(rig.buffers.item_count == 0);
  CHECK(rig.buffers.copy_count == 0);
}

TEST_CASE("copy-on-write is enforced before a forked sequence writes") {
  SchedulerRig rig(small_config(), 32);
  std::uint32_t parent = admit(rig.table, 1, prompt_of(6));
  REQUIRE(rig.step());
  auto child = rig.table.fork(1, 2);
  REQUIRE(child);
  BlockId shared_last = rig.table.block_table(parent)[1];
  CHECK(rig.pool.refcount(shared_last) == 2);
  REQUIRE(rig.step()); // both decode into their shared, partly filled page
  REQUIRE(rig.backend.last_copies.size() == 1);
  const BlockCopy& copy = rig.backend.last_copies[0];
  CHECK(copy.source == shared_last);
  // Exactly one of the two now writes a private copy; neither writes a
  // block the other can read.
  BlockId parent_last = rig.table.block_table(parent)[1];
  BlockId child_last = rig.table.block_table(*child)[1];
  CHECK(parent_last != child_last);
  CHECK(rig.pool.refcount(parent_last) == 1);
  CHECK(rig.pool.refcount(child_last) == 1);
  CHECK(((parent_last == copy.destination) != (child_last == copy.destination)));
}

TEST_CASE("the token budget caps a step; decodes go first, then prefill chunks") {
  SchedulerConfig cfg = small_config();
  cfg.token_budget = 8;
  SchedulerRig rig(cfg, 32);
  std::uint32_t a = admit(rig.table, 1, prompt_of(3));
  REQUIRE(rig.step());
  std::uint32_t b = admit(rig.table, 2, prompt_of(20, 100));
  REQUIRE(rig.step());
  REQUIRE(rig.backend.last_items.size() == 2);
  CHECK(rig.backend.last_items[0].slot == a);
  CHECK(rig.backend.last_items[0].query_length == 1);
  CHECK(rig.backend.last_items[1].slot == b);
  CHECK(rig.backend.last_items[1].query_length == 7);
  // Chunks continue until the prompt is in; only then does b sample.
  REQUIRE(rig.step());
  CHECK(rig.table.view(b).computed == 14);
  CHECK(rig.table.view(b).token_count == 20);
  REQUIRE(rig.step());
  CHECK(rig.table.view(b).computed == 20);
  CHECK(rig.table.view(b).token_count == 21);
}

TEST_CASE("no more than max_running sequences run") {
  SchedulerConfig cfg = small_config();
  cfg.max_running = 2;
  SchedulerRig rig(cfg, 32);
  for (std::uint64_t id = 1; id <= 4; ++id)
    admit(rig.table, id, prompt_of(3, static_cast<TokenId>(id * 10)));
  REQUIRE(rig.step());
  CHECK(rig.backend.last_items.size() == 2);
  CHECK(rig.table.running_count() == 2);
  CHECK(rig.table.view(rig.table.find(3)).running == false);
  REQUIRE(rig.table.finish(1));
  REQUIRE(rig.step());
  CHECK(rig.table.running_count() == 2);
  CHECK(rig.table.view(rig.table.find(3)).running);
}

TEST_CASE("when blocks run out the newest running request is preempted, not failed") {
  SchedulerConfig cfg = small_config();
  SchedulerRig rig(cfg, 4, /*with_cache=*/false);
  std::uint32_t old_slot = admit(rig.table, 1, prompt_of(7));
  std::uint32_t new_slot = admit(rig.table, 2, prompt_of(7, 20));
  REQUIRE(rig.step()); // each holds 2 blocks: the pool is full
  CHECK(rig.pool.free_count() == 0);
  REQUIRE(rig.step()); // position 7 still fits in page 1
  std::vector<TokenId> newest_tokens(rig.table.tokens(new_slot), rig.table.tokens(new_slot) + 9);
  REQUIRE(rig.step()); // position 8 needs page 2: the newest yields
  CHECK(rig.plan.preempted_count == 1);
  CHECK(rig.plan.preempted[0] == new_slot);
  CHECK(rig.table.view(new_slot).running == false);
  CHECK(rig.table.view(new_slot).computed == 0);
  CHECK(rig.table.view(new_slot).token_count == 9); // nothing generated is lost
  CHECK(rig.table.view(old_slot).token_count == 10);
  REQUIRE(rig.table.finish(1));
  REQUIRE(rig.step()); // recompute all 9 known tokens, then decode on
  CHECK(rig.table.view(new_slot).computed == 9);
  CHECK(rig.table.view(new_slot).token_count == 10);
  CHECK(std::equal(newest_tokens.begin(), newest_tokens.end(), rig.table.tokens(new_slot)));
}

TEST_CASE("a preempted request's cached blocks are evicted for the request that needs them") {
  // A (older) and V each hold only published blocks and fill the pool. When A
  // needs one more block, V is preempted: its blocks stay in the prefix cache
  // and nothing is freed, so the planner must evict them before it looks for
  // another victim. Otherwise A, running alone and fitting easily, would be
  // reported unfittable.
  SchedulerConfig cfg = small_config();
  cfg.max_context = 32;
  SchedulerRig rig(cfg, 8);
  std::uint32_t a = admit(rig.table, 1, prompt_of(15)); // 4 blocks, 3 of them full
  REQUIRE(rig.step());
  std::uint32_t v = admit(rig.table, 2, prompt_of(16, 40)); // 4 more, all full: the pool is full
  REQUIRE(rig.step());
  CHECK(rig.pool.free_count() == 0);
  REQUIRE(rig.step()); // A's position 16 needs a fifth block
  CHECK(rig.plan.unfittable_count == 0);
  REQUIRE(rig.plan.preempted_count == 1);
  CHECK(rig.plan.preempted[0] == v);
  CHECK(rig.table.view(a).computed == 17);
  CHECK(rig.table.view(v).token_count == 17); // V keeps its tokens, to recompute
}

TEST_CASE("waiting requests hold no blocks, so cached blocks they would reuse never block a "
          "running request") {
  SchedulerConfig cfg = small_config();
  cfg.max_context = 32;
  cfg.max_running = 1;
  SchedulerRig rig(cfg, 8);
  admit(rig.table, 1, prompt_of(16)); // 4 full blocks, published
  REQUIRE(rig.step());
  REQUIRE(rig.table.finish(1)); // its blocks stay cached, evictable
  // The next request needs all 8 blocks; two that share the cached prompt
  // arrive after it and wait (one runs at a time). Holding the cached
  // blocks from admission, they would keep it from ever starting.
  std::uint32_t runner = admit(rig.table, 2, prompt_of(30, 100));
  admit(rig.table, 3, prompt_of(17));
  admit(rig.table, 4, prompt_of(18));
  CHECK(rig.table.block_table(rig.table.find(3)).empty());
  CHECK(rig.table.block_table(rig.table.find(4)).empty());
  REQUIRE(rig.step());
  CHECK(rig.plan.unfittable_count == 0);
  CHECK(rig.table.view(runner).computed == 30);
  REQUIRE(rig.table.finish(2));
  REQUIRE(rig.step());
  CHECK(rig.table.view(rig.table.find(3)).computed == 17);
}

TEST_CASE("a request that cannot fit even alone is reported, not retried forever") {
  SchedulerConfig cfg = small_config();
  SchedulerRig rig(cfg, 2, /*with_cache=*/false);
  std::uint32_t slot = admit(rig.table, 1, prompt_of(7));
  REQUIRE(rig.step());
  REQUIRE(rig.step());
  REQUIRE(rig.step()); // needs a third block; the pool has two
  REQUIRE(rig.plan.unfittable_count == 1);
  CHECK(rig.plan.unfittable[0] == slot);
  CHECK(rig.pool.free_count() == 2);
}

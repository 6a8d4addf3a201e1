#include "caflm/scheduler/step_planner.hpp"

#include <algorithm>

namespace caflm {

std::uint32_t StepPlan::tokens() const {
  std::uint32_t total = 0;
  for (std::uint32_t i = 0; i < count; ++i)
    total += items[i].tokens;
  return total;
}

StepPlanner::StepPlanner(const SchedulerConfig& config)
  : config_(config)
  , order_(config.max_requests)
  , demand_(config.max_requests, 0) {}

void StepPlanner::plan(RequestTable& table, StepPlan& plan) {
  plan.count = plan.preempted_count = plan.unfittable_count = 0;
  budget_ = config_.token_budget;
  reserved_ = 0;
  std::fill(demand_.begin(), demand_.end(), 0);

  // Every active slot, oldest first: the order of every pass below.
  std::uint32_t active = 0;
  for (std::uint32_t slot = 0; slot < table.capacity(); ++slot)
    if (table.view(slot).state != RequestState::Empty)
      order_[active++] = slot;
  std::sort(order_.begin(), order_.begin() + active, [&](std::uint32_t a, std::uint32_t b) {
    return table.view(a).arrival < table.view(b).arrival;
  });

  // Pass 1: decodes of running requests, one token each.
  for (std::uint32_t i = 0; i < active && budget_ > 0; ++i) {
    RequestView v = table.view(order_[i]);
    if (v.running && v.state == RequestState::Decode && table.pending_tokens(v.slot) == 1)
      reserve(table, plan, v.slot, 1, true);
  }
  // Pass 2: prefill chunks of running requests.
  for (std::uint32_t i = 0; i < active && budget_ > 0; ++i) {
    RequestView v = table.view(order_[i]);
    std::uint32_t pending = table.pending_tokens(v.slot);
    if (v.running && v.state == RequestState::Prefill && pending > 0)
      reserve(table, plan, v.slot, std::min(pending, budget_), true);
  }
  // Pass 3: start waiting requests, first come first served.
  for (std::uint32_t i = 0; i < active && budget_ > 0; ++i) {
    if (table.running_count() >= config_.max_running)
      break;
    RequestView v = table.view(order_[i]);
    if (v.running || v.state == RequestState::Empty)
      continue;
    table.start(v.slot);
    std::uint32_t pending = table.pending_tokens(v.slot);
    if (!reserve(table, plan, v.slot, std::min(pending, budget_), false)) {
      // No room without preempting older work: wait for a later step.
      (void)table.preempt(v.slot);
      break;
    }
  }
  std::sort(plan.items.begin(), plan.items.begin() + plan.count,
            [](const PlannedItem& a, const PlannedItem& b) { return a.slot < b.slot; });
}

bool StepPlanner::reserve(RequestTable& table, StepPlan& plan, std::uint32_t slot,
                          std::uint32_t tokens, bool may_preempt) {
  BlockPool& pool = table.pool();
  PrefixCache* cache = table.prefix_cache();
  const std::uint32_t demand = table.block_demand(slot, tokens);
  auto shortfall = [&] {
    const std::uint32_t available = pool.free_count() - reserved_;
    return demand > available ? demand - available : 0;
  };
  for (;;) {
    // Blocks that only the cache holds go first. A preemption can leave more
    // of them behind (a victim's blocks that the cache also holds), so this
    // runs again after every one.
    if (shortfall() > 0 && cache != nullptr)
      cache->evict(shortfall(), pool);
    if (shortfall() == 0)
      break;
    if (!may_preempt)
      return false;
    std::uint32_t victim = newest_running(table);
    if (victim == slot && table.running_count() == 1) {
      // Alone, with every evictable block evicted: only its own blocks are
      // held, so no preemption can ever make it fit.
      plan.unfittable[plan.unfittable_count++] = slot;
      (void)table.preempt(slot);
      return false;
    }
    drop_from_plan(plan, victim);
    (void)table.preempt(victim);
    plan.preempted[plan.preempted_count++] = victim;
    if (victim == slot)
      return false;
  }
  reserved_ += demand;
  demand_[slot] = demand;
  budget_ -= tokens;
  plan.items[plan.count++] = PlannedItem{slot, tokens};
  return true;
}

std::uint32_t StepPlanner::newest_running(const RequestTable& table) const {
  std::uint32_t newest = RequestTable::no_slot;
  std::uint64_t newest_arrival = 0;
  for (std::uint32_t slot = 0; slot < table.capacity(); ++slot) {
    RequestView v = table.view(slot);
    if (v.state != RequestState::Empty && v.running &&
        (newest == RequestTable::no_slot || v.arrival > newest_arrival)) {
      newest = slot;
      newest_arrival = v.arrival;
    }
  }
  return newest;
}

void StepPlanner::drop_from_plan(StepPlan& plan, std::uint32_t slot) {
  for (std::uint32_t i = 0; i < plan.count; ++i) {
    if (plan.items[i].slot != slot)
      continue;
    budget_ += plan.items[i].tokens;
    reserved_ -= demand_[slot];
    demand_[slot] = 0;
    plan.items[i] = plan.items[--plan.count];
    return;
  }
}

} // namespace caflm

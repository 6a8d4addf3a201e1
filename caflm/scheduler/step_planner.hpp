#pragma once

#include <cstdint>
#include <vector>

#include "caflm/scheduler/request_table.hpp"

namespace caflm {

/// The requests of one step, and what planning had to do to fit them.
struct StepPlan {
  /// Sized for `max_requests` slots, so planning never allocates.
  explicit StepPlan(std::uint32_t max_requests)
    : items(max_requests)
    , preempted(max_requests)
    , unfittable(max_requests) {}

  /// Items sorted by slot. // [count]
  std::vector<PlannedItem> items;
  std::uint32_t count = 0;
  /// Requests preempted to make room (their slots); they wait to recompute.
  std::vector<std::uint32_t> preempted;
  std::uint32_t preempted_count = 0;
  /// Requests that cannot fit in the pool even alone (their slots); the
  /// caller must end them with an error.
  std::vector<std::uint32_t> unfittable;
  std::uint32_t unfittable_count = 0;

  std::uint32_t tokens() const;
};

/// Decides each step under a token budget: decodes first (oldest first),
/// then prefill chunks of running requests, then waiting requests start
/// while fewer than `max_running` run. When blocks run short it evicts
/// blocks only the prefix cache holds, then preempts the newest running
/// request, and evicts again after each preemption: a request is re-queued
/// for recompute, never failed for lack of blocks. Only a request that
/// cannot fit in the pool even alone is reported unfittable.
class StepPlanner {
 public:
  explicit StepPlanner(const SchedulerConfig& config);

  /// Fills `plan` for the next step; may start and preempt requests.
  void plan(RequestTable& table, StepPlan& plan);

 private:
  /// Adds `tokens` of `slot` to the plan once blocks for it are reserved,
  /// preempting newer requests as needed. Returns false when the request
  /// itself was preempted or cannot fit.
  bool reserve(RequestTable& table, StepPlan& plan, std::uint32_t slot, std::uint32_t tokens,
               bool may_preempt);
  /// The running request admitted last, or `RequestTable::no_slot`.
  std::uint32_t newest_running(const RequestTable& table) const;
  void drop_from_plan(StepPlan& plan, std::uint32_t slot);

  SchedulerConfig config_;
  std::vector<std::uint32_t> order_;  // [max_requests] slots by arrival
  std::vector<std::uint32_t> demand_; // [max_requests] blocks reserved per slot
  std::uint32_t budget_ = 0;
  std::uint32_t reserved_ = 0;
};

} // namespace caflm

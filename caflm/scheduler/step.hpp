#pragma once

#include "caflm/scheduler/request_table.hpp"
#include "caflm/scheduler/step_planner.hpp"

namespace caflm {

/// Runs one scheduler step: plan, lower into one ragged batch, one backend
/// launch, check and commit. Afterwards every item whose request awaits a
/// token has its logits in `buffers.logits_row(i)` (or on the backend's
/// device, when it samples there: RaggedBackend::sample); the caller samples and
/// calls `RequestTable::append_token`. On failure no token or position
/// counter changes; requests whose pages were copied this step recompute.
/// When the backend failed, `backend_error` (if given) receives why.
Expected<RaggedBatchReceipt, SchedulerError> run_step(RequestTable& table, StepPlanner& planner,
                                                      RaggedBackend& backend, StepPlan& plan,
                                                      RaggedBatchBuffers& buffers,
                                                      BackendError* backend_error = nullptr);

} // namespace caflm

#include "caflm/scheduler/step.hpp"

namespace caflm {

Expected<RaggedBatchReceipt, SchedulerError> run_step(RequestTable& table, StepPlanner& planner,
                                                      RaggedBackend& backend, StepPlan& plan,
                                                      RaggedBatchBuffers& buffers,
                                                      BackendError* backend_error) {
  planner.plan(table, plan);
  if (auto lowered = table.lower(plan.items.data(), plan.count, buffers); !lowered) {
    table.recover_from_failed_step(buffers);
    return lowered.error();
  }
  if (buffers.item_count == 0)
    return RaggedBatchReceipt{};
  // A backend that samples on its device keeps the logits there.
  float* logits = backend.samples_on_device() ? nullptr : buffers.logits.data();
  auto receipt = backend.execute(buffers.batch(), buffers.outputs.data(), logits);
  if (!receipt) {
    table.recover_from_failed_step(buffers);
    if (backend_error != nullptr)
      *backend_error = receipt.error();
    return SchedulerError::BackendFailed;
  }
  if (auto committed = table.commit(buffers, *receipt); !committed) {
    table.recover_from_failed_step(buffers);
    return committed.error();
  }
  return *receipt;
}

} // namespace caflm

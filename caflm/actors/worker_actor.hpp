#pragma once

#include <memory>

#include <caf/fwd.hpp>

#include "caflm/messages/interfaces.hpp"

namespace caflm {

class InferenceEngine;

/// Spawns the worker that owns `engine` (its runner, request table, KV pool
/// and prefix cache) and runs the step loop, reporting to `core`. It runs
/// detached, on a thread of its own, so its blocking compute never occupies
/// CAF's scheduler threads. Between steps it returns to its mailbox (it
/// sends itself `step`), so adds and cancels are handled promptly.
worker_actor spawn_worker(caf::actor_system& system, std::shared_ptr<InferenceEngine> engine,
                          engine_core_internal_actor core);

} // namespace caflm

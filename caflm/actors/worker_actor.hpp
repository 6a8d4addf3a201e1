#pragma once

#include <chrono>
#include <memory>

#include <caf/fwd.hpp>

#include "caflm/messages/interfaces.hpp"

namespace caflm {

class InferenceEngine;

/// The default WorkerOptions::token_flush_interval. An engine whose step
/// takes longer (any real model on a CPU, most on a GPU) still sends every
/// step; one that steps faster sends a message per sink about once a
/// millisecond instead of once a step, which is what lets the actors carry
/// a million tokens a second, and holds a token at most about this long.
inline constexpr std::chrono::microseconds kDefaultTokenFlushInterval{1000};

/// How a worker streams its tokens.
struct WorkerOptions {
  /// How long a token may wait in the worker for the tokens of later steps
  /// to join it in one message. Zero sends every step's tokens at once: one
  /// TokenBatch per sink per step. Above zero, each sink's chunks collect
  /// over steps until the oldest of them is this old (checked after each
  /// step), the engine runs out of work, or an error or cancel is sent; a
  /// request's tokens then travel as one chunk of several tokens. A
  /// request's first token from the engine and its last chunk never wait.
  /// A model whose step takes longer than this still sends every step,
  /// while a fast one (a GPU, a small model) sends fewer, fuller messages,
  /// so the actors' per-message cost does not cap its tokens per second.
  std::chrono::microseconds token_flush_interval = kDefaultTokenFlushInterval;
};

/// Spawns the worker that owns `engine` (its runner, request table, KV pool
/// and prefix cache) and runs the step loop, reporting to `core`. It runs
/// detached, on a thread of its own, so its blocking compute never occupies
/// CAF's scheduler threads. Between steps it returns to its mailbox (it
/// sends itself `step`), so adds and cancels are handled promptly.
worker_actor spawn_worker(caf::actor_system& system, std::shared_ptr<InferenceEngine> engine,
                          engine_core_internal_actor core, const WorkerOptions& options = {});

} // namespace caflm

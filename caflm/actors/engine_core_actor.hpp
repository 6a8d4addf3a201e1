#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <caf/fwd.hpp>

#include "caflm/actors/worker_actor.hpp"
#include "caflm/engine/engine_options.hpp"
#include "caflm/messages/interfaces.hpp"

namespace caflm {

class InferenceEngine;
class Model;
class Tokenizer;

/// Admission limits of one engine.
struct EngineLimits {
  /// Requests in the worker at once; each counts until its last chunk.
  std::uint32_t max_concurrent = 32;
  /// Requests waiting for the worker; `add` beyond it is refused with
  /// backpressure.
  std::uint32_t queue_capacity = 256;
  /// How long the worker may hold a token for later steps' tokens to join
  /// it in one message (WorkerOptions::token_flush_interval); zero sends
  /// each step's tokens at once.
  std::chrono::microseconds token_flush_interval = kDefaultTokenFlushInterval;
};

/// Why `limits` cannot work (a zero that would admit requests that never
/// run), or nullopt.
std::optional<std::string> validate(const EngineLimits& limits);

/// Spawns an engine core, its worker and its tokenizer around `engine`. The
/// core refuses at once what it can (bad parameters, a full queue), has
/// text prompts tokenized off its own mailbox and then answers `add`
/// (accepted, or refused with a reason), keeps a bounded queue ordered by
/// priority then arrival, drops waiting requests whose sink dies, hands the
/// worker at most `max_concurrent` requests, and answers `get_load`
/// promptly whatever the load. Throws std::invalid_argument for limits
/// that `validate` refuses.
engine_core_actor spawn_engine_core(caf::actor_system& system,
                                    std::shared_ptr<InferenceEngine> engine,
                                    const EngineLimits& limits);

/// Makes an engine core's worker; `spawn_worker` is the real one.
using WorkerFactory =
    std::function<worker_actor(caf::actor_system& system, std::shared_ptr<InferenceEngine> engine,
                               engine_core_internal_actor core)>;

/// As above, with the worker made by `make_worker`: tests put a stand-in
/// there to see exactly what the core hands its worker, and to answer with
/// `done` when they choose.
engine_core_actor spawn_engine_core(caf::actor_system& system,
                                    std::shared_ptr<InferenceEngine> engine,
                                    const EngineLimits& limits, WorkerFactory make_worker);

/// An engine core running `model` on `options.device`, sized by `options` (its
/// request slots at least `limits.max_concurrent`); `tokenizer` is the
/// model's (see load_tokenizer). Throws before spawning anything when the
/// engine cannot be built.
engine_core_actor spawn_engine(caf::actor_system& system, std::shared_ptr<const Model> model,
                               std::shared_ptr<const Tokenizer> tokenizer,
                               const EngineLimits& limits, const EngineOptions& options = {});

/// The engine options `spawn_engine` uses for `limits`: request slots
/// for every concurrent request.
EngineOptions engine_options_for(const EngineLimits& limits, EngineOptions options);

} // namespace caflm

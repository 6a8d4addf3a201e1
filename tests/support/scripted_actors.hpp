#pragma once

// Stand-ins for the actors around the one under test, on CAF's
// deterministic scheduler: a sink that records what it receives, an engine
// whose admissions the test scripts (accept, refuse, or hold the answer to
// give it later) and that records what it is sent, and a coordinator that
// routes to the engines the test lines up.

#include <deque>
#include <memory>
#include <vector>

#include <caf/all.hpp>
#include <caf/scheduler/test_coordinator.hpp>

#include "caflm/messages/interfaces.hpp"
#include "caflm/messages/type_registry.hpp"
#include "tests/support/actor_harness.hpp"

namespace caflm::testing {

/// What a sink received.
struct SinkLog {
  std::vector<TokenChunk> chunks;
  std::vector<InferenceError> errors;

  std::vector<TokenId> tokens() const {
    std::vector<TokenId> out;
    for (const TokenChunk& chunk : chunks)
      out.insert(out.end(), chunk.tokens.begin(), chunk.tokens.end());
    return out;
  }
};

inline token_sink::behavior_type recording_sink(token_sink::pointer, std::shared_ptr<SinkLog> log) {
  return {
      [log](const TokenBatch& batch) {
        log->chunks.insert(log->chunks.end(), batch.chunks.begin(), batch.chunks.end());
      },
      [log](const InferenceError& error) { log->errors.push_back(error); },
  };
}

/// A request as the engine received it.
struct Added {
  GenerateRequest request;
  token_sink sink;
};

/// A `cancel` as the engine received it.
struct Cancelled {
  token_sink sink;
  std::uint64_t id;
  std::uint32_t attempt;
};

/// How a scripted engine answers `add`, and what it was sent.
struct EngineScript {
  enum class Answer { Accept, Refuse, Hold };
  Answer answer = Answer::Accept;
  /// The refusal's code, with Answer::Refuse.
  InferenceErrorCode refusal = InferenceErrorCode::backpressure;
  std::vector<Added> added;
  std::vector<Cancelled> cancels;
  /// Answers to `add` held back, in order, with Answer::Hold, and the
  /// requests they answer.
  std::vector<std::pair<caf::typed_response_promise<Admission>, GenerateRequest>> held;
  LoadReport load;
  /// Whether `get_load` is answered (a stopped process answers nothing).
  bool answer_polls = true;
  int polls = 0;

  bool cancelled(std::uint64_t id, std::uint32_t attempt) const {
    for (const Cancelled& c : cancels)
      if (c.id == id && c.attempt == attempt)
        return true;
    return false;
  }
};

/// Tells a scripted engine to give a held answer: accepted.
using release_atom = caf::atom_constant<caf::atom("t_release")>;

/// A scripted engine as it sees itself; others see an engine_core_actor.
using scripted_engine_actor = engine_core_actor::extend<caf::reacts_to<release_atom, std::size_t>>;

inline scripted_engine_actor::behavior_type
scripted_engine_behavior(scripted_engine_actor::pointer self,
                         std::shared_ptr<EngineScript> script) {
  return {
      [self, script](add_atom, const GenerateRequest& request,
                     const token_sink& sink) -> caf::result<Admission> {
        script->added.push_back(Added{request, sink});
        switch (script->answer) {
        case EngineScript::Answer::Accept:
          return Admission::accept(request.id, request.attempt);
        case EngineScript::Answer::Refuse:
          return Admission::refuse(request.id, request.attempt, script->refusal,
                                   "scripted refusal");
        case EngineScript::Answer::Hold:
          break;
        }
        script->held.emplace_back(self->make_response_promise<Admission>(), request);
        return script->held.back().first;
      },
      [script](get_load_atom) -> caf::result<LoadReport> {
        ++script->polls;
        if (!script->answer_polls)
          return caf::delegated<LoadReport>{}; // never answered
        return script->load;
      },
      [script](cancel_atom, const token_sink& sink, std::uint64_t id, std::uint32_t attempt) {
        script->cancels.push_back(Cancelled{sink, id, attempt});
      },
      [script](release_atom, std::size_t index) {
        auto& [promise, request] = script->held.at(index);
        promise.deliver(Admission::accept(request.id, request.attempt));
      },
  };
}

/// Spawns a scripted engine.
inline engine_core_actor spawn_scripted_engine(caf::actor_system& sys,
                                               std::shared_ptr<EngineScript> script) {
  return caf::actor_cast<engine_core_actor>(sys.spawn(scripted_engine_behavior, std::move(script)));
}

/// Makes a scripted engine give its `index`th held answer: accepted.
inline void release(const engine_core_actor& engine, std::size_t index) {
  caf::anon_send(caf::actor_cast<scripted_engine_actor>(engine), release_atom::value, index);
}

/// Whom a scripted coordinator routes to, and what it was asked.
struct CoordinatorScript {
  /// Handed out in order; the last one again once the rest are used up.
  /// Empty: no engine (an invalid handle).
  std::deque<engine_core_actor> engines;
  /// The engine each route asked to avoid.
  std::vector<engine_core_actor> avoided;
  std::vector<engine_core_actor> registered;
  std::vector<engine_core_actor> deregistered;
};

inline dp_coordinator_actor::behavior_type
scripted_coordinator(dp_coordinator_actor::pointer, std::shared_ptr<CoordinatorScript> script) {
  return {
      [script](route_atom, const GenerateRequest&, const engine_core_actor& avoid) {
        script->avoided.push_back(avoid);
        if (script->engines.empty())
          return engine_core_actor{};
        engine_core_actor next = script->engines.front();
        if (script->engines.size() > 1)
          script->engines.pop_front();
        return next;
      },
      [script](register_atom, const engine_core_actor& engine) {
        script->registered.push_back(engine);
      },
      [script](deregister_atom, const engine_core_actor& engine) {
        script->deregistered.push_back(engine);
      },
      [](stats_atom) { return CoordinatorStats{}; },
  };
}

/// A token chunk as an engine's worker sends it.
inline TokenChunk chunk_of(std::uint64_t id, std::uint32_t attempt, std::uint32_t first_token,
                           std::vector<TokenId> tokens, FinishReason finish = FinishReason::None) {
  TokenChunk chunk;
  chunk.request_id = id;
  chunk.attempt = attempt;
  chunk.first_token = first_token;
  chunk.tokens = std::move(tokens);
  chunk.logprobs.assign(chunk.tokens.size(), -1.0f);
  for (TokenId token : chunk.tokens)
    chunk.text += static_cast<char>('a' + token % 26);
  chunk.finish = finish;
  return chunk;
}

/// An actor system on the deterministic scheduler, with caflm's types.
struct DeterministicSystem {
  DeterministicSystem()
    : sys(init(cfg))
    , sched(dynamic_cast<caf::scheduler::test_coordinator&>(sys.scheduler())) {}

  static caf::actor_system_config& init(caf::actor_system_config& c) {
    add_message_types(c);
    return deterministic(c);
  }

  /// Runs until idle, then lets `time` pass and runs again.
  void run_for(caf::timespan time) {
    sched.run();
    sched.advance_time(time);
    sched.run();
  }

  caf::actor_system_config cfg;
  caf::actor_system sys;
  caf::scheduler::test_coordinator& sched;
};

} // namespace caflm::testing

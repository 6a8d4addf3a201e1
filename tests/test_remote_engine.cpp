// RemoteEngineCoreActor on CAF's deterministic scheduler, with a scripted
// remote engine reached through a stand-in connector: it forwards requests
// under tickets of its own (two local clients with the same id never
// collide), gives up on a slow `add` without dropping the connection and
// cancels it on the remote (also after a late admission), fans chunks back
// out under the clients' ids, and fails every forwarded request over when
// the remote stops answering its probes.
#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <optional>

#include "caflm/actors/remote_engine_core_actor.hpp"
#include "tests/support/scripted_actors.hpp"

using namespace caflm;
using namespace caflm::testing;
using namespace std::chrono_literals;

namespace {

/// Hands out the scripted remote engine for any address.
engine_connector::behavior_type stand_in_connector(engine_connector::pointer,
                                                   engine_core_actor remote) {
  return {
      [remote](connect_atom, const std::string&, std::uint16_t) { return remote; },
  };
}

struct ProxyFixture : DeterministicSystem {
  ProxyFixture() {
    coordinator = sys.spawn(scripted_coordinator, routes);
    remote = spawn_scripted_engine(sys, remote_script);
    options.ping_interval = 250ms;
    options.ping_timeout = 1000ms;
    options.request_timeout = 2000ms;
    proxy = spawn_remote_engine(sys, "10.0.0.7", 7100, coordinator, options,
                                sys.spawn(stand_in_connector, remote));
    sched.run();
  }

  ~ProxyFixture() {
    for (auto& handle : {caf::actor_cast<caf::actor>(proxy), caf::actor_cast<caf::actor>(remote),
                         caf::actor_cast<caf::actor>(coordinator)})
      caf::anon_send_exit(handle, caf::exit_reason::user_shutdown);
    for (auto& sink : sinks)
      caf::anon_send_exit(sink, caf::exit_reason::user_shutdown);
    sched.run();
  }

  token_sink new_sink(std::shared_ptr<SinkLog>& log) {
    log = std::make_shared<SinkLog>();
    sinks.push_back(sys.spawn(recording_sink, log));
    return sinks.back();
  }

  /// Adds `request` through the proxy for `sink`; the admission appears
  /// once the scheduler ran.
  std::shared_ptr<std::optional<Admission>> add(GenerateRequest request, token_sink sink) {
    auto admission = std::make_shared<std::optional<Admission>>();
    sys.spawn([=, proxy = proxy](caf::event_based_actor* self) {
      self->request(proxy, caf::infinite, add_atom::value, request, sink)
          .then([admission](const Admission& answer) { *admission = answer; });
    });
    sched.run();
    return admission;
  }

  /// The remote worker sends the proxy a batch.
  void remote_sends(std::vector<TokenChunk> chunks) {
    caf::anon_send(caf::actor_cast<token_sink>(proxy), TokenBatch{std::move(chunks)});
    sched.run();
  }

  std::shared_ptr<CoordinatorScript> routes = std::make_shared<CoordinatorScript>();
  std::shared_ptr<EngineScript> remote_script = std::make_shared<EngineScript>();
  dp_coordinator_actor coordinator;
  engine_core_actor remote;
  RemoteEngineOptions options;
  engine_core_actor proxy;
  std::vector<token_sink> sinks;
};

GenerateRequest request_of(std::uint64_t id, std::uint32_t attempt = 0) {
  GenerateRequest request;
  request.id = id;
  request.attempt = attempt;
  request.prompt_tokens = {1, 2, 3};
  request.params.max_tokens = 4;
  return request;
}

} // namespace

TEST_CASE("the proxy registers once its remote answers, and forwards under its own tickets") {
  ProxyFixture f;
  REQUIRE(f.routes->registered.size() == 1);
  CHECK(f.routes->registered[0] == f.proxy);

  std::shared_ptr<SinkLog> a_log, b_log;
  token_sink a = f.new_sink(a_log);
  token_sink b = f.new_sink(b_log);
  auto a_admission = f.add(request_of(1), a);
  auto b_admission = f.add(request_of(1), b);
  REQUIRE(a_admission->has_value());
  REQUIRE(b_admission->has_value());
  CHECK((*a_admission)->accepted);
  CHECK((*a_admission)->request_id == 1);
  CHECK((*b_admission)->accepted);

  // Two clients with id 1: two requests on the remote, the proxy their sink.
  const auto& added = f.remote_script->added;
  REQUIRE(added.size() == 2);
  const std::uint64_t ticket_a = added[0].request.id;
  const std::uint64_t ticket_b = added[1].request.id;
  CHECK(ticket_a != ticket_b);
  CHECK(added[0].sink == caf::actor_cast<token_sink>(f.proxy));

  // Chunks come back under each client's own id.
  f.remote_sends({chunk_of(ticket_b, 0, 0, {7}), chunk_of(ticket_a, 0, 0, {5})});
  f.remote_sends({chunk_of(ticket_a, 0, 1, {6}, FinishReason::Length)});
  CHECK(a_log->tokens() == std::vector<TokenId>{5, 6});
  CHECK(b_log->tokens() == std::vector<TokenId>{7});
  CHECK(a_log->chunks.back().request_id == 1);
  CHECK(b_log->chunks.back().request_id == 1);

  // A cancel from b reaches the remote under b's ticket.
  caf::anon_send(f.proxy, cancel_atom::value, b, std::uint64_t{1}, std::uint32_t{0});
  f.sched.run();
  REQUIRE(f.remote_script->cancels.size() == 1);
  CHECK(f.remote_script->cancels[0].id == ticket_b);
  // a finished: its ticket is gone, and a late chunk of it stops it there.
  f.remote_sends({chunk_of(ticket_a, 0, 2, {8})});
  CHECK(a_log->tokens() == std::vector<TokenId>{5, 6});
  CHECK(f.remote_script->cancelled(ticket_a, 0));
}

TEST_CASE("a slow add is given up on and cancelled on the remote; the connection stays up") {
  ProxyFixture f;
  f.remote_script->answer = EngineScript::Answer::Hold;
  std::shared_ptr<SinkLog> log;
  token_sink sink = f.new_sink(log);
  auto admission = f.add(request_of(9, 2), sink);
  CHECK_FALSE(admission->has_value());
  // Past the request timeout (pings keep being answered meanwhile).
  for (int i = 0; i < 9; ++i)
    f.run_for(f.options.ping_interval);
  REQUIRE(admission->has_value());
  CHECK_FALSE((*admission)->accepted);
  CHECK((*admission)->request_id == 9);
  CHECK((*admission)->attempt == 2);
  CHECK((*admission)->error.code == InferenceErrorCode::engine_unavailable);
  const std::uint64_t ticket = f.remote_script->added[0].request.id;
  CHECK(f.remote_script->cancelled(ticket, 2));
  // One slow add is not a lost worker.
  CHECK(f.routes->deregistered.empty());

  // The remote admits after all: told again to drop it; nothing reaches the
  // client.
  const std::size_t cancels = f.remote_script->cancels.size();
  release(f.remote, 0);
  f.sched.run();
  CHECK(f.remote_script->cancels.size() > cancels);
  f.remote_sends({chunk_of(ticket, 2, 0, {4})});
  CHECK(log->chunks.empty());

  // And the connection still serves.
  f.remote_script->answer = EngineScript::Answer::Accept;
  auto next = f.add(request_of(10), sink);
  REQUIRE(next->has_value());
  CHECK((*next)->accepted);
}

TEST_CASE("a remote that stops answering its probes is lost: every forwarded request fails over") {
  ProxyFixture f;
  std::shared_ptr<SinkLog> log;
  token_sink sink = f.new_sink(log);
  REQUIRE(f.add(request_of(3, 1), sink)->value().accepted);
  const std::uint64_t ticket = f.remote_script->added[0].request.id;
  f.remote_sends({chunk_of(ticket, 1, 0, {5})});

  f.remote_script->answer_polls = false; // a SIGSTOPped process
  for (int i = 0; i < 8; ++i)
    f.run_for(f.options.ping_interval);
  REQUIRE(f.routes->deregistered.size() == 1);
  REQUIRE(log->errors.size() == 1);
  CHECK(log->errors[0].request_id == 3);
  CHECK(log->errors[0].attempt == 1);
  CHECK(log->errors[0].code == InferenceErrorCode::engine_unavailable);
  // Should it wake up, it stops working on the request.
  CHECK(f.remote_script->cancelled(ticket, 1));
  // Its late chunks reach nobody.
  f.remote_sends({chunk_of(ticket, 1, 1, {6})});
  CHECK(log->tokens() == std::vector<TokenId>{5});
  // New requests are refused until it is back.
  auto refused = f.add(request_of(4), sink);
  CHECK((*refused)->error.code == InferenceErrorCode::engine_unavailable);
}

TEST_CASE("a local client that goes away has its requests cancelled on the remote") {
  ProxyFixture f;
  std::shared_ptr<SinkLog> log;
  token_sink sink = f.new_sink(log);
  REQUIRE(f.add(request_of(3), sink)->value().accepted);
  REQUIRE(f.add(request_of(4), sink)->value().accepted);
  caf::anon_send_exit(sink, caf::exit_reason::kill);
  f.sched.run();
  CHECK(f.remote_script->cancels.size() == 2);
}

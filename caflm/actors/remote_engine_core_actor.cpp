#include "caflm/actors/remote_engine_core_actor.hpp"

#include <optional>
#include <unordered_map>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/openssl/manager.hpp>

#include "caflm/actors/node_tls.hpp"
#include "caflm/actors/request_key.hpp"
#include "caflm/actors/sink_watch.hpp"
#include "caflm/engine/log.hpp"

namespace caflm {

namespace {

/// A request forwarded to the remote engine under a ticket of the proxy's
/// own: the proxy is its sink there (see "Request identity" in
/// messages.hpp), so requests of different local sinks never collide.
struct Forwarded {
  token_sink sink;
  /// The request's id for its local sink; its attempt is kept as is.
  std::uint64_t id = 0;
  std::uint32_t attempt = 0;
};

struct RemoteState {
  std::string host;
  std::uint16_t port = 0;
  dp_coordinator_actor coordinator;
  RemoteEngineOptions options;
  engine_connector connector;
  engine_core_actor remote;
  bool connected = false;
  bool connecting = false;
  /// Bumped on every loss, so timers and answers of an older connection
  /// are ignored.
  std::uint64_t epoch = 0;
  std::chrono::milliseconds backoff{0};
  /// Why the last connection attempt failed; empty once connected.
  std::string last_connect_error;
  std::uint64_t next_ticket = 1;
  /// Every forwarded request by its ticket, and its ticket by its key.
  std::unordered_map<std::uint64_t, Forwarded> forwarded;
  std::unordered_map<RequestKey, std::uint64_t, RequestKeyHash> tickets;
  /// Admissions the remote has not answered yet, by ticket.
  std::unordered_map<std::uint64_t, caf::typed_response_promise<Admission>> pending_adds;
  /// Local sinks of forwarded requests.
  SinkWatch sinks;

  static inline const char* name = "caflm.remote_engine";

  std::string address() const { return host + ":" + std::to_string(port); }
};

/// The proxy as it sees itself: an engine for local actors, a token sink
/// for the remote worker, and its own timers.
using proxy_actor = remote_engine_actor::extend_with<token_sink>::extend<
    caf::reacts_to<connect_atom, std::uint64_t>, caf::reacts_to<ping_atom, std::uint64_t>,
    caf::reacts_to<add_timeout_atom, std::uint64_t>>;
using proxy_pointer = proxy_actor::stateful_pointer<RemoteState>;

/// A connection error in words an operator reads, not CAF's codes.
std::string describe(proxy_pointer self, const caf::error& error) {
  if (error == caf::sec::cannot_connect_to_node)
    return "the connection was refused (is a caflm worker listening there?)";
  if (error == caf::sec::request_timeout)
    return "it did not answer within " +
           std::to_string(self->state.options.request_timeout.count()) +
           " ms (a stopped or overloaded process, or a filtered port)";
  if (error == caf::sec::request_receiver_down)
    return "it went away";
  return self->system().render(error);
}

token_sink as_sink(proxy_pointer self) {
  return caf::actor_cast<token_sink>(self);
}

std::uint64_t track(proxy_pointer self, const GenerateRequest& request, const token_sink& sink) {
  auto& st = self->state;
  const std::uint64_t ticket = st.next_ticket++;
  st.forwarded.emplace(ticket, Forwarded{sink, request.id, request.attempt});
  st.tickets.emplace(RequestKey{sink.address(), request.id, request.attempt}, ticket);
  st.sinks.add(self, sink);
  return ticket;
}

/// Forgets a forwarded request; returns what the proxy knew of it (an
/// invalid sink when nothing).
Forwarded forget(proxy_pointer self, std::uint64_t ticket) {
  auto& st = self->state;
  auto it = st.forwarded.find(ticket);
  if (it == st.forwarded.end())
    return {};
  Forwarded forwarded = std::move(it->second);
  st.forwarded.erase(it);
  st.tickets.erase(RequestKey{forwarded.sink.address(), forwarded.id, forwarded.attempt});
  st.sinks.remove(self, forwarded.sink.address());
  return forwarded;
}

/// Tells the remote engine to stop a forwarded request.
void cancel_remote(proxy_pointer self, std::uint64_t ticket, std::uint32_t attempt) {
  if (self->state.remote)
    self->send(self->state.remote, cancel_atom::value, as_sink(self), ticket, attempt);
}

/// The answer still owed for a forwarded `add`, taken out of the proxy's
/// books; nullopt once it was given (timed out, lost, abandoned).
std::optional<caf::typed_response_promise<Admission>> take_pending_add(proxy_pointer self,
                                                                       std::uint64_t ticket) {
  auto& pending = self->state.pending_adds;
  auto it = pending.find(ticket);
  if (it == pending.end())
    return std::nullopt;
  auto promise = std::move(it->second);
  pending.erase(it);
  return promise;
}

Admission unavailable(const RemoteState& st, std::uint64_t id, std::uint32_t attempt,
                      const std::string& why) {
  return Admission::refuse(id, attempt, InferenceErrorCode::engine_unavailable,
                           "the remote engine at " + st.address() + " " + why);
}

void schedule_connect(proxy_pointer self) {
  auto& st = self->state;
  st.backoff = std::min(st.options.max_backoff, std::max(st.options.first_backoff, st.backoff * 2));
  self->delayed_send(self, st.backoff, connect_atom::value, st.epoch);
}

/// A connection attempt failed: said once per new reason (an operator
/// learns that the address refuses or is silent), then retried.
void connect_failed(proxy_pointer self, std::string why) {
  auto& st = self->state;
  if (why != st.last_connect_error) {
    log(LogLevel::Warning, "cannot connect to the remote engine at {}: {}; retrying", st.address(),
        why);
    st.last_connect_error = std::move(why);
  }
  schedule_connect(self);
}

/// The remote engine is gone (dead, unreachable or stopped): every request
/// it held fails over, and the proxy leaves the coordinator until it is back.
void lost(proxy_pointer self, const std::string& why) {
  auto& st = self->state;
  if (!st.connected)
    return;
  log(LogLevel::Warning, "lost the remote engine at {} ({}); {} request(s) fail over", st.address(),
      why, st.forwarded.size());
  st.connected = false;
  ++st.epoch;
  self->demonitor(st.remote.address());
  self->send(st.coordinator, deregister_atom::value, caf::actor_cast<engine_core_actor>(self));
  // Admissions not answered yet are refused; admitted requests get an error.
  auto pending_adds = std::move(st.pending_adds);
  st.pending_adds.clear();
  std::vector<std::uint64_t> tickets;
  for (const auto& entry : st.forwarded)
    tickets.push_back(entry.first);
  for (std::uint64_t ticket : tickets) {
    // Should a stopped process wake up, it stops working on these.
    Forwarded forwarded = forget(self, ticket);
    cancel_remote(self, ticket, forwarded.attempt);
    if (auto pending = pending_adds.find(ticket); pending != pending_adds.end())
      pending->second.deliver(unavailable(st, forwarded.id, forwarded.attempt, "was lost"));
    else if (forwarded.sink)
      self->send(forwarded.sink,
                 InferenceError{forwarded.id, forwarded.attempt,
                                InferenceErrorCode::engine_unavailable,
                                "the remote engine at " + st.address() + " was lost"});
  }
  st.remote = engine_core_actor{};
  schedule_connect(self);
}

/// The remote counts as back only once it answers a probe: while the old
/// connection stays open (a stopped process keeps it open), the middleman
/// hands out the cached handle at once, and registering that would route
/// requests to a process that still answers nothing.
void probe(proxy_pointer self, std::uint64_t epoch, engine_core_actor remote) {
  self->request(remote, self->state.options.ping_timeout, get_load_atom::value)
      .then(
          [self, epoch, remote](const LoadReport&) {
            auto& st = self->state;
            st.connecting = false;
            if (epoch != st.epoch || st.connected)
              return;
            st.remote = remote;
            st.connected = true;
            st.backoff = std::chrono::milliseconds{0};
            self->monitor(st.remote);
            self->send(st.coordinator, register_atom::value,
                       caf::actor_cast<engine_core_actor>(self));
            self->send(self, ping_atom::value, st.epoch);
            st.last_connect_error.clear();
            log(LogLevel::Info, "connected to the remote engine at {}", st.address());
          },
          [self, epoch](const caf::error& error) {
            self->state.connecting = false;
            if (epoch == self->state.epoch)
              connect_failed(self, "it did not answer a probe: " + describe(self, error));
          });
}

void connect(proxy_pointer self) {
  auto& st = self->state;
  if (st.connected || st.connecting)
    return;
  st.connecting = true;
  const std::uint64_t epoch = st.epoch;
  self->request(st.connector, st.options.request_timeout, connect_atom::value, st.host, st.port)
      .then(
          [self, epoch](const engine_core_actor& remote) {
            auto& st = self->state;
            if (epoch != st.epoch || st.connected) {
              st.connecting = false;
              return;
            }
            if (!remote) {
              st.connecting = false;
              connect_failed(self, "nothing is published there");
              return;
            }
            probe(self, epoch, remote);
          },
          [self, epoch](const caf::error& error) {
            self->state.connecting = false;
            if (epoch != self->state.epoch)
              return;
            std::string why = describe(self, error);
            if (error == caf::sec::disconnect_during_handshake)
              why += uses_tls(self->home_system())
                         ? " (does the worker use TLS with this node's CA?)"
                         : " (does the worker expect TLS? This node uses none: give "
                           "--tls-cert, --tls-key and --tls-ca)";
            connect_failed(self, why);
          });
}

void ping(proxy_pointer self, std::uint64_t epoch) {
  auto& st = self->state;
  if (!st.connected || epoch != st.epoch)
    return;
  self->request(st.remote, st.options.ping_timeout, get_load_atom::value)
      .then([](const LoadReport&) {},
            [self, epoch](const caf::error& error) {
              if (epoch == self->state.epoch)
                lost(self, "no answer to a liveness probe: " + describe(self, error));
            });
  self->delayed_send(self, st.options.ping_interval, ping_atom::value, epoch);
}

caf::result<Admission> add(proxy_pointer self, GenerateRequest& request, token_sink& sink) {
  auto& st = self->state;
  const std::uint64_t id = request.id;
  const std::uint32_t attempt = request.attempt;
  if (!st.connected)
    return unavailable(st, id, attempt, "is not connected");
  if (!sink || st.tickets.count(RequestKey{sink.address(), id, attempt}) != 0)
    return Admission::refuse(id, attempt, InferenceErrorCode::bad_request,
                             "request " + std::to_string(id) + " attempt " +
                                 std::to_string(attempt) +
                                 " of this sink is already forwarded, or has no sink");
  const std::uint64_t ticket = track(self, request, sink);
  auto promise = self->make_response_promise<Admission>();
  st.pending_adds.emplace(ticket, promise);
  request.id = ticket;
  const std::uint64_t epoch = st.epoch;
  // No timeout on the request itself: CAF would drop a late answer, and a
  // late admission must be cancelled on the remote. The proxy's own timer
  // below gives up on it instead, without dropping the connection: a slow
  // `add` is not a dead worker (the liveness probe decides that).
  self->request(st.remote, caf::infinite, add_atom::value, std::move(request), as_sink(self))
      .then(
          [self, ticket, attempt](Admission& admission) {
            auto promise = take_pending_add(self, ticket);
            if (!promise) {
              // Given up on (timed out, or lost): it must not run there.
              if (admission.accepted)
                cancel_remote(self, ticket, attempt);
              return;
            }
            admission.request_id = admission.error.request_id = self->state.forwarded[ticket].id;
            if (!admission.accepted)
              forget(self, ticket);
            promise->deliver(admission);
          },
          [self, ticket, epoch](const caf::error& error) {
            auto promise = take_pending_add(self, ticket);
            if (!promise)
              return;
            Forwarded forwarded = forget(self, ticket);
            promise->deliver(unavailable(self->state, forwarded.id, forwarded.attempt,
                                         "refused the request: " + describe(self, error)));
            if (epoch == self->state.epoch)
              lost(self, describe(self, error));
          });
  self->delayed_send(self, st.options.request_timeout, add_timeout_atom::value, ticket);
  return promise;
}

/// The remote did not answer a forwarded `add` in time: the local request
/// tries elsewhere, and the remote is told to drop it should it admit it.
void add_timed_out(proxy_pointer self, std::uint64_t ticket) {
  auto& st = self->state;
  auto promise = take_pending_add(self, ticket);
  if (!promise)
    return;
  Forwarded forwarded = forget(self, ticket);
  cancel_remote(self, ticket, forwarded.attempt);
  log(LogLevel::Warning, "the remote engine at {} did not answer add within {} ms", st.address(),
      st.options.request_timeout.count());
  promise->deliver(unavailable(st, forwarded.id, forwarded.attempt,
                               "did not answer within " +
                                   std::to_string(st.options.request_timeout.count()) + " ms"));
}

/// One batch per step from the remote worker; one message per local sink
/// from here.
void fan_out(proxy_pointer self, TokenBatch& batch) {
  auto& st = self->state;
  // Usually one chunk per sink (each request actor is its own): room for
  // that up front, rather than rehashing through the batch.
  std::unordered_map<caf::actor_addr, std::pair<token_sink, TokenBatch>> out;
  out.reserve(batch.chunks.size());
  for (TokenChunk& chunk : batch.chunks) {
    const std::uint64_t ticket = chunk.request_id;
    auto it = st.forwarded.find(ticket);
    if (it == st.forwarded.end()) {
      // Given up on here: it must stop there.
      if (chunk.finish == FinishReason::None)
        cancel_remote(self, ticket, chunk.attempt);
      continue;
    }
    token_sink sink = it->second.sink;
    chunk.request_id = it->second.id;
    if (chunk.finish != FinishReason::None)
      forget(self, ticket);
    auto& entry = out[sink.address()];
    entry.first = sink;
    entry.second.chunks.push_back(std::move(chunk));
  }
  for (auto& [address, entry] : out)
    self->send(entry.first, std::move(entry.second));
}

proxy_actor::behavior_type proxy(proxy_pointer self, std::string host, std::uint16_t port,
                                 dp_coordinator_actor coordinator, RemoteEngineOptions options,
                                 engine_connector connector) {
  auto& st = self->state;
  st.host = std::move(host);
  st.port = port;
  st.coordinator = std::move(coordinator);
  st.options = options;
  st.connector = std::move(connector);
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& st = self->state;
    if (st.connected && down.source == st.remote.address()) {
      lost(self, "its connection closed");
      return;
    }
    // A local sink went away: its remote requests stop.
    std::vector<std::uint64_t> orphans;
    for (const auto& [ticket, forwarded] : st.forwarded)
      if (forwarded.sink.address() == down.source)
        orphans.push_back(ticket);
    for (std::uint64_t ticket : orphans) {
      if (auto pending = st.pending_adds.find(ticket); pending != st.pending_adds.end()) {
        // Nobody waits for this admission any more: answer it now, and the
        // remote drops the request should it admit it (the cancel follows
        // the add on the same connection).
        Forwarded& forwarded = st.forwarded[ticket];
        pending->second.deliver(unavailable(st, forwarded.id, forwarded.attempt, "was abandoned"));
        st.pending_adds.erase(pending);
      }
      Forwarded forwarded = forget(self, ticket);
      cancel_remote(self, ticket, forwarded.attempt);
    }
  });
  self->send(self, connect_atom::value, st.epoch);
  return {
      [self](add_atom, GenerateRequest& request, token_sink& sink) -> caf::result<Admission> {
        return add(self, request, sink);
      },
      [self](get_load_atom) -> caf::result<LoadReport> {
        auto& st = self->state;
        if (!st.connected)
          return caf::make_error(caf::sec::request_receiver_down);
        return self->delegate(st.remote, get_load_atom::value);
      },
      [self](cancel_atom, const token_sink& sink, std::uint64_t id, std::uint32_t attempt) {
        auto& st = self->state;
        auto it = st.tickets.find(RequestKey{sink.address(), id, attempt});
        if (it != st.tickets.end())
          cancel_remote(self, it->second, attempt);
      },
      [self](TokenBatch& batch) { fan_out(self, batch); },
      [self](InferenceError& error) {
        Forwarded forwarded = forget(self, error.request_id);
        if (!forwarded.sink)
          return;
        error.request_id = forwarded.id;
        self->send(forwarded.sink, std::move(error));
      },
      [self](connect_atom, std::uint64_t epoch) {
        if (epoch == self->state.epoch)
          connect(self);
      },
      [self](ping_atom, std::uint64_t epoch) { ping(self, epoch); },
      [self](add_timeout_atom, std::uint64_t ticket) { add_timed_out(self, ticket); },
      [self](status_atom) {
        auto& st = self->state;
        std::string problem = st.last_connect_error;
        if (!st.connected && problem.empty())
          problem = "no answer yet (a stopped or overloaded process, or a filtered port, answers "
                    "nothing)";
        return RemoteEngineStatus{st.connected, std::move(problem)};
      },
  };
}

/// Connects through `middleman`: the plain one, or the OpenSSL module's.
engine_connector::behavior_type middleman_connector(engine_connector::pointer self,
                                                    caf::io::middleman_actor middleman) {
  return {
      [self, middleman](connect_atom, std::string& host,
                        std::uint16_t port) -> caf::result<engine_core_actor> {
        auto promise = self->make_response_promise<engine_core_actor>();
        self->request(middleman, caf::infinite, caf::connect_atom::value, std::move(host), port)
            .then(
                [promise](const caf::node_id&, caf::strong_actor_ptr& ptr,
                          const std::set<std::string>&) mutable {
                  promise.deliver(caf::actor_cast<engine_core_actor>(std::move(ptr)));
                },
                [promise](caf::error& error) mutable { promise.deliver(std::move(error)); });
        return promise;
      },
  };
}

} // namespace

engine_connector spawn_middleman_connector(caf::actor_system& system) {
  caf::io::middleman_actor middleman = uses_tls(system) ? system.openssl_manager().actor_handle()
                                                        : system.middleman().actor_handle();
  return system.spawn(middleman_connector, std::move(middleman));
}

remote_engine_actor spawn_remote_engine(caf::actor_system& system, std::string host,
                                        std::uint16_t port, dp_coordinator_actor coordinator,
                                        const RemoteEngineOptions& options) {
  return spawn_remote_engine(system, std::move(host), port, std::move(coordinator), options,
                             spawn_middleman_connector(system));
}

remote_engine_actor spawn_remote_engine(caf::actor_system& system, std::string host,
                                        std::uint16_t port, dp_coordinator_actor coordinator,
                                        const RemoteEngineOptions& options,
                                        engine_connector connector) {
  return system.spawn(proxy, std::move(host), port, std::move(coordinator), options,
                      std::move(connector));
}

} // namespace caflm

#include "caflm/actors/remote_engine_core_actor.hpp"

#include <unordered_map>

#include <caf/all.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/middleman_actor.hpp>

namespace caflm {

namespace {

struct RemoteState {
  std::string host;
  std::uint16_t port = 0;
  dp_coordinator_actor coordinator;
  RemoteEngineOptions options;
  engine_core_actor remote;
  bool connected = false;
  bool connecting = false;
  /// Bumped on every loss, so timers and answers of an older connection
  /// are ignored.
  std::uint64_t epoch = 0;
  std::chrono::milliseconds backoff{0};
  /// Local sink of every request forwarded to the remote engine.
  std::unordered_map<std::uint64_t, token_sink> sinks;
  std::unordered_map<caf::actor_addr, std::uint32_t> sink_uses;

  static inline const char* name = "caflm.remote_engine";
};

/// The proxy as it sees itself: an engine for local actors, a token sink
/// for the remote worker, and its own timers.
using proxy_actor =
    engine_core_actor::extend_with<token_sink>::extend<caf::reacts_to<connect_atom, std::uint64_t>,
                                                       caf::reacts_to<ping_atom, std::uint64_t>>;
using proxy_pointer = proxy_actor::stateful_pointer<RemoteState>;

void track(proxy_pointer self, std::uint64_t id, const token_sink& sink) {
  auto& st = self->state;
  st.sinks[id] = sink;
  if (st.sink_uses[sink.address()]++ == 0)
    self->monitor(sink);
}

token_sink forget(proxy_pointer self, std::uint64_t id) {
  auto& st = self->state;
  auto it = st.sinks.find(id);
  if (it == st.sinks.end())
    return {};
  token_sink sink = it->second;
  st.sinks.erase(it);
  auto uses = st.sink_uses.find(sink.address());
  if (uses != st.sink_uses.end() && --uses->second == 0) {
    self->demonitor(sink.address());
    st.sink_uses.erase(uses);
  }
  return sink;
}

void schedule_connect(proxy_pointer self) {
  auto& st = self->state;
  st.backoff = std::min(st.options.max_backoff, std::max(st.options.first_backoff, st.backoff * 2));
  self->delayed_send(self, st.backoff, connect_atom::value, st.epoch);
}

/// The remote engine is gone (dead, unreachable or stopped): every request
/// it held fails over, and the proxy leaves the coordinator until it is back.
void lost(proxy_pointer self) {
  auto& st = self->state;
  if (!st.connected)
    return;
  st.connected = false;
  ++st.epoch;
  self->demonitor(st.remote.address());
  self->send(st.coordinator, deregister_atom::value, caf::actor_cast<engine_core_actor>(self));
  std::vector<std::uint64_t> ids;
  for (const auto& entry : st.sinks)
    ids.push_back(entry.first);
  for (std::uint64_t id : ids) {
    // Should a stopped process wake up, it stops working on these.
    self->send(st.remote, cancel_atom::value, id);
    token_sink sink = forget(self, id);
    self->send(sink, InferenceError{id, InferenceErrorCode::engine_unavailable,
                                    "the remote engine at " + st.host + ":" +
                                        std::to_string(st.port) + " was lost"});
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
          },
          [self, epoch](const caf::error&) {
            self->state.connecting = false;
            if (epoch == self->state.epoch)
              schedule_connect(self);
          });
}

void connect(proxy_pointer self) {
  auto& st = self->state;
  if (st.connected || st.connecting)
    return;
  st.connecting = true;
  const std::uint64_t epoch = st.epoch;
  auto mm = self->home_system().middleman().actor_handle();
  self->request(mm, st.options.request_timeout, caf::connect_atom::value, st.host, st.port)
      .then(
          [self, epoch](const caf::node_id&, caf::strong_actor_ptr& ptr,
                        const std::set<std::string>&) {
            auto& st = self->state;
            if (epoch != st.epoch || st.connected) {
              st.connecting = false;
              return;
            }
            if (!ptr) {
              st.connecting = false;
              schedule_connect(self);
              return;
            }
            probe(self, epoch, caf::actor_cast<engine_core_actor>(std::move(ptr)));
          },
          [self, epoch](const caf::error&) {
            self->state.connecting = false;
            if (epoch == self->state.epoch)
              schedule_connect(self);
          });
}

void ping(proxy_pointer self, std::uint64_t epoch) {
  auto& st = self->state;
  if (!st.connected || epoch != st.epoch)
    return;
  self->request(st.remote, st.options.ping_timeout, get_load_atom::value)
      .then([](const LoadReport&) {},
            [self, epoch](const caf::error&) {
              if (epoch == self->state.epoch)
                lost(self);
            });
  self->delayed_send(self, st.options.ping_interval, ping_atom::value, epoch);
}

Admission unavailable(const RemoteState& st, std::uint64_t id) {
  return Admission{id, false,
                   InferenceError{id, InferenceErrorCode::engine_unavailable,
                                  "not connected to " + st.host + ":" + std::to_string(st.port)}};
}

proxy_actor::behavior_type proxy(proxy_pointer self, std::string host, std::uint16_t port,
                                 dp_coordinator_actor coordinator, RemoteEngineOptions options) {
  auto& st = self->state;
  st.host = std::move(host);
  st.port = port;
  st.coordinator = std::move(coordinator);
  st.options = options;
  self->set_down_handler([self](const caf::down_msg& down) {
    auto& st = self->state;
    if (st.connected && down.source == st.remote.address()) {
      lost(self);
      return;
    }
    // A local request actor went away: its remote requests stop.
    std::vector<std::uint64_t> orphans;
    for (const auto& [id, sink] : st.sinks)
      if (sink.address() == down.source)
        orphans.push_back(id);
    for (std::uint64_t id : orphans) {
      forget(self, id);
      if (st.connected)
        self->send(st.remote, cancel_atom::value, id);
    }
  });
  self->send(self, connect_atom::value, st.epoch);
  return {
      [self](add_atom, GenerateRequest& request, token_sink& sink) -> caf::result<Admission> {
        auto& st = self->state;
        const std::uint64_t id = request.id;
        if (!st.connected)
          return unavailable(st, id);
        if (st.sinks.count(id) != 0)
          return Admission{
              id, false,
              InferenceError{id, InferenceErrorCode::bad_request,
                             "request id " + std::to_string(id) + " is already in use"}};
        track(self, id, sink);
        auto promise = self->make_response_promise<Admission>();
        const std::uint64_t epoch = st.epoch;
        self->request(st.remote, st.options.request_timeout, add_atom::value, std::move(request),
                      caf::actor_cast<token_sink>(self))
            .then(
                [self, promise, id](const Admission& admission) mutable {
                  if (!admission.accepted)
                    forget(self, id);
                  promise.deliver(admission);
                },
                [self, promise, id, epoch](const caf::error&) mutable {
                  forget(self, id);
                  promise.deliver(unavailable(self->state, id));
                  if (epoch == self->state.epoch)
                    lost(self);
                });
        return promise;
      },
      [self](get_load_atom) -> caf::result<LoadReport> {
        auto& st = self->state;
        if (!st.connected)
          return caf::make_error(caf::sec::request_receiver_down);
        return self->delegate(st.remote, get_load_atom::value);
      },
      [self](cancel_atom, std::uint64_t id) {
        if (self->state.connected && self->state.sinks.count(id) != 0)
          self->send(self->state.remote, cancel_atom::value, id);
      },
      [self](TokenBatch& batch) {
        // One batch per step from the remote worker; one message per local
        // request actor from here.
        std::unordered_map<caf::actor_addr, std::pair<token_sink, TokenBatch>> out;
        for (TokenChunk& chunk : batch.chunks) {
          auto it = self->state.sinks.find(chunk.request_id);
          if (it == self->state.sinks.end())
            continue; // failed over already
          token_sink sink =
              chunk.finish != FinishReason::None ? forget(self, chunk.request_id) : it->second;
          auto& entry = out[sink.address()];
          entry.first = sink;
          entry.second.chunks.push_back(std::move(chunk));
        }
        for (auto& [address, entry] : out)
          self->send(entry.first, std::move(entry.second));
      },
      [self](InferenceError& error) {
        token_sink sink = forget(self, error.request_id);
        if (sink)
          self->send(sink, std::move(error));
      },
      [self](connect_atom, std::uint64_t epoch) {
        if (epoch == self->state.epoch)
          connect(self);
      },
      [self](ping_atom, std::uint64_t epoch) { ping(self, epoch); },
  };
}

} // namespace

engine_core_actor spawn_remote_engine(caf::actor_system& system, std::string host,
                                      std::uint16_t port, dp_coordinator_actor coordinator,
                                      const RemoteEngineOptions& options) {
  return system.spawn(proxy, std::move(host), port, std::move(coordinator), options);
}

} // namespace caflm

#include "caflm/actors/connection_guard.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>

#include <caf/all.hpp>
#include <caf/io/basp_broker.hpp>
#include <caf/io/middleman.hpp>
#include <caf/io/system_messages.hpp>

#include "caflm/engine/log.hpp"
#include "caflm/messages/atoms.hpp"

namespace caflm {

namespace {

using caf::io::basp_broker;
using caf::io::connection_handle;
using Clock = std::chrono::steady_clock;

/// What the guard knows beyond the broker; touched only on the middleman's
/// event loop.
struct GuardState {
  ConnectionLimits limits;
  /// Each open connection: when it was first seen, and its peer (kept for
  /// the log once the socket is gone).
  struct Connection {
    Clock::time_point opened;
    std::string peer;
  };
  std::unordered_map<connection_handle, Connection> open;
};

std::string peer_of(basp_broker& broker, connection_handle hdl) {
  std::string address = broker.remote_addr(hdl);
  return address.empty() ? "a peer" : address + ":" + std::to_string(broker.remote_port(hdl));
}

/// Closes `hdl` as BASP closes a connection it rejects, and says why; a
/// connect request waiting on it fails with `code`.
void drop(basp_broker& broker, GuardState& state, connection_handle hdl, const std::string& why,
          caf::sec code) {
  log(LogLevel::Warning, "closed the connection of {}: {}", peer_of(broker, hdl), why);
  if (broker.ctx.count(hdl) != 0)
    broker.connection_cleanup(hdl, code);
  broker.close(hdl);
  state.open.erase(hdl);
}

/// Whether `hdl` finished CAF's handshake: the client side records the
/// peer's node in the connection's context, the server side only in the
/// routing table.
bool handshaken(basp_broker& broker, connection_handle hdl) {
  auto context = broker.ctx.find(hdl);
  if (context != broker.ctx.end() && context->second.id != caf::none)
    return true;
  return broker.instance.tbl().lookup_direct(hdl) != caf::none;
}

/// Big-endian, as CAF's binary serializer writes integers.
std::uint32_t read_u32(const char* p) {
  const auto* b = reinterpret_cast<const unsigned char*>(p);
  return std::uint32_t{b[0]} << 24 | std::uint32_t{b[1]} << 16 | std::uint32_t{b[2]} << 8 |
         std::uint32_t{b[3]};
}

/// Why the BASP header in `buf` must not be read on, or empty.
std::string check_header(const std::vector<char>& buf, const ConnectionLimits& limits) {
  if (buf.size() != caf::io::basp::header_size)
    return "a frame header of " + std::to_string(buf.size()) + " bytes";
  // The operation is the header's first byte; heartbeat is the last known.
  const auto operation = static_cast<unsigned char>(buf[0]);
  if (operation > static_cast<unsigned char>(caf::io::basp::message_type::heartbeat))
    return "a frame of unknown type " + std::to_string(operation);
  const std::uint32_t payload = read_u32(buf.data() + 4);
  if (payload > limits.max_frame_bytes)
    return "it announced a " + std::to_string(payload) + "-byte message; at most " +
           std::to_string(limits.max_frame_bytes) + " are accepted";
  return {};
}

/// Why a new connection must be refused, or empty.
std::string check_new_connection(basp_broker& broker, connection_handle hdl,
                                 const ConnectionLimits& limits) {
  const std::vector<connection_handle> open = broker.connections();
  if (open.size() > limits.max_connections)
    return std::to_string(open.size() - 1) + " connections are open, the most accepted";
  const std::string address = broker.remote_addr(hdl);
  const auto same_peer = std::count_if(open.begin(), open.end(), [&](connection_handle other) {
    return other != hdl && broker.remote_addr(other) == address;
  });
  if (static_cast<std::uint64_t>(same_peer) >= limits.max_connections_per_peer)
    return std::to_string(same_peer) + " connections from " + address +
           " are open, the most accepted from one peer";
  return {};
}

/// Puts a behavior in front of the broker's own that checks new
/// connections and frame headers, then hands every message on unchanged.
void install(basp_broker& broker, std::shared_ptr<GuardState> state) {
  caf::behavior original = broker.bhvr_stack().back();
  basp_broker* self = &broker;
  auto forward = [self, original]() mutable {
    original(self->current_mailbox_element()->content());
  };
  caf::message_handler guarded{
      [self, state, forward](caf::io::new_connection_msg& msg) mutable {
        const std::string refusal = check_new_connection(*self, msg.handle, state->limits);
        if (!refusal.empty()) {
          drop(*self, *state, msg.handle, refusal, caf::sec::cannot_connect_to_node);
          return;
        }
        state->open.emplace(msg.handle,
                            GuardState::Connection{Clock::now(), peer_of(*self, msg.handle)});
        forward();
      },
      [self, state, forward](caf::io::new_data_msg& msg) mutable {
        auto context = self->ctx.find(msg.handle);
        const bool header =
            context == self->ctx.end() || context->second.cstate != caf::io::basp::await_payload;
        if (header) {
          const std::string refusal = check_header(msg.buf, state->limits);
          if (!refusal.empty()) {
            drop(*self, *state, msg.handle, refusal, caf::sec::malformed_basp_message);
            return;
          }
        }
        forward();
      },
      [self, state, forward](caf::io::connection_closed_msg& msg) mutable {
        auto known = state->open.find(msg.handle);
        if (known != state->open.end() && !handshaken(*self, msg.handle))
          log(LogLevel::Warning,
              "the connection of {} ended before its handshake (no certificate of this "
              "cluster, or not a caflm node)",
              known->second.peer);
        if (known != state->open.end())
          state->open.erase(known);
        forward();
      },
  };
  broker.become(caf::keep_behavior, caf::behavior{guarded.or_else(original)});
}

/// Drops connections that never finished their handshake, and peers that
/// went silent; logs those the broker closed on its own (a malformed
/// message, a protocol mismatch: a peer that closes sends no message).
void sweep(basp_broker& broker, GuardState& state) {
  const Clock::time_point now = Clock::now();
  const auto broker_now = broker.clock().now();
  std::unordered_map<connection_handle, GuardState::Connection> still_open;
  for (connection_handle hdl : broker.connections()) {
    auto known = state.open.find(hdl);
    GuardState::Connection connection = known != state.open.end()
                                            ? std::move(known->second)
                                            : GuardState::Connection{now, peer_of(broker, hdl)};
    if (known != state.open.end())
      state.open.erase(known);
    auto context = broker.ctx.find(hdl);
    const bool done = handshaken(broker, hdl);
    if (!done && now - connection.opened > state.limits.handshake_timeout)
      drop(broker, state, hdl, "no handshake within the timeout", caf::sec::connection_timeout);
    else if (done && context != broker.ctx.end() &&
             broker_now - context->second.last_seen > state.limits.idle_timeout)
      drop(broker, state, hdl, "silent for longer than the idle timeout",
           caf::sec::connection_timeout);
    else
      still_open.emplace(hdl, std::move(connection));
  }
  for (const auto& [hdl, connection] : state.open)
    log(LogLevel::Warning,
        "the middleman closed the connection of {} (a malformed message or a protocol mismatch)",
        connection.peer);
  state.open = std::move(still_open);
}

using guard_actor = caf::typed_actor<caf::reacts_to<poll_atom>>;

guard_actor::behavior_type guard(guard_actor::pointer self, std::shared_ptr<GuardState> state) {
  auto& middleman = self->home_system().middleman();
  caf::actor basp = middleman.named_broker<basp_broker>(caf::atom("BASP"));
  middleman.run_later([basp, state] {
    install(*static_cast<basp_broker*>(caf::actor_cast<caf::abstract_actor*>(basp)), state);
  });
  self->send(self, poll_atom::value);
  const auto period = std::min(state->limits.handshake_timeout, state->limits.idle_timeout) / 4;
  return {
      [self, basp, state, period](poll_atom) {
        self->home_system().middleman().run_later([basp, state] {
          sweep(*static_cast<basp_broker*>(caf::actor_cast<caf::abstract_actor*>(basp)), *state);
        });
        self->delayed_send(self, period, poll_atom::value);
      },
  };
}

} // namespace

std::optional<std::string> validate(const ConnectionLimits& limits) {
  if (limits.max_frame_bytes == 0 || limits.max_connections == 0 ||
      limits.max_connections_per_peer == 0)
    return std::string("connection limits must be at least 1");
  if (limits.handshake_timeout.count() <= 0 || limits.idle_timeout.count() <= 0)
    return std::string("connection timeouts must be positive");
  return std::nullopt;
}

void start_connection_guard(caf::actor_system& system, const ConnectionLimits& limits) {
  if (auto problem = validate(limits))
    throw std::invalid_argument(*problem);
  // One guard per system: a second would wrap the broker twice.
  static std::mutex mutex;
  static std::set<const caf::actor_system*> guarded;
  {
    std::lock_guard<std::mutex> lock{mutex};
    if (!guarded.insert(&system).second)
      return;
  }
  auto state = std::make_shared<GuardState>();
  state->limits = limits;
  system.spawn<caf::hidden>(guard, std::move(state));
}

} // namespace caflm

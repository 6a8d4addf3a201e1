#pragma once

#include <caf/atom.hpp>

namespace caflm {

// Message tags of caflm's actor protocol (at most 10 characters each).

/// Submit a request to an engine.
using add_atom = caf::atom_constant<caf::atom("lm_add")>;
/// Cancel a request by id.
using cancel_atom = caf::atom_constant<caf::atom("lm_cancel")>;
/// Ask an engine for its LoadReport.
using get_load_atom = caf::atom_constant<caf::atom("lm_getload")>;
/// Ask the coordinator for an engine for a request.
using route_atom = caf::atom_constant<caf::atom("lm_route")>;
/// Add an engine to, or remove it from, the coordinator.
using register_atom = caf::atom_constant<caf::atom("lm_reg")>;
using deregister_atom = caf::atom_constant<caf::atom("lm_dereg")>;
/// Ask the coordinator for its statistics.
using stats_atom = caf::atom_constant<caf::atom("lm_stats")>;
/// A worker runs its next step (sent to itself).
using step_atom = caf::atom_constant<caf::atom("lm_step")>;
/// A worker finished a request (worker to engine core).
using done_atom = caf::atom_constant<caf::atom("lm_done")>;
/// The coordinator polls its engines' load (sent to itself).
using poll_atom = caf::atom_constant<caf::atom("lm_poll")>;
/// Liveness probe and reconnection timer of a remote engine proxy.
using ping_atom = caf::atom_constant<caf::atom("lm_ping")>;
using connect_atom = caf::atom_constant<caf::atom("lm_connect")>;
/// Resubmit a request (a request actor's timer).
using retry_atom = caf::atom_constant<caf::atom("lm_retry")>;
/// Timers of a request actor: an engine's answer to `add` is overdue, and
/// the request's deadline.
using admission_timeout_atom = caf::atom_constant<caf::atom("lm_admtime")>;
using deadline_atom = caf::atom_constant<caf::atom("lm_dead")>;
/// Ask a remote engine's proxy how its connection stands.
using status_atom = caf::atom_constant<caf::atom("lm_status")>;
/// Tokenize a prompt (engine core to its tokenizer).
using tokenize_atom = caf::atom_constant<caf::atom("lm_tok")>;
/// A timer of a remote engine proxy: the remote's answer to a forwarded
/// `add` is overdue.
using add_timeout_atom = caf::atom_constant<caf::atom("lm_addtime")>;

} // namespace caflm

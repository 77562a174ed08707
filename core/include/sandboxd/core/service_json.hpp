// One JSON rendering per result of SandboxService (sandbox_service.hpp), used by every door:
// sandboxctl's --json output and `sandboxctl serve`'s answers are these documents, so they are
// the same by construction. Each returns one pretty-printed JSON object, without a trailing
// newline.
#pragma once

#include <optional>
#include <string>

#include "sandboxd/core/lifecycle_events.hpp"
#include "sandboxd/core/sandbox_service.hpp"
#include "sandboxd/core/usage_sampler.hpp"

namespace sandboxd::core {

// {sandbox_id, sandbox_url, path, user_id, thread_id}
std::string to_json(const Acquired& acquired);
// {from_sandbox_id, sandboxes: [as above, one per new conversation]}
std::string to_json(const Forked& forked);
// {sandbox_id, sandbox_url, state, user_id, thread_id, last_activity|released_at,
//  container_name}
std::string to_json(const SandboxView& sandbox);
// The sandbox's members, then "result": "released" | "already warm".
std::string to_json(const Released& released);
// The sandbox's members, then "result": "destroyed".
std::string to_json(const Destroyed& destroyed);
// {state_dir, owner_id, backend_error, sandboxes: [{sandbox_id, state, tracked, running,
//  sandbox_url, user_id, thread_id, since, lease: {owner_id, state, ours, expires_at} |
//  null, lease_error?}]}
std::string to_json(const Listing& listing);
// {adopted, skipped, deferred, found}
std::string to_json(const ReconcileReport& report);
// {idle_timeout, reaped: [ids], active, warm}
std::string to_json(const Reaped& reaped);
// {events: [{sequence, time, kind, sandbox_id, user_id, thread_id, reason}], last, dropped}
// (user_id and thread_id null when the event has no conversation)
std::string to_json(const LifecycleEventPage& page);
// One of them: {sequence, time, kind, sandbox_id, user_id, thread_id, reason} (an event stream's
// data line).
std::string to_json(const LifecycleEvent& event);
// {status: "ok", owner_id, active, warm, uses_thread_data_mounts}
std::string to_json(const Health& health);
// {name, user_id, thread_id, sandbox_id, network_policy, created_at, expires_at (null: never),
//  directory_bytes, image_bytes, bytes}
std::string to_json(const SnapshotRecord& snapshot);
// {snapshots: [as above], bytes}
std::string to_json(const std::vector<SnapshotRecord>& snapshots);
// The operator page's usage figures (GET /ui/api/usage).
std::string to_json(const UsageView& view);
// {"error": {"code"?, "kind", "message"}}: `code` is the CLI's exit code, absent over HTTP.
std::string error_json(ErrorKind kind, const std::string& message,
                       std::optional<int> exit_code = std::nullopt);

}  // namespace sandboxd::core

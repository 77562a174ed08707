#include "sandboxd/core/sandbox_service.hpp"

#include <chrono>
#include <set>

#include "sandboxd/core/paths.hpp"

namespace sandboxd::core {
namespace {

// Runs a provider call; what it throws becomes a ServiceError of its kind.
template <typename Call>
auto typed(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const ServiceError&) {
    throw;
  } catch (const std::exception& e) {
    throw as_service_error(e, ErrorKind::unavailable);  // what else fails is the backend
  }
}

void validate_id(const std::string& id) {
  try {
    validate_sandbox_id(id);
  } catch (const std::invalid_argument& e) {
    throw ServiceError(ErrorKind::invalid_argument, std::string("sandbox id: ") + e.what());
  }
}

}  // namespace

double wall_clock_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

SandboxView SandboxView::of(const TrackedSandbox& tracked) {
  SandboxView view;
  view.sandbox_id = tracked.info.sandbox_id;
  view.sandbox_url = tracked.info.sandbox_url;
  view.state = tracked.state;
  if (tracked.conversation) {
    view.user_id = tracked.conversation->user_id;
    view.thread_id = tracked.conversation->thread_id;
  }
  view.container_name = tracked.info.container_name;
  view.since = tracked.since;
  view.last_acquire = tracked.last_acquire;
  return view;
}

SandboxService::SandboxService(Provider& provider, std::string state_dir, std::string where)
    : provider_(provider), state_dir_(std::move(state_dir)), where_(std::move(where)) {}

TrackedSandbox SandboxService::require_tracked(const std::string& id) const {
  auto tracked = provider_.find(id);
  if (!tracked) {
    throw ServiceError(ErrorKind::not_found, "sandbox '" + id + "' is not tracked by " + where_ +
                                                 " (sandboxctl list shows what is)");
  }
  return *tracked;
}

std::string SandboxService::lease_holder(const std::string& id) const {
  try {
    if (auto lease = provider_.ownership()->inspect(id)) {
      return lease->owner_id + (lease->destroying ? " (tearing it down)" : "");
    }
    return "nobody";
  } catch (const std::exception& e) {
    return std::string("unknown (") + e.what() + ")";
  }
}

Acquired SandboxService::acquire(const AcquireRequest& request) {
  try {
    if (request.user_id) validate_user_id(*request.user_id);
  } catch (const std::invalid_argument& e) {
    throw ServiceError(ErrorKind::invalid_argument, request.user_label + ": " + e.what());
  }
  try {
    if (request.thread_id) validate_thread_id(*request.thread_id);
  } catch (const std::invalid_argument& e) {
    throw ServiceError(ErrorKind::invalid_argument, request.thread_label + ": " + e.what());
  }
  refuse_unservable_modes();
  const AcquireResult result = typed([&] {
    if (request.from_snapshot) {
      return provider_.restore(request.thread_id, request.user_id, *request.from_snapshot);
    }
    return request.cancellation
               ? provider_.acquire_traced(request.thread_id, request.user_id, *request.cancellation)
               : provider_.acquire_traced(request.thread_id, request.user_id);
  });
  return acquired_of(result);
}

Acquired SandboxService::acquired_of(const AcquireResult& result) {
  Acquired acquired;
  acquired.sandbox_id = result.sandbox_id;
  acquired.path = result.path;
  if (result.info) {
    address(*result.info, acquired.sandbox_url, acquired.request_headers);
    if (egress_ != nullptr) egress_->attach_if_needed(*result.info);
  }
  if (result.conversation) {
    acquired.user_id = result.conversation->user_id;
    acquired.thread_id = result.conversation->thread_id;
  }
  return acquired;
}

void SandboxService::refuse_unservable_modes() const {
  // Refused before anything is made, with the sentence of the mode configured.
  if (egress_ == nullptr && provider_.configured_network_policy() == "allowlist") {
    throw ServiceError(
        ErrorKind::config,
        "network mode allowlist sends a sandbox's egress through the host's proxy and reaches "
        "its API only through the host's relay, which need a long-running host that runs them: "
        "use `sandboxctl serve` or sandboxd-provisioner");
  }
  if (relay_ == nullptr && provider_.makes_namespaced_sandboxes()) {
    // Nobody would serve the URL it could hand out.
    throw ServiceError(
        ErrorKind::config,
        "the backend makes sandboxes without a host address (network mode isolated, or open "
        "with publish false): they are reached only through a relay, which needs a "
        "long-running host; use `sandboxctl serve`, sandboxd-provisioner or a gateway that "
        "embeds the core and runs its Relay");
  }
}

Forked SandboxService::fork(const std::string& id, const std::vector<std::string>& thread_ids,
                            std::optional<std::size_t> count) {
  refuse_unservable_modes();
  const Provider::Forked made = typed([&] { return provider_.fork(id, thread_ids, count); });
  Forked forked;
  forked.from_sandbox_id = made.from_sandbox_id;
  for (const AcquireResult& result : made.sandboxes)
    forked.sandboxes.push_back(acquired_of(result));
  return forked;
}

void SandboxService::address(const SandboxInfo& info, std::string& url,
                             std::map<std::string, std::string>& headers) const {
  if (relay_ != nullptr && provider_.namespaced(info)) {
    url = relay_->url_for(info.sandbox_id);
    headers = relay_->headers_for(info);
    return;
  }
  url = info.sandbox_url;
  headers = info.request_headers;
}

SandboxView SandboxService::view_of(const TrackedSandbox& tracked) const {
  SandboxView view = SandboxView::of(tracked);
  std::map<std::string, std::string> headers;  // not shown in views
  address(tracked.info, view.sandbox_url, headers);
  return view;
}

Released SandboxService::release(const std::string& id) {
  validate_id(id);
  const TrackedSandbox before = require_tracked(id);
  const ReleaseOutcome outcome = typed([&] { return provider_.release(id); });
  if (outcome == ReleaseOutcome::lease_lost) {
    throw ServiceError(ErrorKind::conflict,
                       "sandbox " + id + " was released, but its lease belongs to " +
                           lease_holder(id) +
                           " now; it keeps running and is no longer tracked here");
  }
  if (outcome == ReleaseOutcome::not_tracked) require_tracked(id);  // gone meanwhile
  auto after = provider_.find(id);
  if (!after) require_tracked(id);
  return {view_of(*after), before.released() ? "already warm" : "released"};
}

Destroyed SandboxService::destroy(const std::string& id) {
  validate_id(id);
  const TrackedSandbox before = require_tracked(id);
  const DestroyOutcome outcome = typed([&] { return provider_.destroy(id); });
  switch (outcome) {
    case DestroyOutcome::destroyed:
      if (egress_ != nullptr) egress_->forget(id);
      return {view_of(before)};
    case DestroyOutcome::refused:
      throw ServiceError(ErrorKind::conflict, "refusing to destroy sandbox " + id +
                                                  ": its lease is held by " + lease_holder(id));
    case DestroyOutcome::skipped:
      throw ServiceError(ErrorKind::conflict,
                         "sandbox " + id + " is already being torn down by " + where_);
    case DestroyOutcome::not_tracked:
      break;
  }
  require_tracked(id);
  return {view_of(before)};
}

SandboxView SandboxService::get(const std::string& id) {
  validate_id(id);
  provider_.get(id);  // an active sandbox's last activity is refreshed
  return view_of(require_tracked(id));
}

Listing SandboxService::list() {
  Listing listing;
  listing.state_dir = state_dir_;
  const RegistrySnapshot registry = provider_.export_registry();
  std::optional<std::vector<SandboxInfo>> running;
  try {
    running = provider_.backend()->list_running();
  } catch (const std::exception& e) {
    listing.backend_error = e.what();
  }
  std::set<std::string> running_ids, tracked_ids;
  if (running) {
    for (const auto& info : *running) running_ids.insert(info.sandbox_id);
  }
  for (const auto& t : registry.sandboxes) {
    tracked_ids.insert(t.info.sandbox_id);
    const SandboxView view = view_of(t);
    ListedSandbox row{view.sandbox_id,
                      view.state,
                      view.sandbox_url,
                      view.user_id.value_or(""),
                      view.thread_id.value_or(""),
                      std::nullopt,
                      view.since,
                      std::nullopt,
                      "",
                      view.last_acquire};
    if (running) row.running = running_ids.count(t.info.sandbox_id) > 0;
    if (view.user_id && view.thread_id) {
      row.disk = provider_.conversation_storage(*view.user_id, *view.thread_id);
    }
    listing.sandboxes.push_back(std::move(row));
  }
  if (running) {
    for (const auto& info : *running) {
      if (tracked_ids.count(info.sandbox_id)) continue;
      listing.sandboxes.push_back(
          ListedSandbox{info.sandbox_id, std::nullopt, info.sandbox_url, info.user_id.value_or(""),
                        info.thread_id.value_or(""), true, std::nullopt, std::nullopt, ""});
    }
  }
  // Archived conversations: a snapshot and no container (a restore in flight is tracked).
  std::vector<SnapshotRecord> records;
  try {
    records = provider_.snapshots(std::nullopt);
  } catch (const std::exception& e) {
    listing.snapshot_error = e.what();
  }
  for (const SnapshotRecord& record : records) {
    if (!is_archive(record) || tracked_ids.count(record.sandbox_id)) continue;
    ListedSandbox row;
    row.id = record.sandbox_id;
    row.user = record.user_id;
    row.thread = record.thread_id;
    row.running = false;
    row.since = record.created_at;
    row.archived_bytes = record.bytes();
    row.disk = provider_.conversation_storage(record.user_id, record.thread_id);
    listing.sandboxes.push_back(std::move(row));
  }
  OwnershipStore& store = *provider_.ownership();
  for (auto& row : listing.sandboxes) {
    if (row.archived_bytes) continue;  // no container, no lease
    try {
      row.lease = store.inspect(row.id);
    } catch (const std::exception& e) {
      row.lease_error = e.what();
    }
  }
  listing.owner_id = provider_.owner_id();
  listing.wall_clock_leases = store.supports_cross_process();
  return listing;
}

SnapshotRecord SandboxService::snapshot(const std::string& id,
                                        const std::optional<std::string>& name) {
  validate_id(id);
  return typed([&] { return provider_.snapshot(id, name); });
}

std::vector<SnapshotRecord> SandboxService::snapshots(const std::optional<std::string>& user_id) {
  return typed([&] { return provider_.snapshots(user_id); });
}

SnapshotRecord SandboxService::delete_snapshot(const std::string& user_id,
                                               const std::string& name) {
  return typed([&] { return provider_.delete_snapshot(user_id, name); });
}

ReconcileReport SandboxService::reconcile() {
  const ReconcileReport report = typed([&] { return provider_.reconcile_orphans(); });
  if (!report.listed) {
    throw ServiceError(ErrorKind::unavailable,
                       "the backend could not list its containers (see the log line above); "
                       "nothing was adopted");
  }
  return report;
}

Reaped SandboxService::reap(int idle_timeout) {
  Reaped reaped;
  reaped.idle_timeout = idle_timeout;
  {
    // Archived before the reaper would stop them (archive_after_seconds is the shorter wait).
    const auto before = provider_.export_registry();
    typed([&] { provider_.archive_idle_released(); });  // logs its own failures
    for (const auto& t : before.sandboxes) {
      if (t.released() && !provider_.find(t.info.sandbox_id)) {
        reaped.archived.push_back(t.info.sandbox_id);
      }
    }
  }
  if (idle_timeout > 0) {
    const auto before = provider_.export_registry();
    typed([&] { provider_.cleanup_idle_sandboxes(idle_timeout); });  // logs its own failures
    typed([&] { provider_.stop_layers_past_bound(); });              // likewise
    for (const auto& t : before.sandboxes) {
      if (!provider_.find(t.info.sandbox_id)) reaped.reaped.push_back(t.info.sandbox_id);
    }
  }
  {
    const auto before = provider_.export_registry();
    typed([&] { provider_.pause_idle_warm(); });  // logs its own failures
    for (const auto& t : before.sandboxes) {
      if (t.state != SandboxState::warm) continue;
      const auto now = provider_.find(t.info.sandbox_id);
      if (now && now->state == SandboxState::paused)
        reaped.newly_paused.push_back(t.info.sandbox_id);
    }
  }
  const auto left = provider_.counts();
  reaped.active = left.active;
  reaped.warm = left.warm;
  reaped.paused = left.paused;
  return reaped;
}

Health SandboxService::health() {
  const auto counts = provider_.counts();
  return {provider_.owner_id(),
          counts.active,
          counts.warm,
          counts.paused,
          counts.creating,
          counts.reserved_for_teardown,
          provider_.uses_thread_data_mounts(),
          provider_.configured_network_policy()};
}

}  // namespace sandboxd::core

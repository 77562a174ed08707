// DeerFlow's provisioner API (design §10.8) over any SandboxBackend: what each route answers,
// independent of the HTTP server that carries it (http_binding.hpp). Sandboxes are the
// backend's; the service keeps no state of its own, so a restart loses nothing.
//
// Thread model: every method may run on several HTTP worker threads at once. The settings are
// immutable after construction, the backend is thread-safe (backend.hpp), and backend calls go
// through `calls_` (bounded_calls.hpp), which owns the only mutable state.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bounded_calls.hpp"
#include "extra_mount_validation.hpp"
#include "sandboxd/backend.hpp"
#include "sandboxd/core/backend_relay_targets.hpp"
#include "sandboxd/core/egress_host.hpp"
#include "sandboxd/core/lifecycle_events.hpp"
#include "sandboxd/core/sandbox_service.hpp"
#include "sandboxd/core/usage_sampler.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxd::provisioner {

struct ServiceSettings {
  std::string api_key;  // empty: every /api/* request is refused
  StateRoots roots;
  int mount_contract_version = kSandboxMountContractVersion;  // 0: answer as a legacy one
  double backend_timeout_seconds = 120.0;
};

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // Retry-After for 429
};

// A FastAPI-shaped error: {"detail": message}, the message JSON-escaped.
Reply detail(int status, const std::string& message);

// What a backend call threw, as the doors answer it: the status from the core's one table of
// error kinds (apps/door/error_status.hpp; a backend failure is 502, a capacity refusal such
// as a cluster quota 429 with Retry-After), the body DeerFlow's {"detail": prefix + message}.
Reply failure(const std::string& prefix, const std::exception& error);

class ProvisionerService {
 public:
  ProvisionerService(ServiceSettings settings, std::shared_ptr<SandboxBackend> backend,
                     std::shared_ptr<Logger> logger);
  ~ProvisionerService();  // waits for backend calls still running

  // Constant-time comparison with the configured key; an empty configured key matches nothing.
  bool authorized(std::string_view presented_key) const;
  bool legacy() const { return settings_.mount_contract_version == 0; }

  Reply health() const;
  Reply capabilities() const;                     // 404 in legacy mode, as an old provisioner
  Reply create(std::string_view body);            // POST /api/sandboxes
  Reply get(const std::string& sandbox_id);       // GET /api/sandboxes/{id}
  Reply instance(const std::string& sandbox_id);  // GET /api/sandboxes/{id}/instance
  Reply remove(const std::string& sandbox_id);    // DELETE /api/sandboxes/{id}
  // GET /api/sandboxes/{id}/usage: what the sandbox uses now, read from the backend's
  // SandboxUsage on this request (the caller samples: a gateway's serve over this provisioner,
  // every few seconds while its page is open): {cpu_seconds, host_cpu_seconds, online_cpus,
  // memory_bytes, memory_limit_bytes, pids}, a figure the engine did not give left out. 501
  // when the backend cannot tell, 404 for a sandbox it does not run.
  Reply usage(const std::string& sandbox_id);
  Reply list();  // GET /api/sandboxes

  // The operator page (apps/door/ui_page.hpp). Its table, in serve's shape:
  // {sandboxes: [{sandbox_id, state: "running", user_id, thread_id, since}]}, `since` the
  // creation time (null when the backend does not know it); its counts, {status, running}.
  Reply ui_sandboxes();
  Reply ui_health();
  // Each running sandbox's CPU, memory and processes as last sampled, in serve's shape
  // (core::to_json(UsageView)); answered from the kept figures, never the engine. A sampler
  // thread reads them while someone asks (start_usage_sampling; the backend's SandboxUsage).
  Reply ui_usage();
  void start_usage_sampling() { usage_.start(); }
  // What happened here: creates (created, claimed from a slot, reused when it existed) and
  // deletes (destroyed); thread-safe, in memory, the last 1,000.
  const std::shared_ptr<core::LifecycleEventLog>& events() const { return events_; }

  // Sandboxes the backend makes namespaced (network mode isolated) are answered with
  // `relay`'s URL and `request_headers`, and `targets` forgets a removed one. Set before
  // serving; both outlive the service's requests.
  void set_relay(const core::SandboxAddressing* relay, core::BackendRelayTargets* targets) {
    relay_ = relay;
    relay_targets_ = targets;
  }

  // Network mode allowlist. `egress` is told of each sandbox made and removed, and
  // answers the egress routes (apps/door/egress_routes.hpp). Set before serving; outlives the
  // service's requests.
  void set_egress(core::SandboxEgress* egress, core::EgressHost* host) {
    egress_ = egress;
    egress_host_ = host;
  }
  enum class EgressCall { view, events, deny_pending, decide };
  // GET /api/sandboxes/{id}/egress, POST …/egress/events, …/egress/deny-pending, …/egress/decide
  Reply egress(const std::string& sandbox_id, EgressCall call, std::string_view body);

  // Makes sure the state roots exist (start-up); throws std::runtime_error naming the path.
  void prepare_state_roots() const;
  void drain() { calls_.drain(); }
  // Waits for backend calls until `deadline`; how many still run.
  int drain_until(std::chrono::steady_clock::time_point deadline) {
    return calls_.drain_until(deadline);
  }

 private:
  std::string sandbox_json(const SandboxInfo& info) const;
  // The backend's running sandboxes into `running`; the answer to give instead when listing
  // failed (busy 503, timed out 504, the backend's failure).
  std::optional<Reply> list_running(std::vector<SandboxInfo>& running);
  std::vector<Mount> composed_mounts(const std::string& user_id, const std::string& thread_id,
                                     const std::vector<Mount>& extra) const;

  const ServiceSettings settings_;
  const std::shared_ptr<SandboxBackend> backend_;
  const std::shared_ptr<Logger> logger_;
  const core::SandboxAddressing* relay_ = nullptr;  // set once before serving
  core::BackendRelayTargets* relay_targets_ = nullptr;
  core::SandboxEgress* egress_ = nullptr;                  // set once before serving
  core::EgressHost* egress_host_ = nullptr;                // the same host, for its routes
  const std::shared_ptr<core::LifecycleEventLog> events_;  // its own lock
  core::UsageSampler usage_;  // its own thread and lock; stopped before backend_ goes
  BoundedCalls calls_;        // last: drained (in the destructor) before anything above goes
};

}  // namespace sandboxd::provisioner

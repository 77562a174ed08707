// The interface every sandbox backend plugin implements (design §1.9). The core never calls a
// backend while holding its registry mutex, so implementations may block on I/O; they must be
// safe to call from several threads at once, and from several processes: each verb, who calls
// it and what the core does with the answer are in docs/writing-a-backend.md.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sandboxd/types.hpp"

namespace sandboxd {

// How the provider decides "thread data is bind-mounted" when the config does not say (§3.6).
enum class MountModeKind {
  local_bind_mounts,    // the sandbox shares the gateway's user-data directories (local engine)
  contract_negotiated,  // remote provisioner: mounted iff the negotiated contract is current
  other,                // explicit sync unless the config says otherwise
};

class SandboxBackend {
 public:
  virtual ~SandboxBackend() = default;

  // Start the sandbox, or return the existing one for this id idempotently. Throws on failure
  // (MountContractChangedError when the contract moved under a negotiating backend).
  virtual SandboxInfo create(const CreateRequest& request) = 0;

  // Stop the sandbox. "Already gone" counts as done. A stop that may still be in flight (for
  // example a timeout) throws, so callers never report a clean stop that did not happen.
  virtual void destroy(const SandboxInfo& info) = 0;

  // false: definitively gone. An exception means "could not tell": the core keeps the sandbox.
  virtual bool is_alive(const SandboxInfo& info) = 0;

  // A running, verified sandbox for a deterministic id, or nothing.
  virtual std::optional<SandboxInfo> discover(const std::string& sandbox_id) = 0;

  // Every sandbox of ours that is running, for orphan reconciliation.
  virtual std::vector<SandboxInfo> list_running() { return {}; }

  // Exact-instance lookup for crash-recovery journals; the default cannot tell.
  virtual SandboxDiscoveryResult discover_for_reconciliation(const std::string& /*sandbox_id*/) {
    return SandboxDiscoveryResult::unknown();
  }

  // true when a live instance can only be proven to match this run's mounts by an idempotent
  // create call (remote provisioner); reuse, reclaim and discovery then go through create.
  virtual bool requires_create_validation() const { return false; }

  // contract_negotiated requires the MountContractNegotiation capability (capabilities.hpp).
  virtual MountModeKind mount_mode_kind() const { return MountModeKind::other; }
};

}  // namespace sandboxd

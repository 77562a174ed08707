// The operations every door offers (sandboxctl's commands, `sandboxctl serve`'s routes, an
// embedding gateway), once, in the core: each drives the Provider and returns a result struct
// or throws a ServiceError with a kind (service_errors.hpp). The doors only parse their input,
// call one of these, and render the result with service_json.hpp, so their documents are the
// same by construction.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "sandboxd/ownership.hpp"

namespace sandboxd::core {

// One tracked sandbox as every door shows it.
struct SandboxView {
  std::string sandbox_id;
  std::string sandbox_url;
  SandboxState state = SandboxState::active;  // active, warm or paused (released and frozen)
  std::optional<std::string> user_id;
  std::optional<std::string> thread_id;
  std::optional<std::string> container_name;
  double since = 0.0;  // wall clock: last activity (active) or release time (warm, paused)
  std::optional<AcquirePath> last_acquire;  // how its last acquisition here obtained it

  static SandboxView of(const TrackedSandbox& tracked);
};

struct AcquireRequest {
  std::optional<std::string> user_id;
  std::optional<std::string> thread_id;
  // How the door names the inputs in its messages ("--user", "user_id").
  std::string user_label = "user_id";
  std::string thread_label = "thread_id";
  // Cancelled when the caller gives up (serve: its client hung up): a creation queued for a
  // slot leaves the queue at once. Optional.
  std::shared_ptr<Cancellation> cancellation;
  // Made from this snapshot (path restored; docs/snapshots.md) instead of acquired as usual.
  std::optional<Provider::RestoreFrom> from_snapshot;
};

struct Acquired {
  std::string sandbox_id;
  std::string sandbox_url;
  AcquirePath path = AcquirePath::created;
  std::optional<std::string> user_id;
  std::optional<std::string> thread_id;
  // Headers every request to sandbox_url carries (a relay's token); DeerFlow's
  // SandboxInfo.request_headers. Empty for a URL that needs none.
  std::map<std::string, std::string> request_headers;
};

// What a fork made (docs/snapshots.md): the new conversations' sandboxes, each acquired.
struct Forked {
  std::string from_sandbox_id;
  std::vector<Acquired> sandboxes;
};

// Where a host's relay serves the sandboxes no host address reaches (relay.hpp): their URL and
// the headers a client sends with each request.
class SandboxAddressing {
 public:
  virtual ~SandboxAddressing() = default;
  virtual std::string url_for(const std::string& sandbox_id) const = 0;
  // What every request to the instance `info` describes must carry (its relay token).
  virtual std::map<std::string, std::string> headers_for(const SandboxInfo& info) const = 0;
};

// What a host runs for sandboxes whose egress goes through its proxy (network mode allowlist,
// issue 34; egress_host.hpp): told of each sandbox it hands out and each it destroys.
class SandboxEgress {
 public:
  virtual ~SandboxEgress() = default;
  virtual void attach_if_needed(const SandboxInfo& info) = 0;
  virtual void forget(const std::string& sandbox_id) = 0;
};

struct Released {
  SandboxView sandbox;  // now warm
  std::string result;   // "released" or "already warm"
};

struct Destroyed {
  SandboxView sandbox;  // as it was
};

// A row of the listing: tracked sandboxes, then the backend's containers nobody here tracks.
struct ListedSandbox {
  std::string id;
  std::optional<SandboxState> state;  // nullopt: an orphan, the backend's and tracked nowhere here
  std::string url, user, thread;
  std::optional<bool> running;  // unknown when the backend could not list
  std::optional<double> since;
  std::optional<LeaseRecord> lease;
  std::string lease_error;
  std::optional<AcquirePath> last_acquire;  // tracked ones: how their last acquisition went
  // The conversation's storage against its bound (docs/storage.md); nullopt: not bounded.
  std::optional<ThreadStorage::Usage> disk;
  // An archived conversation's sandbox (archive_after_seconds): no container, its archive's
  // bytes here; its next acquire restores it.
  std::optional<std::uint64_t> archived_bytes;
  // The state as the doors spell it: active, warm, paused, archived or orphan.
  std::string_view state_word() const {
    return state ? to_string(*state) : archived_bytes ? "archived" : "orphan";
  }
};

struct Listing {
  std::string state_dir;
  std::string owner_id;
  std::vector<ListedSandbox> sandboxes;
  bool wall_clock_leases = false;  // lease expiry is comparable with the wall clock
  std::string backend_error;       // "" when the backend listed its containers
  std::string snapshot_error;      // "" when the archives were read (the rows list them)
};

struct Reaped {
  int idle_timeout = 0;
  std::vector<std::string> reaped;
  std::vector<std::string> newly_paused;  // warm ones this pass paused (pause_after_seconds)
  std::vector<std::string> archived;  // released ones this pass archived (archive_after_seconds)
  std::size_t active = 0;
  std::size_t warm = 0;
  std::size_t paused = 0;
};

struct Health {
  std::string owner_id;
  std::size_t active = 0;
  std::size_t warm = 0;
  std::size_t paused = 0;
  std::size_t creating = 0;      // creations in flight, not yet active
  std::size_t tearing_down = 0;  // being stopped by this process
  bool uses_thread_data_mounts = false;
  std::string network_mode;  // the backend's configured policy ("open", "isolated", …); "" unknown
};

class SandboxService {
 public:
  // `state_dir` names where this provider keeps its state, in messages ("is not tracked by
  // state directory X") and listings.
  SandboxService(Provider& provider, std::string state_dir, std::string where);

  // Validates the ids (invalid_argument naming the door's label and the value), then acquires.
  Acquired acquire(const AcquireRequest& request);
  // not_found when `id` is not tracked here; conflict when a peer's lease refuses it (naming
  // the holder); unavailable when the engine fails.
  Released release(const std::string& id);
  Destroyed destroy(const std::string& id);
  // An active sandbox's last activity is refreshed (a get is a use).
  SandboxView get(const std::string& id);
  // Tracked sandboxes, the backend's own containers (untracked ones are orphans) and leases;
  // a backend that cannot list is reported in `backend_error`, not thrown.
  Listing list();
  ReconcileReport reconcile();
  Reaped reap(int idle_timeout);
  Health health();
  // Snapshots (docs/snapshots.md): of a tracked conversation sandbox; listed (of one user when
  // given); deleted. Errors are typed as Provider's.
  SnapshotRecord snapshot(const std::string& id, const std::optional<std::string>& name);
  std::vector<SnapshotRecord> snapshots(const std::optional<std::string>& user_id);
  SnapshotRecord delete_snapshot(const std::string& user_id, const std::string& name);
  // New conversations of sandbox `id`'s user made from its state (Provider::fork): the named
  // thread ids, or `count` generated ones. Refused like an acquire in a mode this host cannot
  // serve; all or none.
  Forked fork(const std::string& id, const std::vector<std::string>& thread_ids,
              std::optional<std::size_t> count);

  Provider& provider() { return provider_; }

  // The relay that serves sandboxes without a host address (nullptr: none, as in a one-shot
  // command; acquiring such a sandbox is then refused before anything is made). Set before
  // the first call; it must outlive the service.
  void set_relay(const SandboxAddressing* relay) { relay_ = relay; }
  // The host's egress proxy for allowlist sandboxes (nullptr: none; acquiring under allowlist
  // is then refused before anything is made). Set before the first call; it must outlive the
  // service.
  void set_egress(SandboxEgress* egress) { egress_ = egress; }

 private:
  // `tracked`'s URL and headers as a client uses them: the relay's for a namespaced sandbox.
  void address(const SandboxInfo& info, std::string& url,
               std::map<std::string, std::string>& headers) const;
  SandboxView view_of(const TrackedSandbox& tracked) const;
  // Throws config when the configured network mode needs a relay or an egress proxy this host
  // does not run, before anything is made.
  void refuse_unservable_modes() const;
  // An acquisition's result as the doors show it (its URL and headers; egress attached).
  Acquired acquired_of(const AcquireResult& result);

  TrackedSandbox require_tracked(const std::string& id) const;
  std::string lease_holder(const std::string& id) const;

  Provider& provider_;
  const std::string state_dir_;
  const std::string where_;
  const SandboxAddressing* relay_ = nullptr;
  SandboxEgress* egress_ = nullptr;
};

// Wall-clock seconds since the epoch, as SandboxView::since and lease expiries count them.
double wall_clock_now();

}  // namespace sandboxd::core

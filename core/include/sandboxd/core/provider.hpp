// The sandbox provider: one sandbox per (user, thread) conversation, kept alive across turns,
// parked in a warm pool on release, reaped when idle, capped by replicas, adopted after a
// restart, coordinated with peer processes through ownership leases (design §2–§8, §12).
//
// This header is the embedding API: Provider is final and keeps its state behind a private
// implementation (core/src/lifecycle/provider_impl.hpp), so an embedding gateway's ABI never
// depends on the registry's layout. The lock story lives with that implementation; what a caller
// needs to know: every method may be called from any thread; none holds a lock while it calls the
// backend, the ownership store, a readiness probe or a hook; acquire_async never blocks its
// caller.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sandboxd/backend.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/acquire_path.hpp"
#include "sandboxd/core/cancellation.hpp"
#include "sandboxd/core/conversation.hpp"
#include "sandboxd/core/creation_planner.hpp"
#include "sandboxd/core/executor.hpp"
#include "sandboxd/core/lifecycle_events.hpp"
#include "sandboxd/core/lifecycle_policy.hpp"
#include "sandboxd/core/mounts.hpp"
#include "sandboxd/core/overflow_policy.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/sandbox_client.hpp"
#include "sandboxd/core/sandbox_endpoint.hpp"
#include "sandboxd/core/sandbox_state.hpp"
#include "sandboxd/core/snapshots.hpp"
#include "sandboxd/core/thread_storage.hpp"
#include "sandboxd/errors.hpp"
#include "sandboxd/logger.hpp"
#include "sandboxd/ownership.hpp"

namespace sandboxd::core {

struct SandboxConfig;

// "('alice', 'thread-1')", the reference's rendering in messages.
std::string to_repr(const ThreadKey& key);
std::string to_repr(const std::optional<ThreadKey>& key);

// Infos are compared by identity in several race guards, so they are shared and immutable.
using InfoPtr = std::shared_ptr<const SandboxInfo>;
using ClientPtr = std::shared_ptr<SandboxClient>;

inline constexpr double kIdleCheckIntervalSeconds = 60.0;
inline constexpr double kCreateReadinessTimeoutSeconds = 60.0;
inline constexpr double kTeardownJoinTimeoutSeconds = 12.0;
inline constexpr int kMaxContractAttempts = 3;

// How many sandboxes shutdown() stops at once.
inline constexpr std::size_t kShutdownParallelism = 16;

struct ProviderOptions {
  int replicas = 3;  // cap on active + released; only released entries are evicted
  // soft: `replicas` is a soft cap. wait, reject, burst: it is a ceiling (see OverflowPolicy).
  OverflowPolicy overflow_policy = OverflowPolicy::soft;
  double acquire_timeout_seconds = 30.0;  // wait: how long a creation queues for a slot
  int burst_limit = 0;                    // burst: slots beyond `replicas` (0: reject)
  int max_per_user = 0;  // > 0: a ceiling per user (any policy; soft refuses at it)
  // wait: how many creations may queue at once (0: no bound); one more is refused at once
  // (reason queue_full). A host whose requests run on a bounded pool of threads sets it below
  // that pool, so queued creations never take the threads a release needs to free a slot.
  std::size_t max_waiting = 0;
  int idle_timeout = 600;  // seconds; 0 disables the idle checker (renewal still runs)
  std::optional<bool> thread_data_mounts;  // design §3.6 override
  double renewal_interval_seconds = 30.0;  // lease renewal and teardown heartbeat period
  double idle_check_interval_seconds = kIdleCheckIntervalSeconds;
  double readiness_timeout_seconds = kCreateReadinessTimeoutSeconds;
  // How long an acquire waits for a teardown of the same id (ours or a peer's) before it gives
  // up with SandboxBeingDestroyedError.
  double teardown_wait_seconds = 30.0;
  double teardown_join_timeout_seconds = kTeardownJoinTimeoutSeconds;
  // A sandbox released this long ago is paused (frozen by the backend's
  // SandboxPausing capability) until it is acquired again or idle_timeout reaps it. 0: never
  // (DeerFlow's behaviour); a backend without the capability keeps it warm.
  double pause_after_seconds = 0.0;
  // A sandbox this old (counted from SandboxInfo::created_at, as its backend reports it) is
  // destroyed by the idle pass, active or released; one whose creation time is unknown (0) is
  // not. 0: never (DeerFlow's behaviour).
  double max_lifetime_seconds = 0.0;
  // A released conversation sandbox idle this long is snapshotted and its container removed;
  // the conversation's next acquire restores it (path restored). 0: never. Needs a backend
  // with SandboxSnapshots.
  double archive_after_seconds = 0.0;
  // The free space kept under the state directory and the backend's engine storage
  // (EngineStorage): below it a new sandbox is refused as a capacity refusal, reason
  // min_free_disk. 0: no floor. From the config key min_free_disk (docs/storage.md).
  std::uint64_t min_free_disk_bytes = 0;
  // The ceilings on each user's snapshots (snapshots.hpp; docs/snapshots.md).
  SnapshotLimits snapshot_limits;
  // Background work starts in start(); tests that drive it by hand leave these off.
  bool run_background_threads = true;
  bool reconcile_on_start = true;
};

// A cross-process exclusive file lock, replaceable in tests (design §5.8).
struct FileLockOps {
  std::function<int(const std::string& path)> open;  // returns a handle
  std::function<void(int handle)> lock;              // exclusive; throws on failure
  std::function<void(int handle)> unlock;
  std::function<void(int handle)> close;

  static FileLockOps posix_flock();
};

// Host facts and replaceable steps. Every member has a working default.
struct ProviderHooks {
  std::function<ClientPtr(const std::string& sandbox_id, const std::string& base_url)> make_client;
  // true once GET {url}/v1/sandbox answers 200 within the timeout.
  std::function<bool(const std::string& url, double timeout_seconds)> wait_until_ready;
  std::function<bool(const std::string& user_id)> lark_integration_active;  // default false
  std::function<bool(const std::string& user_id)> lark_broker_active;       // default false
  std::function<std::optional<std::string>()> ambient_user;                 // default "default"
  FileLockOps file_lock = FileLockOps::posix_flock();
};

struct ProviderDeps {
  // Null only in the seed's uninitialised-mount-helper test: such a provider answers
  // uses_thread_data_mounts() (mounted) and must not be asked to reach a sandbox.
  std::shared_ptr<SandboxBackend> backend;
  std::shared_ptr<OwnershipStore> ownership;
  std::shared_ptr<Logger> logger;
  std::shared_ptr<Clock> clock;
  std::shared_ptr<const Paths> paths;
  // Ids, extra mounts and the skills projection; a HostCreationPlanner over paths when null.
  std::shared_ptr<CreationPlanner> planner;
  ProviderOptions options;
  ProviderHooks hooks;
  // The named lifecycle decisions (lifecycle_policy.hpp); DeerFlow's behaviour when null.
  std::shared_ptr<LifecyclePolicy> policy;
  // Blocking work of acquire_async; a private pool when null.
  std::shared_ptr<Executor> blocking_executor;
  // Per-thread lock waits of acquire_async, never shared with other work (design §12 item 2).
  std::shared_ptr<Executor> lock_wait_executor;
  // Where what happens to sandboxes is recorded (lifecycle_events.hpp); none when null.
  std::shared_ptr<LifecycleEventLog> events;
  // The backend's use string, for messages that name it ("local_docker:LocalContainerBackend").
  std::string backend_use = "the backend";
};

// The result of acquire_async. get() blocks; wait_for() polls; cancel() abandons the wait
// without leaking the conversation's lock: a pending lock wait gives the lock back as soon as
// it gets it, and an acquisition already running completes and releases it.
class AsyncAcquisition {
 public:
  struct State;
  explicit AsyncAcquisition(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::string get();
  bool wait_for(std::chrono::milliseconds timeout) const;
  void cancel();

 private:
  std::shared_ptr<State> state_;
};

class AsyncAcquisitionCancelled : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct AcquireResult {
  std::string sandbox_id;
  AcquirePath path = AcquirePath::created;
  // What the registry held for it as the acquisition ended (issue 35 item 1), so a door needs
  // no second look: its info (null only if it was torn down in between) and the conversation
  // it serves (null for an anonymous sandbox).
  std::shared_ptr<const SandboxInfo> info;
  std::optional<ThreadKey> conversation;
};

// What release() did.
enum class ReleaseOutcome {
  released,      // active → warm pool (it keeps running)
  already_warm,  // it was in the warm pool already
  not_tracked,   // this instance does not track it
  lease_lost,    // parked, then dropped: a peer holds its lease now (it keeps running there)
};
// What destroy() did.
enum class DestroyOutcome {
  destroyed,    // stopped under a teardown lease and forgotten
  not_tracked,  // nothing tracked here under that id (no container was touched)
  refused,      // a peer holds its lease, or the store could not grant the teardown lease
  skipped,      // this instance is already tearing it down, or re-acquired it meanwhile
};
const char* to_string(ReleaseOutcome outcome);
const char* to_string(DestroyOutcome outcome);

// One sandbox as the registry tracks it, for hosts that keep the registry between processes
// (sandboxctl runs one command per process and persists this in its state directory).
struct TrackedSandbox {
  SandboxInfo info;
  std::optional<ThreadKey> conversation;      // null for anonymous and adopted sandboxes
  SandboxState state = SandboxState::active;  // active, warm or paused, never none
  double since = 0.0;  // wall-clock seconds: last activity (active) or release time (warm)
  // How its last acquisition here obtained it; nullopt before any (an adopted orphan, a
  // registry file written before this was kept).
  std::optional<AcquirePath> last_acquire;
  bool released() const { return is_released(state); }
  bool operator==(const TrackedSandbox&) const = default;
};

struct RegistrySnapshot {
  std::vector<TrackedSandbox> sandboxes;  // ordered by sandbox id
  // Reconciliation's first sighting of each unowned container (the adoption grace, §8).
  std::map<std::string, double> unowned_since;
  bool operator==(const RegistrySnapshot&) const = default;
};

// The counts of one orphan-reconciliation pass (design §8 step 4).
struct ReconcileReport {
  int adopted = 0;
  int skipped = 0;     // a live peer owns it
  int deferred = 0;    // owned, within the recovery grace, or being torn down here
  int found = 0;       // running containers the backend listed
  bool listed = true;  // false when the backend could not list its containers
};

// Lifetime counts of what the provider did on its own, for hosts that export metrics.
struct ProviderEventCounts {
  std::uint64_t evictions = 0;       // warm sandboxes stopped to stay within replicas
  std::uint64_t idle_reaps = 0;      // active or warm sandboxes stopped for idleness
  std::uint64_t adoptions = 0;       // orphans adopted by reconciliation
  std::uint64_t lease_renewals = 0;  // renew answered renewed
  std::uint64_t lease_lapses = 0;    // renew answered lapsed
  std::uint64_t lease_losses = 0;    // sandboxes dropped because a peer holds their lease
  std::uint64_t pauses = 0;          // released sandboxes frozen after pause_after_seconds
  std::uint64_t pause_failures = 0;  // pauses the backend refused (the sandbox stayed warm)
  std::uint64_t resumes = 0;         // paused sandboxes thawed and handed out
  double resume_seconds = 0.0;       // total time of those resumes (thaw + liveness check)
  // The ceilings: creations that queued, the time they spent queued, and refusals
  // by reason (capacity: the fleet ceiling; per_user: max_per_user; wait_timeout: queued
  // longer than acquire_timeout).
  std::uint64_t capacity_waits = 0;
  double capacity_wait_seconds = 0.0;
  // The same waits by length, counted as each ends (served, refused or cancelled):
  // capacity_wait_buckets[i] counts the waits longer than bound i-1 and at most
  // kCapacityWaitBounds[i] seconds; the last one those longer than every bound.
  static constexpr std::array<double, 10> kCapacityWaitBounds = {0.05, 0.1, 0.25, 0.5, 1,
                                                                 2.5,  5,   10,   30,  60};
  std::array<std::uint64_t, kCapacityWaitBounds.size() + 1> capacity_wait_buckets{};
  std::uint64_t rejections_capacity = 0;
  std::uint64_t rejections_per_user = 0;
  std::uint64_t rejections_wait_timeout = 0;
  std::uint64_t rejections_queue_full = 0;
  std::uint64_t rejections_min_free_disk = 0;  // the host's free-space floor (min_free_disk)
  std::uint64_t disk_limit_stops = 0;  // sandboxes stopped with a writable layer past disk_limit
  std::uint64_t bursts = 0;            // creations beyond replicas under burst_limit
  // Pre-started slots: creations served by a claim, the time the claims took, and
  // creations that asked for a slot and missed, indexed by PreStartedSlots::Miss (none_ready,
  // key_mismatch, unsupported, claim_failed; index 0 unused).
  std::uint64_t slot_claims = 0;
  double slot_claim_seconds = 0.0;
  std::array<std::uint64_t, 5> slot_misses{};
};

// Identity of the exact instance a crash-recovery journal refers to (design §1.5, §5.19).
struct ReconciliationIdentity {
  std::string provider_key;
  std::optional<std::string> backend_namespace;
  std::string incarnation_id;
};

struct ReconnectResult {
  SandboxDiscoveryResult::Status status = SandboxDiscoveryResult::Status::unknown;
  ClientPtr sandbox;         // transient client, only for found
  bool close_after = false;  // the caller closes `sandbox` when done
};

class Provider final {
 public:
  explicit Provider(ProviderDeps deps);
  ~Provider();
  Provider(const Provider&) = delete;
  Provider& operator=(const Provider&) = delete;

  // Construction from a config: loads the plugins it names and starts background work.
  static std::unique_ptr<Provider> from_config(const SandboxConfig& config,
                                               std::shared_ptr<Logger> logger,
                                               ProviderHooks hooks = {});

  // What a host other than a long-running gateway changes about from_config.
  struct HostOptions {
    // The lease identity; a fresh `{host}:{random}` when unset. A host whose commands run in
    // successive processes (sandboxctl) passes one stable id so each process may renew, release
    // and destroy what an earlier one acquired.
    std::optional<std::string> owner_id;
    // start(): orphan reconciliation, then the renewal and idle-checker threads. A one-shot
    // command leaves it off and calls what it needs itself.
    bool start = true;
    // ProviderOptions::max_waiting (0: no bound).
    std::size_t max_capacity_waiters = 0;
    // ProviderDeps::events: what happens to sandboxes, for a host that shows it (serve).
    std::shared_ptr<LifecycleEventLog> events;
  };
  static std::unique_ptr<Provider> from_config(const SandboxConfig& config,
                                               std::shared_ptr<Logger> logger, ProviderHooks hooks,
                                               const HostOptions& host);

  // Orphan reconciliation once, then the renewal thread always and the idle checker when
  // idle_timeout > 0 (design §5.2 steps 5–7). Called by from_config.
  void start();

  // The sandbox id for this conversation, reusing, reclaiming, discovering or creating it.
  // No thread → a fresh anonymous sandbox.
  std::string acquire(const std::optional<std::string>& thread_id,
                      const std::optional<std::string>& user_id = std::nullopt);
  // Same, and says how the sandbox was obtained.
  AcquireResult acquire_traced(const std::optional<std::string>& thread_id,
                               const std::optional<std::string>& user_id = std::nullopt);
  // Same, giving up while it queues for a slot once `cancellation` is cancelled (from another
  // thread; it throws AsyncAcquisitionCancelled then). A door's request whose client hung up.
  AcquireResult acquire_traced(const std::optional<std::string>& thread_id,
                               const std::optional<std::string>& user_id,
                               Cancellation& cancellation);
  // Same, without blocking the caller's thread.
  AsyncAcquisition acquire_async(const std::optional<std::string>& thread_id,
                                 const std::optional<std::string>& user_id = std::nullopt);

  // The client of an active sandbox; in-memory only (safe on an event loop).
  ClientPtr get(const std::string& sandbox_id);
  // Close the client and park the sandbox in the warm pool (it keeps running).
  ReleaseOutcome release(const std::string& sandbox_id);
  // Close the client and stop the sandbox, under a teardown lease. A backend failure to stop
  // it throws.
  DestroyOutcome destroy(const std::string& sandbox_id);
  // Destroy everything this instance tracks and stop background work. Idempotent.
  void shutdown();
  // Stop background work and close the ownership store, leaving every sandbox running and its
  // lease to lapse after one TTL (then a peer's reconciliation may adopt it). After detach the
  // provider tracks nothing new; shutdown() and the destructor do nothing. Idempotent.
  void detach();

  // The registry as data: what is active and warm, for whom, since when. Reads memory only.
  RegistrySnapshot export_registry() const;
  // The infos of at most `limit` tracked sandboxes (active and released, in no particular
  // order) and how many more there were: shared, not copied, so the registry mutex is held only
  // for the walk (the operator page's usage sampler).
  struct TrackedInfos {
    std::vector<InfoPtr> infos;
    std::size_t left_out = 0;
  };
  TrackedInfos tracked_infos(std::size_t limit) const;
  std::optional<TrackedSandbox> find(const std::string& sandbox_id) const;

  // Network isolation. Whether `info` has no host address (its backend's
  // NamespacedSandboxes says so): clients reach it only through a relay.
  bool namespaced(const SandboxInfo& info) const;
  // Whether the sandboxes the backend makes now are such sandboxes.
  bool makes_namespaced_sandboxes() const;
  // The backend's configured network policy ("open", "isolated", "allowlist"…; "" when the
  // backend has no SandboxNetworkPolicy).
  std::string configured_network_policy() const;
  // How a relay reaches the API of a sandbox tracked here (active or released); nullopt when
  // it is not tracked. `open_socket` is set for a namespaced sandbox.
  std::optional<SandboxEndpoint> endpoint(const std::string& sandbox_id) const;
  // Installs sandboxes tracked by an earlier process of the same host (no backend or store
  // call: the next acquire health-checks them as usual). Ids already tracked are left alone.
  void import_registry(const RegistrySnapshot& snapshot);

  // design §3.6: whether thread data is bind-mounted. Never blocks.
  bool uses_thread_data_mounts() const;
  // Host helpers of §3.6 (may probe the backend: call off any event loop).
  bool provider_uses_thread_data_mounts();
  bool sandbox_uses_thread_data_mounts(const std::string& sandbox_id) const;

  // Background work, callable directly (tests, hosts with their own scheduler).
  void cleanup_idle_sandboxes(double idle_timeout);
  void reap_expired_warm(std::optional<double> timeout = std::nullopt);
  std::optional<std::string> evict_oldest_warm();
  // Pauses warm sandboxes released at least pause_after_seconds ago; returns how
  // many. Nothing when the option is 0 or the backend cannot pause.
  int pause_idle_warm();
  // Archives released conversation sandboxes idle at least archive_after_seconds (a snapshot,
  // then the container removed; the next acquire restores it); returns how many. Nothing when
  // the option is 0 or the backend cannot snapshot.
  int archive_idle_released();
  // ── snapshots (docs/snapshots.md): provider_snapshots.cpp ──
  // A snapshot of conversation sandbox `sandbox_id` (tracked here): its filesystem changes
  // (the backend's SandboxSnapshots) and its conversation's directories, taken while it is
  // frozen for the instant (when the backend can pause); named `name` or a generated name.
  // Throws ServiceError: not_found (not tracked, or anonymous), unsupported (the backend cannot),
  // capacity (the user's count or bytes ceiling), conflict (the name is taken), invalid_argument
  // (a bad name). A failure leaves the sandbox and its conversation as they were.
  SnapshotRecord snapshot(const std::string& sandbox_id,
                          const std::optional<std::string>& name = std::nullopt);
  // Every snapshot (of `user_id` only when given), oldest first.
  std::vector<SnapshotRecord> snapshots(const std::optional<std::string>& user_id) const;
  // Deletes one, and its image; throws not_found.
  SnapshotRecord delete_snapshot(const std::string& user_id, const std::string& name);
  // Deletes every snapshot past snapshot_ttl; how many. Run by the idle checker.
  std::size_t delete_expired_snapshots();
  struct RestoreFrom {
    std::string name;
    std::optional<std::string> user_id;  // whose snapshot: the conversation's user by default
    bool allow_other_user = false;       // the operator's word, per call, for another user's
  };
  // The conversation's sandbox made from snapshot `from` (path restored): its current sandbox,
  // if any, is destroyed; its directories are emptied and the snapshot's copied in; the sandbox
  // is made from the snapshot's image under the configured options. Throws like acquire, and
  // not_found / invalid_argument (another user's snapshot without allow_other_user).
  AcquireResult restore(const std::optional<std::string>& thread_id,
                        const std::optional<std::string>& user_id, const RestoreFrom& from);
  // At most this many conversations made by one fork.
  static constexpr std::size_t kMaxForkCount = 32;
  struct Forked {
    std::string from_sandbox_id;
    std::vector<AcquireResult> sandboxes;  // in the order of the thread ids (path restored)
  };
  // New conversations of sandbox `sandbox_id`'s user, each with a sandbox made from one state
  // of it (provider_fork.cpp): one snapshot, taken once, restored into each conversation in
  // parallel under the usual ceilings, then deleted. The conversations are `thread_ids`, or
  // `count` of them named fork-{16 hex} (1..kMaxForkCount either way); one that exists already
  // is refused (conflict) before anything is made. All or none: when one fails, the sandboxes
  // made are destroyed and the new conversations' directories removed, and its error is thrown.
  Forked fork(const std::string& sandbox_id, const std::vector<std::string>& thread_ids,
              std::optional<std::size_t> count);

  // One pass of the writable-layer bound (docs/storage.md): up to 256 sandboxes' layers asked
  // of the backend (WritableLayerUsage), and one past disk_limit destroyed with an
  // over_disk_limit event. Run by the layer watcher thread every idle-check interval (at once
  // again while more remain); a call while a pass runs returns at once.
  void stop_layers_past_bound();
  ReconcileReport reconcile_orphans();
  void renew_owned_leases();
  // Drops per-conversation locks nobody holds or waits for (run by the renewal thread), so the
  // lock map does not grow with every conversation ever seen.
  void prune_idle_thread_locks();

  // Crash-recovery journal support (design §5.19); backend only, no maps.
  static std::string reconciliation_provider_key() { return "aio_sandbox"; }
  std::optional<ReconciliationIdentity> prepare_sandbox_reconciliation_identity(
      const std::string& sandbox_id);
  ReconnectResult reconnect_sandbox_for_reconciliation(const std::string& sandbox_id,
                                                       const std::string& thread_id,
                                                       const std::string& user_id,
                                                       const ReconciliationIdentity& identity);

  const std::string& owner_id() const;
  SandboxBackend* backend() const;
  OwnershipStore* ownership() const;
  // The conversation's storage against its bound (docs/storage.md): nullopt when it is not
  // bounded (no bound here, or a directory made before the bound). Reads the filesystem.
  std::optional<ThreadStorage::Usage> conversation_storage(const std::string& user_id,
                                                           const std::string& thread_id) const;
  // What bounds each conversation's storage here, as check-config says it.
  const ThreadStorage& storage() const;

  // Counts for diagnostics and tests.
  struct Counts {
    std::size_t active = 0;
    std::size_t warm = 0;    // released, running
    std::size_t paused = 0;  // released, frozen
    std::size_t reserved_for_teardown = 0;
    std::size_t waiting = 0;   // creations queued for a slot (overflow_policy wait)
    std::size_t creating = 0;  // creations admitted and in flight, not yet active
  };
  Counts counts() const;
  // The ceilings as configured, what this process counts against them now and, when
  // the lease store keeps a deployment-wide ledger, its reservations in all. Reads the store
  // (it may block on it; never under the registry mutex): for diagnostics, not a hot path.
  struct Capacity {
    int replicas = 0;
    std::string overflow_policy;  // soft, wait, reject or burst
    int burst_limit = 0;
    int max_per_user = 0;         // 0: no ceiling per user
    std::size_t max_waiting = 0;  // 0: the queue is unbounded
    std::size_t waiting = 0;      // creations queued for a slot now
    std::size_t in_use_here = 0;  // active + released + creating, in this process
    bool fleet_wide = false;      // the ceilings hold across gateways (a shared ledger)
    std::optional<std::size_t> fleet_reserved;  // the ledger's reservations in all, when read
    std::string fleet_error;                    // why they could not be read ("" otherwise)
  };
  Capacity capacity() const;
  ProviderEventCounts event_counts() const;
  // The backend's pre-started slots now (target 0: none asked for, or no such capability).
  PreStartedSlots::Status slot_status() const;

  struct Impl;  // core/src/lifecycle/provider_impl.hpp

 private:
  friend class ProviderTestPeer;  // tests inject step seams and fill state through it
  std::unique_ptr<Impl> impl_;
};

}  // namespace sandboxd::core

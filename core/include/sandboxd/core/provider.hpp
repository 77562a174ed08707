// The sandbox provider: one sandbox per (user, thread) conversation, kept alive across turns,
// parked in a warm pool on release, reaped when idle, capped by replicas, adopted after a
// restart, coordinated with peer processes through ownership leases (SPEC.md §2–§8, §12).
//
// Lock story (read before changing anything here):
//  - `mutex_` (the registry mutex) guards `registry_` and nothing else. It is never held
//    while calling the backend, the ownership store, a readiness probe, a hook, or while
//    closing a client. The only code that runs under it besides map reads is a
//    `still_reapable` predicate, which must itself only read `registry_`.
//  - Per-(user, thread) `ThreadLock`s serialise acquisition of one conversation; they are
//    taken before `mutex_`, never while holding it.
//  - A cross-process flock on `{thread dir}/{sandbox_id}.lock` guards discover-or-create
//    between processes on one host; taken under the thread lock, outside `mutex_`.
//  - `background_mutex_` guards only the stop flag of the two background threads.
//  - A `ThreadLock` keeps a FIFO queue of waiters; an async waiter is a grant callback run by
//    the releasing thread, so waiting on a busy conversation never parks a pool thread and a
//    stuck conversation cannot starve the others (issue 13 A.5).
//  - `async_work_` has its own leaf mutex (nothing is called under it): which async
//    acquisitions run or wait, so shutdown() and detach() can refuse new ones, fail the queued
//    ones and wait for the running ones before anything they use is closed.
//  - `delayed_starts_` has its own leaf mutex: a teardown heartbeat is spawned under it, and
//    nothing else runs there.
//  - `shutdown_mutex_` is held for the whole of shutdown() and detach(): a second caller
//    (a signal watcher beside normal teardown) waits for the first instead of returning while
//    the provider is still in use. It is taken first, before every other lock.
//  - The executors are the last members, so they are destroyed (and joined) first, while the
//    state their tasks use still exists.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "sandboxd/backend.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/delayed_starts.hpp"
#include "sandboxd/core/executor.hpp"
#include "sandboxd/core/mounts.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/sandbox_client.hpp"
#include "sandboxd/core/spare_node.hpp"
#include "sandboxd/core/thread_lock.hpp"
#include "sandboxd/core/thread_map.hpp"
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
  int replicas = 3;        // soft cap on active + warm; only warm entries are evicted
  int idle_timeout = 600;  // seconds; 0 disables the idle checker (renewal still runs)
  std::optional<bool> thread_data_mounts;  // SPEC §3.6 override
  double renewal_interval_seconds = 30.0;  // lease renewal and teardown heartbeat period
  double idle_check_interval_seconds = kIdleCheckIntervalSeconds;
  double readiness_timeout_seconds = kCreateReadinessTimeoutSeconds;
  // How long an acquire waits for a teardown of the same id (ours or a peer's) before it gives
  // up with SandboxBeingDestroyedError.
  double teardown_wait_seconds = 30.0;
  double teardown_join_timeout_seconds = kTeardownJoinTimeoutSeconds;
  // Background work starts in start(); tests that drive it by hand leave these off.
  bool run_background_threads = true;
  bool reconcile_on_start = true;
};

// A cross-process exclusive file lock, replaceable in tests (SPEC §5.8).
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
  std::shared_ptr<SandboxBackend> backend;  // may be null only for helper-style tests
  std::shared_ptr<OwnershipStore> ownership;
  std::shared_ptr<Logger> logger;
  std::shared_ptr<Clock> clock;
  std::shared_ptr<const Paths> paths;
  std::shared_ptr<MountComposer> mounts;  // built from paths when null
  ProviderOptions options;
  ProviderHooks hooks;
  // Blocking work of acquire_async; a private pool when null.
  std::shared_ptr<Executor> blocking_executor;
  // Per-thread lock waits of acquire_async, never shared with other work (SPEC §12 item 2).
  std::shared_ptr<Executor> lock_wait_executor;
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

// acquire_async's bookkeeping (defined in provider_lifecycle.cpp).
struct AsyncWork;
std::shared_ptr<AsyncWork> make_async_work();

// How an acquisition obtained its sandbox (sandboxctl's `path`, serve's metrics).
enum class AcquirePath { reused, reclaimed, discovered, created };
const char* to_string(AcquirePath path);

struct AcquireResult {
  std::string sandbox_id;
  AcquirePath path = AcquirePath::created;
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
  std::optional<ThreadKey> conversation;  // null for anonymous and adopted sandboxes
  bool warm = false;                      // released to the warm pool (else active)
  double since = 0.0;  // wall-clock seconds: last activity (active) or release time (warm)
  bool operator==(const TrackedSandbox&) const = default;
};

struct RegistrySnapshot {
  std::vector<TrackedSandbox> sandboxes;  // ordered by sandbox id
  // Reconciliation's first sighting of each unowned container (the adoption grace, §8).
  std::map<std::string, double> unowned_since;
  bool operator==(const RegistrySnapshot&) const = default;
};

// The counts of one orphan-reconciliation pass (SPEC §8 step 4).
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
};

// Identity of the exact instance a crash-recovery journal refers to (SPEC §1.5, §5.19).
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

class Provider {
 public:
  explicit Provider(ProviderDeps deps);
  virtual ~Provider();
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
  };
  static std::unique_ptr<Provider> from_config(const SandboxConfig& config,
                                               std::shared_ptr<Logger> logger, ProviderHooks hooks,
                                               const HostOptions& host);

  // Orphan reconciliation once, then the renewal thread always and the idle checker when
  // idle_timeout > 0 (SPEC §5.2 steps 5–7). Called by from_config.
  void start();

  // The sandbox id for this conversation, reusing, reclaiming, discovering or creating it.
  // No thread → a fresh anonymous sandbox.
  std::string acquire(const std::optional<std::string>& thread_id,
                      const std::optional<std::string>& user_id = std::nullopt);
  // Same, and says how the sandbox was obtained (the synchronous path only: the branch that
  // succeeds notes it on the calling thread).
  AcquireResult acquire_traced(const std::optional<std::string>& thread_id,
                               const std::optional<std::string>& user_id = std::nullopt);
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
  std::optional<TrackedSandbox> find(const std::string& sandbox_id) const;
  // Installs sandboxes tracked by an earlier process of the same host (no backend or store
  // call: the next acquire health-checks them as usual). Ids already tracked are left alone.
  void import_registry(const RegistrySnapshot& snapshot);

  // SPEC §3.6: whether thread data is bind-mounted. Never blocks.
  bool uses_thread_data_mounts() const;
  // Host helpers of §3.6 (may probe the backend: call off any event loop).
  bool provider_uses_thread_data_mounts();
  bool sandbox_uses_thread_data_mounts(const std::string& sandbox_id) const;

  // Background work, callable directly (tests, hosts with their own scheduler).
  void cleanup_idle_sandboxes(double idle_timeout);
  // Virtual: the seed replaces warm expiry to see that the idle pass delegates to it.
  virtual void reap_expired_warm(std::optional<double> timeout = std::nullopt);
  std::optional<std::string> evict_oldest_warm();
  ReconcileReport reconcile_orphans();
  void renew_owned_leases();
  // Drops per-conversation locks nobody holds or waits for (run by the renewal thread), so the
  // lock map does not grow with every conversation ever seen.
  void prune_idle_thread_locks();

  // Crash-recovery journal support (SPEC §5.19); backend only, no maps.
  static std::string reconciliation_provider_key() { return "aio_sandbox"; }
  std::optional<ReconciliationIdentity> prepare_sandbox_reconciliation_identity(
      const std::string& sandbox_id);
  ReconnectResult reconnect_sandbox_for_reconciliation(const std::string& sandbox_id,
                                                       const std::string& thread_id,
                                                       const std::string& user_id,
                                                       const ReconciliationIdentity& identity);

  const std::string& owner_id() const;
  SandboxBackend* backend() const { return backend_.get(); }
  OwnershipStore* ownership() const { return ownership_.get(); }

  // Counts for diagnostics and tests.
  struct Counts {
    std::size_t active = 0;
    std::size_t warm = 0;
    std::size_t reserved_for_teardown = 0;
  };
  Counts counts() const;
  ProviderEventCounts event_counts() const;

 protected:
  struct WarmEntry {
    InfoPtr info;
    double released_at = 0.0;
    // The conversation it last served (nullopt for an adopted orphan): a reclaim by another
    // identity under the same id is a collision, not a reuse.
    std::optional<ThreadKey> identity;
  };
  // One active sandbox: one map entry holds what the reference keeps in four dicts
  // (_sandboxes, _sandbox_infos, _active_sandbox_identity, _last_activity), so a warm pair makes
  // one node instead of four. Outside the seed tests' partial fixtures, which model a single
  // dict being set, an entry has both a client and an info.
  struct ActiveEntry {
    ClientPtr client;
    InfoPtr info;
    std::optional<ThreadKey> identity;  // the conversation it was handed to
    double last_activity = 0.0;         // monotonic seconds
  };
  // Everything guarded by mutex_. Active and warm are mutually exclusive for an id.
  struct Registry {
    std::map<std::string, ActiveEntry> active;
    ThreadMap thread_map;  // conversation → sandbox, and back
    std::map<std::string, WarmEntry> warm_pool;
    std::map<std::string, double> unowned_since;
    std::set<std::string> local_teardown;
    std::map<std::string, std::uint64_t> acquire_epoch;
    std::uint64_t epoch_counter = 0;
    std::map<std::string, int> acquire_inflight;
    // create_sandbox calls between their replica check and their registration (or failure).
    std::map<std::string, int> creating;
    std::map<ThreadKey, std::shared_ptr<ThreadLock>> thread_locks;
    bool shutdown = false;
    // A warm pair's moves between active and warm, and its in-flight mark, reuse the node the
    // last one freed.
    SpareNode<std::map<std::string, ActiveEntry>> spare_active;
    SpareNode<std::map<std::string, WarmEntry>> spare_warm;
    SpareNode<std::map<std::string, int>> spare_inflight;

    // The reference's `id in _sandboxes` and `id in _sandbox_infos`.
    bool has_client(const std::string& id) const {
      auto it = active.find(id);
      return it != active.end() && it->second.client;
    }
    bool has_info(const std::string& id) const {
      auto it = active.find(id);
      return it != active.end() && it->second.info;
    }
  };
  using Snapshot = std::optional<MountContractSnapshot>;
  using Predicate = std::function<bool()>;  // runs with mutex_ held; reads registry_ only

  // ── acquisition (SPEC §5.3–§5.11); virtual so tests can replace one step ──
  virtual std::string acquire_with_restarts(const std::optional<std::string>& thread_id,
                                            const std::string& user_id);
  virtual Snapshot acquisition_contract_snapshot();
  virtual std::string acquire_internal(const std::optional<std::string>& thread_id,
                                       const std::string& user_id, Snapshot snapshot);
  virtual std::optional<std::string> reuse_in_process_sandbox(
      const std::optional<std::string>& thread_id, const std::string& user_id,
      const std::optional<std::string>& expected_sandbox_id, bool post_lock,
      const Snapshot& snapshot);
  virtual std::optional<std::string> reclaim_warm_pool_sandbox(
      const std::optional<std::string>& thread_id, const std::string& sandbox_id,
      const std::string& user_id, bool post_lock, const Snapshot& snapshot);
  virtual std::string discover_or_create_with_lock(const std::string& thread_id,
                                                   const std::string& sandbox_id,
                                                   const std::string& user_id,
                                                   const Snapshot& snapshot);
  virtual std::optional<std::string> recheck_cached_sandbox(const std::string& thread_id,
                                                            const std::string& sandbox_id,
                                                            const std::string& user_id,
                                                            const Snapshot& snapshot);
  virtual std::string create_sandbox(const std::optional<std::string>& thread_id,
                                     const std::string& sandbox_id, const std::string& user_id,
                                     const Snapshot& snapshot);
  virtual std::string register_discovered_sandbox(const std::string& thread_id, InfoPtr info,
                                                  const std::string& user_id);
  virtual std::string register_created_sandbox(const std::optional<std::string>& thread_id,
                                               const std::string& sandbox_id, InfoPtr info,
                                               const std::string& user_id);
  virtual void destroy_unready_sandbox(const std::string& sandbox_id, const SandboxInfo& info);
  // Stops an instance a creation made but nothing tracks (unready, or on a stale contract),
  // under a teardown lease; skipped when tracked here meanwhile or a peer holds the lease.
  // `what` names it in log lines ("unready sandbox X").
  void destroy_untracked_creation(const std::string& sandbox_id, const SandboxInfo& info,
                                  const std::string& what);

  // ── ids and mounts ──
  virtual std::string sandbox_id_for_thread(const std::optional<std::string>& thread_id,
                                            const std::string& user_id, const Snapshot& snapshot);
  virtual std::vector<Mount> get_extra_mounts(const std::optional<std::string>& thread_id,
                                              const std::string& user_id);
  virtual void ensure_skills_projection(const std::string& user_id);

  // ── ownership (SPEC §7.7–§7.9) ──
  virtual void publish_ownership(const std::string& sandbox_id);
  virtual bool claim_ownership(const std::string& sandbox_id, bool for_destroy);
  bool refresh_ownership(const std::string& sandbox_id);
  void release_ownership(const std::string& sandbox_id);
  // Runs `stop` while a heartbeat keeps our `del` lease alive; the heartbeat releases it.
  virtual void with_held_teardown_lease(const std::string& sandbox_id,
                                        const std::function<void()>& stop);
  bool reserve_local_teardown(const std::string& sandbox_id, const Predicate& still_reapable);
  // Reaper predicate: the warm pool still holds this very entry (same info object, same
  // release time).
  Predicate still_this_warm_entry(const std::string& sandbox_id, const WarmEntry& entry);
  void finish_local_teardown(const std::string& sandbox_id);
  void forget(const std::string& sandbox_id, std::optional<std::uint64_t> expected_epoch);

  // ── teardown and health (SPEC §5.13, §5.16, §6.2) ──
  virtual DestroyOutcome destroy_tracked(const std::string& sandbox_id,
                                         const Predicate& still_reapable);
  virtual bool destroy_warm_entry(const std::string& sandbox_id, const WarmEntry& entry,
                                  const std::string& reason, const Predicate& still_reapable);
  std::optional<bool> check_alive(const std::string& sandbox_id, const SandboxInfo& info);
  void drop_unhealthy_sandbox(const std::string& sandbox_id, const std::string& reason,
                              const InfoPtr& expected_info);
  struct Removed {
    ClientPtr client;
    InfoPtr info;
    bool removed = false;
  };
  Removed remove_tracked(const std::string& sandbox_id, const InfoPtr& expected_info);

  // ── helpers ──
  // One tracked sandbox as data (find, export_registry); mutex_ held.
  TrackedSandbox tracked_active(const ActiveEntry& entry) const;
  TrackedSandbox tracked_warm(const WarmEntry& entry) const;
  std::shared_ptr<ThreadLock> thread_lock(const ThreadKey& key);
  std::string effective_user(const std::optional<std::string>& user_id) const;
  ClientPtr make_client(const std::string& sandbox_id, const std::string& url);
  // Closes `client` if any; a failure is logged with the sentence `what_on_error()` builds,
  // which runs only then (a release closes a client on every warm pair).
  template <class Describe>
  void close_client(const ClientPtr& client, const Describe& what_on_error) {
    if (!client) return;
    try {
      client->close();
    } catch (const std::exception& e) {
      log(LogLevel::warning, what_on_error() + ": " + e.what());
    }
  }
  // Throws SandboxIdentityCollisionError when `sandbox_id` is active for another key.
  void check_active_identity_locked(const std::string& sandbox_id, const ThreadKey& key) const;
  void check_warm_identity_locked(const std::string& sandbox_id, const ThreadKey& key) const;
  // Throws std::runtime_error once shutdown (or detach) has begun.
  void install_active_locked(const std::string& sandbox_id, ClientPtr client, InfoPtr info,
                             const std::optional<ThreadKey>& key);
  // Active + warm + other creations in flight: what the replica cap is checked against.
  std::size_t replica_slots_in_use_locked(const std::string& creating_id) const;
  CreateRequest build_create_request(const std::optional<std::string>& thread_id,
                                     const std::string& sandbox_id, const std::string& user_id);
  // Throws SandboxIdentityCollisionError when the backend verified another (user, thread).
  void check_reported_identity(const SandboxInfo& info, const std::string& thread_id,
                               const std::string& user_id) const;
  InfoPtr revalidate_through_create(const std::string& thread_id, const std::string& sandbox_id,
                                    const std::string& user_id, const Snapshot& snapshot);
  void install_validated_info(const std::string& sandbox_id, const InfoPtr& examined,
                              const InfoPtr& validated);
  // Waits (bounded) until neither this process nor a peer is tearing `sandbox_id` down. The
  // deadline is real time (a container stop takes real time, whatever the injected clock says).
  using Deadline = std::chrono::steady_clock::time_point;
  bool wait_out_teardown(const std::string& sandbox_id, Deadline deadline);
  Deadline teardown_wait_deadline() const;
  // This process has reserved `sandbox_id` for teardown, or a live `del` lease exists for it.
  bool teardown_in_progress(const std::string& sandbox_id);
  bool negotiates_contract() const;
  // Idle, warm and adoption-grace timers run on the monotonic clock, so a wall-clock step
  // (NTP, a suspended VM) neither reaps everything nor keeps anything forever. Only what leaves
  // the process is wall time: TrackedSandbox::since and RegistrySnapshot::unowned_since
  // (sandboxctl's successive processes share them) and, in the stores, the leases.
  double now() const { return clock_->monotonic_now(); }
  double to_wall(double monotonic) const { return monotonic + wall_minus_monotonic(); }
  double from_wall(double wall) const { return wall - wall_minus_monotonic(); }
  double wall_minus_monotonic() const { return clock_->wall_now() - clock_->monotonic_now(); }
  void log(LogLevel level, const std::string& message) const { logger_->log(level, message); }
  // For the warm path's lines: the message is built only when the logger keeps that level.
  template <class Message>
  void log_lazily(LogLevel level, const Message& message) const {
    if (logger_->enabled(level)) logger_->log(level, message());
  }

  void start_background_threads();
  void stop_background_threads();
  void idle_checker_loop(double idle_timeout);
  void renewal_loop();
  // Sleeps up to `seconds` or until stop; false once stop was requested.
  bool wait_for_background_tick(double seconds);

  std::shared_ptr<SandboxBackend> backend_;
  std::shared_ptr<OwnershipStore> ownership_;
  std::shared_ptr<Logger> logger_;
  std::shared_ptr<Clock> clock_;
  std::shared_ptr<const Paths> paths_;
  std::shared_ptr<MountComposer> mounts_;
  const ProviderOptions options_;
  ProviderHooks hooks_;

  mutable std::mutex mutex_;  // the registry mutex: guards registry_ (see the lock story)
  Registry registry_;
  std::condition_variable teardown_finished_;  // with mutex_: local_teardown shrank

  // Event counters: atomics, each incremented where its event happens (relaxed order; read
  // only for metrics), so counting takes no lock.
  struct EventCounters {
    std::atomic<std::uint64_t> evictions{0}, idle_reaps{0}, adoptions{0}, lease_renewals{0},
        lease_lapses{0}, lease_losses{0};
  };
  EventCounters events_;

  std::mutex background_mutex_;  // guards background_stop_
  std::condition_variable background_wake_;
  bool background_stop_ = false;
  std::thread idle_checker_;  // started/joined only by start()/shutdown()
  std::thread renewer_;       // started/joined only by start()/shutdown()

  // Held for the whole of shutdown() and detach(): a second caller (a signal watcher beside
  // normal teardown) waits until the first has finished instead of returning early.
  std::mutex shutdown_mutex_;

  // Starts a teardown's lease heartbeat once its stop has outlasted one renewal interval
  // (with_held_teardown_lease); its own leaf mutex, under which only a thread is spawned.
  DelayedStarts delayed_starts_;

  // acquire_async's work in flight. Shared with its tasks, so a lock grant that arrives after
  // shutdown learns it without touching the provider; shutdown() fails what is still queued
  // and waits for what runs.
  std::shared_ptr<AsyncWork> async_work_;  // set by the constructor, never reset
  void run_async_acquisition(const std::shared_ptr<AsyncAcquisition::State>& state,
                             const std::optional<std::string>& thread_id, const std::string& user,
                             const std::shared_ptr<ThreadLock>& lock);

  // Last, so destroyed first: a private pool joins its workers while everything a queued task
  // uses is still alive.
  std::shared_ptr<Executor> blocking_executor_;
  std::shared_ptr<Executor> lock_wait_executor_;
};

}  // namespace sandboxd::core

// Provider's implementation, private to the core (provider.hpp is the embedding API).
//
// Lock story (read before changing anything here; clang's -Wthread-safety checks the
// annotated parts, see scripts/thread_safety.sh):
//  - `mutex_` (the registry mutex) guards `registry_` and nothing else. Methods that call the
//    backend, the ownership store, a readiness probe, a hook or the logger, or close a client,
//    are EXCLUDES(mutex_): none of that ever runs under it. Code that needs a decision made
//    under it passes a Predicate, which reads the registry it is handed and nothing else.
//  - Per-(user, thread) ThreadLocks serialise acquisition of one conversation; they are taken
//    before `mutex_`, never while holding it. A ThreadLock keeps a FIFO queue of waiters; an
//    async waiter is a grant callback run by the releasing thread, so waiting on a busy
//    conversation parks no pool thread.
//  - A cross-process flock on `{thread dir}/{sandbox_id}.lock` guards discover-or-create
//    between processes on one host; taken under the thread lock, outside `mutex_`.
//  - `background_mutex_` guards only the stop flag of the background threads.
//  - `layer_pass_mutex_` makes writable-layer passes one at a time and guards their cursor; held
//    for a whole pass (engine calls and destroys included), taken before `mutex_` and before any
//    conversation's lock, never under them; a second caller try-locks and returns.
//  - `async_` (AsyncAcquisitions) has its own leaf mutex: which async acquisitions run or wait.
//  - `teardown_` (TeardownLeases) has its own leaf mutex, under which only a thread is spawned.
//  - `shutdown_mutex_` is held for the whole of shutdown() and detach(), taken before every
//    other lock: a second caller waits for the first instead of returning early.
//  - The executors are the last members, so they are destroyed (and joined) first, while the
//    state their tasks use still exists.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "async_acquisitions.hpp"
#include "capacity_queue.hpp"
#include "host/snapshot_store.hpp"
#include "sandbox_registry.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/core/creation_planner.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "sandboxd/readiness.hpp"
#include "sandboxd/thread_annotations.hpp"
#include "teardown_lease.hpp"

namespace sandboxd::core {

// Runs with the registry mutex held and reads only the registry it is handed.
using Predicate = std::function<bool(const SandboxRegistry&)>;
using Snapshot = std::optional<MountContractSnapshot>;

// Test seams: each, when set, replaces one step of the lifecycle (what the Python seed does
// with monkeypatch) at a point where its race tests park or fail a step and no collaborator
// sits (docs/core-shape.md lists them and why). Only ProviderTestPeer::inject sets one, for the
// scope of the guard it returns; production leaves every one empty.
struct ProviderSeams {
  std::function<Snapshot()> acquisition_contract_snapshot;
  std::function<std::string(const std::optional<std::string>&, const std::string&, Snapshot)>
      acquire_internal;
  std::function<std::optional<std::string>(const std::optional<std::string>&, const std::string&,
                                           const std::optional<std::string>&, bool,
                                           const Snapshot&)>
      reuse_in_process_sandbox;
  std::function<std::optional<std::string>(const std::string&, const std::string&,
                                           const std::string&, const Snapshot&)>
      recheck_cached_sandbox;
  std::function<std::string(const std::optional<std::string>&, const std::string&,
                            const std::string&, const Snapshot&)>
      create_sandbox;
  std::function<std::string(const std::optional<std::string>&, const std::string&, InfoPtr,
                            const std::string&)>
      register_created_sandbox;
  std::function<void(const std::string&, const Predicate&)> destroy_tracked;
  std::function<bool(const std::string&, const WarmEntry&, const std::string&, const Predicate&)>
      destroy_warm_entry;
  std::function<void(std::optional<double>)> reap_expired_warm;
};

// Notes how the acquisition running on this thread got its sandbox (provider_acquire.cpp).
void note_acquire_path(AcquirePath path);

struct Provider::Impl {
  explicit Impl(ProviderDeps deps);
  ~Impl();

  // ── the public API (provider.hpp), one to one ──
  void start();
  // A restore in progress on this thread (provider_snapshots.cpp): the conversation's old
  // sandbox is replaced and its directories restored before the acquisition looks for one, and
  // the create makes it from the snapshot's image.
  void prepare_restore(const std::optional<std::string>& thread_id, const std::string& user_id,
                       const std::string& sandbox_id) EXCLUDES(mutex_);
  // Snapshots (provider_snapshots.cpp): one deleted with its image (not_found when none);
  // every one past its time deleted (the idle checker's pass); how many.
  SnapshotRecord delete_snapshot(const std::string& user_id, const std::string& name);
  std::size_t delete_expired_snapshots();
  // The images of deleted snapshots a sandbox still ran from, removed where nothing does now
  // (the engine refuses the others; they stay remembered). Run at start (so each one-shot
  // command takes its turn), by the idle pass and at shutdown.
  void remove_remembered_images();
  // The conversation a tracked sandbox serves, with its info (provider_snapshots.cpp), for a
  // snapshot or a fork of it: not_found when the sandbox is not tracked here, invalid_argument
  // when it serves no conversation (`purpose` says what needed one).
  struct ServedConversation {
    InfoPtr info;
    ThreadKey conversation;
  };
  ServedConversation served_conversation(const std::string& sandbox_id,
                                         std::string_view purpose) const EXCLUDES(mutex_);
  // A failed fork's new conversation directory, emptied and removed (provider_fork.cpp); a
  // failure is logged, never thrown.
  void remove_new_conversation_dir(const std::string& thread_id, const std::string& user_id);
  // The image the create of this thread's acquisition makes the sandbox from, or nullptr.
  static const std::string* restoring_image();
  // A snapshot of `served` taken with its conversation's lock already held by the caller (the
  // body of Provider::snapshot; the archive pass holds the lock across the snapshot and the
  // removal of the container).
  SnapshotRecord snapshot_locked(const std::string& sandbox_id, const ServedConversation& served,
                                 const std::string& snapshot_name) EXCLUDES(mutex_);
  // ── the archived tier (provider_archive.cpp) ──
  bool archiving_enabled() const { return snapshots_ && options_.archive_after_seconds > 0; }
  // Snapshots every released conversation sandbox idle at least archive_after_seconds and
  // removes its container; how many. A sandbox whose snapshot fails stays as it was.
  int archive_idle_released() EXCLUDES(mutex_);
  // The archive of the conversation whose sandbox id is `sandbox_id`, when one was made.
  std::optional<SnapshotRecord> archive_of(const std::string& user_id, const std::string& thread_id,
                                           const std::string& sandbox_id) const;
  // Makes the conversation's sandbox from its archive (the acquisition's create path, path
  // restored), then deletes the archive; called where the acquisition would discover or create.
  std::string restore_archived(const std::string& thread_id, const std::string& sandbox_id,
                               const std::string& user_id, Snapshot snapshot,
                               const SnapshotRecord& archive) EXCLUDES(mutex_);
  // The host's free-space floor (options_.min_free_disk_bytes) under the state directory and
  // the engine's storage: a new sandbox is refused below it, as a capacity refusal
  // (provider_storage.cpp).
  void check_free_disk(const std::string& sandbox_id, const std::string& user_id) EXCLUDES(mutex_);
  // One pass of the writable-layer bound (provider_storage.cpp): at most
  // kLayerChecksPerPass sandboxes, taking up where the last pass stopped; one whose layer is
  // past disk_limit is destroyed and an over_disk_limit event says why. Idle checker only.
  // One writable-layer pass; more_remain when it stopped at kLayerChecksPerPass with others
  // left to look at. A pass already running elsewhere makes this one return done at once.
  enum class LayerPass { done, more_remain };
  LayerPass stop_layers_past_bound() EXCLUDES(mutex_, layer_pass_mutex_);
  LayerPass layer_pass() REQUIRES(layer_pass_mutex_) EXCLUDES(mutex_);
  // The sandbox `sandbox_id` just acquired, with its isolation verified (and re-applied where
  // the engine undid it); one whose isolation cannot be kept is destroyed and the acquisition
  // runs again, once. Outside the registry mutex, under the conversation's lock.
  std::string keep_isolation_at_hand_out(std::string sandbox_id,
                                         const std::optional<std::string>& thread_id,
                                         const std::string& user) EXCLUDES(mutex_);
  std::string acquire(const std::optional<std::string>& thread_id,
                      const std::optional<std::string>& user_id) EXCLUDES(mutex_);
  AcquireResult acquire_traced(const std::optional<std::string>& thread_id,
                               const std::optional<std::string>& user_id) EXCLUDES(mutex_);
  AsyncAcquisition acquire_async(const std::optional<std::string>& thread_id,
                                 const std::optional<std::string>& user_id) EXCLUDES(mutex_);
  ClientPtr get(const std::string& sandbox_id) EXCLUDES(mutex_);
  ReleaseOutcome release(const std::string& sandbox_id) EXCLUDES(mutex_);
  DestroyOutcome destroy(const std::string& sandbox_id) EXCLUDES(mutex_);
  void shutdown() EXCLUDES(mutex_);
  void detach() EXCLUDES(mutex_);
  RegistrySnapshot export_registry() EXCLUDES(mutex_);
  Provider::TrackedInfos tracked_infos(std::size_t limit) EXCLUDES(mutex_);
  std::optional<TrackedSandbox> find(const std::string& sandbox_id) EXCLUDES(mutex_);
  void import_registry(const RegistrySnapshot& snapshot) EXCLUDES(mutex_);
  bool uses_thread_data_mounts() const;
  bool provider_uses_thread_data_mounts();
  bool sandbox_uses_thread_data_mounts(const std::string& sandbox_id) EXCLUDES(mutex_);
  void cleanup_idle_sandboxes(double idle_timeout) EXCLUDES(mutex_);
  void reap_expired_warm(std::optional<double> timeout) EXCLUDES(mutex_);
  // Only `user`'s released sandboxes when set (max_per_user).
  std::optional<std::string> evict_oldest_warm(const std::optional<std::string>& user = {})
      EXCLUDES(mutex_);
  ReconcileReport reconcile_orphans() EXCLUDES(mutex_);
  void renew_owned_leases() EXCLUDES(mutex_);
  void prune_idle_thread_locks() EXCLUDES(mutex_);
  std::optional<ReconciliationIdentity> prepare_sandbox_reconciliation_identity(
      const std::string& sandbox_id);
  ReconnectResult reconnect_sandbox_for_reconciliation(const std::string& sandbox_id,
                                                       const std::string& thread_id,
                                                       const std::string& user_id,
                                                       const ReconciliationIdentity& identity);
  Provider::Counts counts() EXCLUDES(mutex_);
  Provider::Capacity capacity() EXCLUDES(mutex_);
  ProviderEventCounts event_counts() const;

  // ── acquisition (design §5.3–§5.11; provider_acquire.cpp) ──
  std::string acquire_with_restarts(const std::optional<std::string>& thread_id,
                                    const std::string& user_id) EXCLUDES(mutex_);
  Snapshot acquisition_contract_snapshot();
  Snapshot acquisition_contract_snapshot_step();
  std::string acquire_internal(const std::optional<std::string>& thread_id,
                               const std::string& user_id, Snapshot snapshot) EXCLUDES(mutex_);
  std::string acquire_internal_step(const std::optional<std::string>& thread_id,
                                    const std::string& user_id, Snapshot snapshot) EXCLUDES(mutex_);
  std::optional<std::string> reuse_in_process_sandbox(
      const std::optional<std::string>& thread_id, const std::string& user_id,
      const std::optional<std::string>& expected_sandbox_id, bool post_lock,
      const Snapshot& snapshot) EXCLUDES(mutex_);
  std::optional<std::string> reuse_in_process_sandbox_step(
      const std::optional<std::string>& thread_id, const std::string& user_id,
      const std::optional<std::string>& expected_sandbox_id, bool post_lock,
      const Snapshot& snapshot) EXCLUDES(mutex_);
  std::optional<std::string> reclaim_warm_pool_sandbox(const std::optional<std::string>& thread_id,
                                                       const std::string& sandbox_id,
                                                       const std::string& user_id, bool post_lock,
                                                       const Snapshot& snapshot) EXCLUDES(mutex_);
  std::string discover_or_create_with_lock(const std::string& thread_id,
                                           const std::string& sandbox_id,
                                           const std::string& user_id, const Snapshot& snapshot)
      EXCLUDES(mutex_);
  std::optional<std::string> recheck_cached_sandbox(const std::string& thread_id,
                                                    const std::string& sandbox_id,
                                                    const std::string& user_id,
                                                    const Snapshot& snapshot) EXCLUDES(mutex_);
  std::string create_sandbox(const std::optional<std::string>& thread_id,
                             const std::string& sandbox_id, const std::string& user_id,
                             const Snapshot& snapshot) EXCLUDES(mutex_);
  std::string create_sandbox_step(const std::optional<std::string>& thread_id,
                                  const std::string& sandbox_id, const std::string& user_id,
                                  const Snapshot& snapshot) EXCLUDES(mutex_);
  std::string register_discovered_sandbox(const std::string& thread_id, InfoPtr info,
                                          const std::string& user_id) EXCLUDES(mutex_);
  std::string register_created_sandbox(const std::optional<std::string>& thread_id,
                                       const std::string& sandbox_id, InfoPtr info,
                                       const std::string& user_id) EXCLUDES(mutex_);
  std::string register_created_sandbox_step(const std::optional<std::string>& thread_id,
                                            const std::string& sandbox_id, InfoPtr info,
                                            const std::string& user_id) EXCLUDES(mutex_);
  void destroy_unready_sandbox(const std::string& sandbox_id, const SandboxInfo& info)
      EXCLUDES(mutex_);
  // A pre-started slot for this conversation's create, when the backend has one ready;
  // counts the claim or the miss and its reason.
  std::optional<SandboxInfo> claim_slot(const CreateRequest& request) EXCLUDES(mutex_);
  // false when it was not destroyed (adopted, being torn down, or a peer's lease).
  bool destroy_untracked_creation(const std::string& sandbox_id, const SandboxInfo& info,
                                  const std::string& what) EXCLUDES(mutex_);
  // Evicts (per the policy) until within the cap; false when the policy refuses to create
  // beyond it.
  bool make_room(const std::string& creating_id) EXCLUDES(mutex_);
  // ── network isolation (provider.cpp) ──
  bool namespaced(const SandboxInfo& info) const;
  bool makes_namespaced_sandboxes() const;
  // Whether `info` was made under the policy the backend is configured with now (a sandbox
  // found under another is replaced through the fenced destroy path, never reused).
  static std::string policy_or_open(const std::string& policy);
  bool network_policy_matches(const SandboxInfo& info) const;
  SandboxRoute route_to(const SandboxInfo& info) const;
  // Readiness through the sandbox's route (its namespace, its headers), else the host hook.
  bool wait_until_ready(const SandboxInfo& info, double timeout_seconds);
  std::optional<SandboxEndpoint> endpoint(const std::string& sandbox_id) EXCLUDES(mutex_);
  // Destroys `info` (found, not tracked, under another network policy) through the fenced path;
  // throws ServiceError conflict when a peer holds it.
  void replace_for_policy(const std::string& sandbox_id, const SandboxInfo& info);

  // ── ceilings (provider_capacity.cpp) ──
  // true when replicas is a ceiling or max_per_user is set: creations are admitted first.
  bool enforces_ceilings() const {
    return options_.overflow_policy != OverflowPolicy::soft || options_.max_per_user > 0;
  }
  // Admits a creation under the ceilings: evicts released sandboxes (the user's own for
  // max_per_user) when that makes room, queues (wait) or refuses (ServiceError capacity).
  // On return this creation is counted (begin_creation).
  void admit_creation(const std::string& sandbox_id, const std::string& user_id) EXCLUDES(mutex_);
  std::string capacity_refusal(const char* reason, const std::string& user_id,
                               double waited_seconds) EXCLUDES(mutex_);
  void notify_capacity_freed() { capacity_freed_.notify_all(); }
  // The deployment-wide ledger (ledger_), when the store offers one: renewed with the leases,
  // released when a sandbox is gone (else it expires within one TTL).
  void renew_capacity_reservations() EXCLUDES(mutex_, ledger_order_);
  void release_capacity(const std::string& sandbox_id, const std::string& user)
      EXCLUDES(mutex_, ledger_order_);

  // ── ids and mounts ──
  std::string sandbox_id_for_thread(const std::optional<std::string>& thread_id,
                                    const std::string& user_id, const Snapshot& snapshot);
  std::vector<Mount> get_extra_mounts(const std::optional<std::string>& thread_id,
                                      const std::string& user_id);
  void ensure_skills_projection(const std::string& user_id);
  CreateRequest build_create_request(const std::optional<std::string>& thread_id,
                                     const std::string& sandbox_id, const std::string& user_id);
  void check_reported_identity(const SandboxInfo& info, const std::string& thread_id,
                               const std::string& user_id) const;
  InfoPtr revalidate_through_create(const std::string& thread_id, const std::string& sandbox_id,
                                    const std::string& user_id, const Snapshot& snapshot);
  void install_validated_info(const std::string& sandbox_id, const InfoPtr& examined,
                              const InfoPtr& validated) EXCLUDES(mutex_);
  // Throws SandboxIdentityCollisionError when the registry tracks `sandbox_id` for another
  // conversation (SandboxRegistry::identity_conflict).
  void check_identity_locked(const std::string& sandbox_id, const ThreadKey& key) const
      REQUIRES(mutex_);

  // ── ownership (design §7.7–§7.9; provider_ownership.cpp) ──
  void publish_ownership(const std::string& sandbox_id) EXCLUDES(mutex_);
  bool claim_ownership(const std::string& sandbox_id, bool for_destroy);
  bool refresh_ownership(const std::string& sandbox_id);
  void release_ownership(const std::string& sandbox_id);
  void with_held_teardown_lease(const std::string& sandbox_id, const std::function<void()>& stop);
  bool reserve_local_teardown(const std::string& sandbox_id, const Predicate& still_reapable)
      EXCLUDES(mutex_);
  void finish_local_teardown(const std::string& sandbox_id) EXCLUDES(mutex_);
  bool teardown_in_progress(const std::string& sandbox_id) EXCLUDES(mutex_);
  using Deadline = std::chrono::steady_clock::time_point;
  Deadline teardown_wait_deadline() const;
  bool wait_out_teardown(const std::string& sandbox_id, Deadline deadline) EXCLUDES(mutex_);
  void forget(const std::string& sandbox_id, std::optional<std::uint64_t> expected_epoch)
      EXCLUDES(mutex_);

  // ── teardown and health (design §5.13, §5.16, §6; provider_teardown.cpp) ──
  DestroyOutcome destroy_tracked(const std::string& sandbox_id, const Predicate& still_reapable)
      EXCLUDES(mutex_);
  DestroyOutcome destroy_tracked_step(const std::string& sandbox_id,
                                      const Predicate& still_reapable) EXCLUDES(mutex_);
  bool destroy_warm_entry(const std::string& sandbox_id, const WarmEntry& entry,
                          const std::string& reason, const Predicate& still_reapable)
      EXCLUDES(mutex_);
  bool destroy_warm_entry_step(const std::string& sandbox_id, const WarmEntry& entry,
                               const std::string& reason, const Predicate& still_reapable)
      EXCLUDES(mutex_);
  void reap_expired_warm_step(std::optional<double> timeout) EXCLUDES(mutex_);
  // ── the paused tier (provider_pause.cpp) ──
  bool pausing_enabled() const { return pausing_ && options_.pause_after_seconds > 0; }
  // Pauses every warm sandbox released longer than pause_after_seconds ago (the policy
  // agreeing); returns how many it paused.
  int pause_idle_warm() EXCLUDES(mutex_);
  // Thaws a paused pool entry before a reclaim hands it out. false: the container is gone (the
  // entry is dropped, the acquisition creates anew); throws when the backend refuses and the
  // container is still there (the entry stays paused).
  bool thaw_for_reclaim(const std::string& sandbox_id, const InfoPtr& info) EXCLUDES(mutex_);
  // A sandbox found by discovery or reconciliation may have been paused by a previous
  // process: thaw it (idempotent) before it is handed out or pooled as running.
  void thaw_found(const SandboxInfo& info);
  Predicate still_this_warm_entry(const std::string& sandbox_id, const WarmEntry& entry) const;
  std::optional<bool> check_alive(const std::string& sandbox_id, const SandboxInfo& info);
  void drop_unhealthy_sandbox(const std::string& sandbox_id, const std::string& reason,
                              const InfoPtr& expected_info) EXCLUDES(mutex_);

  // ── helpers ──
  TrackedSandbox tracked_entry(const SandboxEntry& entry) const;
  std::shared_ptr<ThreadLock> thread_lock(const ThreadKey& key) EXCLUDES(mutex_);
  std::string effective_user(const std::optional<std::string>& user_id) const;
  ClientPtr make_client(const std::string& sandbox_id, const std::string& url);
  template <class Describe>
  void close_client(const ClientPtr& client, const Describe& what_on_error) {
    if (!client) return;
    try {
      client->close();
    } catch (const std::exception& e) {
      log(LogLevel::warning, what_on_error() + ": " + e.what());
    }
  }
  bool negotiates_contract() const;
  double now() const { return clock_->monotonic_now(); }
  double to_wall(double monotonic) const { return monotonic + wall_minus_monotonic(); }
  double from_wall(double wall) const { return wall - wall_minus_monotonic(); }
  double wall_minus_monotonic() const { return clock_->wall_now() - clock_->monotonic_now(); }
  void log(LogLevel level, const std::string& message) const { logger_->log(level, message); }
  template <class Message>
  void log_lazily(LogLevel level, const Message& message) const {
    if (logger_->enabled(level)) logger_->log(level, message());
  }

  // ── background threads (provider_background.cpp) ──
  void start_background_threads();
  void stop_background_threads() EXCLUDES(background_mutex_);
  void idle_checker_loop(std::optional<double> idle_timeout);
  // Whether the layer watcher has work here: a WritableLayerUsage backend and a disk_limit.
  bool watching_layers() const {
    return writable_layers_ != nullptr && paths_->storage().limit_bytes() > 0;
  }
  void layer_watch_loop();
  // Whether shutdown() has asked the background threads to stop (a long pass ends early).
  bool background_stopping() EXCLUDES(background_mutex_);
  void renewal_loop();
  bool wait_for_background_tick(double seconds) EXCLUDES(background_mutex_);
  void run_async_acquisition(const std::shared_ptr<AsyncAcquisition::State>& state,
                             const std::optional<std::string>& thread_id, const std::string& user,
                             const std::shared_ptr<ThreadLock>& lock);

  // ── collaborators ──
  std::shared_ptr<SandboxBackend> backend_;
  // backend_'s MountContractNegotiation capability, or nullptr; set once by the constructor.
  MountContractNegotiation* negotiation_ = nullptr;
  // backend_'s SandboxPausing capability, or nullptr (the paused tier is then skipped); set once
  // by the constructor.
  SandboxPausing* pausing_ = nullptr;
  PreStartedSlots* slots_ = nullptr;  // the backend's slots, when it offers them
  // backend_'s network capabilities, or nullptr; set once by the constructor.
  NamespacedSandboxes* namespaced_ = nullptr;
  SandboxNetworkPolicy* network_policy_ = nullptr;
  // backend_'s IsolationKeeping capability, or nullptr; set once by the constructor.
  IsolationKeeping* isolation_ = nullptr;
  // backend_'s WritableLayerUsage capability, or nullptr; set once by the constructor.
  WritableLayerUsage* writable_layers_ = nullptr;
  std::string backend_use_;  // for messages that name the backend; set by the constructor
  // backend_'s SandboxSnapshots capability, or nullptr; set once by the constructor.
  SandboxSnapshots* snapshots_ = nullptr;
  // Where snapshots live (host/snapshot_store.hpp); made once by the constructor.
  std::unique_ptr<SnapshotStore> snapshot_store_;
  // One snapshot taken (or deleted) at a time per process: the ceilings are counted and the new
  // one published under it. Guards no field; a leaf taken after the conversation's lock, with
  // file and engine work under it, never with the registry mutex.
  Mutex snapshot_mutex_;
  // One writable-layer pass at a time (the layer watcher's, or an embedder's or sandboxctl
  // reap's call): held for the whole pass, engine calls included; taken before `mutex_` and
  // before any conversation's lock, never under them.
  Mutex layer_pass_mutex_;
  // Where the last writable-layer pass stopped (it looks at a bounded number each time).
  std::string next_layer_to_check_ GUARDED_BY(layer_pass_mutex_);
  // The engine's storage path for the free-space floor (EngineStorage), asked of the backend
  // once, under engine_storage_once_; "" when it has none here.
  std::once_flag engine_storage_once_;
  std::string engine_storage_path_;
  // ownership_'s CapacityLedger capability when ceilings are on, or nullptr (the ceilings then
  // hold per process); set once by the constructor.
  CapacityLedger* ledger_ = nullptr;
  std::shared_ptr<OwnershipStore> ownership_;
  std::shared_ptr<Logger> logger_;
  std::shared_ptr<Clock> clock_;
  std::shared_ptr<const Paths> paths_;
  std::shared_ptr<CreationPlanner> planner_;  // ids, mounts, the skills projection
  const ProviderOptions options_;
  ProviderHooks hooks_;
  std::shared_ptr<LifecyclePolicy> policy_;
  // Null: nothing recorded, and nothing is looked up for it (release and acquire are hot).
  const std::shared_ptr<LifecycleEventLog> event_log_;
  void note(LifecycleEventKind kind, const std::string& sandbox_id,
            const std::optional<ThreadKey>& conversation, const std::string& reason = "") const {
    if (!event_log_) return;
    event_log_->record(
        kind, sandbox_id, conversation ? std::optional(conversation->user_id) : std::nullopt,
        conversation ? std::optional(conversation->thread_id) : std::nullopt, reason);
  }
  ProviderSeams seams_;

  // Orders writes to the capacity ledger (issue 32 B): a renewal holds it from its snapshot of
  // the held sandboxes until the store has written them, and a release holds it around its
  // unreserve, so a release is never overwritten by a renewal that saw the sandbox before it
  // went. Taken before mutex_, never while holding it; store calls run under it (a release
  // waits at most one renewal's store call), never under mutex_.
  mutable Mutex ledger_order_ ACQUIRED_BEFORE(mutex_);
  mutable Mutex mutex_;  // the registry mutex (see the lock story)
  SandboxRegistry registry_ GUARDED_BY(mutex_);
  // Creations queued for a slot under a ceiling; beside the registry so that the
  // room check and begin_creation are one step.
  CapacityQueue capacity_queue_ GUARDED_BY(mutex_);
  // With mutex_: a slot may have freed (a release, a teardown, a creation's end, a forget).
  std::condition_variable capacity_freed_;
  std::condition_variable teardown_finished_;  // with mutex_: a local teardown finished

  // Event counters: atomics, each incremented where its event happens (relaxed order; read
  // only for metrics), so counting takes no lock.
  struct EventCounters {
    std::atomic<std::uint64_t> evictions{0}, idle_reaps{0}, adoptions{0}, lease_renewals{0},
        lease_lapses{0}, lease_losses{0}, pauses{0}, pause_failures{0}, resumes{0},
        resume_microseconds{0}, capacity_waits{0}, capacity_wait_microseconds{0},
        rejections_capacity{0}, rejections_per_user{0}, rejections_wait_timeout{0},
        rejections_queue_full{0}, rejections_min_free_disk{0}, disk_limit_stops{0}, bursts{0},
        slot_claims{0}, slot_claim_microseconds{0};
    std::array<std::atomic<std::uint64_t>, 5> slot_misses{};  // by PreStartedSlots::Miss
    std::array<std::atomic<std::uint64_t>, ProviderEventCounts::kCapacityWaitBounds.size() + 1>
        capacity_wait_buckets{};
  };
  EventCounters events_;

  Mutex background_mutex_;
  std::condition_variable background_wake_;
  bool background_stop_ GUARDED_BY(background_mutex_) = false;
  std::thread idle_checker_;   // started/joined only by start()/shutdown()
  std::thread renewer_;        // started/joined only by start()/shutdown()
  std::thread layer_watcher_;  // started/joined only by start()/shutdown()

  // Taken before every other lock (the lock story): the registry's, and the background and
  // capacity-ledger locks shutdown() takes on its way.
  Mutex shutdown_mutex_ ACQUIRED_BEFORE(mutex_, background_mutex_, ledger_order_);

  // Whether a reconciliation pass has logged yet: the first is "Startup reconciliation", the
  // periodic ones after it are "Reconciliation pass".
  std::atomic<bool> reconciled_once_{false};

  TeardownLeases teardown_;
  std::shared_ptr<AsyncAcquisitions> async_;  // set by the constructor, never reset

  // Last, so destroyed first: a private pool joins its workers while everything a queued task
  // uses is still alive.
  std::shared_ptr<Executor> blocking_executor_;
  std::shared_ptr<Executor> lock_wait_executor_;
};

}  // namespace sandboxd::core

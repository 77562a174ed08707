// Provider: acquisition (design §5.3–§5.11): reuse an active sandbox, reclaim a warm one,
// discover a running one or create one, under the conversation's locks.
#include <chrono>

#include "fixed_decimals.hpp"
#include "provider_impl.hpp"
#include "scope_exit.hpp"

namespace sandboxd::core {
namespace {

// Where acquire_traced wants the path of the acquisition running on this thread. A whole
// synchronous acquisition runs on its caller's thread, so the branch that succeeds notes it
// here without every step having to pass it back.
thread_local AcquirePath* t_acquire_path = nullptr;

}  // namespace

void note_acquire_path(AcquirePath path) {
  if (t_acquire_path) *t_acquire_path = path;
}

// ── acquire (design §5.3, §5.4) ────────────────────────────────────────────────

namespace {

LifecycleEventKind lifecycle_event_of(AcquirePath path);

}  // namespace

std::string Provider::Impl::acquire(const std::optional<std::string>& thread_id,
                                    const std::optional<std::string>& user_id) {
  const std::string user = effective_user(user_id);
  // The path is noted for the event log too: here, unless acquire_traced asked for it already.
  AcquirePath path = AcquirePath::created;
  AcquirePath* const outer = t_acquire_path;
  if (outer == nullptr) t_acquire_path = &path;
  ScopeExit restore([outer] { t_acquire_path = outer; });
  std::string sandbox_id;
  if (!thread_id) {
    sandbox_id = acquire_with_restarts(std::nullopt, user);
    if (isolation_) sandbox_id = keep_isolation_at_hand_out(std::move(sandbox_id), thread_id, user);
  } else {
    validate_thread_id(*thread_id);
    validate_user_id(user);
    auto lock = thread_lock({user, *thread_id});
    std::lock_guard<ThreadLock> held(*lock);
    sandbox_id = acquire_with_restarts(thread_id, user);
    if (isolation_) sandbox_id = keep_isolation_at_hand_out(std::move(sandbox_id), thread_id, user);
  }
  const AcquirePath taken = outer ? *outer : path;
  {
    MutexLock lock(mutex_);
    if (SandboxEntry* entry = registry_.find(sandbox_id)) entry->last_acquire = taken;
  }
  if (event_log_) event_log_->record(lifecycle_event_of(taken), sandbox_id, user, thread_id);
  return sandbox_id;
}

std::string Provider::Impl::keep_isolation_at_hand_out(std::string sandbox_id,
                                                       const std::optional<std::string>& thread_id,
                                                       const std::string& user) {
  for (int attempt = 0;; ++attempt) {
    InfoPtr info;
    {
      MutexLock lock(mutex_);
      if (const SandboxEntry* entry = registry_.find(sandbox_id)) info = entry->info;
    }
    if (!info) return sandbox_id;
    try {
      isolation_->keep_isolation(*info);
      return sandbox_id;
    } catch (const std::exception& e) {
      if (attempt > 0) {
        throw ServiceError(ErrorKind::unavailable,
                           "sandbox " + sandbox_id + " was made again and its isolation still " +
                               "cannot be kept: " + e.what() + "; not handing it out");
      }
      // Failed closed: never handed out as it is. Replaced through the fenced destroy path.
      log(LogLevel::warning, "Sandbox " + sandbox_id + "'s isolation cannot be kept (" + e.what() +
                                 "); replacing it before anyone gets it");
      if (destroy(sandbox_id) == DestroyOutcome::refused) {
        throw ServiceError(ErrorKind::conflict, "sandbox " + sandbox_id +
                                                    "'s isolation cannot be kept and another " +
                                                    "instance holds it; try again later");
      }
      sandbox_id = acquire_with_restarts(thread_id, user);
    }
  }
}

namespace {

LifecycleEventKind lifecycle_event_of(AcquirePath path) {
  switch (path) {
    case AcquirePath::reused:
      return LifecycleEventKind::reused;
    case AcquirePath::reclaimed:
      return LifecycleEventKind::reclaimed;
    case AcquirePath::resumed:
      return LifecycleEventKind::resumed;
    case AcquirePath::discovered:
      return LifecycleEventKind::discovered;
    case AcquirePath::claimed:
      return LifecycleEventKind::claimed;
    case AcquirePath::restored:
      return LifecycleEventKind::restored;
    case AcquirePath::created:
      break;
  }
  return LifecycleEventKind::created;
}

}  // namespace

AcquireResult Provider::Impl::acquire_traced(const std::optional<std::string>& thread_id,
                                             const std::optional<std::string>& user_id) {
  AcquireResult result;
  ScopeExit restore(
      [outer = std::exchange(t_acquire_path, &result.path)] { t_acquire_path = outer; });
  result.sandbox_id = acquire(thread_id, user_id);
  MutexLock lock(mutex_);
  if (const SandboxEntry* entry = registry_.find(result.sandbox_id); entry && entry->info) {
    result.info = entry->info;  // shared, not copied: an info is immutable once registered
    result.conversation = entry->identity;
  }
  return result;
}

Snapshot Provider::Impl::acquisition_contract_snapshot() {
  if (seams_.acquisition_contract_snapshot) return seams_.acquisition_contract_snapshot();
  return acquisition_contract_snapshot_step();
}

Snapshot Provider::Impl::acquisition_contract_snapshot_step() {
  if (!negotiates_contract()) return std::nullopt;
  negotiation_->refresh_capabilities_if_stale();
  return negotiation_->mount_contract_snapshot();
}

std::string Provider::Impl::acquire_with_restarts(const std::optional<std::string>& thread_id,
                                                  const std::string& user_id) {
  const Deadline teardown_deadline = teardown_wait_deadline();
  int contract_attempts = 0;
  while (true) {
    const Snapshot snapshot = acquisition_contract_snapshot();
    try {
      return acquire_internal(thread_id, user_id, snapshot);
    } catch (const MountContractChangedError& e) {
      if (++contract_attempts >= kMaxContractAttempts) throw;
      log(LogLevel::info, std::string(e.what()) + "; restarting acquisition for user/thread " +
                              user_id + "/" + thread_id.value_or("<anonymous>") +
                              " under the new contract");
    } catch (const SandboxBeingDestroyedError& e) {
      // Our own eviction or a peer may be stopping this conversation's old container right
      // now: wait for that stop to finish, then acquire anew instead of failing the turn.
      if (!wait_out_teardown(e.sandbox_id(), teardown_deadline)) throw;
      log(LogLevel::info, "Teardown of sandbox " + e.sandbox_id() +
                              " finished; retrying acquisition for user/thread " + user_id + "/" +
                              thread_id.value_or("<anonymous>"));
    }
  }
}

std::string Provider::Impl::acquire_internal(const std::optional<std::string>& thread_id,
                                             const std::string& user_id, Snapshot snapshot) {
  if (seams_.acquire_internal) return seams_.acquire_internal(thread_id, user_id, snapshot);
  return acquire_internal_step(thread_id, user_id, snapshot);
}

std::string Provider::Impl::acquire_internal_step(const std::optional<std::string>& thread_id,
                                                  const std::string& user_id, Snapshot snapshot) {
  ensure_skills_projection(user_id);
  if (!snapshot && negotiates_contract()) snapshot = acquisition_contract_snapshot();
  std::optional<std::string> expected;
  if (thread_id && snapshot) expected = sandbox_id_for_thread(thread_id, user_id, snapshot);
  if (restoring_image() != nullptr) {
    // A restore: the conversation's sandbox is replaced, so nothing below finds an old one.
    if (!expected) expected = sandbox_id_for_thread(thread_id, user_id, std::nullopt);
    prepare_restore(thread_id, user_id, *expected);
  }

  if (auto reused = reuse_in_process_sandbox(thread_id, user_id, expected, false, snapshot)) {
    note_acquire_path(AcquirePath::reused);
    return std::move(*reused);
  }
  const std::string sandbox_id =
      expected ? std::move(*expected) : sandbox_id_for_thread(thread_id, user_id, std::nullopt);
  if (thread_id) {
    MutexLock lock(mutex_);
    check_identity_locked(sandbox_id, {user_id, *thread_id});
  }
  // Notes its own path: reclaimed, or resumed when it thawed a paused sandbox.
  if (auto reclaimed = reclaim_warm_pool_sandbox(thread_id, sandbox_id, user_id, false, snapshot)) {
    return std::move(*reclaimed);
  }
  // A teardown of this very id, by this process (eviction, idle reap) or by a peer, is the one
  // thing that makes discover-or-create meet a dying container: let it finish first.
  if (teardown_in_progress(sandbox_id) &&
      !wait_out_teardown(sandbox_id, teardown_wait_deadline())) {
    throw SandboxBeingDestroyedError(sandbox_id);
  }
  if (thread_id) {
    // An archived conversation (its container removed when it idled): made from its archive.
    if (restoring_image() == nullptr && snapshots_ != nullptr) {
      if (auto archive = archive_of(user_id, *thread_id, sandbox_id)) {
        return restore_archived(*thread_id, sandbox_id, user_id, snapshot, *archive);
      }
    }
    return discover_or_create_with_lock(*thread_id, sandbox_id, user_id, snapshot);
  }
  note_acquire_path(AcquirePath::created);
  return create_sandbox(std::nullopt, sandbox_id, user_id, snapshot);
}

// ── identity guards (design §4.3) ──────────────────────────────────────────────

void Provider::Impl::check_identity_locked(const std::string& sandbox_id,
                                           const ThreadKey& key) const {
  if (const auto stored = registry_.identity_conflict(sandbox_id, key)) {
    throw SandboxIdentityCollisionError("sandbox ID collision for " + sandbox_id +
                                        ": tracked identity is " + to_repr(stored) +
                                        ", requested identity is " + to_repr(key));
  }
}

// ── revalidation (design §5.7) ─────────────────────────────────────────────────

void Provider::Impl::check_reported_identity(const SandboxInfo& info, const std::string& thread_id,
                                             const std::string& user_id) const {
  // A verified identity that differs is a collision: nothing is destroyed or re-created.
  if ((info.user_id && *info.user_id != user_id) ||
      (info.thread_id && *info.thread_id != thread_id)) {
    throw SandboxIdentityCollisionError(
        "sandbox ID collision for " + info.sandbox_id + ": backend reports identity " +
        to_repr(ThreadKey{info.user_id.value_or(""), info.thread_id.value_or("")}) +
        ", requested identity is " + to_repr(ThreadKey{user_id, thread_id}));
  }
}

InfoPtr Provider::Impl::revalidate_through_create(const std::string& thread_id,
                                                  const std::string& sandbox_id,
                                                  const std::string& user_id,
                                                  const Snapshot& snapshot) {
  auto validated = std::make_shared<const SandboxInfo>(
      backend_->create(build_create_request(thread_id, sandbox_id, user_id)));
  check_reported_identity(*validated, thread_id, user_id);
  if (snapshot && validated->mount_contract_version != snapshot->version) {
    throw MountContractChangedError(snapshot->version, validated->mount_contract_version);
  }
  return validated;
}

void Provider::Impl::install_validated_info(const std::string& sandbox_id, const InfoPtr& examined,
                                            const InfoPtr& validated) {
  ClientPtr fresh;
  if (validated->sandbox_url != examined->sandbox_url) {
    fresh = make_client(sandbox_id, validated->sandbox_url);
  }
  ClientPtr unused;
  {
    MutexLock lock(mutex_);
    // The replaced client when the URL changed; `fresh` itself when the entry changed meanwhile.
    unused = registry_.replace_info(sandbox_id, examined, validated, fresh);
  }
  close_client(unused, [&] {
    return unused == fresh ? "Error closing unused sandbox client " + sandbox_id
                           : "Error closing sandbox " + sandbox_id + " after its URL changed";
  });
}

// ── reuse (design §5.5) ────────────────────────────────────────────────────────

std::optional<std::string> Provider::Impl::reuse_in_process_sandbox(
    const std::optional<std::string>& thread_id, const std::string& user_id,
    const std::optional<std::string>& expected_sandbox_id, bool post_lock,
    const Snapshot& snapshot) {
  if (seams_.reuse_in_process_sandbox) {
    return seams_.reuse_in_process_sandbox(thread_id, user_id, expected_sandbox_id, post_lock,
                                           snapshot);
  }
  return reuse_in_process_sandbox_step(thread_id, user_id, expected_sandbox_id, post_lock,
                                       snapshot);
}

std::optional<std::string> Provider::Impl::reuse_in_process_sandbox_step(
    const std::optional<std::string>& thread_id, const std::string& user_id,
    const std::optional<std::string>& expected_sandbox_id, bool post_lock,
    const Snapshot& snapshot) {
  if (!thread_id) return std::nullopt;
  const ThreadKey key{user_id, *thread_id};
  std::string sandbox_id;
  InfoPtr info;
  bool in_teardown = false;  // logged once the registry mutex is let go
  {
    MutexLock lock(mutex_);
    ThreadMap& conversations = registry_.conversations();
    auto mapping = conversations.find(key);
    if (mapping == conversations.end()) return std::nullopt;
    sandbox_id = mapping->second;
    if (expected_sandbox_id && *expected_sandbox_id != sandbox_id) {
      // Created under another mount contract: the old entry is left to the idle reaper.
      conversations.erase(mapping);
      return std::nullopt;
    }
    in_teardown = registry_.tearing_down(sandbox_id);
    if (!in_teardown) {
      const SandboxEntry* entry = registry_.find(sandbox_id);
      if (!entry || !entry->active() || !entry->client) {
        conversations.erase(mapping);
        return std::nullopt;
      }
      info = entry->info;
    }
  }
  if (in_teardown) {
    log(LogLevel::info,
        "Not reusing sandbox " + sandbox_id + ": it is being torn down by this instance");
    return std::nullopt;
  }

  if (info) {
    if (!network_policy_matches(*info)) {
      replace_for_policy(sandbox_id, *info);  // made under a configuration this host left
      return std::nullopt;
    }
    if (check_alive(sandbox_id, *info) == false) {
      drop_unhealthy_sandbox(sandbox_id, "container is no longer running", info);
      return std::nullopt;
    }
    if (backend_ && backend_->requires_create_validation()) {
      install_validated_info(sandbox_id, info,
                             revalidate_through_create(*thread_id, sandbox_id, user_id, snapshot));
    }
  }

  {
    MutexLock lock(mutex_);
    ThreadMap& conversations = registry_.conversations();
    auto mapping = conversations.find(key);
    if (mapping == conversations.end() || mapping->second != sandbox_id) return std::nullopt;
    SandboxEntry* entry = registry_.find(sandbox_id);
    if (!entry || !entry->active() || !entry->client) {
      conversations.erase(mapping);
      return std::nullopt;
    }
    entry->since = now();
  }
  log_lazily(LogLevel::info, [&] {
    return "Reusing in-process sandbox " + sandbox_id + " for user/thread " + user_id + "/" +
           *thread_id + (post_lock ? " (post-lock check)" : "");
  });

  try {
    publish_ownership(sandbox_id);
  } catch (const SandboxBeingDestroyedError& e) {
    log(LogLevel::info, std::string("Not reusing sandbox ") + sandbox_id + ": " + e.what());
    forget(sandbox_id, std::nullopt);
    return std::nullopt;
  }

  MutexLock lock(mutex_);
  if (registry_.tearing_down(sandbox_id) || !registry_.is_active(sandbox_id)) return std::nullopt;
  return sandbox_id;
}

// ── warm reclaim (design §5.6) ─────────────────────────────────────────────────

std::optional<std::string> Provider::Impl::reclaim_warm_pool_sandbox(
    const std::optional<std::string>& thread_id, const std::string& sandbox_id,
    const std::string& user_id, bool post_lock, const Snapshot& snapshot) {
  if (!thread_id) return std::nullopt;
  const ThreadKey key{user_id, *thread_id};
  InfoPtr info;
  bool paused = false;
  {
    MutexLock lock(mutex_);
    const SandboxEntry* entry = registry_.find(sandbox_id);
    if (!entry || !entry->released()) return std::nullopt;
    check_identity_locked(sandbox_id, key);
    if (entry->teardown) return std::nullopt;  // a stop or a pause is under way: waited out
    info = entry->info;
    paused = entry->paused() && pausing_;
  }
  if (!network_policy_matches(*info)) {
    replace_for_policy(sandbox_id, *info);  // never reused under another policy
    return std::nullopt;
  }

  const auto thaw_started = std::chrono::steady_clock::now();
  // Thawed first: a frozen sandbox is alive but answers nothing. The entry stays paused in the
  // registry until it is installed; a failed hand-out below marks it warm again.
  if (paused && !thaw_for_reclaim(sandbox_id, info)) return std::nullopt;
  ScopeExit stays_thawed([&] {
    if (!paused) return;
    MutexLock lock(mutex_);
    registry_.mark_thawed(sandbox_id, info);  // no-op once installed, stopped or replaced
  });
  if (check_alive(sandbox_id, *info) == false) {
    drop_unhealthy_sandbox(sandbox_id, "warm-pool container is no longer running", info);
    return std::nullopt;
  }
  if (backend_ && backend_->requires_create_validation()) {
    info = revalidate_through_create(*thread_id, sandbox_id, user_id, snapshot);
  }

  // Publish before the warm→active move: a refusal leaves the entry warm and the lease as is.
  try {
    publish_ownership(sandbox_id);
  } catch (const SandboxBeingDestroyedError& e) {
    log(LogLevel::info,
        std::string("Not reclaiming warm-pool sandbox ") + sandbox_id + ": " + e.what());
    forget(sandbox_id, std::nullopt);
    return std::nullopt;
  }

  ClientPtr client = make_client(sandbox_id, info->sandbox_url);
  {
    MutexLock lock(mutex_);
    if (registry_.tearing_down(sandbox_id) || !registry_.is_released(sandbox_id)) {
      client.reset();  // stopped, or handed out by another acquisition meanwhile
    } else {
      check_identity_locked(sandbox_id, key);
      registry_.install_active(sandbox_id, client, info, key, now());
    }
  }
  if (!client) return std::nullopt;
  if (paused) {
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - thaw_started).count();
    events_.resumes.fetch_add(1, std::memory_order_relaxed);
    events_.resume_microseconds.fetch_add(static_cast<std::uint64_t>(took * 1e6),
                                          std::memory_order_relaxed);
    note_acquire_path(AcquirePath::resumed);
    log_lazily(LogLevel::info, [&] {
      return "Resumed paused sandbox " + sandbox_id + " for user/thread " + user_id + "/" +
             *thread_id + " at " + info->sandbox_url + " in " + fixed(took * 1e3, 0) + " ms" +
             (post_lock ? " (post-lock check)" : "");
    });
    return sandbox_id;
  }
  note_acquire_path(AcquirePath::reclaimed);
  log_lazily(LogLevel::info, [&] {
    return "Reclaimed warm-pool sandbox " + sandbox_id + " for user/thread " + user_id + "/" +
           *thread_id + " at " + info->sandbox_url + (post_lock ? " (post-lock check)" : "");
  });
  return sandbox_id;
}

// ── discover-or-create (design §5.8) ───────────────────────────────────────────

std::optional<std::string> Provider::Impl::recheck_cached_sandbox(const std::string& thread_id,
                                                                  const std::string& sandbox_id,
                                                                  const std::string& user_id,
                                                                  const Snapshot& snapshot) {
  if (seams_.recheck_cached_sandbox) {
    return seams_.recheck_cached_sandbox(thread_id, sandbox_id, user_id, snapshot);
  }
  const std::optional<std::string> expected =
      snapshot ? std::optional<std::string>(sandbox_id) : std::nullopt;
  if (auto reused = reuse_in_process_sandbox(thread_id, user_id, expected, true, snapshot)) {
    note_acquire_path(AcquirePath::reused);
    return reused;
  }
  return reclaim_warm_pool_sandbox(thread_id, sandbox_id, user_id, true, snapshot);
}

std::string Provider::Impl::discover_or_create_with_lock(const std::string& thread_id,
                                                         const std::string& sandbox_id,
                                                         const std::string& user_id,
                                                         const Snapshot& snapshot) {
  paths_->ensure_thread_dirs(thread_id, user_id);
  const Paths::ThreadDirsEnsured ensured(thread_id, user_id);  // the mount composition skips
  const std::string lock_path = paths_->lock_file(thread_id, user_id, sandbox_id).string();
  const int handle = hooks_.file_lock.open(lock_path);
  bool locked = false;
  ScopeExit finally([&] {
    if (locked) hooks_.file_lock.unlock(handle);
    hooks_.file_lock.close(handle);
  });
  hooks_.file_lock.lock(handle);
  locked = true;

  if (auto cached = recheck_cached_sandbox(thread_id, sandbox_id, user_id, snapshot)) {
    return *cached;
  }
  if (backend_->requires_create_validation()) {
    note_acquire_path(AcquirePath::created);
    return create_sandbox(thread_id, sandbox_id, user_id, snapshot);
  }
  if (auto discovered = backend_->discover(sandbox_id)) {
    if (network_policy_matches(*discovered)) {
      thaw_found(*discovered);  // a previous process may have paused it
      note_acquire_path(AcquirePath::discovered);
      return register_discovered_sandbox(thread_id,
                                         std::make_shared<const SandboxInfo>(*discovered), user_id);
    }
    replace_for_policy(sandbox_id, *discovered);
  }
  note_acquire_path(AcquirePath::created);
  return create_sandbox(thread_id, sandbox_id, user_id, snapshot);
}

}  // namespace sandboxd::core

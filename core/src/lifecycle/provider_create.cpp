// Provider: registering a discovered or created sandbox, and creating one within the replica
// cap (design §5.9–§5.11).
#include <future>
#include <system_error>

#include "provider_impl.hpp"
#include "scope_exit.hpp"

namespace sandboxd::core {

namespace {
// How long a claimed slot may take to answer: it was ready when the pool last looked, so it
// answers at once unless it died since.
constexpr double kClaimedSlotReadySeconds = 5.0;
}  // namespace

// ── registration (design §5.9) ─────────────────────────────────────────────────

std::string Provider::Impl::register_discovered_sandbox(const std::string& thread_id, InfoPtr info,
                                                        const std::string& user_id) {
  const std::string& sandbox_id = info->sandbox_id;
  const ThreadKey key{user_id, thread_id};
  check_reported_identity(*info, thread_id, user_id);
  {
    MutexLock lock(mutex_);
    // A container this process is stopping must not be re-registered: its name would collide.
    if (registry_.tearing_down(sandbox_id)) throw SandboxBeingDestroyedError(sandbox_id);
    check_identity_locked(sandbox_id, key);
  }
  ClientPtr client = make_client(sandbox_id, info->sandbox_url);
  try {
    publish_ownership(sandbox_id);
    MutexLock lock(mutex_);
    if (registry_.tearing_down(sandbox_id)) throw SandboxBeingDestroyedError(sandbox_id);
    check_identity_locked(sandbox_id, key);
    registry_.install_active(sandbox_id, client, info, key, now());
  } catch (const std::exception&) {
    close_client(client, [&] {
      return "Error closing sandbox " + sandbox_id + " after failed ownership publish";
    });
    throw;
  }
  log(LogLevel::info, "Discovered existing sandbox " + sandbox_id + " for user/thread " + user_id +
                          "/" + thread_id + " at " + info->sandbox_url);
  return sandbox_id;
}

std::string Provider::Impl::register_created_sandbox(const std::optional<std::string>& thread_id,
                                                     const std::string& sandbox_id, InfoPtr info,
                                                     const std::string& user_id) {
  if (seams_.register_created_sandbox) {
    return seams_.register_created_sandbox(thread_id, sandbox_id, std::move(info), user_id);
  }
  return register_created_sandbox_step(thread_id, sandbox_id, std::move(info), user_id);
}

std::string Provider::Impl::register_created_sandbox_step(
    const std::optional<std::string>& thread_id, const std::string& sandbox_id, InfoPtr info,
    const std::string& user_id) {
  ClientPtr client = make_client(sandbox_id, info->sandbox_url);
  std::optional<ThreadKey> key;
  if (thread_id) key = ThreadKey{user_id, *thread_id};
  try {
    if (key) {
      MutexLock lock(mutex_);
      check_identity_locked(sandbox_id, *key);
    }
    publish_ownership(sandbox_id);
    MutexLock lock(mutex_);
    if (key) {
      check_identity_locked(sandbox_id, *key);
    }
    registry_.install_active(sandbox_id, client, info, key, now());
  } catch (const SandboxIdentityCollisionError&) {
    // The id belongs to another tenant's tracked sandbox: never touch that container.
    close_client(client, [&] {
      return "Error closing sandbox " + sandbox_id + " during ownership rollback";
    });
    throw;
  } catch (const std::exception& e) {
    log(LogLevel::error,
        "Could not register new sandbox " + sandbox_id +
            "; destroying it rather than leaking an untracked container: " + e.what());
    close_client(client, [&] {
      return "Error closing sandbox " + sandbox_id + " during ownership rollback";
    });
    try {
      backend_->destroy(*info);
    } catch (const std::exception& destroy_error) {
      log(LogLevel::error, "Failed to destroy sandbox " + sandbox_id +
                               " after registration failure: " + destroy_error.what());
    }
    throw;
  }
  log(LogLevel::info, "Created sandbox " + sandbox_id + " for thread " +
                          thread_id.value_or("<anonymous>") + " at " + info->sandbox_url);
  return sandbox_id;
}

// ── create (design §5.10, §5.11) ───────────────────────────────────────────────

bool Provider::Impl::make_room(const std::string& creating_id) {
  const auto replicas = static_cast<std::size_t>(options_.replicas);
  // Evict until within the cap: after a burst beyond the soft limit one eviction per create
  // would leave warm sandboxes running above it.
  while (true) {
    {
      MutexLock lock(mutex_);
      if (registry_.slots_in_use(creating_id) < replicas) return true;
    }
    if (auto evicted = evict_oldest_warm()) {
      log(LogLevel::info, "Evicted warm-pool sandbox " + *evicted +
                              " to stay within replicas=" + std::to_string(options_.replicas));
      continue;
    }
    if (!policy_->create_beyond_replicas()) return false;
    log(LogLevel::warning, "All " + std::to_string(options_.replicas) +
                               " replica slots are in active use; creating sandbox " + creating_id +
                               " beyond the soft limit");
    return true;
  }
}

std::string Provider::Impl::create_sandbox(const std::optional<std::string>& thread_id,
                                           const std::string& sandbox_id,
                                           const std::string& user_id, const Snapshot& snapshot) {
  if (seams_.create_sandbox) return seams_.create_sandbox(thread_id, sandbox_id, user_id, snapshot);
  return create_sandbox_step(thread_id, sandbox_id, user_id, snapshot);
}

std::string Provider::Impl::create_sandbox_step(const std::optional<std::string>& thread_id,
                                                const std::string& sandbox_id,
                                                const std::string& user_id,
                                                const Snapshot& snapshot) {
  const CreateRequest request = build_create_request(thread_id, sandbox_id, user_id);
  check_free_disk(sandbox_id, user_id);

  // This creation holds a replica slot from its capacity check until it is registered or has
  // failed, so concurrent creations count each other instead of all seeing the same free slot.
  // Under a ceiling the room is made (or waited for, or refused) before the create: a stop
  // beside the create would put one more sandbox than the ceiling on the host for a moment.
  bool over_cap = false;
  if (enforces_ceilings()) {
    admit_creation(sandbox_id, user_id);
    if (options_.overflow_policy == OverflowPolicy::soft) {  // max_per_user alone
      MutexLock lock(mutex_);
      over_cap = registry_.slots_in_use(sandbox_id) >= static_cast<std::size_t>(options_.replicas);
    }
  } else {
    MutexLock lock(mutex_);
    registry_.begin_creation(sandbox_id, user_id);
    over_cap = registry_.slots_in_use(sandbox_id) >= static_cast<std::size_t>(options_.replicas);
  }
  // The deployment-wide reservation admit_creation made goes with a creation that fails; a
  // registered sandbox keeps it (renewed with the leases, released when it is destroyed).
  bool registered = false;
  ScopeExit uncount([&] {
    {
      MutexLock lock(mutex_);
      registry_.end_creation(sandbox_id);
    }
    if (!registered && ledger_) release_capacity(sandbox_id, user_id);
    notify_capacity_freed();
  });
  // On a real engine a stop and a create each take a second or so: the eviction's stops run
  // beside the backend create instead of before it. The creating call still waits
  // for them before it registers its sandbox, and on every way out, so the oldest warm
  // sandbox has been destroyed, once, by the time it returns (design §5.10).
  std::future<bool> room;
  if (over_cap) {
    auto evict = [this, sandbox_id] {
      try {
        return make_room(sandbox_id);
      } catch (const std::exception& e) {
        log(LogLevel::error, std::string("Evicting a warm-pool sandbox failed: ") + e.what());
        return true;
      }
    };
    try {
      room = std::async(std::launch::async, evict);
    } catch (const std::system_error&) {
      std::promise<bool> done;  // no thread to spare: evict first, as before
      done.set_value(evict());
      room = done.get_future();
    }
  }
  ScopeExit wait_for_room([&] {
    if (room.valid()) room.wait();
  });

  // A contract change found by the create itself means the backend made (or found) an instance
  // under the id of the old contract. The acquisition restarts under a new id, so nothing would
  // ever track or stop this one: destroy it now, unless a peer holds its lease.
  InfoPtr info;
  try {
    if (const std::string* image = restoring_image()) {
      if (snapshots_ == nullptr) throw std::logic_error("a restore without SandboxSnapshots");
      info = std::make_shared<const SandboxInfo>(snapshots_->create_from_snapshot(request, *image));
      note_acquire_path(AcquirePath::restored);
    } else if (auto claimed = claim_slot(request)) {
      info = std::make_shared<const SandboxInfo>(std::move(*claimed));
      // A slot was ready when the pool last looked; it may have died since (its network
      // deleted, its container killed). Asked briefly, never for the cold create's minute: a
      // dead one is destroyed and the conversation gets a cold sandbox instead.
      if (!wait_until_ready(*info, kClaimedSlotReadySeconds)) {
        log(LogLevel::warning, "The pre-started slot claimed for sandbox " + sandbox_id +
                                   " does not answer at " + info->sandbox_url +
                                   "; destroying it and creating the sandbox cold");
        destroy_unready_sandbox(sandbox_id, *info);
        note_acquire_path(AcquirePath::created);
        info = std::make_shared<const SandboxInfo>(backend_->create(request));
      }
    } else {
      info = std::make_shared<const SandboxInfo>(backend_->create(request));
    }
    // The create adopted a container of this name made under another network policy (a
    // racing peer of an older configuration, a leftover): replaced, then made anew once.
    if (!network_policy_matches(*info)) {
      replace_for_policy(sandbox_id, *info);
      info = std::make_shared<const SandboxInfo>(backend_->create(request));
      if (!network_policy_matches(*info)) {
        throw std::runtime_error("sandbox " + sandbox_id + " was made under network policy '" +
                                 policy_or_open(info->network_policy) +
                                 "' twice; not handing it out");
      }
    }
  } catch (const MountContractChangedError& changed) {
    SandboxInfo stale;
    stale.sandbox_id = sandbox_id;
    stale.user_id = request.user_id;
    stale.thread_id = request.thread_id;
    destroy_untracked_creation(sandbox_id, stale,
                               "sandbox " + sandbox_id + " created under mount contract " +
                                   std::to_string(changed.current_version()) + " instead of " +
                                   std::to_string(changed.previous_version()));
    throw;
  }
  if (snapshot && backend_->requires_create_validation() &&
      info->mount_contract_version != snapshot->version) {
    destroy_untracked_creation(sandbox_id, *info,
                               "sandbox " + sandbox_id + " created under mount contract " +
                                   std::to_string(info->mount_contract_version) + " instead of " +
                                   std::to_string(snapshot->version));
    throw MountContractChangedError(snapshot->version, info->mount_contract_version);
  }
  if (!wait_until_ready(*info, options_.readiness_timeout_seconds)) {
    destroy_unready_sandbox(sandbox_id, *info);
    throw std::runtime_error("Sandbox " + sandbox_id +
                             " failed to become ready within timeout at " + info->sandbox_url);
  }
  if (room.valid() && !room.get()) {
    destroy_untracked_creation(
        sandbox_id, *info,
        "sandbox " + sandbox_id + " created beyond replicas=" + std::to_string(options_.replicas));
    throw std::runtime_error("all " + std::to_string(options_.replicas) +
                             " replica slots are in use and the lifecycle policy refuses to "
                             "create beyond them");
  }
  std::string registered_id = register_created_sandbox(thread_id, sandbox_id, info, user_id);
  registered = true;
  return registered_id;
}

std::optional<SandboxInfo> Provider::Impl::claim_slot(const CreateRequest& request) {
  // Only a conversation's sandbox: an anonymous one has no mounts of its own to bind.
  if (slots_ == nullptr || !request.thread_id || slots_->slot_status().target == 0) {
    return std::nullopt;
  }
  const auto started = std::chrono::steady_clock::now();
  PreStartedSlots::Claim claim = slots_->claim_slot(request);
  if (claim.sandbox) {
    events_.slot_claims.fetch_add(1, std::memory_order_relaxed);
    events_.slot_claim_microseconds.fetch_add(
        static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                       std::chrono::steady_clock::now() - started)
                                       .count()),
        std::memory_order_relaxed);
    note_acquire_path(AcquirePath::claimed);
    return std::move(claim.sandbox);
  }
  const auto miss = static_cast<std::size_t>(claim.miss);
  if (miss < events_.slot_misses.size()) {
    events_.slot_misses[miss].fetch_add(1, std::memory_order_relaxed);
  }
  log(LogLevel::info, "No pre-started slot for sandbox " + request.sandbox_id + " (" +
                          to_string(claim.miss) + ": " + claim.detail + "); creating it");
  return std::nullopt;
}

void Provider::Impl::destroy_unready_sandbox(const std::string& sandbox_id,
                                             const SandboxInfo& info) {
  destroy_untracked_creation(sandbox_id, info, "unready sandbox " + sandbox_id);
}

bool Provider::Impl::destroy_untracked_creation(const std::string& sandbox_id,
                                                const SandboxInfo& info, const std::string& what) {
  const bool reserved = reserve_local_teardown(
      sandbox_id, [sandbox_id](const SandboxRegistry& r) { return !r.held(sandbox_id); });
  if (!reserved) {
    log(LogLevel::warning,
        "Not destroying " + what + ": adopted or being torn down by this instance");
    return false;
  }
  ScopeExit finish([&] { finish_local_teardown(sandbox_id); });
  if (!claim_ownership(sandbox_id, true)) {
    log(LogLevel::warning,
        "Not destroying " + what + ": owned by another instance or ownership unavailable");
    return false;
  }
  log(LogLevel::info, "Destroying " + what);
  bool destroyed = true;
  with_held_teardown_lease(sandbox_id, [&] {
    try {
      backend_->destroy(info);
    } catch (const std::exception& e) {
      destroyed = false;
      log(LogLevel::warning, "Error destroying " + what + ": " + e.what());
    }
  });
  return destroyed;
}

void Provider::Impl::replace_for_policy(const std::string& sandbox_id, const SandboxInfo& info) {
  const std::string made = policy_or_open(info.network_policy);
  const std::string wanted = policy_or_open(network_policy_->configured_network_policy());
  const std::string what = "sandbox " + sandbox_id + ", made under network policy '" + made +
                           "' where the configuration asks for '" + wanted + "'";
  log(LogLevel::info, "Replacing " + what + ": it is never reused under another policy");
  bool tracked = false;
  {
    MutexLock lock(mutex_);
    tracked = registry_.held(sandbox_id);
  }
  const bool gone = tracked ? destroy(sandbox_id) == DestroyOutcome::destroyed
                            : destroy_untracked_creation(sandbox_id, info, what);
  if (!gone) {
    throw ServiceError(ErrorKind::conflict,
                       "cannot replace " + what +
                           ": another instance holds it or is tearing it down; try again later");
  }
}

}  // namespace sandboxd::core

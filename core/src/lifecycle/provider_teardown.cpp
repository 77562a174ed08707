// Provider: release, destroy, shutdown, health, the warm pool's expiry and eviction, and the
// idle reaper (design §5.12–§5.16, §6).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <system_error>
#include <thread>

#include "fixed_decimals.hpp"
#include "provider_impl.hpp"
#include "scope_exit.hpp"

namespace sandboxd::core {
const char* to_string(ReleaseOutcome outcome) {
  switch (outcome) {
    case ReleaseOutcome::released:
      return "released";
    case ReleaseOutcome::already_warm:
      return "already warm";
    case ReleaseOutcome::not_tracked:
      return "not tracked";
    case ReleaseOutcome::lease_lost:
      return "lease lost";
  }
  return "?";
}

const char* to_string(DestroyOutcome outcome) {
  switch (outcome) {
    case DestroyOutcome::destroyed:
      return "destroyed";
    case DestroyOutcome::not_tracked:
      return "not tracked";
    case DestroyOutcome::refused:
      return "refused";
    case DestroyOutcome::skipped:
      return "skipped";
  }
  return "?";
}

// ── release (design §5.12) ─────────────────────────────────────────────────────

ReleaseOutcome Provider::Impl::release(const std::string& sandbox_id) {
  SandboxRegistry::Parked parked;
  std::optional<ThreadKey> conversation;
  {
    MutexLock lock(mutex_);
    parked = registry_.park(sandbox_id, now());
    if (const SandboxEntry* entry =
            event_log_ && parked.info ? registry_.find(sandbox_id) : nullptr) {
      conversation = entry->identity;
    }
  }
  close_client(parked.client,
               [&] { return "Error closing sandbox " + sandbox_id + " during release"; });
  ReleaseOutcome outcome = parked.info       ? ReleaseOutcome::released
                           : parked.was_warm ? ReleaseOutcome::already_warm
                                             : ReleaseOutcome::not_tracked;
  if (parked.info) note(LifecycleEventKind::released, sandbox_id, conversation);
  // A lease that is no longer ours only because this instance is already evicting the sandbox
  // (a creation waiting for room got there first) is not a peer's: the release stands.
  const auto ours_being_torn_down = [&] {
    MutexLock lock(mutex_);
    return registry_.tearing_down(sandbox_id);
  };
  if (parked.info && !refresh_ownership(sandbox_id) && !ours_being_torn_down()) {
    log(LogLevel::warning, "Sandbox " + sandbox_id +
                               " is owned by another instance; releasing it from this warm pool");
    // The acquisition this release ended: a newer one must not be dropped.
    forget(sandbox_id, parked.epoch ? std::optional<std::uint64_t>(parked.epoch) : std::nullopt);
    outcome = ReleaseOutcome::lease_lost;
  }
  // After the lease check: a waiter woken now may evict it at once.
  if (parked.info) notify_capacity_freed();
  log_lazily(LogLevel::info, [&] {
    return "Released sandbox " + sandbox_id + " to warm pool (container still running)";
  });
  return outcome;
}

// ── destroy (design §5.13) ─────────────────────────────────────────────────────

DestroyOutcome Provider::Impl::destroy(const std::string& sandbox_id) {
  std::optional<ThreadKey> conversation;
  if (event_log_) {
    MutexLock lock(mutex_);
    if (const SandboxEntry* entry = registry_.find(sandbox_id)) conversation = entry->identity;
  }
  const DestroyOutcome outcome =
      destroy_tracked(sandbox_id, [](const SandboxRegistry&) { return true; });
  if (outcome == DestroyOutcome::destroyed) {
    note(LifecycleEventKind::destroyed, sandbox_id, conversation);
  }
  return outcome;
}

DestroyOutcome Provider::Impl::destroy_tracked(const std::string& sandbox_id,
                                               const Predicate& still_reapable) {
  if (seams_.destroy_tracked) {
    seams_.destroy_tracked(sandbox_id, still_reapable);
    return DestroyOutcome::destroyed;
  }
  return destroy_tracked_step(sandbox_id, still_reapable);
}

DestroyOutcome Provider::Impl::destroy_tracked_step(const std::string& sandbox_id,
                                                    const Predicate& still_reapable) {
  if (!reserve_local_teardown(sandbox_id, still_reapable)) {
    log(LogLevel::info, "Skipping destroy of sandbox " + sandbox_id +
                            ": re-acquired by this instance or already being torn down");
    return DestroyOutcome::skipped;
  }
  ScopeExit finish([&] { finish_local_teardown(sandbox_id); });
  // Claim before untracking: a refused claim must not leave a running, untracked container.
  if (!claim_ownership(sandbox_id, true)) {
    log(LogLevel::warning,
        "Refusing to destroy sandbox " + sandbox_id + ": owned by another instance");
    return DestroyOutcome::refused;
  }
  SandboxRegistry::Removed removed;
  {
    MutexLock lock(mutex_);
    removed = registry_.remove(sandbox_id, nullptr);
  }
  close_client(removed.client,
               [&] { return "Error closing sandbox " + sandbox_id + " during destroy"; });
  if (removed.info) {
    with_held_teardown_lease(sandbox_id, [&] { backend_->destroy(*removed.info); });
    release_capacity(sandbox_id, removed.identity ? removed.identity->user_id : std::string());
    log(LogLevel::info, "Destroyed sandbox " + sandbox_id);
    return DestroyOutcome::destroyed;
  }
  release_ownership(sandbox_id);  // leave no `del` marker behind
  return DestroyOutcome::not_tracked;
}

// ── shutdown (design §5.15) ────────────────────────────────────────────────────

void Provider::Impl::shutdown() {
  MutexLock once(shutdown_mutex_);  // a concurrent second call returns when this one has
  std::vector<std::string> active;
  std::vector<std::pair<std::string, WarmEntry>> warm;
  {
    MutexLock lock(mutex_);
    if (!registry_.begin_shutdown()) return;
    registry_.for_each([&](const std::string& id, const SandboxEntry& entry) {
      if (entry.active() && entry.client) active.push_back(id);
    });
    warm = registry_.take_released();
  }
  sort_by_id(active);
  sort_by_id(warm);
  notify_capacity_freed();  // queued creations see the shutdown and give up
  // Stop renewal before destroying, so it does not re-publish leases being dropped.
  stop_background_threads();
  async_->close();  // queued async waiters fail now; running ones are waited for below
  log(LogLevel::info, "Shutting down " + std::to_string(active.size()) + " active + " +
                          std::to_string(warm.size()) + " warm-pool sandbox(es)");
  // Stops run side by side, at most kShutdownParallelism at once: with real containers one
  // stop takes a second or more, so in sequence a thousand sandboxes took many minutes.
  const std::size_t total = active.size() + warm.size();
  std::atomic<std::size_t> next{0};
  const Predicate always = [](const SandboxRegistry&) { return true; };
  auto work = [&] {
    for (std::size_t i = next++; i < total; i = next++) {
      const std::string& id = i < active.size() ? active[i] : warm[i - active.size()].first;
      try {
        if (i < active.size()) {
          destroy(id);
        } else {
          destroy_warm_entry(id, warm[i - active.size()].second, "shutdown", always);
        }
      } catch (const std::exception& e) {
        log(LogLevel::error, "Failed to destroy sandbox " + id + " during shutdown: " + e.what());
      }
    }
  };
  std::vector<std::thread> stoppers;
  const std::size_t width = std::min<std::size_t>(kShutdownParallelism, total);
  for (std::size_t w = 1; w < width; ++w) {
    try {
      stoppers.emplace_back(work);
    } catch (const std::system_error&) {
      break;  // no more threads: the ones running (and this one) finish the list
    }
  }
  work();
  for (auto& stopper : stoppers) stopper.join();
  // An async creation that finishes now finds its install refused and destroys its container
  // itself (A.3); it still needs the store, so the store closes after it.
  async_->wait_idle();
  remove_remembered_images();
  try {
    ownership_->close();
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("Error closing the ownership store: ") + e.what());
  }
}

void Provider::Impl::detach() {
  MutexLock once(shutdown_mutex_);
  Provider::Counts left;
  {
    MutexLock lock(mutex_);
    if (!registry_.begin_shutdown()) return;
    left = {registry_.active_count(), registry_.warm_count(), 0};
  }
  stop_background_threads();
  async_->close();
  async_->wait_idle();
  // A one-shot command that destroyed the last sandbox running from a deleted snapshot's image
  // removes the image now: no later command on this state directory may come to do it.
  remove_remembered_images();
  try {
    ownership_->close();
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("Error closing the ownership store: ") + e.what());
  }
  log(LogLevel::debug, "Detached from " + std::to_string(left.active) + " active + " +
                           std::to_string(left.warm) +
                           " warm-pool sandbox(es); they keep running under their leases");
}

// ── health (design §5.16) ──────────────────────────────────────────────────────

std::optional<bool> Provider::Impl::check_alive(const std::string& sandbox_id,
                                                const SandboxInfo& info) {
  try {
    return backend_->is_alive(info);
  } catch (const std::exception& e) {
    log(LogLevel::warning, "Failed to check sandbox " + sandbox_id + " health: " + e.what());
    return std::nullopt;
  }
}

void Provider::Impl::drop_unhealthy_sandbox(const std::string& sandbox_id,
                                            const std::string& reason,
                                            const InfoPtr& expected_info) {
  if (!reserve_local_teardown(sandbox_id, [](const SandboxRegistry&) { return true; })) {
    log(LogLevel::info,
        "Skipped dropping sandbox " + sandbox_id + ": already being torn down by this instance");
    return;
  }
  ScopeExit finish([&] { finish_local_teardown(sandbox_id); });
  SandboxRegistry::Removed removed;
  {
    MutexLock lock(mutex_);
    removed = registry_.remove(sandbox_id, expected_info);
  }
  if (!removed.removed) {
    log(LogLevel::info,
        "Skipped dropping sandbox " + sandbox_id + ": tracked info changed after health check");
    return;
  }
  close_client(removed.client, [&] { return "Error closing unhealthy sandbox " + sandbox_id; });
  if (removed.info) {
    if (claim_ownership(sandbox_id, true)) {
      with_held_teardown_lease(sandbox_id, [&] {
        try {
          backend_->destroy(*removed.info);
        } catch (const std::exception& e) {
          log(LogLevel::warning,
              "Error destroying unhealthy sandbox " + sandbox_id + ": " + e.what());
        }
      });
      release_capacity(sandbox_id, removed.identity ? removed.identity->user_id : std::string());
    } else {
      log(LogLevel::info,
          "Not destroying unhealthy sandbox " + sandbox_id + ": owned by another instance");
    }
  }
  log(LogLevel::warning, "Dropped unhealthy sandbox " + sandbox_id + ": " + reason);
}

// ── warm pool (design §6.2, §6.3) ──────────────────────────────────────────────

bool Provider::Impl::destroy_warm_entry(const std::string& sandbox_id, const WarmEntry& entry,
                                        const std::string& reason,
                                        const Predicate& still_reapable) {
  if (seams_.destroy_warm_entry) {
    return seams_.destroy_warm_entry(sandbox_id, entry, reason, still_reapable);
  }
  return destroy_warm_entry_step(sandbox_id, entry, reason, still_reapable);
}

bool Provider::Impl::destroy_warm_entry_step(const std::string& sandbox_id, const WarmEntry& entry,
                                             const std::string& reason,
                                             const Predicate& still_reapable) {
  if (!reserve_local_teardown(sandbox_id, still_reapable)) {
    log(LogLevel::info, "Refusing to destroy warm-pool sandbox " + sandbox_id + " for " + reason +
                            ": reclaimed by this instance");
    return false;
  }
  ScopeExit finish([&] { finish_local_teardown(sandbox_id); });
  if (!claim_ownership(sandbox_id, true)) {
    log(LogLevel::info, "Refusing to destroy warm-pool sandbox " + sandbox_id + " for " + reason +
                            ": owned by another instance");
    return false;
  }
  bool stopped = true;
  with_held_teardown_lease(sandbox_id, [&] {
    try {
      backend_->destroy(*entry.info);
    } catch (const std::exception& e) {
      stopped = false;
      if (reason == "idle_timeout") {
        log(LogLevel::error,
            "Failed to destroy idle warm-pool sandbox " + sandbox_id + ": " + e.what());
      } else if (reason == "replica_enforcement") {
        log(LogLevel::error, "Failed to destroy warm-pool sandbox " + sandbox_id + ": " + e.what());
      } else {
        log(LogLevel::error, "Failed to destroy warm-pool sandbox " + sandbox_id + " for " +
                                 reason + ": " + e.what());
      }
    }
  });
  if (!stopped) return false;
  {
    // Still inside the reservation: drop the entry only if it is the very one we stopped.
    MutexLock lock(mutex_);
    registry_.erase_released_if(sandbox_id, entry.info);
  }
  release_capacity(sandbox_id, entry.identity ? entry.identity->user_id : std::string());
  note(reason == "idle_timeout"          ? LifecycleEventKind::reaped
       : reason == "replica_enforcement" ? LifecycleEventKind::evicted
       : reason == "archived"            ? LifecycleEventKind::archived
                                         : LifecycleEventKind::destroyed,
       sandbox_id, entry.identity, reason);
  if (reason == "idle_timeout") {
    events_.idle_reaps.fetch_add(1, std::memory_order_relaxed);
    log(LogLevel::info, "Destroyed idle warm-pool sandbox " + sandbox_id);
  } else if (reason == "replica_enforcement") {
    log(LogLevel::info, "Destroyed warm-pool sandbox " + sandbox_id);
  } else {
    log(LogLevel::info, "Destroyed warm-pool sandbox " + sandbox_id + " for " + reason);
  }
  return true;
}

// "Still in the warm pool" means this very entry: between the snapshot and the reservation
// the sandbox may have been reclaimed and parked again (a fresh entry, not expired), or
// stopped and re-created under the same id (stopping the snapshot's info would then hit a dead
// container while the live one stays parked).
Predicate Provider::Impl::still_this_warm_entry(const std::string& sandbox_id,
                                                const WarmEntry& entry) const {
  return [sandbox_id, entry](const SandboxRegistry& registry) {
    const SandboxEntry* now = registry.find(sandbox_id);
    return now && now->released() && now->info == entry.info && now->since == entry.released_at;
  };
}

void Provider::Impl::reap_expired_warm(std::optional<double> timeout) {
  if (seams_.reap_expired_warm) {
    seams_.reap_expired_warm(timeout);
    return;
  }
  reap_expired_warm_step(timeout);
}

void Provider::Impl::reap_expired_warm_step(std::optional<double> timeout) {
  const double limit = timeout.value_or(options_.idle_timeout);
  if (limit <= 0) return;
  std::vector<std::pair<std::string, WarmEntry>> expired;
  double current = 0;
  {
    MutexLock lock(mutex_);
    current = now();
    for (auto& [id, entry] : registry_.released_entries()) {
      if (current - entry.released_at > limit) expired.emplace_back(id, std::move(entry));
    }
  }
  sort_by_id(expired);
  for (const auto& [id, entry] : expired) {
    if (!policy_->stop_expired_warm({id, entry.released_at, entry.identity, entry.paused},
                                    current - entry.released_at)) {
      continue;
    }
    destroy_warm_entry(id, entry, "idle_timeout", still_this_warm_entry(id, entry));
  }
}

std::optional<std::string> Provider::Impl::evict_oldest_warm(
    const std::optional<std::string>& user) {
  std::vector<std::pair<std::string, WarmEntry>> warm;
  {
    MutexLock lock(mutex_);
    warm = registry_.released_entries();
  }
  sort_by_id(warm);  // the policy's order is stable: ties stay in id order
  if (user) {
    warm.erase(std::remove_if(warm.begin(), warm.end(),
                              [&](const auto& w) {
                                return !w.second.identity || w.second.identity->user_id != *user;
                              }),
               warm.end());
  }
  std::vector<WarmCandidate> candidates;
  candidates.reserve(warm.size());
  for (const auto& [id, entry] : warm) {
    candidates.push_back({id, entry.released_at, entry.identity, entry.paused});
  }
  for (const std::string& id : policy_->eviction_order(std::move(candidates))) {
    auto it = std::find_if(warm.begin(), warm.end(), [&](const auto& w) { return w.first == id; });
    if (it == warm.end()) continue;
    if (destroy_warm_entry(id, it->second, "replica_enforcement",
                           still_this_warm_entry(id, it->second))) {
      events_.evictions.fetch_add(1, std::memory_order_relaxed);
      return id;
    }
  }
  return std::nullopt;
}

// ── max lifetime (issue 35 item 2), then the idle reaper (design §6.1) ─────────

namespace {

// Destroys every sandbox older than max_lifetime_seconds; the end of the idle pass. A policy
// of this file alone: it uses the provider's destroy path, its registry and its event log.
void reap_past_lifetime(Provider::Impl& impl) EXCLUDES(impl.mutex_) {
  const double limit = impl.options_.max_lifetime_seconds;
  if (limit <= 0) return;
  struct Old {
    InfoPtr info;
    double age = 0;
    std::optional<ThreadKey> conversation;
  };
  std::vector<std::pair<std::string, Old>> old;  // led by the id, for sort_by_id
  {
    MutexLock lock(impl.mutex_);
    const double wall = impl.clock_->wall_now();
    impl.registry_.for_each([&](const std::string& id, const SandboxEntry& entry) {
      // An unknown creation time (0) is not taken for 1970.
      if (entry.info && entry.info->created_at > 0 && wall - entry.info->created_at >= limit) {
        old.emplace_back(id, Old{entry.info, wall - entry.info->created_at, entry.identity});
      }
    });
  }
  sort_by_id(old);
  for (const auto& [id, sandbox] : old) {
    // A warning: an active one is taken from its conversation, whose next turn gets a new one.
    impl.log(LogLevel::warning, "Sandbox " + id + " reached max_lifetime_seconds (" +
                                    fixed(sandbox.age, 1) + "s since its creation, limit " +
                                    fixed(limit, 1) + "s), destroying it");
    // The very container seen above: not one re-created under the id since.
    const Predicate same_container = [id = id,
                                      info = sandbox.info](const SandboxRegistry& registry) {
      const SandboxEntry* entry = registry.find(id);
      return entry && entry->info == info;
    };
    try {
      if (impl.destroy_tracked(id, same_container) == DestroyOutcome::destroyed) {
        impl.note(LifecycleEventKind::expired, id, sandbox.conversation, "max_lifetime_seconds");
      }
    } catch (const std::exception& e) {
      impl.log(LogLevel::error,
               "Failed to destroy sandbox " + id + " past its lifetime: " + e.what());
    }
  }
}

}  // namespace

void Provider::Impl::cleanup_idle_sandboxes(double idle_timeout) {
  std::vector<std::pair<std::string, double>> idle;  // id, idle for (s)
  {
    MutexLock lock(mutex_);
    const double current = now();
    registry_.for_each([&](const std::string& id, const SandboxEntry& entry) {
      if (entry.active() && entry.client && current - entry.since > idle_timeout) {
        idle.emplace_back(id, current - entry.since);
      }
    });
  }
  sort_by_id(idle);
  for (const auto& candidate : idle) {
    // Named, not a structured binding: the predicate below captures it (clang 14 cannot).
    const std::string& id = candidate.first;
    const double idle_for = candidate.second;
    if (!policy_->stop_idle_active(id, idle_for)) continue;
    log(LogLevel::info,
        "Sandbox " + id + " idle for " + fixed(idle_for, 1) + "s, marking for destroy");
    log(LogLevel::info, "Destroying idle sandbox " + id);
    // Re-checked inside the reservation's critical section: a turn may have re-acquired it.
    // The predicate runs under the registry mutex, so it notes why it refused and the line is
    // logged after. (Shared, and the id copied: a caller may keep the predicate past this
    // iteration.)
    auto skipped = std::make_shared<std::string>();
    auto clock = clock_;
    const Predicate still_idle = [id, idle_timeout, skipped, clock](const SandboxRegistry& r) {
      const SandboxEntry* entry = r.find(id);
      if (!entry || !entry->active()) {
        *skipped = "Sandbox " + id + " already gone before idle destroy, skipping";
        return false;
      }
      if (clock->monotonic_now() - entry->since < idle_timeout) {
        *skipped = "Sandbox " + id + " was re-acquired before idle destroy, skipping";
        return false;
      }
      return true;
    };
    ScopeExit log_skip([&] {
      if (!skipped->empty()) log(LogLevel::info, *skipped);
    });
    try {
      destroy_tracked(id, still_idle);
      if (!find(id)) {
        events_.idle_reaps.fetch_add(1, std::memory_order_relaxed);
        note(LifecycleEventKind::reaped, id, std::nullopt, "idle_timeout");
      }
    } catch (const std::exception& e) {
      log(LogLevel::error, "Failed to destroy idle sandbox " + id + ": " + e.what());
    }
  }
  reap_expired_warm(idle_timeout);
  reap_past_lifetime(*this);
}

}  // namespace sandboxd::core

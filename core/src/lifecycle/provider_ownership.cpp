// Provider: how it uses the ownership store (design §7.7–§7.10): publishing a lease on every
// hand-out, claims for teardown, renewal, the local teardown reservation, and dropping what a
// peer took over.
#include <cstdio>
#include <set>

#include "fixed_decimals.hpp"
#include "provider_impl.hpp"
#include "scope_exit.hpp"

namespace sandboxd::core {
void Provider::Impl::publish_ownership(const std::string& sandbox_id) {
  {
    // The intent mark is visible before the takeover can become durable in the store.
    MutexLock lock(mutex_);
    registry_.begin_publish(sandbox_id);
  }
  bool taken = false;
  // The mark goes and, on success, the new epoch appears in one step (one lock, not two).
  ScopeExit done([&] {
    MutexLock lock(mutex_);
    registry_.end_publish(sandbox_id, taken);
  });
  if (!ownership_->take(sandbox_id)) throw SandboxBeingDestroyedError(sandbox_id);
  taken = true;
}

bool Provider::Impl::claim_ownership(const std::string& sandbox_id, bool for_destroy) {
  try {
    return ownership_->claim(sandbox_id, for_destroy);
  } catch (const std::exception& e) {
    log(LogLevel::warning, "Sandbox ownership claim failed for " + sandbox_id +
                               " (treating as not owned): " + e.what());
    return false;
  }
}

bool Provider::Impl::refresh_ownership(const std::string& sandbox_id) {
  RenewOutcome outcome;
  try {
    outcome = ownership_->renew(sandbox_id);
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Could not renew sandbox ownership for " + sandbox_id + ", will retry: " + e.what());
    return true;
  }
  if (outcome == RenewOutcome::renewed) {
    events_.lease_renewals.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  if (outcome == RenewOutcome::lost) return false;
  events_.lease_lapses.fetch_add(1, std::memory_order_relaxed);
  try {
    if (ownership_->claim(sandbox_id, false)) {
      log(LogLevel::info, "Re-established a lapsed ownership lease for " + sandbox_id);
      return true;
    }
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Could not re-establish lapsed lease for " + sandbox_id + ", will retry: " + e.what());
    return true;
  }
  log(LogLevel::warning, "Lapsed ownership lease for " + sandbox_id + " was taken by a peer");
  return false;
}

void Provider::Impl::release_ownership(const std::string& sandbox_id) {
  try {
    ownership_->release(sandbox_id);
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Failed to release sandbox ownership for " + sandbox_id + ": " + e.what());
  }
}

void Provider::Impl::with_held_teardown_lease(const std::string& sandbox_id,
                                              const std::function<void()>& stop) {
  teardown_.hold(sandbox_id, stop);
}

bool Provider::Impl::reserve_local_teardown(const std::string& sandbox_id,
                                            const Predicate& still_reapable) {
  MutexLock lock(mutex_);
  if (registry_.tearing_down(sandbox_id)) return false;
  if (!still_reapable(registry_)) return false;
  registry_.reserve_teardown(sandbox_id);
  return true;
}

void Provider::Impl::finish_local_teardown(const std::string& sandbox_id) {
  {
    MutexLock lock(mutex_);
    registry_.finish_teardown(sandbox_id);
  }
  teardown_finished_.notify_all();
  notify_capacity_freed();
}

bool Provider::Impl::teardown_in_progress(const std::string& sandbox_id) {
  {
    MutexLock lock(mutex_);
    if (registry_.tearing_down(sandbox_id)) return true;
  }
  try {
    const auto lease = ownership_->inspect(sandbox_id);
    return lease && lease->destroying;
  } catch (const std::exception&) {
    return false;  // the publish that follows fails closed if the store stays unreachable
  }
}

Provider::Impl::Deadline Provider::Impl::teardown_wait_deadline() const {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(options_.teardown_wait_seconds));
}

bool Provider::Impl::wait_out_teardown(const std::string& sandbox_id, Deadline deadline) {
  const auto remaining = [&] {
    return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
  };
  log(LogLevel::info, "Sandbox " + sandbox_id +
                          " is being torn down; waiting for the teardown to finish (at most " +
                          fixed(std::max(0.0, remaining()), 1) + "s)");
  {
    MutexLock lock(mutex_);
    while (registry_.tearing_down(sandbox_id)) {
      const double left = remaining();
      if (left <= 0) return false;
      lock.wait_for(teardown_finished_, std::chrono::duration<double>(std::min(left, 0.5)));
    }
  }
  // A peer's `del` lease: poll with back-off until it is gone or the deadline passes.
  double delay = 0.005;
  while (true) {
    std::optional<LeaseRecord> lease;
    try {
      lease = ownership_->inspect(sandbox_id);
    } catch (const std::exception&) {
      return false;  // cannot tell: fail closed
    }
    if (!lease || !lease->destroying) return true;
    const double left = remaining();
    if (left <= 0) return false;
    MutexLock lock(background_mutex_);
    if (lock.wait_for(background_wake_, std::chrono::duration<double>(std::min(delay, left)),
                      [&]() NO_THREAD_SAFETY_ANALYSIS { return background_stop_; })) {
      return false;
    }
    delay = std::min(delay * 2, 0.5);
  }
}

void Provider::Impl::forget(const std::string& sandbox_id,
                            std::optional<std::uint64_t> expected_epoch) {
  ClientPtr client;
  const char* kept_because = nullptr;  // logged once the registry mutex is let go
  {
    MutexLock lock(mutex_);
    client = registry_.forget(sandbox_id, expected_epoch, &kept_because);
  }
  if (kept_because) {
    if (*kept_because) log(LogLevel::info, "Not dropping sandbox " + sandbox_id + kept_because);
    return;
  }
  notify_capacity_freed();
  // Never touch the container: it belongs to the peer now.
  close_client(client,
               [&] { return "Error closing sandbox " + sandbox_id + " after losing its lease"; });
}

void Provider::Impl::renew_owned_leases() {
  std::vector<std::pair<std::string, std::optional<std::uint64_t>>> ids;
  {
    MutexLock lock(mutex_);
    registry_.for_each([&](const std::string& id, const SandboxEntry& entry) {
      if ((entry.active() && entry.client) || entry.released()) {
        ids.emplace_back(id,
                         entry.epoch ? std::optional<std::uint64_t>(entry.epoch) : std::nullopt);
      }
    });
  }
  for (const auto& [id, epoch] : ids) {
    if (!refresh_ownership(id)) {
      events_.lease_losses.fetch_add(1, std::memory_order_relaxed);
      log(LogLevel::warning,
          "Lost sandbox ownership lease for " + id + "; dropping it from this instance");
      forget(id, epoch);
    }
  }
  renew_capacity_reservations();
}

void Provider::Impl::renew_capacity_reservations() {
  if (!ledger_) return;
  MutexLock order(ledger_order_);  // until the store has written this snapshot
  std::vector<std::pair<std::string, std::string>> held;  // id, user
  {
    MutexLock lock(mutex_);
    registry_.for_each([&](const std::string& id, const SandboxEntry& entry) {
      if (entry.active() || entry.released()) {
        held.emplace_back(id, entry.identity ? entry.identity->user_id : std::string());
      } else if (entry.creations > 0) {
        held.emplace_back(id, entry.creating_user);
      }
    });
  }
  try {
    ledger_->renew_reservations(held);
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("Failed to renew capacity reservations: ") + e.what());
  }
}

void Provider::Impl::release_capacity(const std::string& sandbox_id, const std::string& user) {
  if (!ledger_) return;
  MutexLock order(ledger_order_);  // after any renewal whose snapshot still held it
  try {
    ledger_->unreserve(sandbox_id, user);
  } catch (const std::exception& e) {
    // It expires within one TTL anyway: nobody renews a reservation of a sandbox that is gone.
    log(LogLevel::warning, "Failed to release the capacity reservation of " + sandbox_id +
                               " (it expires within one lease TTL): " + e.what());
  }
}

}  // namespace sandboxd::core

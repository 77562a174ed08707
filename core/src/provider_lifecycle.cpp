// Provider: release, destroy, shutdown, health, warm pool, ownership use, reconciliation and
// background threads (SPEC §5.12–§5.16, §6, §7.7–§7.10, §8).
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <set>
#include <system_error>
#include <thread>

#include "sandboxd/core/provider.hpp"

namespace sandboxd::core {

// ── async bookkeeping (SPEC §12; used by acquire_async and shutdown) ───────────

struct AsyncAcquisition::State {
  std::mutex mutex;  // guards everything below
  std::condition_variable done_cv;
  bool done = false;
  bool cancelled = false;
  std::string result;
  std::exception_ptr error;

  void finish(std::string value, std::exception_ptr failure) {
    {
      std::lock_guard lock(mutex);
      if (done) return;
      done = true;
      result = std::move(value);
      error = failure;
    }
    done_cv.notify_all();
  }
  bool is_cancelled() {
    std::lock_guard lock(mutex);
    return cancelled;
  }
};

// Lock story: `mutex` is a leaf lock (nothing else is taken under it, no task runs under it).
struct AsyncWork {
  std::mutex mutex;  // guards everything below
  std::condition_variable idle;
  bool accepting = true;  // false once shutdown (or detach) began
  int running = 0;        // acquisitions handed to the blocking executor, not yet finished
  std::set<std::shared_ptr<AsyncAcquisition::State>> queued;  // waiting for their lock

  // A task may start touching the provider (true), or shutdown began (false).
  bool begin() {
    std::lock_guard lock(mutex);
    if (!accepting) return false;
    ++running;
    return true;
  }
  void end() {
    {
      std::lock_guard lock(mutex);
      --running;
    }
    idle.notify_all();
  }
  bool enqueue(const std::shared_ptr<AsyncAcquisition::State>& state) {
    std::lock_guard lock(mutex);
    if (!accepting) return false;
    queued.insert(state);
    return true;
  }
  // The lock reached a queued waiter: it may run (true) unless shutdown already failed it.
  bool dequeue_and_begin(const std::shared_ptr<AsyncAcquisition::State>& state) {
    std::lock_guard lock(mutex);
    if (queued.erase(state) == 0 || !accepting) return false;
    ++running;
    return true;
  }
  // Stops new work and fails every queued waiter; returns at once.
  void close() {
    std::set<std::shared_ptr<AsyncAcquisition::State>> failed;
    {
      std::lock_guard lock(mutex);
      accepting = false;
      failed.swap(queued);
    }
    for (const auto& state : failed) {
      state->finish("", std::make_exception_ptr(std::runtime_error(
                            "the provider shut down while this acquisition waited for its "
                            "conversation's lock")));
    }
  }
  void wait_idle() {
    std::unique_lock lock(mutex);
    idle.wait(lock, [&] { return running == 0; });
  }
};

std::shared_ptr<AsyncWork> make_async_work() {
  return std::make_shared<AsyncWork>();
}

namespace {

std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

// Runs `action` when the scope ends, whatever happens.
template <class Action>
class ScopeExit {
 public:
  // A template rather than std::function: publish_ownership runs one on every acquire, and a
  // std::function holding more than two pointers allocates.
  explicit ScopeExit(Action action) : action_(std::move(action)) {}
  ~ScopeExit() { action_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  Action action_;
};

}  // namespace

// ── release (SPEC §5.12) ─────────────────────────────────────────────────────

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

ReleaseOutcome Provider::release(const std::string& sandbox_id) {
  ClientPtr client;
  InfoPtr info;
  bool was_warm = false;
  // The acquisition this release ends: a `forget` below must not drop a newer one.
  std::optional<std::uint64_t> epoch;
  {
    std::lock_guard lock(mutex_);
    was_warm = registry_.warm_pool.count(sandbox_id) > 0;
    std::optional<ThreadKey> identity;
    if (auto it = registry_.active.find(sandbox_id); it != registry_.active.end()) {
      client = std::move(it->second.client);
      info = std::move(it->second.info);
      identity = std::move(it->second.identity);
      registry_.spare_active.erase(registry_.active, it);
    }
    std::optional<ThreadKey> first_key = registry_.thread_map.erase_sandbox(sandbox_id);
    if (info && !registry_.warm_pool.count(sandbox_id)) {
      registry_.spare_warm(registry_.warm_pool, sandbox_id) =
          WarmEntry{info, now(), first_key ? std::move(first_key) : std::move(identity)};
    }
    if (auto it = registry_.acquire_epoch.find(sandbox_id); it != registry_.acquire_epoch.end()) {
      epoch = it->second;
    }
  }
  close_client(client, [&] { return "Error closing sandbox " + sandbox_id + " during release"; });
  ReleaseOutcome outcome = info        ? ReleaseOutcome::released
                           : was_warm  ? ReleaseOutcome::already_warm
                                       : ReleaseOutcome::not_tracked;
  if (info) {
    if (!refresh_ownership(sandbox_id)) {
      log(LogLevel::warning, "Sandbox " + sandbox_id +
                                 " is owned by another instance; releasing it from this warm pool");
      forget(sandbox_id, epoch);
      outcome = ReleaseOutcome::lease_lost;
    }
  }
  log_lazily(LogLevel::info, [&] {
    return "Released sandbox " + sandbox_id + " to warm pool (container still running)";
  });
  return outcome;
}

// ── destroy (SPEC §5.13) ─────────────────────────────────────────────────────

DestroyOutcome Provider::destroy(const std::string& sandbox_id) {
  return destroy_tracked(sandbox_id, [] { return true; });
}

DestroyOutcome Provider::destroy_tracked(const std::string& sandbox_id,
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
  Removed removed = remove_tracked(sandbox_id, nullptr);
  close_client(removed.client,
               [&] { return "Error closing sandbox " + sandbox_id + " during destroy"; });
  if (removed.info) {
    with_held_teardown_lease(sandbox_id, [&] { backend_->destroy(*removed.info); });
    log(LogLevel::info, "Destroyed sandbox " + sandbox_id);
    return DestroyOutcome::destroyed;
  }
  release_ownership(sandbox_id);  // leave no `del` marker behind
  return DestroyOutcome::not_tracked;
}

// ── shutdown (SPEC §5.15) ────────────────────────────────────────────────────

void Provider::shutdown() {
  std::lock_guard once(shutdown_mutex_);  // a concurrent second call returns when this one has
  std::vector<std::string> active;
  std::vector<std::pair<std::string, WarmEntry>> warm;
  {
    std::lock_guard lock(mutex_);
    if (registry_.shutdown) return;
    registry_.shutdown = true;
    for (const auto& [id, entry] : registry_.active) {
      if (entry.client) active.push_back(id);
    }
    for (const auto& [id, entry] : registry_.warm_pool) warm.emplace_back(id, entry);
    registry_.warm_pool.clear();
  }
  // Stop renewal before destroying, so it does not re-publish leases being dropped.
  stop_background_threads();
  async_work_->close();  // queued async waiters fail now; running ones are waited for below
  log(LogLevel::info, "Shutting down " + std::to_string(active.size()) + " active + " +
                          std::to_string(warm.size()) + " warm-pool sandbox(es)");
  // Stops run side by side, at most kShutdownParallelism at once: with real containers one
  // stop takes a second or more, so in sequence a thousand sandboxes took many minutes.
  const std::size_t total = active.size() + warm.size();
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i = next++; i < total; i = next++) {
      const std::string& id = i < active.size() ? active[i] : warm[i - active.size()].first;
      try {
        if (i < active.size()) {
          destroy(id);
        } else {
          destroy_warm_entry(id, warm[i - active.size()].second, "shutdown", [] { return true; });
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
  async_work_->wait_idle();
  try {
    ownership_->close();
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("Error closing the ownership store: ") + e.what());
  }
}

void Provider::detach() {
  std::lock_guard once(shutdown_mutex_);
  Counts left;
  {
    std::lock_guard lock(mutex_);
    if (registry_.shutdown) return;
    registry_.shutdown = true;
    left = {registry_.active.size(), registry_.warm_pool.size(), 0};
  }
  stop_background_threads();
  async_work_->close();
  async_work_->wait_idle();
  try {
    ownership_->close();
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("Error closing the ownership store: ") + e.what());
  }
  log(LogLevel::debug, "Detached from " + std::to_string(left.active) + " active + " +
                           std::to_string(left.warm) +
                           " warm-pool sandbox(es); they keep running under their leases");
}

// ── health (SPEC §5.16) ──────────────────────────────────────────────────────

std::optional<bool> Provider::check_alive(const std::string& sandbox_id, const SandboxInfo& info) {
  if (!backend_) return std::nullopt;
  try {
    return backend_->is_alive(info);
  } catch (const std::exception& e) {
    log(LogLevel::warning, "Failed to check sandbox " + sandbox_id + " health: " + e.what());
    return std::nullopt;
  }
}

Provider::Removed Provider::remove_tracked(const std::string& sandbox_id,
                                           const InfoPtr& expected_info) {
  std::lock_guard lock(mutex_);
  if (expected_info) {
    const auto active = registry_.active.find(sandbox_id);
    const auto warm = registry_.warm_pool.find(sandbox_id);
    const bool is_active = active != registry_.active.end() && active->second.info &&
                           active->second.info == expected_info;
    const bool is_warm = warm != registry_.warm_pool.end() && warm->second.info == expected_info;
    if (!is_active && !is_warm) return {};
  }
  Removed removed;
  removed.removed = true;
  if (auto it = registry_.active.find(sandbox_id); it != registry_.active.end()) {
    removed.client = std::move(it->second.client);
    removed.info = std::move(it->second.info);
    registry_.active.erase(it);
  }
  registry_.thread_map.erase_sandbox(sandbox_id);
  registry_.acquire_epoch.erase(sandbox_id);
  if (auto it = registry_.warm_pool.find(sandbox_id); it != registry_.warm_pool.end()) {
    if (!removed.info) removed.info = it->second.info;
    registry_.warm_pool.erase(it);
  }
  return removed;
}

void Provider::drop_unhealthy_sandbox(const std::string& sandbox_id, const std::string& reason,
                                      const InfoPtr& expected_info) {
  if (!reserve_local_teardown(sandbox_id, [] { return true; })) {
    log(LogLevel::info,
        "Skipped dropping sandbox " + sandbox_id + ": already being torn down by this instance");
    return;
  }
  ScopeExit finish([&] { finish_local_teardown(sandbox_id); });
  Removed removed = remove_tracked(sandbox_id, expected_info);
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
    } else {
      log(LogLevel::info,
          "Not destroying unhealthy sandbox " + sandbox_id + ": owned by another instance");
    }
  }
  log(LogLevel::warning, "Dropped unhealthy sandbox " + sandbox_id + ": " + reason);
}

// ── warm pool (SPEC §6.2, §6.3) ──────────────────────────────────────────────

bool Provider::destroy_warm_entry(const std::string& sandbox_id, const WarmEntry& entry,
                                  const std::string& reason, const Predicate& still_reapable) {
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
    std::lock_guard lock(mutex_);
    auto it = registry_.warm_pool.find(sandbox_id);
    if (it != registry_.warm_pool.end() && it->second.info == entry.info) {
      registry_.warm_pool.erase(it);
    }
  }
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
Provider::Predicate Provider::still_this_warm_entry(const std::string& sandbox_id,
                                                    const WarmEntry& entry) {
  return [this, sandbox_id, entry] {
    auto it = registry_.warm_pool.find(sandbox_id);
    return it != registry_.warm_pool.end() && it->second.info == entry.info &&
           it->second.released_at == entry.released_at;
  };
}

void Provider::reap_expired_warm(std::optional<double> timeout) {
  const double limit = timeout.value_or(options_.idle_timeout);
  if (limit <= 0) return;
  std::vector<std::pair<std::string, WarmEntry>> expired;
  {
    std::lock_guard lock(mutex_);
    const double current = now();
    for (const auto& [id, entry] : registry_.warm_pool) {
      if (current - entry.released_at > limit) expired.emplace_back(id, entry);
    }
  }
  for (const auto& [id, entry] : expired) {
    destroy_warm_entry(id, entry, "idle_timeout", still_this_warm_entry(id, entry));
  }
}

std::optional<std::string> Provider::evict_oldest_warm() {
  std::vector<std::pair<std::string, WarmEntry>> by_age;
  {
    std::lock_guard lock(mutex_);
    by_age.assign(registry_.warm_pool.begin(), registry_.warm_pool.end());
  }
  std::stable_sort(by_age.begin(), by_age.end(), [](const auto& a, const auto& b) {
    return a.second.released_at < b.second.released_at;
  });
  for (const auto& [id, entry] : by_age) {
    if (destroy_warm_entry(id, entry, "replica_enforcement", still_this_warm_entry(id, entry))) {
      events_.evictions.fetch_add(1, std::memory_order_relaxed);
      return id;
    }
  }
  return std::nullopt;
}

// ── idle reaper (SPEC §6.1) ──────────────────────────────────────────────────

void Provider::cleanup_idle_sandboxes(double idle_timeout) {
  std::vector<std::pair<std::string, double>> idle;  // id, idle for (s)
  {
    std::lock_guard lock(mutex_);
    const double current = now();
    for (const auto& [id, entry] : registry_.active) {
      if (entry.client && current - entry.last_activity > idle_timeout) {
        idle.emplace_back(id, current - entry.last_activity);
      }
    }
  }
  for (const auto& candidate : idle) {
    // Named, not a structured binding: the predicate below captures it (clang 14 cannot).
    const std::string& id = candidate.first;
    const double idle_for = candidate.second;
    log(LogLevel::info,
        "Sandbox " + id + " idle for " + fixed(idle_for, 1) + "s, marking for destroy");
    log(LogLevel::info, "Destroying idle sandbox " + id);
    // Re-checked inside the reservation's critical section: a turn may have re-acquired it.
    // The predicate runs under the registry mutex, so it notes why it refused and the line is
    // logged after.
    // (Shared, and the id copied: a caller may keep the predicate past this iteration.)
    auto skipped = std::make_shared<std::string>();
    const Predicate still_idle = [this, id, idle_timeout, skipped] {
      auto it = registry_.active.find(id);
      if (it == registry_.active.end()) {
        *skipped = "Sandbox " + id + " already gone before idle destroy, skipping";
        return false;
      }
      if (now() - it->second.last_activity < idle_timeout) {
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
      if (!find(id)) events_.idle_reaps.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
      log(LogLevel::error, "Failed to destroy idle sandbox " + id + ": " + e.what());
    }
  }
  reap_expired_warm(idle_timeout);
}

// ── ownership helpers (SPEC §7.7–§7.10) ──────────────────────────────────────

void Provider::publish_ownership(const std::string& sandbox_id) {
  {
    // The intent mark is visible before the takeover can become durable in the store.
    std::lock_guard lock(mutex_);
    ++registry_.spare_inflight(registry_.acquire_inflight, sandbox_id);
  }
  bool taken = false;
  // The mark goes and, on success, the new epoch appears in one step (one lock, not two).
  ScopeExit done([&] {
    std::lock_guard lock(mutex_);
    auto it = registry_.acquire_inflight.find(sandbox_id);
    if (it != registry_.acquire_inflight.end() && --it->second <= 0) {
      registry_.spare_inflight.erase(registry_.acquire_inflight, it);
    }
    if (taken) registry_.acquire_epoch[sandbox_id] = ++registry_.epoch_counter;
  });
  if (!ownership_->take(sandbox_id)) throw SandboxBeingDestroyedError(sandbox_id);
  taken = true;
}

bool Provider::claim_ownership(const std::string& sandbox_id, bool for_destroy) {
  try {
    return ownership_->claim(sandbox_id, for_destroy);
  } catch (const std::exception& e) {
    log(LogLevel::warning, "Sandbox ownership claim failed for " + sandbox_id +
                               " (treating as not owned): " + e.what());
    return false;
  }
}

bool Provider::refresh_ownership(const std::string& sandbox_id) {
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

void Provider::release_ownership(const std::string& sandbox_id) {
  try {
    ownership_->release(sandbox_id);
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Failed to release sandbox ownership for " + sandbox_id + ": " + e.what());
  }
}

namespace {

// State shared between a teardown and its heartbeat; outlives the provider if the heartbeat
// has to be abandoned (its final release then happens on that thread).
struct TeardownHeartbeat {
  std::mutex mutex;  // guards stop and exited
  std::condition_variable wake;
  bool stop = false;
  bool exited = false;
  std::thread thread;  // set by the delayed start, read by the teardown once cancel() says so
  bool start_failed = false;  // the thread could not be made (guarded by mutex)
};

}  // namespace

void Provider::with_held_teardown_lease(const std::string& sandbox_id,
                                        const std::function<void()>& stop) {
  auto shared = std::make_shared<TeardownHeartbeat>();
  auto store = ownership_;
  auto logger = logger_;
  const double interval = options_.renewal_interval_seconds;
  // Refreshes the teardown lease every interval while the stop runs, then makes the final
  // release itself, so no refresh can land after it. Started only once the stop has run for one
  // interval: a stop that ends sooner never needed a refresh.
  auto beat = [shared, store, logger, sandbox_id, interval] {
    {
      std::unique_lock lock(shared->mutex);
      while (!shared->stop) {
        lock.unlock();
        bool keep_beating = true;
        try {
          if (!store->claim(sandbox_id, true)) {
            logger->error("Lost the teardown exclusion for " + sandbox_id +
                          " while its container stop was still in flight; a peer may have "
                          "taken it");
            keep_beating = false;
          }
        } catch (const std::exception& e) {
          logger->warning("Could not refresh the teardown lease for " + sandbox_id +
                          ", will retry: " + e.what());
        }
        lock.lock();
        if (!keep_beating) {
          // Stop beating but still wait for the stop to finish before releasing.
          shared->wake.wait(lock, [&] { return shared->stop; });
          break;
        }
        if (shared->wake.wait_for(lock, std::chrono::duration<double>(interval),
                                  [&] { return shared->stop; })) {
          break;
        }
      }
    }
    try {
      store->release(sandbox_id);
    } catch (const std::exception& e) {
      logger->warning("Failed to release sandbox ownership for " + sandbox_id + ": " + e.what());
    }
    std::lock_guard lock(shared->mutex);
    shared->exited = true;
    shared->wake.notify_all();
  };
  const DelayedStarts::Token start =
      delayed_starts_.schedule(std::chrono::duration<double>(interval), [shared, beat] {
        try {
          shared->thread = std::thread(beat);
        } catch (const std::system_error&) {
          std::lock_guard lock(shared->mutex);
          shared->start_failed = true;
        }
      });
  auto join = [&] {
    if (delayed_starts_.cancel(start)) {
      release_ownership(sandbox_id);  // no heartbeat ever ran: nothing can refresh after this
      return;
    }
    std::unique_lock lock(shared->mutex);
    if (shared->start_failed) {
      lock.unlock();
      log(LogLevel::warning, "Could not start the teardown heartbeat for " + sandbox_id +
                                 "; its lease was not refreshed during the stop");
      release_ownership(sandbox_id);
      return;
    }
    shared->stop = true;
    shared->wake.notify_all();
    const bool exited = shared->wake.wait_for(
        lock, std::chrono::duration<double>(options_.teardown_join_timeout_seconds),
        [&] { return shared->exited; });
    lock.unlock();
    if (exited) {
      shared->thread.join();
    } else {
      log(LogLevel::warning, "Teardown heartbeat for " + sandbox_id + " did not exit within " +
                                 fixed(options_.teardown_join_timeout_seconds, 1) +
                                 "s; its lease release is deferred to that thread");
      shared->thread.detach();
    }
  };
  try {
    stop();
  } catch (...) {
    join();
    throw;
  }
  join();
}

bool Provider::reserve_local_teardown(const std::string& sandbox_id,
                                      const Predicate& still_reapable) {
  std::lock_guard lock(mutex_);
  if (registry_.local_teardown.count(sandbox_id)) return false;
  if (!still_reapable()) return false;
  registry_.local_teardown.insert(sandbox_id);
  return true;
}

void Provider::finish_local_teardown(const std::string& sandbox_id) {
  {
    std::lock_guard lock(mutex_);
    registry_.local_teardown.erase(sandbox_id);
  }
  teardown_finished_.notify_all();
}

bool Provider::teardown_in_progress(const std::string& sandbox_id) {
  {
    std::lock_guard lock(mutex_);
    if (registry_.local_teardown.count(sandbox_id)) return true;
  }
  try {
    const auto lease = ownership_->inspect(sandbox_id);
    return lease && lease->destroying;
  } catch (const std::exception&) {
    return false;  // the publish that follows fails closed if the store stays unreachable
  }
}

Provider::Deadline Provider::teardown_wait_deadline() const {
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(options_.teardown_wait_seconds));
}

bool Provider::wait_out_teardown(const std::string& sandbox_id, Deadline deadline) {
  const auto remaining = [&] {
    return std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
  };
  log(LogLevel::info, "Sandbox " + sandbox_id +
                          " is being torn down; waiting for the teardown to finish (at most " +
                          fixed(remaining(), 1) + "s)");
  {
    std::unique_lock lock(mutex_);
    while (registry_.local_teardown.count(sandbox_id)) {
      const double left = remaining();
      if (left <= 0) return false;
      teardown_finished_.wait_for(lock, std::chrono::duration<double>(std::min(left, 0.5)));
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
    std::unique_lock lock(background_mutex_);
    if (background_wake_.wait_for(lock, std::chrono::duration<double>(std::min(delay, left)),
                                  [&] { return background_stop_; })) {
      return false;
    }
    delay = std::min(delay * 2, 0.5);
  }
}

void Provider::forget(const std::string& sandbox_id, std::optional<std::uint64_t> expected_epoch) {
  ClientPtr client;
  const char* kept_because = nullptr;  // logged once the registry mutex is let go
  {
    std::lock_guard lock(mutex_);
    if (registry_.local_teardown.count(sandbox_id)) return;
    if (registry_.acquire_inflight.count(sandbox_id)) {
      kept_because = ": an acquire is publishing ownership for it";
    } else if (expected_epoch) {
      auto it = registry_.acquire_epoch.find(sandbox_id);
      const std::uint64_t current = it == registry_.acquire_epoch.end() ? 0 : it->second;
      if (current != *expected_epoch) {
        kept_because = ": this instance re-acquired it after the lease check";
      }
    }
    if (!kept_because) {
      if (auto it = registry_.active.find(sandbox_id); it != registry_.active.end()) {
        client = std::move(it->second.client);
        registry_.active.erase(it);
      }
      registry_.warm_pool.erase(sandbox_id);
      registry_.acquire_epoch.erase(sandbox_id);
      registry_.thread_map.erase_sandbox(sandbox_id);
    }
  }
  if (kept_because) {
    log(LogLevel::info, "Not dropping sandbox " + sandbox_id + kept_because);
    return;
  }
  // Never touch the container: it belongs to the peer now.
  close_client(client,
               [&] { return "Error closing sandbox " + sandbox_id + " after losing its lease"; });
}

void Provider::renew_owned_leases() {
  std::vector<std::pair<std::string, std::optional<std::uint64_t>>> ids;
  {
    std::lock_guard lock(mutex_);
    std::set<std::string> all;
    for (const auto& [id, entry] : registry_.active) {
      if (entry.client) all.insert(id);
    }
    for (const auto& [id, entry] : registry_.warm_pool) all.insert(id);
    for (const auto& id : all) {
      auto it = registry_.acquire_epoch.find(id);
      ids.emplace_back(id, it == registry_.acquire_epoch.end()
                               ? std::nullopt
                               : std::optional<std::uint64_t>(it->second));
    }
  }
  for (const auto& [id, epoch] : ids) {
    if (!refresh_ownership(id)) {
      events_.lease_losses.fetch_add(1, std::memory_order_relaxed);
      log(LogLevel::warning,
          "Lost sandbox ownership lease for " + id + "; dropping it from this instance");
      forget(id, epoch);
    }
  }
}

// ── orphan reconciliation (SPEC §8) ──────────────────────────────────────────

ReconcileReport Provider::reconcile_orphans() {
  ReconcileReport report;
  if (!backend_) return report;
  std::vector<SandboxInfo> running;
  try {
    running = backend_->list_running();
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        std::string("Failed to enumerate running containers during startup reconciliation: ") +
            e.what());
    report.listed = false;
    return report;
  }
  {
    std::set<std::string> present;
    for (const auto& info : running) present.insert(info.sandbox_id);
    std::lock_guard lock(mutex_);
    for (auto it = registry_.unowned_since.begin(); it != registry_.unowned_since.end();) {
      it = present.count(it->first) ? std::next(it) : registry_.unowned_since.erase(it);
    }
  }
  if (running.empty()) return report;

  const double ttl = ownership_->ttl_seconds();
  report.found = static_cast<int>(running.size());
  int& adopted = report.adopted;
  int& skipped = report.skipped;
  int& deferred = report.deferred;
  for (const auto& info : running) {
    const std::string& id = info.sandbox_id;
    const double current = now();
    const double age = info.created_at > 0 ? current - info.created_at : INFINITY;
    if (ownership_->supports_cross_process()) {
      std::optional<std::string> owner;
      try {
        owner = ownership_->owner(id);
      } catch (const std::exception& e) {
        log(LogLevel::warning, "Could not read sandbox ownership for " + id +
                                   " during reconciliation (deferring adoption): " + e.what());
        ++deferred;
        continue;
      }
      bool adoptable = false;
      {
        std::lock_guard lock(mutex_);
        if (owner) {
          registry_.unowned_since.erase(id);
        } else {
          const double first_seen = registry_.unowned_since.try_emplace(id, current).first->second;
          adoptable = current - first_seen >= ttl;
        }
      }
      if (!adoptable) {
        ++deferred;
        log(LogLevel::debug,
            "Deferring adoption of sandbox " + id + " (owned or within recovery grace)");
        continue;
      }
    }
    if (!claim_ownership(id, false)) {
      ++skipped;
      continue;
    }
    {
      std::lock_guard lock(mutex_);
      if (registry_.has_client(id) || registry_.has_info(id) || registry_.warm_pool.count(id)) {
        continue;
      }
      if (registry_.local_teardown.count(id) || registry_.shutdown) {
        ++deferred;  // shutting down: a late adoption would never be stopped
        continue;
      }
      registry_.warm_pool[id] = WarmEntry{std::make_shared<const SandboxInfo>(info), current};
      registry_.unowned_since.erase(id);
    }
    ++adopted;
    events_.adoptions.fetch_add(1, std::memory_order_relaxed);
    log(LogLevel::info, "Adopted container " + id + " into warm pool (age: " +
                            (std::isinf(age) ? std::string("inf") : fixed(age, 0)) + "s)");
  }
  log(LogLevel::info, "Startup reconciliation complete: " + std::to_string(adopted) +
                          " adopted into warm pool, " + std::to_string(skipped) +
                          " skipped (live peer ownership), " + std::to_string(deferred) +
                          " deferred (owned or within recovery grace), " +
                          std::to_string(running.size()) + " total found");
  return report;
}

// ── background threads (SPEC §5.2, §6, §7.10) ────────────────────────────────

void Provider::start() {
  if (options_.reconcile_on_start) reconcile_orphans();
  if (options_.run_background_threads) start_background_threads();
}

void Provider::start_background_threads() {
  renewer_ = std::thread([this] { renewal_loop(); });
  log(LogLevel::info, "Started sandbox ownership renewal thread (interval: " +
                          fixed(options_.renewal_interval_seconds, 1) +
                          "s, ttl: " + fixed(ownership_->ttl_seconds(), 1) + "s)");
  if (options_.idle_timeout > 0) {
    const double idle_timeout = options_.idle_timeout;
    idle_checker_ = std::thread([this, idle_timeout] { idle_checker_loop(idle_timeout); });
    log(LogLevel::info, "Started warm-pool idle checker thread (timeout: " +
                            std::to_string(options_.idle_timeout) + "s)");
  }
}

void Provider::stop_background_threads() {
  {
    std::lock_guard lock(background_mutex_);
    background_stop_ = true;
  }
  background_wake_.notify_all();
  if (idle_checker_.joinable() && idle_checker_.get_id() != std::this_thread::get_id()) {
    idle_checker_.join();
  }
  if (renewer_.joinable() && renewer_.get_id() != std::this_thread::get_id()) renewer_.join();
}

bool Provider::wait_for_background_tick(double seconds) {
  std::unique_lock lock(background_mutex_);
  return !background_wake_.wait_for(lock, std::chrono::duration<double>(seconds),
                                    [&] { return background_stop_; });
}

void Provider::idle_checker_loop(double idle_timeout) {
  while (wait_for_background_tick(options_.idle_check_interval_seconds)) {
    try {
      reconcile_orphans();
      cleanup_idle_sandboxes(idle_timeout);
    } catch (const std::exception& e) {
      log(LogLevel::error, std::string("Error in warm-pool idle checker loop: ") + e.what());
    }
  }
}

void Provider::prune_idle_thread_locks() {
  std::lock_guard lock(mutex_);
  for (auto it = registry_.thread_locks.begin(); it != registry_.thread_locks.end();) {
    // Only the map refers to it and nobody holds it: no waiter can be lost by dropping it.
    const bool idle = it->second.use_count() == 1 && !it->second->is_held();
    it = idle ? registry_.thread_locks.erase(it) : std::next(it);
  }
}

void Provider::renewal_loop() {
  while (wait_for_background_tick(options_.renewal_interval_seconds)) {
    try {
      prune_idle_thread_locks();
      renew_owned_leases();
    } catch (const std::exception& e) {
      log(LogLevel::error, std::string("Error in sandbox ownership renewal loop: ") + e.what());
    }
  }
}

// ── async acquire (SPEC §12) ─────────────────────────────────────────────────

std::string AsyncAcquisition::get() {
  std::unique_lock lock(state_->mutex);
  state_->done_cv.wait(lock, [&] { return state_->done; });
  if (state_->error) std::rethrow_exception(state_->error);
  return state_->result;
}

bool AsyncAcquisition::wait_for(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(state_->mutex);
  return state_->done_cv.wait_for(lock, timeout, [&] { return state_->done; });
}

void AsyncAcquisition::cancel() {
  {
    std::lock_guard lock(state_->mutex);
    state_->cancelled = true;
  }
  state_->finish("", std::make_exception_ptr(AsyncAcquisitionCancelled("acquire_async cancelled")));
}

namespace {
std::exception_ptr shut_down_error() {
  return std::make_exception_ptr(
      std::runtime_error("the provider is shut down; acquire_async refused"));
}
}  // namespace

void Provider::run_async_acquisition(const std::shared_ptr<AsyncAcquisition::State>& state,
                                     const std::optional<std::string>& thread_id,
                                     const std::string& user,
                                     const std::shared_ptr<ThreadLock>& lock) {
  std::string result;
  std::exception_ptr error;
  if (!state->is_cancelled()) {
    try {
      result = acquire_with_restarts(thread_id, user);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (lock) lock->unlock();  // may grant the next waiter: still counted as running here
  state->finish(std::move(result), error);
}

AsyncAcquisition Provider::acquire_async(const std::optional<std::string>& thread_id,
                                         const std::optional<std::string>& user_id) {
  auto state = std::make_shared<AsyncAcquisition::State>();
  // The user is resolved here, once, on the caller's thread: an ambient_user hook may read
  // per-request context that a pool thread does not have.
  std::string user;
  try {
    user = effective_user(user_id);
  } catch (...) {
    state->finish("", std::current_exception());
    return AsyncAcquisition(state);
  }
  // What the tasks share. They capture the provider (`this`) only inside work counted as
  // running, which shutdown() waits for; everything else holds shared state.
  auto work = async_work_;
  auto blocking = blocking_executor_;
  auto run = [this, work, state, thread_id, user](const std::shared_ptr<ThreadLock>& lock) {
    run_async_acquisition(state, thread_id, user, lock);
    work->end();
  };
  try {
    if (!thread_id) {
      if (!work->begin()) {
        state->finish("", shut_down_error());
        return AsyncAcquisition(state);
      }
      try {
        blocking->submit([run] { run(nullptr); });
      } catch (...) {
        work->end();
        throw;
      }
      return AsyncAcquisition(state);
    }
    validate_thread_id(*thread_id);
    validate_user_id(user);
    auto lock = thread_lock({user, *thread_id});
    if (!work->enqueue(state)) {
      state->finish("", shut_down_error());
      return AsyncAcquisition(state);
    }
    // The wait has its own executor (SPEC §12 item 2), and parks no thread there: the lock
    // queues a grant, run by whoever releases it, which hands the work to the blocking pool. So
    // waiters on one stuck conversation, cancelled or not, never hold up another (issue 13 A.5).
    auto grant = [work, state, lock, blocking, run]() -> bool {
      if (!work->dequeue_and_begin(state)) return false;  // shut down meanwhile: pass it on
      if (state->is_cancelled()) {
        work->end();
        return false;  // the waiter gave up: the lock goes straight to the next one
      }
      try {
        blocking->submit([lock, run] { run(lock); });
        return true;
      } catch (...) {
        work->end();
        state->finish("", std::current_exception());
        return false;
      }
    };
    lock_wait_executor_->submit([lock, grant] { lock->lock_async(grant); });
  } catch (...) {
    state->finish("", std::current_exception());
  }
  return AsyncAcquisition(state);
}

}  // namespace sandboxd::core

// Provider: start-up, the background threads (idle checker, lease renewer, layer watcher) and
// acquire_async (design §5.2, §6, §7.10, §12).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "fixed_decimals.hpp"
#include "provider_impl.hpp"
#include "running_cancellation.hpp"
#include "sandboxd/core/thread_storage.hpp"

namespace sandboxd::core {
void Provider::Impl::start() {
  if (options_.reconcile_on_start) reconcile_orphans();
  remove_remembered_images();
  if (options_.run_background_threads) start_background_threads();
}

void Provider::Impl::start_background_threads() {
  if (slots_) slots_->start_slots();
  if (isolation_) isolation_->start_keeping_isolation();
  renewer_ = std::thread([this] { renewal_loop(); });
  log(LogLevel::info, "Started sandbox ownership renewal thread (interval: " +
                          fixed(options_.renewal_interval_seconds, 1) +
                          "s, ttl: " + fixed(ownership_->ttl_seconds(), 1) + "s)");
  if (watching_layers()) {
    layer_watcher_ = std::thread([this] { layer_watch_loop(); });
    log(LogLevel::info, "Started writable-layer watch thread (bound: " +
                            show_size(paths_->storage().limit_bytes()) +
                            ", interval: " + fixed(options_.idle_check_interval_seconds, 1) + "s)");
  }
  std::optional<double> idle_timeout;
  if (options_.idle_timeout > 0) idle_timeout = options_.idle_timeout;
  const bool lifetime = options_.max_lifetime_seconds > 0;
  if (idle_timeout || pausing_enabled() || lifetime || archiving_enabled()) {
    // With no idle timeout, the idle pass still ends sandboxes past their lifetime.
    idle_checker_ = std::thread([this, idle_timeout, lifetime] {
      idle_checker_loop(lifetime ? idle_timeout.value_or(INFINITY) : idle_timeout);
    });
    log(LogLevel::info,
        "Started warm-pool idle checker thread (timeout: " + std::to_string(options_.idle_timeout) +
            "s" +
            (pausing_enabled() ? ", pause after: " + fixed(options_.pause_after_seconds, 1) + "s"
                               : std::string()) +
            (lifetime ? ", max lifetime: " + fixed(options_.max_lifetime_seconds, 1) + "s"
                      : std::string()) +
            (archiving_enabled()
                 ? ", archive after: " + fixed(options_.archive_after_seconds, 1) + "s"
                 : std::string()) +
            ")");
  }
}

void Provider::Impl::stop_background_threads() {
  {
    MutexLock lock(background_mutex_);
    background_stop_ = true;
  }
  background_wake_.notify_all();
  if (idle_checker_.joinable() && idle_checker_.get_id() != std::this_thread::get_id()) {
    idle_checker_.join();
  }
  if (renewer_.joinable() && renewer_.get_id() != std::this_thread::get_id()) renewer_.join();
  if (layer_watcher_.joinable() && layer_watcher_.get_id() != std::this_thread::get_id()) {
    layer_watcher_.join();
  }
}

bool Provider::Impl::background_stopping() {
  MutexLock lock(background_mutex_);
  return background_stop_;
}

bool Provider::Impl::wait_for_background_tick(double seconds) {
  MutexLock lock(background_mutex_);
  return !lock.wait_for(background_wake_, std::chrono::duration<double>(seconds),
                        [&]() NO_THREAD_SAFETY_ANALYSIS { return background_stop_; });
}

void Provider::Impl::idle_checker_loop(std::optional<double> idle_timeout) {
  // Reconciliation and idle reaping run every idle-check interval; the pause pass runs more
  // often when pause_after_seconds is shorter, so a sandbox is paused within half of it late.
  const double interval = options_.idle_check_interval_seconds;
  // The archive pass likewise, within half of archive_after_seconds.
  double tick = interval;
  if (pausing_enabled()) tick = std::min(tick, std::max(0.5, options_.pause_after_seconds / 2));
  if (archiving_enabled()) {
    tick = std::min(tick, std::max(0.5, options_.archive_after_seconds / 2));
  }
  double since_full_pass = 0;
  while (wait_for_background_tick(tick)) {
    since_full_pass += tick;
    try {
      if (idle_timeout && since_full_pass + 1e-9 >= interval) {
        since_full_pass = 0;
        reconcile_orphans();
        cleanup_idle_sandboxes(*idle_timeout);
        delete_expired_snapshots();
      }
      pause_idle_warm();
      archive_idle_released();
    } catch (const std::exception& e) {
      log(LogLevel::error, std::string("Error in warm-pool idle checker loop: ") + e.what());
    }
  }
}

void Provider::Impl::layer_watch_loop() {
  // Its own thread: a pass is up to kLayerChecksPerPass looks, each the engine walking a layer
  // (milliseconds for a layer of few files, far longer for one of many or a busy engine), so
  // in the idle checker one slow pass held back reaping, pausing and archiving. A pass that stopped
  // at its bound is followed at once by the next, so every layer is looked at once per interval
  // plus the sweep's own time.
  double wait = options_.idle_check_interval_seconds;
  while (wait_for_background_tick(wait)) {
    bool more = false;
    try {
      more = stop_layers_past_bound() == LayerPass::more_remain;
    } catch (const std::exception& e) {
      log(LogLevel::error, std::string("Error in writable-layer watch loop: ") + e.what());
    }
    wait = more ? 0.0 : options_.idle_check_interval_seconds;
  }
}

void Provider::Impl::prune_idle_thread_locks() {
  MutexLock lock(mutex_);
  registry_.prune_idle_thread_locks();
}

void Provider::Impl::renewal_loop() {
  while (wait_for_background_tick(options_.renewal_interval_seconds)) {
    try {
      prune_idle_thread_locks();
      renew_owned_leases();
    } catch (const std::exception& e) {
      log(LogLevel::error, std::string("Error in sandbox ownership renewal loop: ") + e.what());
    }
  }
}

// ── async acquire (design §12) ─────────────────────────────────────────────────

void Provider::Impl::run_async_acquisition(const std::shared_ptr<AsyncAcquisition::State>& state,
                                           const std::optional<std::string>& thread_id,
                                           const std::string& user,
                                           const std::shared_ptr<ThreadLock>& lock) {
  std::string result;
  std::exception_ptr error;
  if (!state->is_cancelled()) {
    try {
      const RunningCancellation running(&state->cancellation);  // a capacity wait sees cancel()
      result = acquire_with_restarts(thread_id, user);
    } catch (...) {
      error = std::current_exception();
    }
  }
  if (lock) lock->unlock();  // may grant the next waiter: still counted as running here
  state->finish(std::move(result), error);
}

AsyncAcquisition Provider::Impl::acquire_async(const std::optional<std::string>& thread_id,
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
  auto work = async_;
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
    // The wait has its own executor (design §12 item 2), and parks no thread there: the lock
    // queues a grant, run by whoever releases it, which hands the work to the blocking pool. So
    // waiters on one stuck conversation, cancelled or not, never hold up another.
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

#include "teardown_lease.hpp"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <system_error>
#include <thread>

namespace sandboxd::core {

TeardownLeases::TeardownLeases(std::shared_ptr<OwnershipStore> store,
                               std::shared_ptr<Logger> logger, double renewal_interval_seconds,
                               double join_timeout_seconds)
    : store_(std::move(store)),
      logger_(std::move(logger)),
      interval_(renewal_interval_seconds),
      join_timeout_(join_timeout_seconds) {}

void TeardownLeases::release(const std::string& sandbox_id) {
  try {
    store_->release(sandbox_id);
  } catch (const std::exception& e) {
    logger_->warning("Failed to release sandbox ownership for " + sandbox_id + ": " + e.what());
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

void TeardownLeases::hold(const std::string& sandbox_id, const std::function<void()>& stop) {
  auto shared = std::make_shared<TeardownHeartbeat>();
  auto store = store_;
  auto logger = logger_;
  const double interval = interval_;
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
      release(sandbox_id);  // no heartbeat ever ran: nothing can refresh after this
      return;
    }
    std::unique_lock lock(shared->mutex);
    if (shared->start_failed) {
      lock.unlock();
      logger_->warning("Could not start the teardown heartbeat for " + sandbox_id +
                       "; its lease was not refreshed during the stop");
      release(sandbox_id);
      return;
    }
    shared->stop = true;
    shared->wake.notify_all();
    const bool exited = shared->wake.wait_for(lock, std::chrono::duration<double>(join_timeout_),
                                              [&] { return shared->exited; });
    lock.unlock();
    if (exited) {
      shared->thread.join();
    } else {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%.1f", join_timeout_);
      logger_->warning("Teardown heartbeat for " + sandbox_id + " did not exit within " + seconds +
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

}  // namespace sandboxd::core

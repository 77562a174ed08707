// Refusals of requests without valid credentials: counted (for metrics) and logged at most one
// line per interval, so that a client sending them as fast as it can never floods the log.
// The first refusal after a quiet interval is logged at once; the ones that follow within the
// interval are summed into the next line. Never logs a credential: only method and path.
//
// Lock story: `mutex_` guards the interval's state; the log line is written after it is
// released. `total_` is read without the lock (metrics).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "sandboxd/logger.hpp"

namespace sandboxd::door {

class RefusalLog {
 public:
  using Clock = std::chrono::steady_clock;

  RefusalLog(std::shared_ptr<Logger> logger, std::string what,
             std::chrono::seconds interval = std::chrono::seconds(60))
      : logger_(std::move(logger)), what_(std::move(what)), interval_(interval) {}

  // One refusal of `method path` (already made loggable); `now` is injectable for tests.
  void record(const std::string& method, const std::string& path,
              Clock::time_point now = Clock::now()) {
    total_.fetch_add(1, std::memory_order_relaxed);
    std::uint64_t suppressed = 0;
    {
      std::lock_guard lock(mutex_);
      if (logged_once_ && now - last_logged_ < interval_) {
        ++pending_;
        return;
      }
      suppressed = pending_;
      pending_ = 0;
      last_logged_ = now;
      logged_once_ = true;
    }
    std::string line = what_ + ": " + method + " " + path;
    if (suppressed > 0) {
      line += " (and " + std::to_string(suppressed) + " more in the last " +
              std::to_string(interval_.count()) + " s, not logged one by one)";
    }
    if (logger_) logger_->warning(line);
  }

  std::uint64_t total() const { return total_.load(std::memory_order_relaxed); }

 private:
  const std::shared_ptr<Logger> logger_;
  const std::string what_;
  const std::chrono::seconds interval_;
  std::atomic<std::uint64_t> total_{0};
  std::mutex mutex_;
  bool logged_once_ = false;         // guarded by mutex_
  Clock::time_point last_logged_{};  // guarded by mutex_
  std::uint64_t pending_ = 0;        // refusals since the last line; guarded by mutex_
};

}  // namespace sandboxd::door

// A lock that any thread may release (SPEC §12 item 2): an async acquisition takes it on one
// thread and may release it on another, which std::mutex forbids.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace sandboxd::core {

class ThreadLock {
 public:
  void lock() {
    std::unique_lock guard(mutex_);
    released_.wait(guard, [&] { return !held_; });
    held_ = true;
  }
  bool try_lock() {
    std::lock_guard guard(mutex_);
    if (held_) return false;
    held_ = true;
    return true;
  }
  template <typename Clock, typename Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& deadline) {
    std::unique_lock guard(mutex_);
    if (!released_.wait_until(guard, deadline, [&] { return !held_; })) return false;
    held_ = true;
    return true;
  }
  void unlock() {
    {
      std::lock_guard guard(mutex_);
      held_ = false;
    }
    released_.notify_one();
  }
  bool is_held() const {
    std::lock_guard guard(mutex_);
    return held_;
  }

 private:
  mutable std::mutex mutex_;  // guards held_
  std::condition_variable released_;
  bool held_ = false;
};

}  // namespace sandboxd::core

// A lock that any thread may release (design §12 item 2): an async acquisition takes it on one
// thread and may release it on another, which std::mutex forbids.
//
// Waiters queue in arrival order, synchronous and asynchronous alike, and unlock() hands the
// lock straight to the first of them. An asynchronous waiter (lock_async) parks no thread: it is
// a grant callback, run by whoever releases the lock, that either takes the lock (true) or
// declines it (false, e.g. its caller cancelled), in which case the lock passes on. So any
// number of waiters on one stuck conversation cost no thread, and cannot hold up another
// conversation.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>

namespace sandboxd::core {

class ThreadLock {
 public:
  // Runs on the releasing thread, without the lock's internal mutex: must not block (it hands
  // the real work to an executor). true takes the lock, false passes it on.
  using Grant = std::function<bool()>;

  void lock() {
    std::unique_lock guard(mutex_);
    if (!held_) {
      held_ = true;
      return;
    }
    auto self = std::make_shared<Waiter>();
    queue_.push_back(self);
    handed_over_.wait(guard, [&] { return self->granted; });
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
    if (!held_) {
      held_ = true;
      return true;
    }
    auto self = std::make_shared<Waiter>();
    queue_.push_back(self);
    const bool granted =
        handed_over_.wait_until(guard, deadline, [&] { return self->granted; }) || self->granted;
    if (!granted) std::erase(queue_, self);  // timed out: leave the queue before anyone grants
    return granted;
  }

  // Takes the lock now if it is free (running `grant` on this thread), else queues `grant`.
  void lock_async(Grant grant) {
    {
      std::lock_guard guard(mutex_);
      if (held_) {
        auto waiter = std::make_shared<Waiter>();
        waiter->grant = std::move(grant);
        queue_.push_back(std::move(waiter));
        return;
      }
      held_ = true;
    }
    if (!offer(grant)) unlock();
  }

  void unlock() {
    while (true) {
      std::shared_ptr<Waiter> next;
      {
        std::lock_guard guard(mutex_);
        if (queue_.empty()) {
          held_ = false;
          return;
        }
        next = std::move(queue_.front());
        queue_.pop_front();
        if (!next->grant) {  // a synchronous waiter: it owns the lock from here
          next->granted = true;
          handed_over_.notify_all();
          return;
        }
      }
      // Still held on the async waiter's behalf; it takes it or passes it on (the loop, not
      // recursion, so a long line of cancelled waiters cannot exhaust the stack).
      if (offer(next->grant)) return;
    }
  }

  bool is_held() const {
    std::lock_guard guard(mutex_);
    return held_;
  }
  // Waiters queued behind the holder (tests and diagnostics).
  std::size_t waiters() const {
    std::lock_guard guard(mutex_);
    return queue_.size();
  }

 private:
  // A grant that throws has not taken the lock.
  static bool offer(const Grant& grant) noexcept {
    try {
      return grant();
    } catch (...) {
      return false;
    }
  }

  struct Waiter {
    Grant grant;           // empty for a synchronous waiter
    bool granted = false;  // synchronous only; guarded by mutex_
  };
  mutable std::mutex mutex_;  // guards held_, queue_ and every queued Waiter's `granted`
  std::condition_variable handed_over_;
  bool held_ = false;
  // A list, not a deque: every conversation keeps one ThreadLock, and an empty libstdc++ deque
  // already holds a 512-byte block (a third of the memory per tracked sandbox).
  std::list<std::shared_ptr<Waiter>> queue_;
};

}  // namespace sandboxd::core

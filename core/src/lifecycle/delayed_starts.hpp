// Work that should start only if something is still going on after a delay: a teardown's
// lease heartbeat is needed only while a container stop outlasts one renewal interval, and most
// stops finish long before. One timer thread per owner runs each start that comes due; a start
// cancelled before then never runs, so a fast stop costs a map insert and erase instead of a
// thread (shutdown of 10,000 tracked sandboxes spent most of its time creating them).
//
// Lock story: `mutex_` guards `pending_`, `due_of_`, `next_token_` and `stopping_`; a due start
// runs with it held, so cancel() knows for sure whether the start ran (it must be quick and never
// block: it may spawn a thread, nothing more). The timer thread starts with the first schedule().
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <utility>

#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::core {

class DelayedStarts {
 public:
  using Clock = std::chrono::steady_clock;
  using Token = std::uint64_t;

  DelayedStarts() = default;
  DelayedStarts(const DelayedStarts&) = delete;
  DelayedStarts& operator=(const DelayedStarts&) = delete;
  ~DelayedStarts() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (timer_.joinable()) timer_.join();
  }

  // Runs `start` once `delay` has passed, unless cancel(token) comes first.
  Token schedule(std::chrono::duration<double> delay, std::function<void()> start) {
    const auto due = Clock::now() + std::chrono::duration_cast<Clock::duration>(delay);
    MutexLock lock(mutex_);
    const Token token = ++next_token_;
    pending_.emplace(std::make_pair(due, token), std::move(start));
    due_of_.emplace(token, due);
    if (!timer_.joinable()) timer_ = std::thread([this] { run(); });
    wake_.notify_all();
    return token;
  }

  // True when the start was still pending and now never runs; false when it has run.
  bool cancel(Token token) {
    MutexLock lock(mutex_);
    auto due = due_of_.find(token);
    if (due == due_of_.end()) return false;
    pending_.erase(std::make_pair(due->second, token));
    due_of_.erase(due);
    return true;
  }

 private:
  void run() EXCLUDES(mutex_) {
    MutexLock lock(mutex_);
    while (!stopping_) {
      if (pending_.empty()) {
        lock.wait(wake_);
        continue;
      }
      const auto due = pending_.begin()->first.first;
      if (Clock::now() < due) {
        lock.wait_until(wake_, due);
        continue;
      }
      auto start = std::move(pending_.begin()->second);
      due_of_.erase(pending_.begin()->first.second);
      pending_.erase(pending_.begin());
      try {
        start();  // under the lock: cancel() must see it either pending or run
      } catch (...) {
        // A start reports its own failure to whoever scheduled it; the timer goes on.
      }
    }
  }

  Mutex mutex_;
  std::condition_variable wake_;
  // (due, token) → start, ordered by due time; one entry per teardown in flight.
  std::map<std::pair<Clock::time_point, Token>, std::function<void()>> pending_ GUARDED_BY(mutex_);
  std::map<Token, Clock::time_point> due_of_ GUARDED_BY(mutex_);  // the way back, for cancel()
  Token next_token_ GUARDED_BY(mutex_) = 0;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread timer_;  // made under mutex_ by the first schedule(), joined by the destructor
};

}  // namespace sandboxd::core

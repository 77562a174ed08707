// acquire_async's bookkeeping (design §12): the state one AsyncAcquisition shares with the
// work that serves it, and which acquisitions wait for their conversation's lock or run, so
// shutdown() and detach() can refuse new ones, fail the queued ones and wait for the running
// ones before anything they use is closed.
//
// Lock story: AsyncAcquisitions::mutex is a leaf lock (nothing else is taken under it, no task
// runs under it); each State has its own, also a leaf. A State's `cancellation` has its own
// story (sandboxd/core/cancellation.hpp).
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

#include "sandboxd/core/cancellation.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::core {

struct AsyncAcquisition::State {
  Mutex mutex;
  std::condition_variable done_cv;
  bool done GUARDED_BY(mutex) = false;
  std::string result GUARDED_BY(mutex);
  std::exception_ptr error GUARDED_BY(mutex);
  // cancel() sets it: the lock-wait grant skips the work, and a capacity wait the acquisition
  // is in leaves its queue at once.
  Cancellation cancellation;

  void finish(std::string value, std::exception_ptr failure) {
    {
      MutexLock lock(mutex);
      if (done) return;
      done = true;
      result = std::move(value);
      error = failure;
    }
    done_cv.notify_all();
  }
  bool is_cancelled() const { return cancellation.cancelled(); }
};

// Lock story: `mutex` is a leaf lock (nothing else is taken under it, no task runs under it).
class AsyncAcquisitions {
 public:
  Mutex mutex;
  std::condition_variable idle;
  bool accepting GUARDED_BY(mutex) = true;  // false once shutdown (or detach) began
  // Acquisitions handed to the blocking executor, not yet finished.
  int running GUARDED_BY(mutex) = 0;
  // Waiting for their conversation's lock.
  std::set<std::shared_ptr<AsyncAcquisition::State>> queued GUARDED_BY(mutex);

  // A task may start touching the provider (true), or shutdown began (false).
  bool begin() {
    MutexLock lock(mutex);
    if (!accepting) return false;
    ++running;
    return true;
  }
  void end() {
    {
      MutexLock lock(mutex);
      --running;
    }
    idle.notify_all();
  }
  bool enqueue(const std::shared_ptr<AsyncAcquisition::State>& state) {
    MutexLock lock(mutex);
    if (!accepting) return false;
    queued.insert(state);
    return true;
  }
  // The lock reached a queued waiter: it may run (true) unless shutdown already failed it.
  bool dequeue_and_begin(const std::shared_ptr<AsyncAcquisition::State>& state) {
    MutexLock lock(mutex);
    if (queued.erase(state) == 0 || !accepting) return false;
    ++running;
    return true;
  }
  // Stops new work and fails every queued waiter; returns at once.
  void close() {
    std::set<std::shared_ptr<AsyncAcquisition::State>> failed;
    {
      MutexLock lock(mutex);
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
    MutexLock lock(mutex);
    lock.wait(idle, [&]() REQUIRES(mutex) { return running == 0; });
  }
};

// The error of an acquisition refused because the provider shut down.
std::exception_ptr shut_down_error();

}  // namespace sandboxd::core

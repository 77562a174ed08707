// A request to stop waiting, shared between whoever may give up on a call (a client that hung
// up on `sandboxctl serve`, an abandoned acquire_async) and the one wait inside an acquisition
// that can be long: a creation queued for a slot under overflow_policy wait. A
// cancelled acquisition leaves that queue at once and creates nothing; work already past the
// queue completes as if nobody had cancelled it.
//
// Lock story: `mutex_` guards `wake_` only. cancel() runs the wake under it, so a wake never
// runs after clear_wake() returned (the waiting side may be gone by then); the wake may take
// the waiter's own lock, so the waiter never holds that lock while it sets or clears its wake.
#pragma once

#include <atomic>
#include <functional>
#include <mutex>

namespace sandboxd::core {

class Cancellation {
 public:
  // Idempotent; from any thread.
  void cancel();
  bool cancelled() const { return requested_.load(); }

  // The waiting side: `wake` is called by cancel() while it is set. A waiter checks
  // cancelled() after setting it, so a cancel that came first is not missed.
  void set_wake(std::function<void()> wake);
  void clear_wake();

 private:
  std::atomic<bool> requested_{false};
  std::mutex mutex_;
  std::function<void()> wake_;  // guarded by mutex_
};

}  // namespace sandboxd::core

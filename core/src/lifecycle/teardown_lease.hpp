// A teardown's lease (design §7.8): while a container stop runs, our `del` lease on the sandbox
// must not lapse, or a peer could take the sandbox and create under it before the stop is
// done. A heartbeat refreshes it every renewal interval, and makes the final release itself so
// that no refresh can land after it. Most stops end within one interval, so the heartbeat is
// started only when the stop outlasts one (DelayedStarts: one timer thread, not a thread per
// stop).
//
// Lock story: DelayedStarts has its own leaf mutex, under which only a thread is spawned; each
// heartbeat's state is guarded by its own mutex and outlives the provider if a heartbeat has to
// be abandoned (its final release then happens on that thread).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "delayed_starts.hpp"
#include "sandboxd/logger.hpp"
#include "sandboxd/ownership.hpp"

namespace sandboxd::core {

class TeardownLeases {
 public:
  TeardownLeases(std::shared_ptr<OwnershipStore> store, std::shared_ptr<Logger> logger,
                 double renewal_interval_seconds, double join_timeout_seconds);

  // Runs `stop` while our `del` lease on `sandbox_id` is kept alive; releases the lease after
  // (on every way out). The caller has claimed the lease for destroy.
  void hold(const std::string& sandbox_id, const std::function<void()>& stop);

 private:
  void release(const std::string& sandbox_id);

  std::shared_ptr<OwnershipStore> store_;
  std::shared_ptr<Logger> logger_;
  const double interval_;
  const double join_timeout_;
  DelayedStarts delayed_starts_;
};

}  // namespace sandboxd::core

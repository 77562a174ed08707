// What each tracked sandbox uses (CPU, memory, processes), for the operator's page.
// The backend's SandboxUsage readings are taken by one thread of the sampler's own, never on a
// request: a sweep takes the tracked sandboxes' infos (Provider::tracked_infos: one short hold
// of the registry mutex, the infos shared), then asks the backend for each, one at a time, at
// most `max_per_sweep` of them, and keeps the figures. Sweeps run every `interval_seconds` while
// someone looked at the figures within `demand_seconds` (an open page polls them), and not at all
// otherwise, so a fleet nobody watches costs its engine nothing. view() answers from the kept
// figures and never waits for the engine.
//
// CPU is a percentage of one CPU over the time between two sweeps (the engine's counters
// differenced, Docker's `docker stats` formula): the first reading of a sandbox has none.
//
// Lock story: `mutex_` guards every member marked GUARDED_BY; no backend call and no registry
// walk runs under it. `previous_` is unguarded: only sweep() touches it, and sweeps never run
// at once (the thread's, or a test's on its own thread without start()).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "sandboxd/capabilities.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::core {

struct UsageSamplerOptions {
  double interval_seconds = 5.0;
  double demand_seconds = 60.0;
  std::size_t max_per_sweep = 1000;
};

// One sandbox's figures as of its last reading; a figure the engine did not give is empty.
struct SandboxUsageFigures {
  std::optional<double> cpu_percent;  // of one CPU, since the reading before
  std::optional<std::uint64_t> memory_bytes;
  std::optional<std::uint64_t> memory_limit_bytes;
  std::optional<std::uint64_t> pids;
  double read_at = 0.0;  // wall clock
  std::string error;     // the last reading failed: why ("" when it did not)
};

struct UsageView {
  bool available = false;  // the backend can tell (SandboxUsage)
  double interval_seconds = 0.0;
  double swept_at = 0.0;        // wall clock of the last finished sweep (0: none yet)
  std::size_t not_sampled = 0;  // tracked beyond max_per_sweep in that sweep
  std::map<std::string, SandboxUsageFigures> sandboxes;  // by sandbox id
};

class UsageSampler {
 public:
  // The sandboxes a sweep reads: at most `limit` infos, and how many were left out.
  using TrackedSource = std::function<Provider::TrackedInfos(std::size_t limit)>;

  // Samples `provider`'s sandboxes through its backend's SandboxUsage (when it has none, views
  // say unavailable and no thread starts). `clock` times demand and readings.
  UsageSampler(Provider& provider, std::shared_ptr<Clock> clock, UsageSamplerOptions options = {});
  // Samples what `tracked` names through `usage` (nullptr: unavailable), for a daemon without a
  // Provider (sandboxd-provisioner lists its backend's sandboxes). `usage` and whatever
  // `tracked` reads outlive the sampler; `tracked` runs on the sweep thread, never on a request.
  UsageSampler(SandboxUsage* usage, TrackedSource tracked, std::shared_ptr<Clock> clock,
               UsageSamplerOptions options = {});
  ~UsageSampler();  // stops the thread (a sweep in flight finishes its current reading)
  UsageSampler(const UsageSampler&) = delete;
  UsageSampler& operator=(const UsageSampler&) = delete;

  // Starts the sweep thread (a long-lived host only). Idempotent.
  void start();
  // The kept figures; counts as demand, and wakes the thread when nothing was swept for a while.
  UsageView view() EXCLUDES(mutex_);
  // One sweep, on the caller's thread (the thread's body; tests call it with a manual clock).
  void sweep() EXCLUDES(mutex_);

 private:
  void run() EXCLUDES(mutex_);

  struct Previous {
    double cpu_seconds = 0.0;
    double host_cpu_seconds = 0.0;
  };

  const TrackedSource tracked_;
  const std::shared_ptr<Clock> clock_;
  const UsageSamplerOptions options_;
  SandboxUsage* const usage_;  // the backend's capability, or nullptr

  Mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  double demanded_at_ GUARDED_BY(mutex_) = -1e300;  // monotonic; never asked yet
  UsageView figures_ GUARDED_BY(mutex_);
  // The counters of each sandbox's previous reading (see the lock story).
  std::map<std::string, Previous> previous_;
  std::thread thread_;
};

}  // namespace sandboxd::core

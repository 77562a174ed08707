// The sandboxes a relay serves for a host that has no Provider (sandboxd-provisioner):
// asked of the backend (discover_for_reconciliation: one inspect, no readiness wait) and kept
// for `ttl_seconds`, so a burst of requests to one sandbox costs one engine call. Only sandboxes
// the backend says are namespaced are served; any other id is not this relay's (404). The relay
// checks a request's token before it asks, so only a token's holder makes the backend be asked.
//
// Lock story: `mutex_` guards `cache_`, never held across a backend call.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "sandboxd/backend.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/sandbox_endpoint.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::core {

class BackendRelayTargets {
 public:
  static constexpr std::size_t kMaxCached = 10'000;

  BackendRelayTargets(std::shared_ptr<SandboxBackend> backend, std::shared_ptr<Clock> clock,
                      double ttl_seconds = 2.0);

  // nullopt: not a namespaced sandbox of this backend (or none at all). A sandbox that exists
  // but is not running (paused, starting) is answered paused.
  std::optional<SandboxEndpoint> lookup(const std::string& sandbox_id);
  // After a destroy: the next request asks the backend again.
  void forget(const std::string& sandbox_id);

 private:
  struct Cached {
    SandboxEndpoint endpoint;
    double expires = 0;
  };
  const std::shared_ptr<SandboxBackend> backend_;
  NamespacedSandboxes* const access_;
  const std::shared_ptr<Clock> clock_;
  const double ttl_seconds_;
  Mutex mutex_;
  std::map<std::string, Cached> cache_ GUARDED_BY(mutex_);
};

}  // namespace sandboxd::core

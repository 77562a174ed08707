// BackendRelayTargets (backend_relay_targets.hpp).
#include "sandboxd/core/backend_relay_targets.hpp"

#include "sandboxd/capabilities.hpp"

namespace sandboxd::core {

BackendRelayTargets::BackendRelayTargets(std::shared_ptr<SandboxBackend> backend,
                                         std::shared_ptr<Clock> clock, double ttl_seconds)
    : backend_(std::move(backend)),
      access_(backend_capability<NamespacedSandboxes>(*backend_)),
      clock_(std::move(clock)),
      ttl_seconds_(ttl_seconds) {}

std::optional<SandboxEndpoint> BackendRelayTargets::lookup(const std::string& sandbox_id) {
  if (access_ == nullptr) return std::nullopt;
  const double now = clock_->monotonic_now();
  {
    MutexLock lock(mutex_);
    const auto it = cache_.find(sandbox_id);
    if (it != cache_.end() && it->second.expires > now) return it->second.endpoint;
  }
  const SandboxDiscoveryResult found = backend_->discover_for_reconciliation(sandbox_id);
  if (found.status != SandboxDiscoveryResult::Status::found) return std::nullopt;
  std::optional<SandboxEndpoint> endpoint;
  if (found.info) {
    if (!access_->namespaced(*found.info)) return std::nullopt;
    endpoint = endpoint_of(*found.info, backend_, access_);
    if (!endpoint) return std::nullopt;
  } else {
    // It exists but cannot be reached now (paused, starting): answered as paused, never cached.
    SandboxEndpoint paused;
    paused.paused = true;
    return paused;
  }
  MutexLock lock(mutex_);
  if (cache_.size() >= kMaxCached) {
    for (auto it = cache_.begin(); it != cache_.end();) {
      it = it->second.expires <= now ? cache_.erase(it) : std::next(it);
    }
    if (cache_.size() >= kMaxCached) cache_.clear();
  }
  cache_[sandbox_id] = Cached{*endpoint, now + ttl_seconds_};
  return endpoint;
}

void BackendRelayTargets::forget(const std::string& sandbox_id) {
  MutexLock lock(mutex_);
  cache_.erase(sandbox_id);
}

}  // namespace sandboxd::core

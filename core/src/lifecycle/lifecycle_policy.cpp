#include "sandboxd/core/lifecycle_policy.hpp"

#include <algorithm>

namespace sandboxd::core {

std::vector<std::string> LifecyclePolicy::eviction_order(std::vector<WarmCandidate> warm) const {
  std::stable_sort(warm.begin(), warm.end(), [](const WarmCandidate& a, const WarmCandidate& b) {
    if (a.paused != b.paused) return a.paused;
    return a.released_at < b.released_at;
  });
  std::vector<std::string> order;
  order.reserve(warm.size());
  for (auto& candidate : warm) order.push_back(std::move(candidate.sandbox_id));
  return order;
}

std::shared_ptr<LifecyclePolicy> default_lifecycle_policy() {
  static const auto policy = std::make_shared<LifecyclePolicy>();
  return policy;
}

}  // namespace sandboxd::core

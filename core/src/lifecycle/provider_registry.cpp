#include "sandboxd/core/provider_registry.hpp"

namespace sandboxd::core {

std::shared_ptr<Provider> ProviderRegistry::get() {
  {
    std::lock_guard lock(mutex_);
    if (instance_) return instance_;
  }
  std::shared_ptr<Provider> built = factory_();  // outside the lock: may be slow or re-enter
  std::shared_ptr<Provider> loser;
  std::shared_ptr<Provider> winner;
  {
    std::lock_guard lock(mutex_);
    if (instance_) {
      loser = std::move(built);
      winner = instance_;
    } else {
      instance_ = built;
      winner = std::move(built);
    }
  }
  if (loser) loser->shutdown();
  return winner;
}

void ProviderRegistry::set(std::shared_ptr<Provider> provider) {
  std::lock_guard lock(mutex_);
  instance_ = std::move(provider);
}

void ProviderRegistry::reset() {
  std::shared_ptr<Provider> detached;
  {
    std::lock_guard lock(mutex_);
    detached = std::move(instance_);
  }
  detached.reset();  // outside the lock: the last reference shuts the provider down
}

void ProviderRegistry::shutdown() {
  std::shared_ptr<Provider> detached;
  {
    std::lock_guard lock(mutex_);
    detached = std::move(instance_);
  }
  if (detached) detached->shutdown();
}

}  // namespace sandboxd::core

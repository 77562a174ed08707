// The host's one process-wide provider (design §5.18).
//
// Lock story: `mutex_` guards `instance_` only. Construction and shutdown of a provider run
// outside it (plugin code may be slow or re-enter the registry), so get() never waits on them.
#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "sandboxd/core/provider.hpp"

namespace sandboxd::core {

class ProviderRegistry {
 public:
  using Factory = std::function<std::shared_ptr<Provider>()>;
  explicit ProviderRegistry(Factory factory) : factory_(std::move(factory)) {}

  // The installed provider, building one on first use. Two threads racing on a cold start
  // both build; the loser shuts its instance down and returns the winner's.
  std::shared_ptr<Provider> get();
  // Replaces the instance without shutting the old one down (the caller owns it).
  void set(std::shared_ptr<Provider> provider);
  // Detaches the instance; it is destroyed (and so shut down) when its last user lets go.
  void reset();
  // Detaches the instance and shuts it down now.
  void shutdown();

 private:
  Factory factory_;
  std::mutex mutex_;  // guards instance_
  std::shared_ptr<Provider> instance_;
};

}  // namespace sandboxd::core

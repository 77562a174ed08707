// Runs an action when a scope ends, whatever happens (the core's one scope guard).
#pragma once

#include <utility>

namespace sandboxd::core {

template <class Action>
class ScopeExit {
 public:
  // A template rather than std::function: publish_ownership runs one on every acquire, and a
  // std::function holding more than two pointers allocates.
  explicit ScopeExit(Action action) : action_(std::move(action)) {}
  ~ScopeExit() { action_(); }
  ScopeExit(const ScopeExit&) = delete;
  ScopeExit& operator=(const ScopeExit&) = delete;

 private:
  Action action_;
};

}  // namespace sandboxd::core

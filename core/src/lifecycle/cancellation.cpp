#include "sandboxd/core/cancellation.hpp"

#include "running_cancellation.hpp"

namespace sandboxd::core {

void Cancellation::cancel() {
  std::lock_guard lock(mutex_);
  requested_.store(true);
  if (wake_) wake_();
}

void Cancellation::set_wake(std::function<void()> wake) {
  std::lock_guard lock(mutex_);
  wake_ = std::move(wake);
}

void Cancellation::clear_wake() {
  std::lock_guard lock(mutex_);
  wake_ = nullptr;
}

namespace {
thread_local Cancellation* running = nullptr;
}  // namespace

Cancellation* running_cancellation() {
  return running;
}

RunningCancellation::RunningCancellation(Cancellation* cancellation) : previous_(running) {
  running = cancellation;
}
RunningCancellation::~RunningCancellation() {
  running = previous_;
}

}  // namespace sandboxd::core

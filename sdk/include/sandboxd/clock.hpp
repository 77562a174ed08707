// Time source handed to plugins and the core, so tests can move time instead of sleeping.
#pragma once

#include <chrono>

namespace sandboxd {

// Implementations must be safe to call from any thread at the same time.
class Clock {
 public:
  virtual ~Clock() = default;
  // Seconds since the Unix epoch: comparable across processes (lease expiry in a shared file).
  virtual double wall_now() const = 0;
  // Seconds on a clock that never goes backwards: for timeouts inside one process.
  virtual double monotonic_now() const = 0;
};

class SystemClock final : public Clock {
 public:
  double wall_now() const override {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }
  double monotonic_now() const override {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
};

}  // namespace sandboxd

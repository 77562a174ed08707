// Helpers shared by the tests: a logger that records lines, a clock the test moves by hand.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

#include "sandboxd/clock.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxd::testing {

// Records every line. Lock story: `mutex_` guards `lines_`; log() may come from any thread.
class CapturingLogger final : public Logger {
 public:
  struct Line {
    LogLevel level;
    std::string message;
  };

  void log(LogLevel level, std::string_view message) override {
    std::lock_guard lock(mutex_);
    lines_.push_back({level, std::string(message)});
  }

  std::vector<Line> lines() const {
    std::lock_guard lock(mutex_);
    return lines_;
  }

  // true when some line at `level` contains `fragment`.
  bool contains(LogLevel level, const std::string& fragment) const {
    std::lock_guard lock(mutex_);
    for (const auto& line : lines_) {
      if (line.level == level && line.message.find(fragment) != std::string::npos) return true;
    }
    return false;
  }
  bool contains(const std::string& fragment) const {
    std::lock_guard lock(mutex_);
    for (const auto& line : lines_) {
      if (line.message.find(fragment) != std::string::npos) return true;
    }
    return false;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<Line> lines_;
};

// Both readings move together under the test's control. Atomic so background threads may read.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(double start = 1'000'000.0) : now_(start) {}
  double wall_now() const override { return now_.load(); }
  double monotonic_now() const override { return now_.load(); }
  void advance(double seconds) { now_.fetch_add(seconds); }
  void set(double seconds) { now_.store(seconds); }

 private:
  std::atomic<double> now_;
};

}  // namespace sandboxd::testing

// One updating status line on stderr while sandboxctl waits (an engine create, a readiness
// poll): "acquiring sandbox for alice/t-1 ... 3.2s". Only when stderr is a terminal; log lines
// written meanwhile go through ProgressAwareLogger, which clears the line first and redraws it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "sandboxd/logger.hpp"

namespace sandboxctl {

class ProgressLine {
 public:
  // enabled = stderr is a terminal (see stderr_is_terminal).
  explicit ProgressLine(bool enabled) : enabled_(enabled) {}
  ~ProgressLine() { stop(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void start(const std::string& phase);
  void set_phase(const std::string& phase);
  void stop();  // clears the line; idempotent
  // Runs `write` (which prints to stderr) with the line cleared, then redraws it.
  template <typename Write>
  void around_write(Write&& write) {
    std::lock_guard lock(mutex_);
    if (shown_) clear_locked();
    write();
    if (running_) draw_locked();
  }

  static bool stderr_is_terminal();

 private:
  void draw_locked();
  void clear_locked();

  const bool enabled_;
  std::mutex mutex_;  // guards everything below and every write to stderr while running
  std::condition_variable wake_;
  bool running_ = false;
  bool shown_ = false;
  std::string phase_;
  std::chrono::steady_clock::time_point started_;
  std::thread ticker_;  // started by start(), joined by stop()
};

class ProgressAwareLogger final : public sandboxd::Logger {
 public:
  ProgressAwareLogger(std::shared_ptr<sandboxd::Logger> inner, std::shared_ptr<ProgressLine> line,
                      sandboxd::LogLevel threshold)
      : inner_(std::move(inner)), line_(std::move(line)), threshold_(threshold) {}
  void log(sandboxd::LogLevel level, std::string_view message) override {
    if (level < threshold_) return;  // nothing to print: leave the line alone
    line_->around_write([&] { inner_->log(level, message); });
  }
  bool enabled(sandboxd::LogLevel level) const override {
    return level >= threshold_ && inner_->enabled(level);
  }

 private:
  std::shared_ptr<sandboxd::Logger> inner_;
  std::shared_ptr<ProgressLine> line_;
  const sandboxd::LogLevel threshold_;
};

}  // namespace sandboxctl

#include "progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace sandboxctl {

bool ProgressLine::stderr_is_terminal() {
  return ::isatty(STDERR_FILENO) == 1;
}

void ProgressLine::start(const std::string& phase) {
  if (!enabled_) return;
  std::lock_guard lock(mutex_);
  if (running_) return;
  running_ = true;
  phase_ = phase;
  started_ = std::chrono::steady_clock::now();
  draw_locked();
  ticker_ = std::thread([this] {
    std::unique_lock lock(mutex_);
    while (running_) {
      wake_.wait_for(lock, std::chrono::milliseconds(100));
      if (running_) draw_locked();
    }
  });
}

void ProgressLine::set_phase(const std::string& phase) {
  std::lock_guard lock(mutex_);
  phase_ = phase;
  if (running_) draw_locked();
}

void ProgressLine::stop() {
  {
    std::lock_guard lock(mutex_);
    if (!running_) return;
    running_ = false;
    if (shown_) clear_locked();
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
}

void ProgressLine::draw_locked() {
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  std::fprintf(stderr, "\r\033[K%s ... %.1fs", phase_.c_str(), elapsed);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::clear_locked() {
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace sandboxctl

// Helpers shared by the tests: a logger that records lines, a clock the test moves by hand.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
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
  std::size_t count(LogLevel level, const std::string& fragment) const {
    std::lock_guard lock(mutex_);
    std::size_t found = 0;
    for (const auto& line : lines_) {
      found += line.level == level && line.message.find(fragment) != std::string::npos;
    }
    return found;
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

// A fresh mkdtemp directory, resolved through symlinks like design §2.1 resolves base dirs (so
// expected path strings match), removed with its contents at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "sandboxd-test-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    path_ = std::filesystem::weakly_canonical(pattern);
  }
  ~TempDir() {
    // A test may have made a subdirectory read-only; give write access back so removal works.
    std::error_code ignored;
    for (auto it = std::filesystem::recursive_directory_iterator(path_, ignored);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ignored)) {
      if (it->is_directory(ignored)) ::chmod(it->path().c_str(), 0700);
    }
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// Sets (or unsets, for nullopt) one variable and restores the previous state on destruction.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, std::optional<std::string> value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) old_ = old;
    apply(value);
  }
  ~ScopedEnv() { apply(old_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  void apply(const std::optional<std::string>& value) {
    if (value) {
      ::setenv(name_.c_str(), value->c_str(), 1);
    } else {
      ::unsetenv(name_.c_str());
    }
  }

  std::string name_;
  std::optional<std::string> old_;
};

// The image the engine tests run: $SANDBOXD_TEST_IMAGE, else the offline test image that
// scripts/test_engine.sh imports into each engine.
inline std::string engine_test_image() {
  const char* image = std::getenv("SANDBOXD_TEST_IMAGE");
  return image && *image ? image : "localhost/sandboxd-test-sandbox:latest";
}

// $SANDBOXD_TEST_ENGINE ("podman", "docker"), or "" when the run did not say.
inline std::string engine_test_name() {
  const char* engine = std::getenv("SANDBOXD_TEST_ENGINE");
  return engine ? engine : "";
}

}  // namespace sandboxd::testing

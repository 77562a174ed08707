// Real temp dirs and scoped environment variables for the paths tests.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace sandboxd::testing {

// mkdtemp directory, resolved like SPEC §2.1 resolves base dirs (so /tmp symlinks do not make
// expected strings differ), removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "sandboxd-paths-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = std::filesystem::weakly_canonical(pattern);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

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

// Every test starts with the path-related variables unset.
class CleanPathEnvTest : public ::testing::Test {
 protected:
  CleanPathEnvTest() {
    for (const char* name :
         {"DEER_FLOW_HOME", "DEER_FLOW_PROJECT_ROOT", "DEER_FLOW_HOST_BASE_DIR"}) {
      env_.push_back(std::make_unique<ScopedEnv>(name, std::nullopt));
    }
  }
  void set_env(const std::string& name, std::optional<std::string> value) {
    env_.push_back(std::make_unique<ScopedEnv>(name, std::move(value)));
  }

  TempDir tmp_;

 private:
  std::vector<std::unique_ptr<ScopedEnv>> env_;
};

inline unsigned mode_of(const std::filesystem::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0xFFFFFFFFu;
  return st.st_mode & 07777;
}

}  // namespace sandboxd::testing

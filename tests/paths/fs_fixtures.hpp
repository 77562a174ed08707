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

#include "test_support.hpp"

namespace sandboxd::testing {

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

// Helpers for the ownership-store tests: temp directories, plugin contexts and loading a store
// through the real plugin loader by its use string.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <system_error>

#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/sdk.hpp"
#include "test_support.hpp"

namespace sandboxd::testing {

inline constexpr const char* kMemoryStoreUse = "ownership_memory:MemoryOwnershipStore";
inline constexpr const char* kSqliteStoreUse = "ownership_sqlite:SqliteOwnershipStore";
inline constexpr const char* kRedisStoreUse = "ownership_redis:RedisOwnershipStore";
inline constexpr const char* kOwnershipKeyPath = "sandbox.ownership";

// The Redis the tests may use (scripts/test.sh starts one on 127.0.0.1), or "".
inline std::string redis_test_url() {
  const char* url = std::getenv("SANDBOXD_TEST_REDIS_URL");
  return url ? url : "";
}

inline PluginContext make_store_context(const std::string& owner_id,
                                        const std::string& options_json,
                                        const std::string& base_dir, std::shared_ptr<Clock> clock,
                                        std::shared_ptr<Logger> logger) {
  PluginContext context;
  context.config_json = options_json;
  context.config_key_path = kOwnershipKeyPath;
  context.owner_id = owner_id;
  context.base_dir = base_dir;
  context.clock = std::move(clock);
  context.logger = std::move(logger);
  return context;
}

inline std::shared_ptr<OwnershipStore> load_store(const std::string& use,
                                                  const PluginContext& context) {
  const core::PluginLoader loader({SANDBOXD_TEST_PLUGIN_DIR});
  return loader.load_ownership_store(use, context, "test");
}

// The loader's message when loading fails, or "" when it unexpectedly succeeds.
inline std::string load_error(const std::string& use, const PluginContext& context) {
  try {
    load_store(use, context);
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

inline void write_file(const std::string& path, const std::string& content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << content;
}

inline unsigned int file_mode(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return 0;
  return info.st_mode & 07777;
}

}  // namespace sandboxd::testing

// The host's default logger: one line per message on stderr.
#pragma once

#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "sandboxd/logger.hpp"

namespace sandboxd::core {

class StderrLogger final : public Logger {
 public:
  explicit StderrLogger(LogLevel threshold = LogLevel::info) : threshold_(threshold) {}
  void log(LogLevel level, std::string_view message) override;
  bool enabled(LogLevel level) const override { return level >= threshold_; }

 private:
  const LogLevel threshold_;
  std::mutex write_mutex_;  // keeps lines from different threads from interleaving
};

// "debug", "info", "warning"/"warn", "error" → the level; anything else → nothing.
std::optional<LogLevel> parse_log_level(const std::string& text);

}  // namespace sandboxd::core

#include "sandboxd/core/logging.hpp"

#include <chrono>
#include <cstdio>
#include <ctime>

namespace sandboxd::core {

void StderrLogger::log(LogLevel level, std::string_view message) {
  if (level < threshold_) return;
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto millis =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &utc);
  std::lock_guard lock(write_mutex_);
  std::fprintf(stderr, "%s.%03dZ %-7s %.*s\n", stamp, static_cast<int>(millis), to_string(level),
               static_cast<int>(message.size()), message.data());
}

std::optional<LogLevel> parse_log_level(const std::string& text) {
  if (text == "debug") return LogLevel::debug;
  if (text == "info") return LogLevel::info;
  if (text == "warning" || text == "warn") return LogLevel::warning;
  if (text == "error") return LogLevel::error;
  return std::nullopt;
}

}  // namespace sandboxd::core

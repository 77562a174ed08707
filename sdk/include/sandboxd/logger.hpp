// The logging interface the host hands to plugins. Plugins never print on their own: they log
// through this so the host decides format, destination and level.
#pragma once

#include <string>
#include <string_view>

namespace sandboxd {

enum class LogLevel { debug = 0, info = 1, warning = 2, error = 3 };

inline const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::debug:
      return "debug";
    case LogLevel::info:
      return "info";
    case LogLevel::warning:
      return "warning";
    case LogLevel::error:
      return "error";
  }
  return "?";
}

// Implementations must be safe to call from any thread at the same time.
class Logger {
 public:
  virtual ~Logger() = default;
  virtual void log(LogLevel level, std::string_view message) = 0;
  // False when a line at `level` would be dropped, so a caller may skip building it. Appended
  // after log() (ABI 1 keeps log()'s slot); hosts provide loggers, plugins only call them.
  virtual bool enabled(LogLevel /*level*/) const { return true; }

  void debug(std::string_view m) { log(LogLevel::debug, m); }
  void info(std::string_view m) { log(LogLevel::info, m); }
  void warning(std::string_view m) { log(LogLevel::warning, m); }
  void error(std::string_view m) { log(LogLevel::error, m); }
};

// Never put a secret in a log line: environment values and API keys go through this.
inline constexpr std::string_view kRedacted = "<redacted>";

}  // namespace sandboxd

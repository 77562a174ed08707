// The benchmarks' logger: only errors reach stderr, and enabled() says so, so the provider does
// not build the lines a gateway at the default level would (the figures count the core's work,
// not a terminal's).
#pragma once

#include <cstdio>
#include <string_view>

#include "sandboxd/logger.hpp"

namespace sandboxd::bench {

class QuietLogger final : public Logger {
 public:
  void log(LogLevel level, std::string_view message) override {
    if (level >= LogLevel::error) {
      std::fprintf(stderr, "%.*s\n", static_cast<int>(message.size()), message.data());
    }
  }
  bool enabled(LogLevel level) const override { return level >= LogLevel::error; }
};

}  // namespace sandboxd::bench

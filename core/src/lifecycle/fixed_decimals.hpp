// "12.3": a number with a fixed count of decimals, as the provider's log lines and messages
// print seconds. Private to the core.
#pragma once

#include <cstdio>
#include <string>

namespace sandboxd::core {

inline std::string fixed(double value, int decimals) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", decimals, value);
  return buffer;
}

}  // namespace sandboxd::core

// libFuzzer target: the config loader (design §11) on arbitrary text. Any input either loads or
// throws ConfigError; a loaded config renders redacted. Crashes, hangs and sanitizer reports
// are the findings.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sandboxd/core/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = sandboxd::core::parse_config(text, "fuzz.json", "/tmp");
    (void)sandboxd::core::render_redacted(config);
  } catch (const sandboxd::core::ConfigError&) {
  }
  return 0;
}

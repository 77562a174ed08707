// libFuzzer target: DeerFlow's config.yaml as sandboxctl reads it: yaml-cpp's parse,
// the conversion of the sandbox sections to JSON with their lines, then the config parser. Any
// input either loads or throws ConfigError; a loaded config renders redacted. Crashes, hangs,
// unbounded recursion and sanitizer reports are the findings.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sandboxd/core/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto config = sandboxd::core::parse_config(text, "fuzz.yaml", "/tmp");
    (void)sandboxd::core::render_redacted(config);
    (void)sandboxd::core::with_source_line(config, "fuzz.yaml: sandbox.replicas: x");
  } catch (const sandboxd::core::ConfigError&) {
  }
  return 0;
}

// libFuzzer target: a plugin's own section through PluginConfig and the SDK's lease-timing
// rules, every typed accessor on every key the built-in plugins read. Any input either reads
// or throws PluginConfigError.
#include <cstddef>
#include <cstdint>
#include <string>

#include "sandboxd/lease_rules.hpp"
#include "sandboxd/plugin_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    sandboxd::PluginConfig options(text, "sandbox.backend");
    for (const char* key : {"image", "socket", "environment", "mounts", "port", "memory", "cpus",
                            "security_opt", "init", "provisioner_api_key", "url"}) {
      try {
        (void)options.optional_string(key);
      } catch (const sandboxd::PluginConfigError&) {
      }
      try {
        (void)options.optional_integer(key);
      } catch (const sandboxd::PluginConfigError&) {
      }
      try {
        (void)options.optional_bool(key);
      } catch (const sandboxd::PluginConfigError&) {
      }
      try {
        (void)options.get_string_list(key);
      } catch (const sandboxd::PluginConfigError&) {
      }
      try {
        (void)options.get_string_map(key);
      } catch (const sandboxd::PluginConfigError&) {
      }
      try {
        (void)options.get_mounts(key);
      } catch (const sandboxd::PluginConfigError&) {
      }
    }
    (void)options.unread_keys();
    (void)sandboxd::lease_rules::read_lease_timing(options);
  } catch (const sandboxd::PluginConfigError&) {
  }
  return 0;
}

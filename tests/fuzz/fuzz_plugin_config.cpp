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
    // Each accessor on its own: a wrong type for one must not skip the others.
    const auto each = [](auto&& read) {
      try {
        read();
      } catch (const sandboxd::PluginConfigError&) {
      }
    };
    for (const char* key : {"image", "socket", "environment", "mounts", "port", "memory", "cpus",
                            "security_opt", "init", "provisioner_api_key", "url"}) {
      each([&] { (void)options.optional_string(key); });
      each([&] { (void)options.optional_integer(key); });
      each([&] { (void)options.optional_bool(key); });
      each([&] { (void)options.get_string_list(key); });
      each([&] { (void)options.get_string_map(key); });
      each([&] { (void)options.get_mounts(key); });
    }
    (void)options.unread_keys();
    (void)sandboxd::lease_rules::read_lease_timing(options);
  } catch (const sandboxd::PluginConfigError&) {
  }
  return 0;
}

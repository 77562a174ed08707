// Builds the backend and ownership store a config names, through the plugin loader.
#pragma once

#include <memory>
#include <string>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/plugin_loader.hpp"

namespace sandboxd::core {

// What the host hands every plugin it constructs.
struct HostServices {
  std::shared_ptr<Logger> logger;
  std::shared_ptr<Clock> clock;
  std::string owner_id;  // lease identity of this provider instance
  std::string base_dir;  // the provider's resolved base directory
};

struct ConfiguredPlugins {
  std::shared_ptr<SandboxBackend> backend;
  std::shared_ptr<OwnershipStore> ownership;
};

// The context for one plugin section: its options, where they came from, host services.
PluginContext make_plugin_context(const SandboxConfig& config, const PluginSection& section,
                                  const HostServices& services);

// Loads the ownership store first, then the backend; throws PluginLoadError naming the
// config file and key (e.g. "/etc/sandboxd.json: sandbox.backend.use: ...").
ConfiguredPlugins load_configured_plugins(const SandboxConfig& config,
                                          const HostServices& services);

}  // namespace sandboxd::core

#include "sandboxd/core/configured_plugins.hpp"

namespace sandboxd::core {
namespace {

std::string where_of(const SandboxConfig& config, const PluginSection& section) {
  const std::string file = config.source_file.empty() ? "<config>" : config.source_file;
  return file + ": " + section.key_path + ".use";
}

}  // namespace

PluginContext make_plugin_context(const SandboxConfig& config, const PluginSection& section,
                                  const HostServices& services) {
  PluginContext context;
  context.config_json = section.options_json.empty() ? "{}" : section.options_json;
  context.config_key_path = section.key_path;
  context.config_file = config.source_file;
  context.owner_id = services.owner_id;
  context.base_dir = services.base_dir;
  context.logger = services.logger;
  context.clock = services.clock;
  return context;
}

ConfiguredPlugins load_configured_plugins(const SandboxConfig& config,
                                          const HostServices& services) {
  const PluginLoader loader(config.plugin_dirs);
  ConfiguredPlugins plugins;
  try {
    plugins.ownership = loader.load_ownership_store(
        config.ownership.use, make_plugin_context(config, config.ownership, services),
        where_of(config, config.ownership));
    plugins.backend = loader.load_backend(config.backend.use,
                                          make_plugin_context(config, config.backend, services),
                                          where_of(config, config.backend));
  } catch (const PluginLoadError& e) {
    throw PluginLoadError(with_source_line(config, e.what()));  // a config.yaml's line
  }
  return plugins;
}

}  // namespace sandboxd::core

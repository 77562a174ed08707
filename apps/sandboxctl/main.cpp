// sandboxctl: the operator's command line for sandboxd.
//
//   sandboxctl [--config FILE] plugins [--json]
//   sandboxctl --config FILE check-config
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/configured_plugins.hpp"
#include "sandboxd/core/logging.hpp"
#include "sandboxd/core/owner_id.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/plugin_loader.hpp"

namespace po = boost::program_options;
using namespace sandboxd;

namespace {

constexpr const char* kUsage =
    "Usage: sandboxctl [--config FILE] [--log-level LEVEL] COMMAND [OPTIONS]\n"
    "\n"
    "Commands:\n"
    "  plugins [--json]   List every plugin class found on the plugin path, one per line:\n"
    "                     module:Class  kind  abi=N  path\n"
    "                     The path is the config's plugin_dirs (with --config), then\n"
    "                     SANDBOXD_PLUGIN_PATH, the install directory, the build tree.\n"
    "  check-config       Load --config FILE and the plugins it names, then print the\n"
    "                     resolved settings with secrets redacted (exit 1 on any error).\n"
    "\n"
    "Global options";

int list_plugins(const std::optional<core::SandboxConfig>& config, bool as_json) {
  const core::PluginLoader loader(config ? config->plugin_dirs : std::vector<std::string>{});
  const auto classes = loader.list();
  if (as_json) {
    rapidjson::StringBuffer buffer;
    rapidjson::PrettyWriter<rapidjson::StringBuffer> w(buffer);
    w.StartObject();
    w.Key("search_path");
    w.StartArray();
    for (const auto& dir : loader.search_path()) w.String(dir.c_str());
    w.EndArray();
    w.Key("plugins");
    w.StartArray();
    for (const auto& c : classes) {
      w.StartObject();
      w.Key("use");
      w.String(c.use_string().c_str());
      w.Key("kind");
      w.String(c.problem.empty() ? to_string(c.kind) : "unusable");
      w.Key("abi");
      w.Uint(c.abi_version);
      w.Key("path");
      w.String(c.path.c_str());
      w.Key("description");
      w.String(c.description.c_str());
      if (!c.problem.empty()) {
        w.Key("problem");
        w.String(c.problem.c_str());
      }
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    std::cout << buffer.GetString() << "\n";
    return 0;
  }
  if (classes.empty()) {
    std::cerr << "sandboxctl: no plugins found; searched:";
    for (const auto& dir : loader.search_path()) std::cerr << " " << dir;
    std::cerr << "\n";
    return 1;
  }
  for (const auto& c : classes) {
    std::printf("%-45s  %-9s  abi=%u  %s%s\n", c.use_string().c_str(),
                c.problem.empty() ? to_string(c.kind) : "unusable", c.abi_version, c.path.c_str(),
                c.problem.empty() ? "" : ("  (" + c.problem + ")").c_str());
  }
  return 0;
}

int check_config(const core::SandboxConfig& config, const std::shared_ptr<Logger>& logger) {
  for (const auto& warning : config.warnings) logger->warning(warning);
  core::HostServices services;
  services.logger = logger;
  services.clock = std::make_shared<SystemClock>();
  services.owner_id = core::generate_owner_id();
  services.base_dir = core::resolve_base_dir(config.base_dir);
  // Constructing each plugin is what validates its own options.
  const auto plugins = core::load_configured_plugins(config, services);
  std::cout << core::render_redacted(config) << "\n";
  std::cout << "backend: " << config.backend.use << " loaded\n";
  std::cout << "ownership: " << config.ownership.use << " loaded (ttl "
            << plugins.ownership->ttl_seconds() << "s, "
            << (plugins.ownership->supports_cross_process() ? "cross-process" : "single-process")
            << ")\n";
  plugins.ownership->close();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description global(kUsage);
  global.add_options()("help,h", "show this help")("config,c", po::value<std::string>(),
                                                   "JSON config file with a `sandbox` section")(
      "log-level", po::value<std::string>()->default_value("info"),
      "debug, info, warning or error");
  po::options_description hidden;
  hidden.add_options()("command", po::value<std::string>())("args",
                                                            po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(global).add(hidden);
  po::positional_options_description positional;
  positional.add("command", 1).add("args", -1);

  try {
    po::variables_map vm;
    po::parsed_options parsed = po::command_line_parser(argc, argv)
                                    .options(all)
                                    .positional(positional)
                                    .allow_unregistered()
                                    .run();
    po::store(parsed, vm);
    po::notify(vm);
    if (vm.count("help") || !vm.count("command")) {
      std::cout << global << "\n";
      return vm.count("help") ? 0 : 2;
    }
    const auto level = core::parse_log_level(vm["log-level"].as<std::string>());
    if (!level) {
      std::cerr << "sandboxctl: --log-level: unknown level '" << vm["log-level"].as<std::string>()
                << "' (use debug, info, warning or error)\n";
      return 2;
    }
    auto logger = std::make_shared<core::StderrLogger>(*level);
    const std::string command = vm["command"].as<std::string>();
    std::vector<std::string> rest =
        po::collect_unrecognized(parsed.options, po::include_positional);
    rest.erase(rest.begin());  // the command itself

    std::optional<core::SandboxConfig> config;
    if (vm.count("config")) config = core::load_config_file(vm["config"].as<std::string>());

    if (command == "plugins") {
      bool as_json = false;
      for (const auto& arg : rest) {
        if (arg == "--json") {
          as_json = true;
        } else {
          std::cerr << "sandboxctl plugins: unknown argument '" << arg << "'\n";
          return 2;
        }
      }
      return list_plugins(config, as_json);
    }
    if (command == "check-config") {
      if (!rest.empty()) {
        std::cerr << "sandboxctl check-config: unknown argument '" << rest.front() << "'\n";
        return 2;
      }
      if (!config) {
        std::cerr << "sandboxctl check-config: --config FILE is required\n";
        return 2;
      }
      return check_config(*config, logger);
    }
    std::cerr << "sandboxctl: unknown command '" << command << "' (see sandboxctl --help)\n";
    return 2;
  } catch (const po::error& e) {
    std::cerr << "sandboxctl: " << e.what() << " (see sandboxctl --help)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "sandboxctl: " << e.what() << "\n";
    return 1;
  }
}

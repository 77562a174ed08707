// sandboxctl: the operator's command line for sandboxd. Every command runs in its own process;
// what it acquires keeps running after it exits (see session.hpp).
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <boost/program_options.hpp>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli_error.hpp"
#include "commands.hpp"
#include "sandboxd/core/config.hpp"
#include "sandboxd/core/logging.hpp"
#include "sandboxd/core/one_shot_host.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/service_json.hpp"
#include "sandboxd/errors.hpp"
#include "sandboxd/host_fs.hpp"

namespace po = boost::program_options;
using namespace sandboxd;

namespace {

using namespace sandboxctl;

constexpr const char* kExitCodes =
    "Exit codes:\n"
    "  0  ok\n"
    "  1  internal error\n"
    "  2  bad usage (unknown command or option, invalid id, missing argument)\n"
    "  3  bad config (config file, plugin, plugin option, state directory)\n"
    "  4  backend failure (the engine or provisioner failed or is unreachable)\n"
    "  5  not found (the sandbox id is not tracked by this state directory)\n"
    "  6  ownership refused (another instance holds the lease or is tearing the sandbox\n"
    "     down) or the lease store cannot answer\n"
    "  7  capacity: a ceiling (replicas, per user, a quota) refused it; try again later\n";

void print_usage(const po::options_description& global) {
  std::cout << "Usage: sandboxctl [--config FILE] [--log-level LEVEL] [--json] COMMAND [ARGS]\n"
               "\nCommands (sandboxctl COMMAND --help for each one's options and an example):\n";
  for (const auto& command : commands()) {
    std::printf("  %-13s %s\n", command.name, command.summary);
  }
  std::cout
      << "\n"
      << global << "\n"
      << "Without --config, sandboxctl uses the built-in default: SQLite leases and its\n"
         "registry in $XDG_STATE_HOME/sandboxd (else ~/.local/state/sandboxd), the engine\n"
         "at DOCKER_HOST, else /var/run/docker.sock, else the podman service that\n"
         "scripts/setup.sh starts, and the offline test image ($SANDBOXD_IMAGE overrides).\n"
         "`sandboxctl check-config` prints what it resolved to.\n\n"
      << kExitCodes << "\nExample:\n"
      << "  sandboxctl acquire --user alice --thread t-1   # prints sandbox_id and sandbox_url\n"
         "  sandboxctl release SANDBOX_ID\n";
}

// The one-sentence message on stderr, plus {"error": …} on stdout for --json callers; the
// exit code comes from the kind (cli_error.hpp's one table).
int fail(ErrorKind kind, const std::string& message, bool as_json) {
  const int code = exit_code(kind);
  std::cerr << "sandboxctl: " << message << "\n";
  if (as_json) std::cout << core::error_json(kind, message, code) << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  po::options_description global("Global options");
  global.add_options()("help,h", "show this help")(
      "config,c", po::value<std::string>(),
      "config file: JSON with a `sandbox` section, or DeerFlow's config.yaml")(
      "log-level", po::value<std::string>()->default_value("warning"),
      "debug, info, warning or error (log lines go to stderr; serve: info)")(
      "json", "print one JSON document on stdout (also accepted after the command)");
  po::options_description hidden;
  hidden.add_options()("command", po::value<std::string>())("args",
                                                            po::value<std::vector<std::string>>());
  po::options_description all;
  all.add(global).add(hidden);
  po::positional_options_description positional;
  positional.add("command", 1).add("args", -1);

  GlobalContext context;
  std::vector<std::string> rest;
  bool as_json = false;
  for (int i = 1; i < argc; ++i) as_json |= std::string(argv[i]) == "--json";
  try {
    po::variables_map vm;
    // Global options stop at the command: everything after it belongs to the command.
    po::parsed_options parsed = po::command_line_parser(argc, argv)
                                    .options(all)
                                    .positional(positional)
                                    .allow_unregistered()
                                    .run();
    po::store(parsed, vm);
    po::notify(vm);
    if (vm.count("help") && !vm.count("command")) {
      print_usage(global);
      return kOk;
    }
    if (!vm.count("command")) {
      print_usage(global);
      return exit_code(ErrorKind::invalid_argument);
    }
    const auto level = core::parse_log_level(vm["log-level"].as<std::string>());
    if (!level) {
      return fail(ErrorKind::invalid_argument,
                  "--log-level: unknown level '" + vm["log-level"].as<std::string>() +
                      "' (use debug, info, warning or error)",
                  as_json);
    }
    context.json = vm.count("json") > 0;
    context.log_level_given = !vm["log-level"].defaulted();
    if (vm.count("config")) context.config_file = vm["config"].as<std::string>();
    context.progress = std::make_shared<ProgressLine>(ProgressLine::stderr_is_terminal());
    context.logger = std::make_shared<ProgressAwareLogger>(
        std::make_shared<core::StderrLogger>(*level), context.progress, *level);

    const std::string name = vm["command"].as<std::string>();
    rest = po::collect_unrecognized(parsed.options, po::include_positional);
    rest.erase(rest.begin());  // the command itself
    if (vm.count("help")) rest.push_back("--help");
    for (const auto& command : commands()) {
      if (name == command.name) return run_command(command, context, rest);
    }
    return fail(ErrorKind::invalid_argument,
                "unknown command '" + name + "' (sandboxctl --help lists them)", as_json);
  } catch (const po::error& e) {
    return fail(ErrorKind::invalid_argument, std::string(e.what()) + " (see sandboxctl --help)",
                as_json);
  } catch (const std::exception& e) {
    // ServiceError keeps its kind; config, plugin, state-directory, lease and id errors are
    // classified; anything else is internal.
    if (context.progress) context.progress->stop();
    const core::ServiceError error = core::as_service_error(e);
    return fail(error.kind(), error.what(), as_json);
  }
}

// The subcommands of sandboxctl. Each parses its own options (each has --help with an example
// and --json), calls the core, and prints; none holds lifecycle logic of its own.
#pragma once

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <boost/program_options.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "progress.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxctl {

using JsonWriter = rapidjson::PrettyWriter<rapidjson::StringBuffer>;

struct GlobalContext {
  std::optional<std::string> config_file;  // --config; nothing → the built-in default
  bool json = false;                       // --json given before the command
  bool log_level_given = false;            // --log-level was on the command line
  std::shared_ptr<sandboxd::Logger> logger;
  std::shared_ptr<ProgressLine> progress;
};

struct Command {
  const char* name;
  const char* summary;  // one line for `sandboxctl --help`
  int (*run)(GlobalContext& context, const std::vector<std::string>& args);
};

// ── what every subcommand's parsing shares ──
struct CommandHelp {
  const char* usage;    // "sandboxctl [global options] acquire --user U --thread T [--json]"
  const char* details;  // what it does, exit codes that matter, an example
};
class HelpShown {};  // --help was given: the help has been printed, exit 0
// Parses a subcommand's arguments (adding --json and --help); --help prints usage, options
// and details, then throws HelpShown.
boost::program_options::variables_map parse_args(
    const CommandHelp& help, boost::program_options::options_description& options,
    const std::vector<std::string>& args,
    const boost::program_options::positional_options_description* positional = nullptr);
bool json_output(const GlobalContext& context, const boost::program_options::variables_map& vm);
void emit(const rapidjson::StringBuffer& buffer);  // one JSON document on stdout

// `sandboxctl serve` (serve.cpp).
int cmd_serve(GlobalContext& context, const std::vector<std::string>& args);
// `sandboxctl egress` (egress_command.cpp).
int cmd_egress(GlobalContext& context, const std::vector<std::string>& args);
// `sandboxctl snapshot`, `snapshots`, `snapshot-rm`, `fork` (snapshot_commands.cpp).
int cmd_snapshot(GlobalContext& context, const std::vector<std::string>& args);
int cmd_snapshots(GlobalContext& context, const std::vector<std::string>& args);
int cmd_snapshot_rm(GlobalContext& context, const std::vector<std::string>& args);
int cmd_fork(GlobalContext& context, const std::vector<std::string>& args);

// Every subcommand, in the order `sandboxctl --help` lists them.
const std::vector<Command>& commands();

// Runs it; --help prints the command's help and returns 0.
int run_command(const Command& command, GlobalContext& context,
                const std::vector<std::string>& args);

// Whether the command's own arguments asked for JSON (so errors can be reported as JSON too).
bool wants_json(const GlobalContext& context, const std::vector<std::string>& args);

}  // namespace sandboxctl

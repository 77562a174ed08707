// The subcommands of sandboxctl. Each parses its own options (each has --help with an example
// and --json), calls the core, and prints; none holds lifecycle logic of its own.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "progress.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxctl {

struct GlobalContext {
  std::optional<std::string> config_file;  // --config; nothing → the built-in default
  bool json = false;                       // --json given before the command
  std::shared_ptr<sandboxd::Logger> logger;
  std::shared_ptr<ProgressLine> progress;
};

struct Command {
  const char* name;
  const char* summary;  // one line for `sandboxctl --help`
  int (*run)(GlobalContext& context, const std::vector<std::string>& args);
};

// Every subcommand, in the order `sandboxctl --help` lists them.
const std::vector<Command>& commands();

// Runs it; --help prints the command's help and returns 0.
int run_command(const Command& command, GlobalContext& context,
                const std::vector<std::string>& args);

// Whether the command's own arguments asked for JSON (so errors can be reported as JSON too).
bool wants_json(const GlobalContext& context, const std::vector<std::string>& args);

}  // namespace sandboxctl

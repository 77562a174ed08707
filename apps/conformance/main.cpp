// sandboxd-backend-conformance: checks a backend plugin against the contract the core relies
// on (docs/writing-a-backend.md, "Checking a backend"). Exit 0: every rule held; 1: a rule
// failed (each failure names its rule and why it matters); 2: the kit could not run (a bad
// flag, a plugin that does not load).
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "kit.hpp"

namespace {

constexpr const char* kUsage =
    "usage: sandboxd-backend-conformance (--use module:Class [--plugin FILE] | --config FILE\n"
    "                                     [--use module:Class] [--plugin FILE])\n"
    "                                    [--state-dir DIR] [--ready-seconds S]\n"
    "                                    [--destroy-seconds S] [--gtest_filter=RULES]\n"
    "\n"
    "Checks a sandbox backend plugin against the rules sandboxd relies on: create makes a\n"
    "sandbox that answers GET {url}/v1/sandbox, carries the conversation's identity and its\n"
    "creation time, and is returned again by a second create; a second process discovers,\n"
    "lists and destroys it; an unknown id is not found; optional verbs work as offered; destroy\n"
    "of a gone sandbox succeeds; destroy stops the sandbox while SIGTERM is blocked, as in the\n"
    "daemons. It makes two sandboxes (user conformance-alice, threads t-1 and t-2) and destroys\n"
    "them.\n"
    "\n"
    "  --use module:Class   the backend class (default: the config's sandbox.backend.use)\n"
    "  --plugin FILE        the plugin library (default: found on the plugin search path)\n"
    "  --config FILE        a sandboxd config whose sandbox.backend section holds the backend's\n"
    "                       options (an engine, an image, a provisioner URL)\n"
    "  --state-dir DIR      the host's state directory for the run (default: a new temporary\n"
    "                       one, removed at the end)\n"
    "  --ready-seconds S    how long a new sandbox may take to answer (default 60)\n"
    "  --destroy-seconds S  how long destroy may take (default 30)\n"
    "  --gtest_filter=...   run some rules only (--gtest_list_tests lists them)\n"
    "\n"
    "Exit status: 0 every rule held, 1 a rule failed, 2 the kit could not run.\n";

double seconds_flag(const std::string& flag, const std::string& value) {
  try {
    std::size_t used = 0;
    const double seconds = std::stod(value, &used);
    if (used == value.size() && seconds > 0 && seconds <= 3600) return seconds;
  } catch (const std::exception&) {
  }
  throw std::invalid_argument(flag + " " + value + ": expected seconds in (0, 3600]");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace sandboxd::conformance;
  KitSettings settings;
  std::vector<char*> gtest_arguments{argv[0]};
  std::string child_verb;
  std::vector<std::string> child_arguments;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string argument = argv[i];
      const auto value = [&]() -> std::string {
        if (i + 1 >= argc) throw std::invalid_argument(argument + " needs a value");
        return argv[++i];
      };
      if (argument == "--help" || argument == "-h") {
        std::cout << kUsage;
        return 0;
      } else if (argument == "--use") {
        settings.use = value();
      } else if (argument == "--plugin") {
        settings.plugin = value();
      } else if (argument == "--config") {
        settings.config_file = value();
      } else if (argument == "--state-dir") {
        settings.state_dir = value();
      } else if (argument == "--ready-seconds") {
        settings.ready_seconds = seconds_flag(argument, value());
      } else if (argument == "--destroy-seconds") {
        settings.destroy_seconds = seconds_flag(argument, value());
      } else if (argument == "--child") {
        child_verb = value();
        for (++i; i < argc; ++i) child_arguments.emplace_back(argv[i]);
      } else if (argument.rfind("--gtest_", 0) == 0) {
        gtest_arguments.push_back(argv[i]);
      } else {
        throw std::invalid_argument("unknown argument " + argument + " (see --help)");
      }
    }
    if (settings.use.empty() && settings.config_file.empty()) {
      throw std::invalid_argument("name the backend with --use module:Class or --config FILE");
    }
  } catch (const std::exception& e) {
    std::cerr << "sandboxd-backend-conformance: " << e.what() << "\n";
    return 2;
  }

  take_the_daemons_signal_mask();
  if (!child_verb.empty()) return child_main(settings, child_verb, child_arguments);

  int gtest_argc = static_cast<int>(gtest_arguments.size());
  testing::InitGoogleTest(&gtest_argc, gtest_arguments.data());
  std::unique_ptr<Kit> kit;
  try {
    kit = std::make_unique<Kit>(settings);
  } catch (const std::exception& e) {
    std::cerr << "sandboxd-backend-conformance: the plugin did not load: " << e.what() << "\n";
    return 2;
  }
  set_the_kit(kit.get());
  const int failed = RUN_ALL_TESTS();
  set_the_kit(nullptr);
  kit.reset();
  if (failed) {
    std::cout << "\nA rule above failed: its message says what sandboxd relies on and why.\n";
    return 1;
  }
  std::cout << "\nEvery rule held.\n";
  return 0;
}

// Command-line flags of the in-process network benches (relay_bench, egress_bench): integer
// flags written `--name N`, and `--json`.
#pragma once

#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

namespace sandboxd::bench {

// Sets each `--name N` given into `numbers[name]` and `json` for `--json`. Anything else prints
// `usage` and the argument to stderr and returns false (the bench exits 2).
inline bool read_flags(int argc, char** argv, const std::map<std::string, int*>& numbers,
                       bool& json, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json") {
      json = true;
      continue;
    }
    const auto number = numbers.find(arg);
    if (number == numbers.end() || i + 1 >= argc) {
      std::fprintf(stderr, "usage: %s\n%s: %s\n", usage,
                   number == numbers.end() ? "unknown argument" : "needs a value", arg.c_str());
      return false;
    }
    *number->second = std::stoi(argv[++i]);
  }
  return true;
}

}  // namespace sandboxd::bench

// Command-line flags of the in-process network benches (relay_bench, egress_bench): integer
// flags written `--name N`, and `--json`.
#pragma once

#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

namespace sandboxd::bench {

// Sets each `--name N` given into `numbers[name]` and `json` for `--json`. Anything else, or a
// value that is not a whole number, prints `usage` and what was wrong to stderr and returns
// false (the bench exits 2).
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
    const std::string value = argv[++i];
    std::size_t used = 0;
    try {
      *number->second = std::stoi(value, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != value.size()) {
      std::fprintf(stderr, "usage: %s\n%s needs a whole number, got '%s'\n", usage, arg.c_str(),
                   value.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace sandboxd::bench

// What a plugin library declares about its classes, read from the library file without loading
// it (no static initialiser, no factory runs): the records of its "sandboxd_meta" ELF section
// (sdk/include/sandboxd/plugin.hpp). Private to the core.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace sandboxd::core {

struct PluginMetadata {
  std::string class_name;
  std::string kind;  // "backend" or "ownership_store"
  std::uint32_t abi_version = 0;
  std::string description;
  std::string version;  // "" when the record has none (built before versions were recorded)
};

// The records of `path`'s metadata section, in order; an empty vector when the library has no
// such section (a plugin built against an SDK before it had one). Throws std::runtime_error
// naming the file when it is not a 64-bit little-endian ELF file it can read. Reads at most
// 4 KiB of headers, the section name table and 1 MiB of metadata, bounds-checked against the
// file's size.
std::vector<PluginMetadata> read_plugin_metadata(const std::string& path);

// The records in a metadata section's bytes (for the reader and its fuzz target).
std::vector<PluginMetadata> parse_plugin_metadata(const std::string& section);

}  // namespace sandboxd::core

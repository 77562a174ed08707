// DeerFlow's own config.yaml, read as is: the sections that concern sandboxes
// (`sandbox:`, `skills:` and `stream_bridge:`) are turned into the JSON document the config
// parser already validates, with the line of every key kept so each error names it. The
// other sections (models, tools, memory, …) are DeerFlow's business and are not read at all.
//
// Scalars are typed as DeerFlow's PyYAML `safe_load` types them (YAML 1.1: yes/no/on/off are
// booleans, ~ and an empty value are null); a quoted scalar is always a string. A string that
// starts with `$` is replaced by that environment variable, at any depth, as DeerFlow's
// `AppConfig.resolve_env_variables` does; an unset one is an error naming the file, the line,
// the key path and the variable, never a value, as DeerFlow refuses such a file (issue 32 C).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace sandboxd::core {

struct DeerFlowYaml {
  std::string json;                  // {"sandbox": …, "skills": …, "stream_bridge": …}
  std::map<std::string, int> lines;  // key path ("sandbox.mounts[0].host_path") → 1-based line
  std::vector<std::string> warnings;
  std::vector<std::string> other_sections;  // top-level keys left to DeerFlow
};

// What an unset `$NAME` is called in the config errors of both formats.
std::string unset_variable_message(const std::string& name);

// true for a name ending in .yaml or .yml.
bool has_yaml_extension(const std::string& path);

// true for a file named *.yaml or *.yml, or whose text does not start (after blanks and `#`
// comments) with '{': JSON config files are objects, DeerFlow's config.yaml is not.
bool looks_like_yaml(const std::string& path, const std::string& text);

// Throws ConfigError naming `source`, the line and column for malformed YAML, and the line and
// key path for a value JSON cannot carry.
DeerFlowYaml read_deerflow_yaml(const std::string& text, const std::string& source);

}  // namespace sandboxd::core

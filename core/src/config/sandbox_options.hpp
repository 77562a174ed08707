// Every scalar option of the `sandbox` section, declared once (issue 35 item 2).
//
// An entry says where the value lives in SandboxConfig and in ProviderOptions, its bounds, the
// sentence an operator reads for a bad value and which component reads it. The parser, the
// check-config rendering, the copy into the provider and the provider's own check of options
// an embedder built by hand all walk this table, so a new option is one entry here plus the
// fields it fills and the code that acts on it.
//
// Keys whose reading is structural (use, network, backend, ownership, plugin_dirs) are read by
// the parser itself; they are listed here only so that no key is called unknown.
#pragma once

#include <rapidjson/document.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/provider.hpp"

namespace sandboxd::core {

// Where an option's value lives in SandboxConfig; the type says how it is read and shown.
using ConfigField =
    std::variant<int SandboxConfig::*, double SandboxConfig::*,
                 std::optional<bool> SandboxConfig::*, OverflowPolicy SandboxConfig::*,
                 std::optional<std::string> SandboxConfig::*>;

// Where the provider takes it (the same type), or nowhere (base_dir goes to Paths).
using ProviderField =
    std::variant<std::monostate, int ProviderOptions::*, double ProviderOptions::*,
                 std::optional<bool> ProviderOptions::*, OverflowPolicy ProviderOptions::*>;

struct SandboxOption {
  const char* key;  // under `sandbox.`
  ConfigField field;
  ProviderField provider_field = std::monostate{};
  const char* provider_name = "";  // its ProviderOptions member's name, for the provider's check

  // Bounds of a number (integers included): minimum (itself allowed unless minimum_excluded)
  // and maximum.
  double minimum = 0;
  bool minimum_excluded = false;
  double maximum = 0;
  // A C++ embedder may set 0 in ProviderOptions where the config key must be above it
  // (teardown_wait_seconds 0: give up at once).
  bool provider_allows_zero = false;
  // null means 0, "none" (max_per_user): check-config shows 0 as null.
  bool null_means_zero = false;
  // Read only under this overflow policy; given under another, a warning says it is ignored.
  std::optional<OverflowPolicy> applies_only_with;
  // A text option's own check (a size: "10g"); nullptr takes any non-empty string.
  bool (*valid_text)(const std::string& text) = nullptr;

  const char* expected;  // the sentence after "expected" when a value is refused
  const char* read_by;   // the component that acts on it
};

// The options in the order check-config shows them.
std::span<const SandboxOption> sandbox_options();

// The keys of the `sandbox` section read by the parser itself (use, network, …).
std::span<const char* const> structural_sandbox_keys();

// true for a key of the table or a structural key.
bool is_known_sandbox_key(std::string_view key);

// Reads `value` (present, not null) into `config`; false when it is not a value the option
// takes (the caller refuses it with `option.expected`).
bool read_sandbox_option(const SandboxOption& option, const rapidjson::Value& value,
                         SandboxConfig& config);

// The option's value in `config` as check-config shows it.
rapidjson::Value rendered_sandbox_option(const SandboxOption& option, const SandboxConfig& config,
                                         rapidjson::Document::AllocatorType& alloc);

// Copies every option the provider reads from `config` into `options`.
void copy_sandbox_options(const SandboxConfig& config, ProviderOptions& options);

// Throws std::invalid_argument naming the first ProviderOptions member outside its option's
// bounds (an embedder's hand-built options get the config's rules).
void check_provider_options(const ProviderOptions& options);

}  // namespace sandboxd::core

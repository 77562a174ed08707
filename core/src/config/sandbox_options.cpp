// The table of sandbox options (sandbox_options.hpp) and the four walks over it.
#include "sandbox_options.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <type_traits>

#include "sandboxd/core/thread_storage.hpp"

namespace sandboxd::core {

namespace {

using rapidjson::Value;
using Allocator = rapidjson::Document::AllocatorType;

constexpr double kIntMax = INT_MAX;

bool is_size(const std::string& text) {
  return parse_size(text).has_value();
}

const SandboxOption kOptions[] = {
    {.key = "base_dir",
     .field = &SandboxConfig::base_dir,
     .expected = "a non-empty path string",
     .read_by = "paths (gateway state: thread dirs, lock files, the registry)"},
    {.key = "disk_limit",
     .field = &SandboxConfig::disk_limit,
     .valid_text = &is_size,
     .expected = "a size such as \"10g\", \"512m\" or a number of bytes (\"0\": unbounded)",
     .read_by = "paths (each conversation's directory, bounded: docs/storage.md)"},
    {.key = "min_free_disk",
     .field = &SandboxConfig::min_free_disk,
     .valid_text = &is_size,
     .expected = "a size such as \"2g\" or a number of bytes (\"0\": no floor)",
     .read_by = "provider (new sandboxes refused below it: docs/storage.md)"},
    {.key = "max_snapshots_per_user",
     .field = &SandboxConfig::max_snapshots_per_user,
     .minimum = 0,
     .maximum = 100000,
     .expected = "an integer >= 0 (0: no ceiling on the count)",
     .read_by = "provider (snapshots: docs/snapshots.md)"},
    {.key = "max_snapshot_bytes_per_user",
     .field = &SandboxConfig::max_snapshot_bytes_per_user,
     .valid_text = &is_size,
     .expected = "a size such as \"20g\" or a number of bytes (\"0\": no ceiling on the bytes)",
     .read_by = "provider (snapshots: docs/snapshots.md)"},
    {.key = "snapshot_ttl_seconds",
     .field = &SandboxConfig::snapshot_ttl_seconds,
     .minimum = 0,
     .maximum = 315360000,
     .expected = "a number of seconds >= 0 and <= 315360000 (0: kept until deleted)",
     .read_by = "provider (the idle checker deletes expired snapshots)"},
    {.key = "replicas",
     .field = &SandboxConfig::replicas,
     .provider_field = &ProviderOptions::replicas,
     .provider_name = "replicas",
     .minimum = 1,
     .maximum = kIntMax,
     .expected = "an integer > 0",
     .read_by = "provider (eviction, ceilings)"},
    {.key = "idle_timeout",
     .field = &SandboxConfig::idle_timeout,
     .provider_field = &ProviderOptions::idle_timeout,
     .provider_name = "idle_timeout",
     .minimum = 0,
     .maximum = kIntMax,
     .expected = "an integer >= 0 (seconds)",
     .read_by = "provider (the idle checker)"},
    {.key = "teardown_wait_seconds",
     .field = &SandboxConfig::teardown_wait_seconds,
     .provider_field = &ProviderOptions::teardown_wait_seconds,
     .provider_name = "teardown_wait_seconds",
     .minimum = 0,
     .minimum_excluded = true,
     .maximum = 3600,
     .provider_allows_zero = true,
     .expected = "a number of seconds > 0 and <= 3600",
     .read_by = "provider (acquire)"},
    {.key = "pause_after_seconds",
     .field = &SandboxConfig::pause_after_seconds,
     .provider_field = &ProviderOptions::pause_after_seconds,
     .provider_name = "pause_after_seconds",
     .minimum = 0,
     // A week: longer than any idle_timeout anyone runs, short enough to catch a unit mistake.
     .maximum = 604800,
     .expected = "a number of seconds >= 0 and <= 604800 (0: never)",
     .read_by = "provider (the idle checker's pause pass)"},
    {.key = "max_lifetime_seconds",
     .field = &SandboxConfig::max_lifetime_seconds,
     .provider_field = &ProviderOptions::max_lifetime_seconds,
     .provider_name = "max_lifetime_seconds",
     .minimum = 0,
     .maximum = 31'536'000,  // a year
     .expected = "a number of seconds >= 0 and <= 31536000 (0: never)",
     .read_by = "provider (the idle pass)"},
    {.key = "archive_after_seconds",
     .field = &SandboxConfig::archive_after_seconds,
     .provider_field = &ProviderOptions::archive_after_seconds,
     .provider_name = "archive_after_seconds",
     .minimum = 0,
     .maximum = 31'536'000,  // a year
     .expected = "a number of seconds >= 0 and <= 31536000 (0: never)",
     .read_by = "provider (the archive pass)"},
    {.key = "overflow_policy",
     .field = &SandboxConfig::overflow_policy,
     .provider_field = &ProviderOptions::overflow_policy,
     .provider_name = "overflow_policy",
     .expected = "\"wait\", \"reject\", \"burst\" or null",
     .read_by = "provider (ceilings)"},
    {.key = "acquire_timeout",
     .field = &SandboxConfig::acquire_timeout,
     .provider_field = &ProviderOptions::acquire_timeout_seconds,
     .provider_name = "acquire_timeout_seconds",
     .minimum = 0,
     .minimum_excluded = true,
     .maximum = 3600,
     .provider_allows_zero = true,
     .applies_only_with = OverflowPolicy::wait,
     .expected = "a number of seconds > 0 and <= 3600",
     .read_by = "provider (ceilings: the wait queue)"},
    {.key = "burst_limit",
     .field = &SandboxConfig::burst_limit,
     .provider_field = &ProviderOptions::burst_limit,
     .provider_name = "burst_limit",
     .minimum = 0,
     .maximum = kIntMax,
     .applies_only_with = OverflowPolicy::burst,
     .expected = "an integer >= 0",
     .read_by = "provider (ceilings)"},
    {.key = "max_per_user",
     .field = &SandboxConfig::max_per_user,
     .provider_field = &ProviderOptions::max_per_user,
     .provider_name = "max_per_user",
     .minimum = 1,
     .maximum = kIntMax,
     .null_means_zero = true,
     .expected = "an integer > 0 or null",
     .read_by = "provider (ceilings)"},
    {.key = "thread_data_mounts",
     .field = &SandboxConfig::thread_data_mounts,
     .provider_field = &ProviderOptions::thread_data_mounts,
     .provider_name = "thread_data_mounts",
     .expected = "true, false or null",
     .read_by = "provider (the mounts of a new sandbox)"},
};

constexpr const char* kStructuralKeys[] = {"use", "network", "backend", "ownership", "plugin_dirs"};

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

// Integers may be written as 3 or 3.0; anything fractional or out of range is not one.
std::optional<long long> as_integer(const Value& value) {
  if (value.IsInt64()) return value.GetInt64();
  if (value.IsDouble()) {
    const double d = value.GetDouble();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) {
      return static_cast<long long>(d);
    }
  }
  return std::nullopt;
}

// Whether ProviderOptions has fields of this type at all (base_dir's string it has not).
template <class Field, class Variant>
struct HasAlternative;
template <class Field, class... Alternatives>
struct HasAlternative<Field, std::variant<Alternatives...>>
    : std::bool_constant<(std::is_same_v<Field ProviderOptions::*, Alternatives> || ...)> {};
template <class Field>
constexpr bool kProviderCanHold = HasAlternative<Field, ProviderField>::value;

bool within(const SandboxOption& option, double value) {
  const bool above = option.minimum_excluded ? value > option.minimum : value >= option.minimum;
  return above && value <= option.maximum;
}

std::string shortest(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

}  // namespace

std::span<const SandboxOption> sandbox_options() {
  return kOptions;
}

std::span<const char* const> structural_sandbox_keys() {
  return kStructuralKeys;
}

bool is_known_sandbox_key(std::string_view key) {
  return std::any_of(std::begin(kOptions), std::end(kOptions),
                     [&](const SandboxOption& option) { return key == option.key; }) ||
         std::find(std::begin(kStructuralKeys), std::end(kStructuralKeys), key) !=
             std::end(kStructuralKeys);
}

bool read_sandbox_option(const SandboxOption& option, const Value& value, SandboxConfig& config) {
  return std::visit(Overloaded{
                        [&](int SandboxConfig::*field) {
                          const auto number = as_integer(value);
                          if (!number || !within(option, static_cast<double>(*number)))
                            return false;
                          config.*field = static_cast<int>(*number);
                          return true;
                        },
                        [&](double SandboxConfig::*field) {
                          if (!value.IsNumber() || !within(option, value.GetDouble())) return false;
                          config.*field = value.GetDouble();
                          return true;
                        },
                        [&](std::optional<bool> SandboxConfig::*field) {
                          if (!value.IsBool()) return false;
                          config.*field = value.GetBool();
                          return true;
                        },
                        [&](OverflowPolicy SandboxConfig::*field) {
                          const auto policy = value.IsString()
                                                  ? overflow_policy_from(value.GetString())
                                                  : std::optional<OverflowPolicy>();
                          if (!policy) return false;
                          config.*field = *policy;
                          return true;
                        },
                        [&](std::optional<std::string> SandboxConfig::*field) {
                          if (!value.IsString() || value.GetStringLength() == 0) return false;
                          std::string text(value.GetString(), value.GetStringLength());
                          if (option.valid_text != nullptr && !option.valid_text(text)) {
                            return false;
                          }
                          config.*field = std::move(text);
                          return true;
                        },
                    },
                    option.field);
}

Value rendered_sandbox_option(const SandboxOption& option, const SandboxConfig& config,
                              Allocator& alloc) {
  return std::visit(Overloaded{
                        [&](int SandboxConfig::*field) {
                          if (option.null_means_zero && config.*field == 0)
                            return Value(rapidjson::kNullType);
                          return Value(config.*field);
                        },
                        [&](double SandboxConfig::*field) { return Value(config.*field); },
                        [&](std::optional<bool> SandboxConfig::*field) {
                          const auto& flag = config.*field;
                          return flag ? Value(*flag) : Value(rapidjson::kNullType);
                        },
                        [&](OverflowPolicy SandboxConfig::*field) {
                          // soft is the policy of no policy: shown as the null that asks for it.
                          if (config.*field == OverflowPolicy::soft)
                            return Value(rapidjson::kNullType);
                          return Value(to_string(config.*field), alloc);
                        },
                        [&](std::optional<std::string> SandboxConfig::*field) {
                          const auto& text = config.*field;
                          return text ? Value(text->c_str(), alloc) : Value(rapidjson::kNullType);
                        },
                    },
                    option.field);
}

void copy_sandbox_options(const SandboxConfig& config, ProviderOptions& options) {
  for (const SandboxOption& option : kOptions) {
    std::visit(
        [&](auto config_field) {
          using Field = std::remove_cvref_t<decltype(config.*config_field)>;
          if constexpr (kProviderCanHold<Field>) {
            if (auto* target = std::get_if<Field ProviderOptions::*>(&option.provider_field)) {
              options.** target = config.*config_field;
            }
          }
        },
        option.field);
  }
}

void check_provider_options(const ProviderOptions& options) {
  for (const SandboxOption& option : kOptions) {
    std::optional<double> value;
    if (auto* field = std::get_if<int ProviderOptions::*>(&option.provider_field)) {
      value = options.**field;
    } else if (auto* number = std::get_if<double ProviderOptions::*>(&option.provider_field)) {
      value = options.**number;
    }
    if (!value) continue;
    const bool zero_allowed = option.provider_allows_zero || option.null_means_zero;
    if (within(option, *value) || (zero_allowed && *value == 0)) continue;
    throw std::invalid_argument(
        std::string("ProviderOptions.") + option.provider_name + ": expected " + option.expected +
        (option.provider_allows_zero ? " (or 0)" : "") + ", got " + shortest(*value) +
        " (the config key sandbox." + option.key + " takes the same values)");
  }
}

}  // namespace sandboxd::core

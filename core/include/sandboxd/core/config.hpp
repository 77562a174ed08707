// The `sandbox` section of a JSON config file (design §11, design "Configuration").
//
// Nested shape: `backend` and `ownership` sub-sections, each with its `use:` string and the
// plugin's own options. DeerFlow's flat keys (provisioner_url, provisioner_api_key, image,
// port, mounts, environment, container_prefix, ownership.type) are accepted too and mapped
// onto the equivalent plugin choice; `mapping_notes` says which mapping was made. A key given
// both ways is an error.
#pragma once

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxd/core/overflow_policy.hpp"
#include "sandboxd/redact.hpp"

namespace sandboxd::core {

inline constexpr const char* kLocalDockerUse = "local_docker:LocalContainerBackend";
inline constexpr const char* kRemoteProvisionerUse = "remote_provisioner:RemoteSandboxBackend";
inline constexpr const char* kMemoryOwnershipUse = "ownership_memory:MemoryOwnershipStore";
inline constexpr const char* kSqliteOwnershipUse = "ownership_sqlite:SqliteOwnershipStore";
inline constexpr const char* kRedisOwnershipUse = "ownership_redis:RedisOwnershipStore";

// Names the file, the key path, what was expected and what was found; malformed JSON reports
// line and column.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// One plugin choice with its own options.
struct PluginSection {
  std::string use;  // "module:Class"
  // The whole sub-section as a JSON object, `use` included, after `$NAME` substitution. A
  // section synthesised from DeerFlow keys holds the resolved `use` (and, for the backend, the
  // moved flat keys; DeerFlow's ownership `type` is dropped). No section at all → "{}".
  std::string options_json;
  std::string key_path;  // "sandbox.backend" or "sandbox.ownership"
};

struct SandboxConfig {
  std::string source_file;  // "" when parsed from a string without a name

  PluginSection backend;
  PluginSection ownership;

  std::optional<std::string> base_dir;  // unset → design §2.1 resolution
  // Each conversation's storage bound ("10g"; "0": none); unset → kDefaultDiskLimit
  // (thread_storage.hpp). A size string, checked when read.
  std::optional<std::string> disk_limit;
  // The free space kept under the state directory and the engine's storage ("2g"; "0": none);
  // below it new sandboxes are refused (a capacity refusal). Unset → kDefaultMinFreeDisk.
  std::optional<std::string> min_free_disk;
  // Snapshots (docs/snapshots.md): each user's ceilings and how long one is kept.
  int max_snapshots_per_user = 10;                         // 0: no count ceiling
  std::optional<std::string> max_snapshot_bytes_per_user;  // a size; unset: "20g"
  double snapshot_ttl_seconds = 30 * 24 * 3600.0;          // 0: kept until deleted
  int replicas = 3;                        // > 0
  int idle_timeout = 600;                  // seconds; 0 disables the idle checker
  std::optional<bool> thread_data_mounts;  // null / true / false carried through unchanged
  std::vector<std::string> plugin_dirs;
  std::string skills_container_path = "/mnt/skills";  // top-level `skills.container_path`
  // How long an acquire waits for a teardown of its sandbox (ours or a peer's `del` lease)
  // before it answers "being destroyed" (serve: 409). A gateway's HTTP timeout must exceed it.
  double teardown_wait_seconds = 30.0;
  // Pause a sandbox released this long ago (0: never, DeerFlow's behaviour). Takes
  // effect only with a backend that can pause; must be below idle_timeout to matter.
  double pause_after_seconds = 0.0;
  // Destroy a sandbox this long after its creation, active or not (0: never).
  double max_lifetime_seconds = 0.0;
  double archive_after_seconds = 0.0;  // 0: never (docs/snapshots.md, "The archived tier")
  // Issue 23, the ceilings (DeerFlow's E2B provider's words): unset overflow_policy keeps
  // `replicas` soft; wait | reject | burst make it a ceiling. max_per_user 0: no per-user one.
  OverflowPolicy overflow_policy = OverflowPolicy::soft;
  double acquire_timeout = 30.0;  // wait: seconds a creation queues for a slot (> 0)
  int burst_limit = 0;            // burst: slots beyond replicas
  int max_per_user = 0;

  // From the ownership section; validated here because the core runs the renewal thread.
  double renewal_interval_seconds = 30.0;  // > 0
  double ttl_multiplier = 4.0;             // >= 2
  double ttl_seconds() const { return renewal_interval_seconds * ttl_multiplier; }

  // Read from a DeerFlow config.yaml: key path → its 1-based line, a flat key also under its
  // sandbox.backend.* path, so a plugin's complaint can name the line. Empty for JSON.
  std::map<std::string, int> source_lines;

  std::vector<std::string> mapping_notes;  // e.g. "sandbox.image → sandbox.backend.image"
  std::vector<std::string> warnings;       // unknown keys and similar
};

// Reads and validates `path`: JSON, or DeerFlow's config.yaml (a .yaml/.yml name, or text that
// is not a JSON object). Throws ConfigError. Relative `plugin_dirs` entries are resolved
// against the directory that holds the file.
SandboxConfig load_config_file(const std::string& path);

// Parses config text: JSON, or DeerFlow's YAML when `source_name` ends in .yaml or .yml.
// `source_name` is used in error messages in place of a file name (and is stored as
// source_file). Relative `plugin_dirs` entries are resolved against
// `relative_base_dir`, or against the current directory when it is empty.
SandboxConfig parse_config(const std::string& json_text, const std::string& source_name,
                           const std::string& relative_base_dir = "");

// "{file}: {key path}: …" → "{file}:{line}: {key path}: …" when the key's line is known.
std::string with_source_line(const SandboxConfig& config, const std::string& message);

// true when a key of this name holds a secret: its lower-cased name (with '-' read as '_')
// contains api_key, apikey, secret, password, token or credential.
using sandboxd::is_secret_key_name;  // defined in sandboxd/redact.hpp

// The resolved settings as pretty JSON with every secret replaced by "<redacted>" (environment
// values, api keys, passwords, tokens): what `sandboxctl check-config` prints.
std::string render_redacted(const SandboxConfig& config);

}  // namespace sandboxd::core

// What a host whose commands each run in a fresh process (sandboxctl) needs so that those
// processes act as one provider instance: one stable lease identity, leases that outlive the
// process that wrote them, and the registry (active and warm sandboxes) kept in a file.
//
// Lifetime of what a one-shot command leaves behind: the sandbox keeps running under a lease
// whose TTL is at least the idle timeout. Nobody renews it between commands; the next command
// on the same state directory (same owner id) renews, releases or destroys it. Once the lease
// has lapsed and a further TTL of grace has passed, any reconciling peer sharing the store
// (`sandboxctl reconcile`, `sandboxctl serve`, a gateway) may adopt it into its warm pool, and
// it is reaped after that peer's idle timeout (`sandboxctl reap` does the same for the state
// directory's own sandboxes).
#pragma once

#include <filesystem>
#include <optional>
#include <string>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/provider.hpp"

namespace sandboxd::core {

// The file in a state directory that holds its installation id.
inline constexpr const char* kInstallationIdFile = "instance-id";

// The random id of the installation whose state directory is `state_dir`, kept in
// {state_dir}/instance-id (mode 0600, never through a link), made by the first call with
// `create` (nullopt when it does not exist and `create` is false). Throws RegistryFileError.
std::optional<std::string> installation_id(const std::filesystem::path& state_dir, bool create);

// "{hostname}:sandboxctl-{24 hex}" from the state directory's installation id (made when
// missing), this machine's /etc/machine-id and the registry file's name: the same for every
// process working on that state directory with that registry, distinct between state
// directories, and distinct between two machines that share a hostname and a state path
// (cloned VMs, containers in the host's UTS namespace) even when they share a lease store.
// With `create` false, "" when the installation id has not been made yet.
std::string one_shot_owner_id(const std::filesystem::path& registry_file, bool create = true);

// The config with its lease timing raised so that TTL ≥ ttl_seconds (the renewal interval is
// raised; the multiplier is kept). Unchanged when the TTL is already long enough.
SandboxConfig with_lease_ttl_at_least(SandboxConfig config, double ttl_seconds);

// A corrupt or unreadable registry file; the message names the path and what to do.
class RegistryFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The registry of one state directory as a JSON file (mode 0600), guarded by an flock on a
// sidecar "{file}.lock" and replaced atomically (write to a temporary file, rename), so a
// reader never sees half a file and concurrent commands on different sandboxes both land.
class RegistryFile {
 public:
  explicit RegistryFile(std::filesystem::path path);
  const std::filesystem::path& path() const { return path_; }

  // A missing file is an empty registry.
  RegistrySnapshot load() const;

  // Applies what changed from `before` (what load() returned) to `after` onto the file as it
  // is now: sandboxes added or changed are written, those that disappeared are removed, others
  // (another command's) are kept as they are.
  void apply(const RegistrySnapshot& before, const RegistrySnapshot& after) const;

 private:
  RegistrySnapshot read_unlocked() const;
  void write_unlocked(const RegistrySnapshot& snapshot) const;

  std::filesystem::path path_;
};

}  // namespace sandboxd::core

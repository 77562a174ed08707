// One sandboxctl command's provider: the config (or the built-in default), the state
// directory's registry loaded into a Provider that acts under the state directory's stable
// lease identity, and, when the command ends, the registry's changes written back and the
// provider detached (every sandbox keeps running; see one_shot_host.hpp for what is left
// behind and who reaps it).
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/one_shot_host.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/sandbox_service.hpp"

namespace sandboxctl {

// The config a command runs with: --config FILE, else the built-in default.
sandboxd::core::SandboxConfig load_command_config(const std::optional<std::string>& config_file);

// {state_dir}/sandboxctl-registry.json: the registry of one state directory's commands.
std::filesystem::path registry_path(const std::filesystem::path& state_dir);
// {state_dir}/serve-registry.json: what `sandboxctl serve` leaves for the next serve.
std::filesystem::path serve_registry_path(const std::filesystem::path& state_dir);

enum class SessionKind {
  // One command: no background work, leases lasting the idle timeout (nobody renews them).
  one_shot,
  // `sandboxctl serve`: reconciliation, renewal and idle reaping run; leases as configured. A
  // serve that exits leaving its sandboxes running hands them (registry and lease identity) to
  // the next serve on the same state directory.
  daemon,
};

class Session {
 public:
  Session(const sandboxd::core::SandboxConfig& config, std::shared_ptr<sandboxd::Logger> logger,
          sandboxd::core::ProviderHooks hooks = {}, SessionKind kind = SessionKind::one_shot,
          std::size_t max_capacity_waiters = 0);
  // Writes the registry back (errors logged) and detaches, unless commit() already did.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  sandboxd::core::Provider& provider() { return *provider_; }
  // The operations every door offers, over this session's provider.
  sandboxd::core::SandboxService& service() { return *service_; }
  // What happened to sandboxes (a daemon's; null for a one-shot command, which sees too little).
  const std::shared_ptr<sandboxd::core::LifecycleEventLog>& events() const { return events_; }
  const sandboxd::core::SandboxConfig& config() const { return config_; }
  const std::filesystem::path& state_dir() const { return state_dir_; }
  // "state directory PATH", for messages.
  std::string where() const { return "state directory " + state_dir_.string(); }
  const sandboxd::core::RegistryFile& registry() const { return registry_; }

  // Writes what this command changed into the registry file and detaches the provider.
  // Throws RegistryFileError.
  void commit();

 private:
  sandboxd::core::SandboxConfig config_;
  std::shared_ptr<sandboxd::Logger> logger_;
  std::filesystem::path state_dir_;
  sandboxd::core::RegistryFile registry_;
  sandboxd::core::RegistrySnapshot loaded_;
  std::shared_ptr<sandboxd::core::LifecycleEventLog> events_;  // before the provider uses it
  std::unique_ptr<sandboxd::core::Provider> provider_;
  std::unique_ptr<sandboxd::core::SandboxService> service_;
  bool committed_ = false;
};

}  // namespace sandboxctl

// Extra bind mounts for a sandbox (design §3): thread data, skills views, integration skills and
// the lark-cli credential/runtime dirs. Sources are host paths (Paths::host_*); directories are
// created and checked on the container-visible base dir.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxd/core/paths.hpp"
#include "sandboxd/logger.hpp"
#include "sandboxd/types.hpp"

namespace sandboxd::core {

inline constexpr std::string_view kDefaultSkillsContainerPath = "/mnt/skills";
inline constexpr std::string_view kDefaultAmbientUser = "default";
inline constexpr std::string_view kWorkspaceContainerPath = "/mnt/user-data/workspace";
inline constexpr std::string_view kUploadsContainerPath = "/mnt/user-data/uploads";
inline constexpr std::string_view kOutputsContainerPath = "/mnt/user-data/outputs";
inline constexpr std::string_view kUploadConversionsContainerPath =
    "/mnt/user-data/.upload-conversions";
inline constexpr std::string_view kAcpWorkspaceContainerPath = "/mnt/acp-workspace";
inline constexpr std::string_view kLarkCliSandboxConfigDir = "/mnt/integrations/lark-cli/config";
inline constexpr std::string_view kLarkCliSandboxDataDir = "/mnt/integrations/lark-cli/data";
inline constexpr std::string_view kLarkCliSandboxRuntimeDir = "/mnt/integrations/lark-cli/runtime";

struct MountComposerOptions {
  // `skills.container_path` of the app config.
  std::string skills_container_path = std::string(kDefaultSkillsContainerPath);
  // The host's ambient user (request context). Unset → always "default". Returning nullopt
  // selects the legacy (not user-scoped) thread layout.
  std::function<std::optional<std::string>()> ambient_user;
  // Rebuilds the user's enabled-only skills views (design §3.7). Best effort: a throw is logged
  // as a warning and swallowed. Unset → nothing to do.
  std::function<void(const std::string& user_id)> skills_projection;
  std::shared_ptr<Logger> logger;  // null → silent
};

// Python-style rendering of a mount list for log lines: [('/h', '/c', False), ...].
std::string format_mounts(const std::vector<Mount>& mounts);

// Keeps the first mount per container path; each dropped one logs the warning
// `Skipping duplicate sandbox mount for container path {cp} from host {hp}`.
std::vector<Mount> dedupe_mounts_by_container_path(const std::vector<Mount>& mounts,
                                                   Logger* logger);

// The helpers are virtual so tests (and the provider's tests) can replace one source of mounts
// and exercise the composition alone.
class MountComposer {
 public:
  MountComposer(std::shared_ptr<const Paths> paths, MountComposerOptions options = {});
  virtual ~MountComposer() = default;

  const Paths& paths() const { return *paths_; }
  const MountComposerOptions& options() const { return options_; }

  // A non-empty explicit user wins; otherwise the ambient user ("default" when no hook).
  std::optional<std::string> effective_user(const std::optional<std::string>& user_id) const;

  // Runs the projection hook for the effective user; never throws. Logs
  // `Could not ensure skills projection for user {u}: {err}` on failure.
  void ensure_skills_projection(const std::optional<std::string>& user_id) const;

  // design §3.1: ensure_thread_dirs, then workspace, uploads, outputs (rw), .upload-conversions
  // (ro), acp-workspace (ro). Invalid ids throw std::invalid_argument.
  virtual std::vector<Mount> thread_mounts(const std::string& thread_id,
                                           const std::optional<std::string>& user_id) const;
  // design §3.2: {C}/public, {C}/custom, {C}/legacy, all ro. Failure → warning, empty list.
  // Every source a composition returns exists (missing views are created 0755): Docker
  // refuses a bind mount whose source is missing.
  virtual std::vector<Mount> skills_mounts(const std::optional<std::string>& user_id) const;
  // design §3.3: {C}/integrations ro from the user's projection. Failure → warning, empty list.
  virtual std::vector<Mount> user_skill_mounts(const std::optional<std::string>& user_id) const;
  // design §3.4: config (ro), data (rw), runtime (ro, only if B/integrations/lark-cli/sandbox-cli
  // is a directory). No config/locks mount. Failure → warning, empty list.
  virtual std::vector<Mount> lark_cli_runtime_mounts(
      const std::optional<std::string>& user_id) const;

  // design §3.5. Without thread-data mounts the read-only conversions entry is dropped (explicit
  // sync writes into the sandbox and a nested ro mount would block it); then de-duplicated.
  std::vector<Mount> compose_extra_mounts(const std::optional<std::string>& thread_id,
                                          const std::optional<std::string>& user_id,
                                          bool thread_data_mounted) const;

 protected:
  void log(LogLevel level, std::string_view message) const;

 private:
  void run_skills_projection(const std::optional<std::string>& resolved_user) const;

  std::shared_ptr<const Paths> paths_;
  MountComposerOptions options_;
};

}  // namespace sandboxd::core

#include "sandboxd/core/mounts.hpp"

#include <exception>
#include <filesystem>
#include <stdexcept>
#include <unordered_set>
#include <utility>

namespace sandboxd::core {
namespace {

const std::string& require_user(const std::optional<std::string>& user_id) {
  if (!user_id) throw std::invalid_argument("no effective user id");
  return *user_id;
}

// A read-only skills view is a bind-mount source: Docker refuses a missing one (podman creates
// it), so the composer makes sure it exists. Gateway-owned, readable by the sandbox's user
// (0755 when made here); an existing view (the projection's) is left as it is. Walked from the
// base dir without following a link, like every directory the gateway makes in its state.
void ensure_view_dir(const Paths& paths, const std::filesystem::path& dir) {
  paths.ensure_dir_below_base(dir, 0755);
}

}  // namespace

std::string format_mounts(const std::vector<Mount>& mounts) {
  std::string out = "[";
  for (std::size_t i = 0; i < mounts.size(); ++i) {
    // Appended piece by piece: GCC 12 at -O3 takes `"(" + std::string&&` (an insert at the
    // front) for an overlapping memcpy and warns (-Wrestrict), failing a Release build.
    if (i > 0) out += ", ";
    out += '(';
    out += python_repr(mounts[i].host_path);
    out += ", ";
    out += python_repr(mounts[i].container_path);
    out += mounts[i].read_only ? ", True)" : ", False)";
  }
  return out + "]";
}

std::vector<Mount> dedupe_mounts_by_container_path(const std::vector<Mount>& mounts,
                                                   Logger* logger) {
  std::unordered_set<std::string> seen;
  std::vector<Mount> deduped;
  deduped.reserve(mounts.size());
  for (const auto& mount : mounts) {
    if (!seen.insert(mount.container_path).second) {
      if (logger) {
        logger->warning("Skipping duplicate sandbox mount for container path " +
                        mount.container_path + " from host " + mount.host_path);
      }
      continue;
    }
    deduped.push_back(mount);
  }
  return deduped;
}

MountComposer::MountComposer(std::shared_ptr<const Paths> paths, MountComposerOptions options)
    : paths_(std::move(paths)), options_(std::move(options)) {
  if (!paths_) throw std::invalid_argument("MountComposer needs a Paths");
}

void MountComposer::log(LogLevel level, std::string_view message) const {
  if (options_.logger) options_.logger->log(level, message);
}

std::optional<std::string> MountComposer::effective_user(
    const std::optional<std::string>& user_id) const {
  // Python's `user_id or get_effective_user_id()`: an empty explicit id counts as absent.
  if (user_id && !user_id->empty()) return user_id;
  if (!options_.ambient_user) return std::string(kDefaultAmbientUser);
  return options_.ambient_user();
}

void MountComposer::ensure_skills_projection(const std::optional<std::string>& user_id) const {
  run_skills_projection(effective_user(user_id));
}

void MountComposer::run_skills_projection(const std::optional<std::string>& user) const {
  try {
    if (options_.skills_projection) options_.skills_projection(require_user(user));
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Could not ensure skills projection for user " + user.value_or("None") + ": " + e.what());
  } catch (...) {
    log(LogLevel::warning,
        "Could not ensure skills projection for user " + user.value_or("None") + ": unknown error");
  }
}

std::vector<Mount> MountComposer::thread_mounts(const std::string& thread_id,
                                                const std::optional<std::string>& user_id) const {
  const auto user = effective_user(user_id);
  paths_->ensure_thread_dirs(thread_id, user);
  return {
      {paths_->host_sandbox_work_dir(thread_id, user), std::string(kWorkspaceContainerPath), false},
      {paths_->host_sandbox_uploads_dir(thread_id, user), std::string(kUploadsContainerPath),
       false},
      {paths_->host_sandbox_outputs_dir(thread_id, user), std::string(kOutputsContainerPath),
       false},
      // Read-only: conversions are generated gateway-side and must not be tampered with.
      {paths_->host_upload_conversions_dir(thread_id, user),
       std::string(kUploadConversionsContainerPath), true},
      // Read-only: the ACP subprocess writes from the host; the agent only reads results.
      {paths_->host_acp_workspace_dir(thread_id, user), std::string(kAcpWorkspaceContainerPath),
       true},
  };
}

std::vector<Mount> MountComposer::skills_mounts(const std::optional<std::string>& user_id) const {
  try {
    const auto user = effective_user(user_id);
    run_skills_projection(user);
    const std::string& u = require_user(user);
    const std::string& c = options_.skills_container_path;
    ensure_view_dir(*paths_, paths_->public_skills_view_dir());
    ensure_view_dir(*paths_, paths_->user_custom_skills_view_dir(u));
    ensure_view_dir(*paths_, paths_->user_legacy_skills_view_dir(u));
    // Legacy is mounted even when empty so a later visibility change needs no recreation.
    return {
        {paths_->host_public_skills_view_dir(), c + "/public", true},
        {paths_->host_user_custom_skills_view_dir(u), c + "/custom", true},
        {paths_->host_user_legacy_skills_view_dir(u), c + "/legacy", true},
    };
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("Could not setup skills mounts: ") + e.what());
    return {};
  }
}

std::vector<Mount> MountComposer::user_skill_mounts(
    const std::optional<std::string>& user_id) const {
  try {
    const auto user = effective_user(user_id);
    run_skills_projection(user);
    ensure_view_dir(*paths_, paths_->user_integration_skills_view_dir(require_user(user)));
    return {{paths_->host_user_integration_skills_view_dir(require_user(user)),
             options_.skills_container_path + "/integrations", true}};
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("Could not setup user skill mounts: ") + e.what());
    return {};
  }
}

std::vector<Mount> MountComposer::lark_cli_runtime_mounts(
    const std::optional<std::string>& user_id) const {
  try {
    const auto effective = effective_user(user_id);
    const std::string& user = require_user(effective);
    const std::string integration(kLarkCliIntegrationId);
    const CredentialTreeReport tightened = paths_->ensure_lark_cli_credential_tree(user);
    if (!tightened.complete) {
      log(LogLevel::warning, "Lark CLI credential tree of user " + user +
                                 " only partly made owner-only: " + tightened.note);
    }
    std::vector<Mount> mounts = {
        // The app secret lives in config: read-only so the sandbox cannot replace it.
        {paths_->host_user_integration_config_dir(user, integration),
         std::string(kLarkCliSandboxConfigDir), true},
        // OAuth tokens are refreshed in the sandbox.
        {paths_->host_user_integration_data_dir(user, integration),
         std::string(kLarkCliSandboxDataDir), false},
    };
    std::error_code ec;
    if (std::filesystem::is_directory(paths_->integration_sandbox_cli_dir(integration), ec)) {
      mounts.push_back({paths_->host_integration_sandbox_cli_dir(integration),
                        std::string(kLarkCliSandboxRuntimeDir), true});
    }
    return mounts;
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("Could not setup Lark CLI runtime mounts: ") + e.what());
    return {};
  }
}

std::vector<Mount> MountComposer::compose_extra_mounts(const std::optional<std::string>& thread_id,
                                                       const std::optional<std::string>& user_id,
                                                       bool thread_data_mounted) const {
  std::vector<Mount> mounts;
  auto append = [&mounts](const std::vector<Mount>& more) {
    mounts.insert(mounts.end(), more.begin(), more.end());
  };

  if (thread_id) {
    append(thread_mounts(*thread_id, user_id));
    log(LogLevel::info,
        "Adding thread mounts for thread " + *thread_id + ": " + format_mounts(mounts));
  }
  if (auto skills = skills_mounts(user_id); !skills.empty()) {
    append(skills);
    log(LogLevel::info, "Adding skills mounts: " + format_mounts(skills));
  }
  if (auto user_skills = user_skill_mounts(user_id); !user_skills.empty()) {
    append(user_skills);
    log(LogLevel::info, "Adding user skill mounts: " + format_mounts(user_skills));
  }
  if (auto lark = lark_cli_runtime_mounts(user_id); !lark.empty()) {
    append(lark);
    log(LogLevel::info, "Adding Lark CLI runtime mounts: " + format_mounts(lark));
  }

  if (!thread_data_mounted) {
    std::erase_if(
        mounts, [](const Mount& m) { return m.container_path == kUploadConversionsContainerPath; });
  }
  return dedupe_mounts_by_container_path(mounts, options_.logger.get());
}

}  // namespace sandboxd::core

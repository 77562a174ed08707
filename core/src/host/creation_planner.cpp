#include "sandboxd/core/creation_planner.hpp"

#include <utility>

#include "sandboxd/core/sandbox_id.hpp"

namespace sandboxd::core {

HostCreationPlanner::HostCreationPlanner(std::shared_ptr<const MountComposer> mounts)
    : mounts_(std::move(mounts)) {}

HostCreationPlanner::HostCreationPlanner(std::shared_ptr<const Paths> paths,
                                         MountComposerOptions options)
    : HostCreationPlanner(
          std::make_shared<const MountComposer>(std::move(paths), std::move(options))) {}

std::string HostCreationPlanner::sandbox_id(const std::optional<std::string>& thread_id,
                                            const std::string& user_id,
                                            int contract_version) const {
  if (!thread_id) return random_sandbox_id();
  return deterministic_sandbox_id(*thread_id, user_id, contract_version);
}

void HostCreationPlanner::ensure_skills_projection(const std::string& user_id) const {
  mounts_->ensure_skills_projection(user_id);
}

std::vector<Mount> HostCreationPlanner::extra_mounts(const std::optional<std::string>& thread_id,
                                                     const std::string& user_id,
                                                     bool thread_data_mounted) const {
  return mounts_->compose_extra_mounts(thread_id, user_id, thread_data_mounted);
}

}  // namespace sandboxd::core

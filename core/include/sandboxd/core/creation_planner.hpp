// What a creation asks of the host before the backend runs (design §3, §4.1, §4.2): the sandbox's
// id for a conversation, the skills projection of its user, and its extra mounts. The provider
// holds one planner (ProviderDeps::planner); a host's is a HostCreationPlanner over its Paths
// and MountComposer, and tests give the provider one of their own instead of replacing
// provider steps.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/core/mounts.hpp"
#include "sandboxd/types.hpp"

namespace sandboxd::core {

class CreationPlanner {
 public:
  virtual ~CreationPlanner() = default;

  // The id of the conversation's sandbox under mount contract `contract_version` (deterministic
  // per user and thread), or a random one for an anonymous acquisition (no thread).
  virtual std::string sandbox_id(const std::optional<std::string>& thread_id,
                                 const std::string& user_id, int contract_version) const = 0;
  // Runs the user's skills projection; never throws (a failure is logged).
  virtual void ensure_skills_projection(const std::string& user_id) const = 0;
  // The mounts a sandbox of the conversation gets besides the backend's own.
  virtual std::vector<Mount> extra_mounts(const std::optional<std::string>& thread_id,
                                          const std::string& user_id,
                                          bool thread_data_mounted) const = 0;
};

// The host's planner: ids from sandbox_id.hpp, mounts and projection from the MountComposer.
class HostCreationPlanner final : public CreationPlanner {
 public:
  explicit HostCreationPlanner(std::shared_ptr<const MountComposer> mounts);
  // Over a MountComposer of its own.
  HostCreationPlanner(std::shared_ptr<const Paths> paths, MountComposerOptions options);

  std::string sandbox_id(const std::optional<std::string>& thread_id, const std::string& user_id,
                         int contract_version) const override;
  void ensure_skills_projection(const std::string& user_id) const override;
  std::vector<Mount> extra_mounts(const std::optional<std::string>& thread_id,
                                  const std::string& user_id,
                                  bool thread_data_mounted) const override;

 private:
  const std::shared_ptr<const MountComposer> mounts_;
};

}  // namespace sandboxd::core

// A creation planner whose answers a test can script, over the host's real planner that answers
// everything not scripted: what the seed does by monkeypatching `_sandbox_id_for_thread`,
// `_get_extra_mounts` and `_ensure_skills_projection`. Each ProviderUnderTest is given its own, a
// collaborator like any other, so the provider keeps no test seam for ids and mounts.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sandboxd/core/creation_planner.hpp"

namespace sandboxd::testing {

class ScriptedCreationPlanner final : public core::CreationPlanner {
 public:
  using IdScript = std::function<std::string(const std::optional<std::string>& thread_id,
                                             const std::string& user_id, int contract_version)>;
  using MountsScript = std::function<std::vector<Mount>(const std::optional<std::string>& thread_id,
                                                        const std::string& user_id)>;
  using ProjectionScript = std::function<void(const std::string& user_id)>;

  explicit ScriptedCreationPlanner(std::shared_ptr<const core::CreationPlanner> real)
      : real_(std::move(real)) {}

  // Each replaces its answer from then on, until clear_scripts.
  void script_sandbox_id(IdScript script) {
    std::lock_guard lock(mutex_);
    id_ = std::move(script);
  }
  void script_extra_mounts(MountsScript script) {
    std::lock_guard lock(mutex_);
    mounts_ = std::move(script);
  }
  void script_skills_projection(ProjectionScript script) {
    std::lock_guard lock(mutex_);
    projection_ = std::move(script);
  }
  void clear_scripts() {
    std::lock_guard lock(mutex_);
    id_ = nullptr;
    mounts_ = nullptr;
    projection_ = nullptr;
  }

  std::string sandbox_id(const std::optional<std::string>& thread_id, const std::string& user_id,
                         int contract_version) const override {
    if (IdScript script = copy(id_)) return script(thread_id, user_id, contract_version);
    return real_->sandbox_id(thread_id, user_id, contract_version);
  }
  void ensure_skills_projection(const std::string& user_id) const override {
    if (ProjectionScript script = copy(projection_)) return script(user_id);
    real_->ensure_skills_projection(user_id);
  }
  std::vector<Mount> extra_mounts(const std::optional<std::string>& thread_id,
                                  const std::string& user_id,
                                  bool thread_data_mounted) const override {
    if (MountsScript script = copy(mounts_)) return script(thread_id, user_id);
    return real_->extra_mounts(thread_id, user_id, thread_data_mounted);
  }

 private:
  // Copied out so that a script may block (a race test parks a step) without holding this
  // lock against the provider's other threads.
  template <typename Script>
  Script copy(const Script& script) const {
    std::lock_guard lock(mutex_);
    return script;
  }

  const std::shared_ptr<const core::CreationPlanner> real_;
  mutable std::mutex mutex_;
  IdScript id_;                  // guarded by mutex_; empty: the real answer
  MountsScript mounts_;          // guarded by mutex_
  ProjectionScript projection_;  // guarded by mutex_
};

}  // namespace sandboxd::testing

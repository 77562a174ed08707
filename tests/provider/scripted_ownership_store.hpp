// An ownership store whose claims a test can script, over a real store that does everything
// else: what the seed does by monkeypatching `provider._claim_ownership` or
// `provider._ownership.claim`. The provider under test is given it as its store, a collaborator
// like any other, so the provider keeps no test seam for claims. A script may call real_claim
// to delegate after it has observed, blocked or refused.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "sandboxd/ownership.hpp"

namespace sandboxd::testing {

class ScriptedOwnershipStore final : public OwnershipStore {
 public:
  using ClaimScript = std::function<bool(const std::string& sandbox_id, bool for_destroy)>;

  explicit ScriptedOwnershipStore(std::shared_ptr<OwnershipStore> real) : real_(std::move(real)) {}

  // Every later claim runs `script` instead of the real store's claim, until clear_scripts.
  void script_claim(ClaimScript script) {
    std::lock_guard lock(mutex_);
    claim_script_ = std::move(script);
  }
  void clear_scripts() { script_claim(nullptr); }
  bool real_claim(const std::string& sandbox_id, bool for_destroy) {
    return real_->claim(sandbox_id, for_destroy);
  }

  const std::string& owner_id() const override { return real_->owner_id(); }
  bool supports_cross_process() const override { return real_->supports_cross_process(); }
  double ttl_seconds() const override { return real_->ttl_seconds(); }
  bool take(const std::string& sandbox_id) override { return real_->take(sandbox_id); }
  bool claim(const std::string& sandbox_id, bool for_destroy) override {
    ClaimScript script;
    {
      // Copied out so that a script may block (a race test parks a claim) without holding
      // this lock against the other threads' claims.
      std::lock_guard lock(mutex_);
      script = claim_script_;
    }
    return script ? script(sandbox_id, for_destroy) : real_claim(sandbox_id, for_destroy);
  }
  RenewOutcome renew(const std::string& sandbox_id) override { return real_->renew(sandbox_id); }
  void release(const std::string& sandbox_id) override { real_->release(sandbox_id); }
  std::optional<std::string> owner(const std::string& sandbox_id) override {
    return real_->owner(sandbox_id);
  }
  std::optional<LeaseRecord> inspect(const std::string& sandbox_id) override {
    return real_->inspect(sandbox_id);
  }
  void close() override { real_->close(); }

 private:
  const std::shared_ptr<OwnershipStore> real_;
  std::mutex mutex_;
  ClaimScript claim_script_;  // guarded by mutex_; empty: the real claim
};

}  // namespace sandboxd::testing

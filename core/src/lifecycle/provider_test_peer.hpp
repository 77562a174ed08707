// The one befriended test peer of Provider (Envoy's test registry and InjectFactory are the
// model): tests replace single lifecycle steps through its seams (what the Python seed does
// with monkeypatch), call steps directly, and fill or read state only through the registry's
// own methods, holding the registry mutex. No test subclasses Provider. Private to the core:
// only the test suites include it.
#pragma once

#include <type_traits>
#include <utility>

#include "provider_impl.hpp"

namespace sandboxd::core {

// Puts a seam's previous function back when it goes (Envoy's InjectFactory): a replacement
// lasts for the scope that made it, so no test leaves one behind for the next and no teardown
// clears seams by hand.
template <typename Function>
class [[nodiscard]] SeamGuard {
 public:
  SeamGuard(Function& seam, Function replacement)
      : seam_(&seam), previous_(std::exchange(seam, std::move(replacement))) {}
  ~SeamGuard() { restore(); }
  SeamGuard(const SeamGuard&) = delete;
  SeamGuard& operator=(const SeamGuard&) = delete;

  // Puts the previous function back now: for a test that destroys its provider before the
  // guard's scope ends.
  void restore() {
    if (seam_ == nullptr) return;
    *seam_ = std::move(previous_);
    seam_ = nullptr;
  }

 private:
  Function* seam_;  // null once restored
  Function previous_;
};

class ProviderTestPeer {
 public:
  explicit ProviderTestPeer(Provider& provider) : impl_(*provider.impl_) {}

  // Replaces one step until the returned guard goes. Inject before the provider runs the step
  // on another thread, and keep the guard until no thread of the provider can still run it.
  template <typename Function>
  SeamGuard<Function> inject(Function ProviderSeams::*seam,
                             std::type_identity_t<Function> replacement) {
    return SeamGuard<Function>(impl_.seams_.*seam, std::move(replacement));
  }

  // The registry, for pre-filling and reading; hold mutex() while the provider may run
  // elsewhere.
  Mutex& mutex() RETURN_CAPABILITY(impl_.mutex_) { return impl_.mutex_; }
  SandboxRegistry& registry() NO_THREAD_SAFETY_ANALYSIS { return impl_.registry_; }

  // The real steps, for a seam that observes and then delegates.
  std::optional<std::string> base_reuse_in_process_sandbox(
      const std::optional<std::string>& thread_id, const std::string& user_id,
      const std::optional<std::string>& expected_sandbox_id, bool post_lock,
      const Snapshot& snapshot) {
    return impl_.reuse_in_process_sandbox_step(thread_id, user_id, expected_sandbox_id, post_lock,
                                               snapshot);
  }
  std::string base_create_sandbox(const std::optional<std::string>& thread_id,
                                  const std::string& sandbox_id, const std::string& user_id,
                                  const Snapshot& snapshot) {
    return impl_.create_sandbox_step(thread_id, sandbox_id, user_id, snapshot);
  }
  bool base_destroy_warm_entry(const std::string& sandbox_id, const WarmEntry& entry,
                               const std::string& reason, const Predicate& still_reapable) {
    return impl_.destroy_warm_entry_step(sandbox_id, entry, reason, still_reapable);
  }

  // Steps the seed calls directly.
  std::string acquire_internal(const std::optional<std::string>& thread_id,
                               const std::string& user_id, Snapshot snapshot) {
    return impl_.acquire_internal(thread_id, user_id, std::move(snapshot));
  }
  std::optional<std::string> reuse_in_process_sandbox(
      const std::optional<std::string>& thread_id, const std::string& user_id,
      const std::optional<std::string>& expected_sandbox_id, bool post_lock,
      const Snapshot& snapshot) {
    return impl_.reuse_in_process_sandbox(thread_id, user_id, expected_sandbox_id, post_lock,
                                          snapshot);
  }
  std::optional<std::string> reclaim_warm_pool_sandbox(const std::optional<std::string>& thread_id,
                                                       const std::string& sandbox_id,
                                                       const std::string& user_id, bool post_lock,
                                                       const Snapshot& snapshot) {
    return impl_.reclaim_warm_pool_sandbox(thread_id, sandbox_id, user_id, post_lock, snapshot);
  }
  std::string discover_or_create_with_lock(const std::string& thread_id,
                                           const std::string& sandbox_id,
                                           const std::string& user_id, const Snapshot& snapshot) {
    return impl_.discover_or_create_with_lock(thread_id, sandbox_id, user_id, snapshot);
  }
  std::string create_sandbox(const std::optional<std::string>& thread_id,
                             const std::string& sandbox_id, const std::string& user_id,
                             const Snapshot& snapshot) {
    return impl_.create_sandbox(thread_id, sandbox_id, user_id, snapshot);
  }
  void destroy_unready_sandbox(const std::string& sandbox_id, const SandboxInfo& info) {
    impl_.destroy_unready_sandbox(sandbox_id, info);
  }
  std::string sandbox_id_for_thread(const std::optional<std::string>& thread_id,
                                    const std::string& user_id, const Snapshot& snapshot) {
    return impl_.sandbox_id_for_thread(thread_id, user_id, snapshot);
  }
  std::vector<Mount> get_extra_mounts(const std::optional<std::string>& thread_id,
                                      const std::string& user_id) {
    return impl_.get_extra_mounts(thread_id, user_id);
  }
  void drop_unhealthy_sandbox(const std::string& sandbox_id, const std::string& reason,
                              const InfoPtr& expected_info) {
    impl_.drop_unhealthy_sandbox(sandbox_id, reason, expected_info);
  }
  void forget(const std::string& sandbox_id, std::optional<std::uint64_t> expected_epoch) {
    impl_.forget(sandbox_id, expected_epoch);
  }
  std::shared_ptr<ThreadLock> thread_lock(const ThreadKey& key) { return impl_.thread_lock(key); }

 private:
  Provider::Impl& impl_;
};

}  // namespace sandboxd::core

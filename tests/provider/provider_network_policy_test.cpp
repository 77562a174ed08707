// A sandbox records the network policy it was made under (SandboxInfo.network_policy),
// and one whose policy differs from the backend's configured one is never handed out again:
// not reclaimed from the warm pool, not reused in process, not adopted by discovery. It is
// replaced through the fenced destroy path (destroyed, then made anew under the configured
// policy). A backend without the SandboxNetworkPolicy capability changes nothing.
#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::AcquirePath;

// Containers that record the policy configured when they were made; `configured` is the
// configuration the next provider (or the next acquire) sees. Every create and destroy is
// recorded.
class PolicyBackend final : public SandboxBackend, public SandboxNetworkPolicy {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    std::lock_guard lock(mutex_);
    SandboxInfo info = make_info(request.sandbox_id, "http://" + request.sandbox_id);
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    info.network_policy = configured_;
    live_[request.sandbox_id] = info;
    calls_.push_back("create " + request.sandbox_id + " " + configured_);
    return info;
  }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    live_.erase(info.sandbox_id);
    calls_.push_back("destroy " + info.sandbox_id + " " + info.network_policy);
  }
  bool is_alive(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    return live_.count(info.sandbox_id) > 0;
  }
  std::optional<SandboxInfo> discover(const std::string& id) override {
    std::lock_guard lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) return std::nullopt;
    return it->second;
  }
  std::string configured_network_policy() const override {
    std::lock_guard lock(mutex_);
    return configured_;
  }
  std::string network_preflight() override { return ""; }

  void configure(const std::string& policy) {
    std::lock_guard lock(mutex_);
    configured_ = policy;
  }
  // A container another process made under `policy`, running.
  void running(const std::string& id, const std::string& user, const std::string& thread,
               const std::string& policy) {
    std::lock_guard lock(mutex_);
    SandboxInfo info = make_info(id, "http://" + id);
    info.user_id = user;
    info.thread_id = thread;
    info.network_policy = policy;
    live_[id] = info;
  }
  std::vector<std::string> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  mutable std::mutex mutex_;
  std::string configured_ = "open";
  std::map<std::string, SandboxInfo> live_;
  std::vector<std::string> calls_;
};

class ProviderNetworkPolicyTest : public ProviderFixture {
 protected:
  std::shared_ptr<PolicyBackend> policies = std::make_shared<PolicyBackend>();
};

TEST_F(ProviderNetworkPolicyTest, AWarmSandboxOfAnotherPolicyIsReplacedNotReclaimed) {
  provider = make_provider(policies, &store);
  const std::string id = provider->acquire("t-1", "alice");
  provider->release(id);
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::reclaimed)
      << "same policy: reclaimed as before";
  provider->release(id);

  policies->configure("isolated");
  const auto again = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(again.path, AcquirePath::created);
  EXPECT_EQ(again.sandbox_id, id) << "the conversation's id does not change";
  EXPECT_EQ(provider->find(id)->info.network_policy, "isolated");
  EXPECT_EQ(policies->calls(),
            (std::vector<std::string>{"create " + id + " open", "destroy " + id + " open",
                                      "create " + id + " isolated"}));
}

TEST_F(ProviderNetworkPolicyTest, AnActiveSandboxOfAnotherPolicyIsReplacedOnItsNextAcquire) {
  provider = make_provider(policies, &store);
  const std::string id = provider->acquire("t-1", "alice");
  policies->configure("isolated");
  const auto again = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(again.path, AcquirePath::created);
  EXPECT_EQ(provider->find(id)->info.network_policy, "isolated");
  EXPECT_EQ(policies->calls().size(), 3u);
}

TEST_F(ProviderNetworkPolicyTest, ARunningContainerOfAnotherPolicyIsNotAdoptedByDiscovery) {
  const std::string id = core::deterministic_sandbox_id("t-1", "alice");
  policies->running(id, "alice", "t-1", "open");  // another process made it, open
  policies->configure("isolated");
  provider = make_provider(policies, &store);
  const auto got = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(got.path, AcquirePath::created) << "discovered, then replaced";
  EXPECT_EQ(provider->find(id)->info.network_policy, "isolated");
  EXPECT_EQ(policies->calls(),
            (std::vector<std::string>{"destroy " + id + " open", "create " + id + " isolated"}));

  // The same container under the same policy is adopted as before.
  provider.reset();
  auto other = std::make_shared<PolicyBackend>();
  other->running(id, "alice", "t-1", "open");
  provider = make_provider(other, &store);
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::discovered);
  EXPECT_TRUE(other->calls().empty());
}

TEST_F(ProviderNetworkPolicyTest, ASandboxRecordedBeforePoliciesWereIsOpen) {
  const std::string id = core::deterministic_sandbox_id("t-1", "alice");
  policies->running(id, "alice", "t-1", "");  // made before SDK ABI 3 recorded policies
  provider = make_provider(policies, &store);
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::discovered)
      << "an unrecorded policy is DeerFlow's default, open";
}

// The load run's regression (CI of 6154b59): a backend that records no policy and configures
// none ("" on both sides, its default) made every acquire fail with "made under network policy
// '' twice". Unset is open on both sides.
TEST_F(ProviderNetworkPolicyTest, ABackendThatConfiguresNoPolicyIsOpenOnBothSides) {
  policies->configure("");
  provider = make_provider(policies, &store);
  const auto got = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(got.path, AcquirePath::created);
  provider->release(got.sandbox_id);
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::reclaimed);
  EXPECT_EQ(policies->calls().size(), 1u) << "made once, never replaced";
}

}  // namespace
}  // namespace sandboxd::testing

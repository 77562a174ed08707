// Isolation kept for a sandbox's whole life (docs/network-isolation.md, "Kept, not set once"): a
// backend offering IsolationKeeping is asked to verify (and re-apply) a sandbox's isolation
// before every hand-out, whatever the path (created, reused, reclaimed, discovered), and on
// every reconciliation pass; one whose isolation cannot be kept is never handed out: it is
// replaced through the fenced destroy path and made again, once, and a second failure refuses
// the acquire. Before, isolation was applied once, at the create, and nothing read it back.
#include <set>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::AcquirePath;

// Sandboxes whose isolation a test can take away (as an engine restart of the container does);
// keep_isolation() records every call and re-applies what it can unless told it cannot.
class KeptBackend final : public SandboxBackend, public IsolationKeeping {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    std::lock_guard lock(mutex_);
    SandboxInfo info = make_info(request.sandbox_id, "http://" + request.sandbox_id);
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    info.container_id = "c" + std::to_string(++made_);
    live_[request.sandbox_id] = info;
    isolated_[*info.container_id] = !all_unrepairable_;  // as an engine that cannot isolate
    calls_.push_back("create " + *info.container_id);
    return info;
  }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    live_.erase(info.sandbox_id);
    calls_.push_back("destroy " + info.container_id.value_or("?"));
  }
  bool is_alive(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    return live_.count(info.sandbox_id) > 0;
  }
  std::optional<SandboxInfo> discover(const std::string& id) override {
    std::lock_guard lock(mutex_);
    const auto it = live_.find(id);
    if (it == live_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<SandboxInfo> list_running() override {
    std::lock_guard lock(mutex_);
    std::vector<SandboxInfo> out;
    for (const auto& [id, info] : live_) out.push_back(info);
    return out;
  }

  void keep_isolation(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    const std::string container = info.container_id.value_or("?");
    calls_.push_back("keep " + container);
    if (isolated_[container]) return;
    if (unrepairable_.count(container) != 0 || all_unrepairable_) {
      throw std::runtime_error("container " + container + " cannot be isolated");
    }
    isolated_[container] = true;  // re-applied
    calls_.push_back("reisolated " + container);
  }
  std::vector<std::string> keep_all_isolation() override {
    std::lock_guard lock(mutex_);
    calls_.push_back("keep all");
    for (auto& [container, isolated] : isolated_) isolated = true;
    return {"container stranger (not a sandbox) is on the sandboxes' network"};
  }
  void start_keeping_isolation() override {}

  // What an engine restart does: the container comes back on a port nobody isolated.
  void lose_isolation(const std::string& container, bool repairable = true) {
    std::lock_guard lock(mutex_);
    isolated_[container] = false;
    if (!repairable) unrepairable_.insert(container);
  }
  void nothing_repairable() {
    std::lock_guard lock(mutex_);
    all_unrepairable_ = true;
    for (auto& [container, isolated] : isolated_) isolated = false;
  }
  void run_elsewhere(const std::string& id, const std::string& user, const std::string& thread) {
    std::lock_guard lock(mutex_);
    SandboxInfo info = make_info(id, "http://" + id);
    info.user_id = user;
    info.thread_id = thread;
    info.container_id = "c" + std::to_string(++made_);
    live_[id] = info;
    isolated_[*info.container_id] = false;  // restarted while nobody held it
  }
  bool isolated(const std::string& container) {
    std::lock_guard lock(mutex_);
    return isolated_[container];
  }
  std::vector<std::string> take_calls() {
    std::lock_guard lock(mutex_);
    return std::exchange(calls_, {});
  }

 private:
  std::mutex mutex_;
  int made_ = 0;
  std::map<std::string, SandboxInfo> live_;
  std::map<std::string, bool> isolated_;
  std::set<std::string> unrepairable_;
  bool all_unrepairable_ = false;
  std::vector<std::string> calls_;
};

class ProviderIsolationTest : public ProviderFixture {
 protected:
  std::shared_ptr<KeptBackend> kept = std::make_shared<KeptBackend>();
};

TEST_F(ProviderIsolationTest, EveryHandOutVerifiesIsolationAndReappliesWhatWasLost) {
  provider = make_provider(kept, &store);
  const auto created = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(created.path, AcquirePath::created);
  EXPECT_EQ(kept->take_calls(), (std::vector<std::string>{"create c1", "keep c1"}));

  kept->lose_isolation("c1");  // the engine restarted the container under us
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::reused);
  EXPECT_EQ(kept->take_calls(), (std::vector<std::string>{"keep c1", "reisolated c1"}));
  EXPECT_TRUE(kept->isolated("c1"));

  provider->release(created.sandbox_id);
  kept->lose_isolation("c1");
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::reclaimed);
  EXPECT_EQ(kept->take_calls(), (std::vector<std::string>{"keep c1", "reisolated c1"}));
}

TEST_F(ProviderIsolationTest, ADiscoveredSandboxIsVerifiedBeforeItIsHandedOut) {
  const std::string id = core::deterministic_sandbox_id("t-1", "alice");
  kept->run_elsewhere(id, "alice", "t-1");
  provider = make_provider(kept, &store);
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::discovered);
  EXPECT_EQ(kept->take_calls(), (std::vector<std::string>{"keep c1", "reisolated c1"}));
}

TEST_F(ProviderIsolationTest, ASandboxWhoseIsolationCannotBeKeptIsReplacedNeverHandedOut) {
  provider = make_provider(kept, &store);
  const std::string id = provider->acquire("t-1", "alice");
  kept->take_calls();
  kept->lose_isolation("c1", /*repairable=*/false);
  const auto again = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(again.sandbox_id, id);
  EXPECT_EQ(again.path, AcquirePath::created);
  EXPECT_EQ(provider->find(id)->info.container_id, "c2") << "the open container was handed out";
  EXPECT_EQ(kept->take_calls(), (std::vector<std::string>{"keep c1", "destroy c1", "create c2",
                                                          "keep c2"}));
}

TEST_F(ProviderIsolationTest, TwoFailuresInARowRefuseTheAcquire) {
  provider = make_provider(kept, &store);
  const std::string id = provider->acquire("t-1", "alice");
  kept->nothing_repairable();
  try {
    provider->acquire("t-1", "alice");
    FAIL() << "a sandbox whose isolation cannot be kept was handed out";
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::unavailable);
    EXPECT_NE(std::string(e.what()).find("isolation still cannot be kept"), std::string::npos)
        << e.what();
  }
}

TEST_F(ProviderIsolationTest, EveryReconciliationPassKeepsIsolationAndSaysWhatItFound) {
  provider = make_provider(kept, &store);
  provider->acquire("t-1", "alice");
  kept->lose_isolation("c1");
  kept->take_calls();
  provider->reconcile_orphans();
  const auto calls = kept->take_calls();
  EXPECT_NE(std::find(calls.begin(), calls.end(), "keep all"), calls.end());
  EXPECT_TRUE(kept->isolated("c1"));
  EXPECT_TRUE(logger->contains(LogLevel::warning, "container stranger (not a sandbox)"));
}

// A claimed slot was handed out without a look: with its network deleted under
// a running serve, the next acquire claimed the dead slot and answered "failed to become ready"
// after the cold create's whole minute. Now a claimed slot gets a short readiness probe (5 s);
// a dead one is destroyed and the acquire goes on cold.
class DeadSlotBackend final : public SandboxBackend, public PreStartedSlots {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    std::lock_guard lock(mutex_);
    calls_.push_back("create " + request.sandbox_id);
    SandboxInfo info = make_info(request.sandbox_id, "http://cold-" + request.sandbox_id);
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    return info;
  }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    calls_.push_back("destroy " + info.sandbox_url);
  }
  bool is_alive(const SandboxInfo&) override { return true; }
  std::optional<SandboxInfo> discover(const std::string&) override { return std::nullopt; }
  Claim claim_slot(const CreateRequest& request) override {
    std::lock_guard lock(mutex_);
    calls_.push_back("claim " + request.sandbox_id);
    Claim claim;
    SandboxInfo slot = make_info(request.sandbox_id, "http://dead-slot");
    slot.user_id = request.user_id;
    slot.thread_id = request.thread_id;
    claim.sandbox = slot;
    return claim;
  }
  void start_slots() override {}
  std::string slot_preflight() override { return ""; }
  Status slot_status() const override { return {1, 1, 1, ""}; }
  std::vector<std::string> calls() {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> calls_;
};

TEST_F(ProviderIsolationTest, ADeadClaimedSlotIsDestroyedAndTheSandboxMadeCold) {
  auto slots = std::make_shared<DeadSlotBackend>();
  hooks.ready_fn = [](const std::string& url, double) { return url != "http://dead-slot"; };
  provider = make_provider(slots, &store);
  const auto got = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(got.path, AcquirePath::created);
  EXPECT_EQ(provider->find(got.sandbox_id)->info.sandbox_url, "http://cold-" + got.sandbox_id);
  EXPECT_EQ(slots->calls(),
            (std::vector<std::string>{"claim " + got.sandbox_id, "destroy http://dead-slot",
                                      "create " + got.sandbox_id}));
  const auto waits = hooks.ready_calls();
  ASSERT_FALSE(waits.empty());
  EXPECT_EQ(waits.front().url, "http://dead-slot");
  EXPECT_LE(waits.front().timeout, 5.0) << "the claimed slot was given the cold create's minute";
}

}  // namespace
}  // namespace sandboxd::testing

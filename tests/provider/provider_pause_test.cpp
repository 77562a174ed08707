// The paused tier: a warm sandbox released longer than pause_after_seconds ago is
// frozen through the backend's SandboxPausing capability, handed out again by thawing it
// (path `resumed`), evicted before running warm ones, and reaped at idle_timeout counted from
// its release. With the option unset or a backend that cannot pause, nothing changes.
#include <future>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::AcquirePath;

// A backend whose containers are running, paused or gone; every pause and unpause is recorded.
class PausingBackend final : public SandboxBackend, public SandboxPausing {
 public:
  // Ids whose pause the engine refuses.
  std::set<std::string> refuse_pause_of;
  std::atomic<bool> refuse_unpause{false};
  // When set, pause() waits for it (a slow freezer).
  std::shared_future<void> pause_gate;
  std::promise<void> pause_entered;

  SandboxInfo create(const CreateRequest& request) override {
    std::lock_guard lock(mutex_);
    states_[request.sandbox_id] = "running";
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);
  }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    states_.erase(info.sandbox_id);
    calls_.push_back("destroy " + info.sandbox_id);
  }
  bool is_alive(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    return states_.count(info.sandbox_id) > 0;  // paused is alive
  }
  std::optional<SandboxInfo> discover(const std::string& id) override {
    std::lock_guard lock(mutex_);
    if (states_.count(id) == 0) return std::nullopt;
    return make_info(id, "http://" + id);
  }
  void pause(const SandboxInfo& info) override {
    if (pause_gate.valid()) {
      pause_entered.set_value();
      pause_gate.wait();
    }
    std::lock_guard lock(mutex_);
    calls_.push_back("pause " + info.sandbox_id);
    if (refuse_pause_of.count(info.sandbox_id) != 0) {
      throw std::runtime_error("HTTP 500: the freezer is not available");
    }
    auto it = states_.find(info.sandbox_id);
    if (it == states_.end()) throw std::runtime_error("no such container");
    it->second = "paused";
  }
  void unpause(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    calls_.push_back("unpause " + info.sandbox_id);
    if (refuse_unpause) throw std::runtime_error("HTTP 500: cannot thaw");
    auto it = states_.find(info.sandbox_id);
    if (it == states_.end()) throw std::runtime_error("no such container");
    it->second = "running";
  }

  std::string state(const std::string& id) const {
    std::lock_guard lock(mutex_);
    auto it = states_.find(id);
    return it == states_.end() ? "gone" : it->second;
  }
  void set_state(const std::string& id, const std::string& state) {
    std::lock_guard lock(mutex_);
    states_[id] = state;
  }
  std::vector<std::string> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  mutable std::mutex mutex_;
  std::map<std::string, std::string> states_;
  std::vector<std::string> calls_;
};

class ProviderPauseTest : public ProviderFixture {
 protected:
  void SetUp() override {
    ProviderFixture::SetUp();
    options.pause_after_seconds = 30;
    clock->set(1000);
  }
  ProviderUnderTest& build_pausing() {
    provider = make_provider(pausing, &store);
    return provider;
  }
  std::string released(const std::string& thread, const std::string& user) {
    const std::string id = provider->acquire(thread, user);
    provider->release(id);
    return id;
  }

  std::shared_ptr<PausingBackend> pausing = std::make_shared<PausingBackend>();
};

TEST_F(ProviderPauseTest, AWarmSandboxIsPausedAfterItsDelayAndResumedOnAcquire) {
  build_pausing();
  const std::string id = released("t-1", "alice");
  clock->set(1029);
  EXPECT_EQ(provider->pause_idle_warm(), 0) << "released 29 s ago, the delay is 30 s";
  EXPECT_EQ(pausing->state(id), "running");
  clock->set(1031);
  EXPECT_EQ(provider->pause_idle_warm(), 1);
  EXPECT_EQ(pausing->state(id), "paused");
  auto counts = provider->counts();
  EXPECT_EQ(counts.paused, 1u);
  EXPECT_EQ(counts.warm, 0u);
  ASSERT_TRUE(provider->find(id));
  EXPECT_EQ(provider->find(id)->state, core::SandboxState::paused);
  EXPECT_TRUE(provider->find(id)->released()) << "paused is still released";
  EXPECT_EQ(provider->pause_idle_warm(), 0) << "a paused sandbox is not paused twice";

  const auto resumed = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(resumed.path, AcquirePath::resumed);
  EXPECT_EQ(resumed.sandbox_id, id);
  EXPECT_EQ(pausing->state(id), "running");
  counts = provider->counts();
  EXPECT_EQ(counts.active, 1u);
  EXPECT_EQ(counts.paused, 0u);
  const auto events = provider->event_counts();
  EXPECT_EQ(events.pauses, 1u);
  EXPECT_EQ(events.resumes, 1u);
  EXPECT_EQ(pausing->calls(), (std::vector<std::string>{"pause " + id, "unpause " + id}));
  EXPECT_TRUE(logger->contains(LogLevel::info, "Resumed paused sandbox " + id));

  // Released again, it is warm (not paused) and reclaimed as before.
  provider->release(id);
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::reclaimed);
}

TEST_F(ProviderPauseTest, WithoutTheOptionNothingIsPausedAndABackendThatCannotSaysSo) {
  options.pause_after_seconds = 0;
  build_pausing();
  released("t-1", "alice");
  clock->set(5000);
  EXPECT_EQ(provider->pause_idle_warm(), 0);
  EXPECT_TRUE(pausing->calls().empty());

  // The fixture's FakeBackend offers no SandboxPausing: the option is noted and skipped.
  options.pause_after_seconds = 30;
  auto other = make_provider(backend, nullptr);
  EXPECT_TRUE(logger->contains(LogLevel::warning,
                               "pause_after_seconds is set but the backend cannot pause"));
  const std::string id = other->acquire("t-2", "bob");
  other->release(id);
  clock->set(9000);
  EXPECT_EQ(other->pause_idle_warm(), 0);
  EXPECT_EQ(other->counts().warm, 1u);
}

TEST_F(ProviderPauseTest, EvictionTakesPausedBeforeWarmAndARefusedPauseStaysWarm) {
  options.replicas = 2;
  build_pausing();
  const std::string older = released("t-old", "alice");  // released at 1000
  pausing->refuse_pause_of.insert(older);
  clock->set(1010);
  const std::string newer = released("t-new", "alice");  // released at 1010
  clock->set(1045);
  EXPECT_EQ(provider->pause_idle_warm(), 1);
  EXPECT_EQ(pausing->state(older), "running") << "its pause was refused";
  EXPECT_EQ(pausing->state(newer), "paused");
  EXPECT_EQ(provider->event_counts().pause_failures, 1u);
  EXPECT_TRUE(logger->contains(LogLevel::warning,
                               "Could not pause warm-pool sandbox " + older + " (it stays warm)"));

  // Both slots are taken: the paused one goes first though the warm one is older.
  provider->acquire("t-third", "bob");
  EXPECT_EQ(pausing->state(newer), "gone");
  EXPECT_EQ(pausing->state(older), "running");
  EXPECT_EQ(provider->acquire_traced("t-old", "alice").path, AcquirePath::reclaimed);
}

TEST_F(ProviderPauseTest, TimeSpentPausedCountsTowardTheIdleTimeout) {
  build_pausing();
  const std::string id = released("t-1", "alice");
  clock->set(1031);
  ASSERT_EQ(provider->pause_idle_warm(), 1);
  clock->set(1599);
  provider->reap_expired_warm(600);
  EXPECT_EQ(pausing->state(id), "paused") << "released 599 s ago";
  clock->set(1601);
  provider->reap_expired_warm(600);
  EXPECT_EQ(pausing->state(id), "gone") << "released 601 s ago, 570 of them paused";
  EXPECT_EQ(provider->counts().paused, 0u);
}

TEST_F(ProviderPauseTest, AnAcquireDuringAPauseWaitsForItAndThenResumes) {
  build_pausing();
  const std::string id = released("t-1", "alice");
  std::promise<void> open;
  pausing->pause_gate = open.get_future().share();
  clock->set(1031);
  auto pausing_pass = std::async(std::launch::async, [&] { return provider->pause_idle_warm(); });
  pausing->pause_entered.get_future().wait();
  // The freezer is inside pause(); an acquire now must not take the sandbox as running.
  auto acquiring =
      std::async(std::launch::async, [&] { return provider->acquire_traced("t-1", "alice"); });
  EXPECT_EQ(acquiring.wait_for(std::chrono::milliseconds(200)), std::future_status::timeout)
      << "the acquire did not wait for the pause";
  open.set_value();
  EXPECT_EQ(pausing_pass.get(), 1);
  const auto result = acquiring.get();
  EXPECT_EQ(result.sandbox_id, id);
  EXPECT_EQ(result.path, AcquirePath::resumed);
  EXPECT_EQ(pausing->state(id), "running") << "an acquired sandbox was left frozen";
}

TEST_F(ProviderPauseTest, ASandboxLeftPausedByAnEarlierProcessIsThawedWhenDiscovered) {
  build_pausing();
  const std::string id = core::deterministic_sandbox_id("t-9", "carol");
  pausing->set_state(id, "paused");  // an earlier serve paused it and exited
  const auto result = provider->acquire_traced("t-9", "carol");
  EXPECT_EQ(result.path, AcquirePath::discovered);
  EXPECT_EQ(pausing->state(id), "running");
}

TEST_F(ProviderPauseTest, APausedSandboxSurvivesTheRegistryAsDataAndResumes) {
  build_pausing();
  const std::string id = released("t-1", "alice");
  clock->set(1031);
  ASSERT_EQ(provider->pause_idle_warm(), 1);
  const auto exported = provider->export_registry();
  ASSERT_EQ(exported.sandboxes.size(), 1u);
  EXPECT_EQ(exported.sandboxes[0].state, core::SandboxState::paused);
  provider->detach();

  auto next = make_provider(pausing, nullptr);
  next->import_registry(exported);
  EXPECT_EQ(next->counts().paused, 1u);
  EXPECT_EQ(next->acquire_traced("t-1", "alice").path, AcquirePath::resumed);
  EXPECT_EQ(pausing->state(id), "running");
}

// A thaw that fails: a container the engine lost is dropped and the conversation gets a new
// one; one the engine still has but will not thaw fails the acquire and stays paused.
TEST_F(ProviderPauseTest, AFailedThawRecreatesAGoneSandboxAndRefusesAFrozenOne) {
  build_pausing();
  const std::string id = released("t-1", "alice");
  clock->set(1031);
  ASSERT_EQ(provider->pause_idle_warm(), 1);
  pausing->destroy(make_info(id, ""));  // removed behind our back
  const auto fresh = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(fresh.path, AcquirePath::created);
  EXPECT_EQ(pausing->state(id), "running");
  EXPECT_TRUE(logger->contains(LogLevel::warning, "paused container is no longer there"));

  provider->release(id);
  clock->set(1070);
  ASSERT_EQ(provider->pause_idle_warm(), 1);
  pausing->refuse_unpause = true;
  EXPECT_THROW(provider->acquire("t-1", "alice"), std::runtime_error);
  EXPECT_TRUE(logger->contains(LogLevel::warning, "Could not resume paused sandbox " + id));
  EXPECT_EQ(provider->counts().paused, 1u) << "it stays paused, tracked, for the next try";
  pausing->refuse_unpause = false;
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::resumed);
}

}  // namespace
}  // namespace sandboxd::testing

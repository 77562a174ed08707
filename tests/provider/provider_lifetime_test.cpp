// max_lifetime_seconds (issue 35 item 2): a sandbox is destroyed once it is that old, counted
// from its creation as the backend reports it (SandboxInfo::created_at, so a restart or an
// adoption does not reset it), whether it is active, warm or paused, by the idle pass. A warning
// names it; 0 (the default) never does; an unknown creation time (0) is never taken for old.
#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

class ProviderLifetimeTest : public ProviderFixture {
 protected:
  void SetUp() override {
    ProviderFixture::SetUp();
    clock->set(10'000);
    // Each sandbox is created "now" by the injected clock, as an engine stamps a container.
    backend->create_fn = [clock = clock](const CreateRequest& request) {
      SandboxInfo info = make_info(request.sandbox_id, "http://" + request.sandbox_id);
      info.created_at = clock->wall_now();
      return info;
    };
  }
  std::vector<std::string> destroyed() const {
    std::vector<std::string> ids;
    for (const auto& info : backend->destroys()) ids.push_back(info.sandbox_id);
    return ids;
  }
};

TEST_F(ProviderLifetimeTest, ASandboxPastItsLifetimeIsDestroyedActiveOrReleased) {
  options.max_lifetime_seconds = 3600;
  build();
  const std::string old_active = provider->acquire("t-active", "alice");  // created at 10,000
  const std::string old_warm = provider->acquire("t-warm", "alice");
  provider->release(old_warm);
  clock->set(11'000);
  const std::string young = provider->acquire("t-young", "bob");  // created at 11,000

  clock->set(13'599);
  provider->cleanup_idle_sandboxes(1e9);
  EXPECT_TRUE(destroyed().empty()) << "3,599 s old: not yet";

  clock->set(13'600);
  provider->cleanup_idle_sandboxes(1e9);
  auto gone = destroyed();
  std::sort(gone.begin(), gone.end());
  std::vector<std::string> expected{old_active, old_warm};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(gone, expected);
  EXPECT_FALSE(provider->find(old_active));
  EXPECT_FALSE(provider->find(old_warm));
  ASSERT_TRUE(provider->find(young));
  EXPECT_TRUE(logger->contains(LogLevel::warning, "Sandbox " + old_active +
                                                      " reached max_lifetime_seconds (3600.0s "
                                                      "since its creation, limit 3600.0s)"));
  // The conversation gets a new sandbox on its next turn.
  const auto again = provider->acquire_traced("t-active", "alice");
  EXPECT_EQ(again.path, core::AcquirePath::created);
}

TEST_F(ProviderLifetimeTest, ZeroNeverDestroysAndAnUnknownCreationTimeIsNotOld) {
  build();  // max_lifetime_seconds 0: the default
  const std::string id = provider->acquire("t-1", "alice");
  clock->set(10'000 + 30 * 86'400.0);
  provider->cleanup_idle_sandboxes(1e9);
  EXPECT_TRUE(destroyed().empty());
  ASSERT_TRUE(provider->find(id));

  options.max_lifetime_seconds = 60;
  backend->create_fn = [](const CreateRequest& request) {
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);  // created_at 0
  };
  auto other = make_provider(backend, nullptr);
  const std::string unknown = other->acquire("t-2", "bob");
  clock->advance(86'400);
  other->cleanup_idle_sandboxes(1e9);
  EXPECT_TRUE(destroyed().empty()) << "a creation time of 0 means unknown, not 1970";
  EXPECT_TRUE(other->find(unknown));
}

TEST_F(ProviderLifetimeTest, TheIdleCheckerEnforcesItWithoutAnIdleTimeout) {
  options.idle_timeout = 0;  // no idle reaping: the checker runs for the lifetime alone
  options.max_lifetime_seconds = 60;
  options.run_background_threads = true;
  options.idle_check_interval_seconds = 0.02;
  build();
  provider->start();
  const std::string id = provider->acquire("t-1", "alice");
  EXPECT_TRUE(logger->contains(LogLevel::info, "max lifetime: 60.0s"));
  clock->advance(59);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // five passes
  EXPECT_TRUE(destroyed().empty()) << "59 s old";
  clock->advance(1);
  // Bounded wait on a real thread; the deadline is a failure bound, not a speed goal.
  for (int i = 0; i < 500 && destroyed().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(destroyed(), std::vector<std::string>{id});
  EXPECT_FALSE(provider->find(id));
}

}  // namespace
}  // namespace sandboxd::testing

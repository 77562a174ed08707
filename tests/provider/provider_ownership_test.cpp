// How the provider uses ownership leases with a peer (design §7.7–§7.10, §8): renewal outcomes,
// forgetting a lost sandbox without touching its container, the fail-open refresh, waiting out
// a peer's teardown, the adoption grace after a restart, and the teardown heartbeat. The peer
// is a second real SQLite store on the same file with another owner id.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using namespace std::chrono_literals;
using core::ProviderDeps;
using core::ProviderOptions;

// A real store whose calls the test can make fail, to reach the fail-open paths.
class FailableStore final : public OwnershipStore {
 public:
  explicit FailableStore(std::shared_ptr<OwnershipStore> real) : real_(std::move(real)) {}
  std::atomic<bool> renew_throws{false};
  std::atomic<bool> claim_throws{false};
  std::atomic<int> destroy_claims{0};

  const std::string& owner_id() const override { return real_->owner_id(); }
  bool supports_cross_process() const override { return real_->supports_cross_process(); }
  double ttl_seconds() const override { return real_->ttl_seconds(); }
  bool take(const std::string& id) override { return real_->take(id); }
  bool claim(const std::string& id, bool for_destroy) override {
    if (claim_throws) throw OwnershipBackendError("store unreachable");
    if (for_destroy) ++destroy_claims;
    return real_->claim(id, for_destroy);
  }
  RenewOutcome renew(const std::string& id) override {
    if (renew_throws) throw OwnershipBackendError("store unreachable");
    return real_->renew(id);
  }
  void release(const std::string& id) override { real_->release(id); }
  std::optional<std::string> owner(const std::string& id) override { return real_->owner(id); }
  std::optional<LeaseRecord> inspect(const std::string& id) override { return real_->inspect(id); }
  void close() override { real_->close(); }

 private:
  std::shared_ptr<OwnershipStore> real_;
};

class ProviderOwnershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    options.replicas = 3;
    options.idle_timeout = 600;
    options.run_background_threads = false;
    options.reconcile_on_start = false;
    options.renewal_interval_seconds = 10;  // TTL 40 s with ttl_multiplier 4
    options.teardown_wait_seconds = 5;
  }

  void TearDown() override {
    backend->clear_scripts();
    hooks.clear_scripts();
    provider.reset();
  }

  std::shared_ptr<OwnershipStore> sqlite_store(const std::string& owner) {
    return load_sqlite_store((tmp.path() / "leases.db").string(), owner, clock, logger,
                             R"(, "renewal_interval_seconds": 10, "ttl_multiplier": 4)");
  }

  ProviderUnderTest& build() {
    store = std::make_shared<FailableStore>(sqlite_store(kTestOwnerId));
    peer = sqlite_store("peer-worker");
    ProviderDeps deps;
    deps.backend = backend;
    deps.ownership = store;
    deps.logger = logger;
    deps.clock = clock;
    deps.paths = std::make_shared<const core::Paths>(tmp.path(), tmp.path().string());
    deps.options = options;
    deps.hooks = hooks.make_hooks();
    provider = ProviderUnderTest(std::move(deps));
    return provider;
  }

  bool is_tracked(const std::string& id) {
    std::lock_guard lock(provider.mutex());
    const core::SandboxEntry* entry = provider.registry().find(id);
    return entry && (entry->active() || entry->warm());
  }

  TempDir tmp;
  std::shared_ptr<CapturingLogger> logger = std::make_shared<CapturingLogger>();
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::shared_ptr<FakeBackend> backend = std::make_shared<FakeBackend>();
  HookState hooks;
  ProviderOptions options;
  std::shared_ptr<FailableStore> store;
  std::shared_ptr<OwnershipStore> peer;
  ProviderUnderTest provider;
};

TEST_F(ProviderOwnershipTest, RenewalKeepsWhatIsStillOurs) {
  build();
  const std::string id = provider->acquire("thread-1", "alice");
  clock->advance(20);
  provider->renew_owned_leases();
  EXPECT_TRUE(is_tracked(id));
  ASSERT_TRUE(peer->owner(id).has_value());
  EXPECT_EQ(*peer->owner(id), kTestOwnerId);
  clock->advance(30);  // past the original 40 s TTL: only a real renewal keeps it alive
  EXPECT_EQ(peer->owner(id).value_or(""), kTestOwnerId);
}

TEST_F(ProviderOwnershipTest, ALapsedLeaseIsReEstablishedNotDropped) {
  build();
  const std::string id = provider->acquire("thread-1", "alice");
  clock->advance(100);  // the lease expired (a stalled process, a store that lost state)
  EXPECT_FALSE(peer->owner(id).has_value());
  provider->renew_owned_leases();
  EXPECT_TRUE(is_tracked(id));
  EXPECT_EQ(peer->owner(id).value_or(""), kTestOwnerId);
  EXPECT_TRUE(
      logger->contains(LogLevel::info, "Re-established a lapsed ownership lease for " + id));
}

TEST_F(ProviderOwnershipTest, ALostLeaseForgetsTheSandboxWithoutTouchingItsContainer) {
  build();
  const std::string id = provider->acquire("thread-1", "alice");
  auto client = std::dynamic_pointer_cast<RecordingClient>(provider->get(id));
  ASSERT_TRUE(peer->take(id));  // a peer's acquisition took the sandbox over
  provider->renew_owned_leases();
  EXPECT_FALSE(is_tracked(id));
  EXPECT_EQ(provider->get(id), nullptr);
  EXPECT_EQ(client->close_count(), 1);
  EXPECT_TRUE(backend->destroys().empty()) << "the peer's container was stopped";
  EXPECT_EQ(peer->owner(id).value_or(""), "peer-worker");
  EXPECT_TRUE(logger->contains(LogLevel::warning, "Lost sandbox ownership lease for " + id));
}

TEST_F(ProviderOwnershipTest, ALapsedLeaseTakenByAPeerMeanwhileIsLost) {
  build();
  const std::string id = provider->acquire("thread-1", "alice");
  clock->advance(100);
  ASSERT_TRUE(peer->claim(id, false));
  provider->renew_owned_leases();
  EXPECT_FALSE(is_tracked(id));
  EXPECT_TRUE(backend->destroys().empty());
}

TEST_F(ProviderOwnershipTest, AStoreThatCannotAnswerNeverEvictsALiveSandbox) {
  build();
  const std::string id = provider->acquire("thread-1", "alice");
  store->renew_throws = true;
  provider->renew_owned_leases();
  EXPECT_TRUE(is_tracked(id));
  EXPECT_TRUE(logger->contains(LogLevel::warning,
                               "Could not renew sandbox ownership for " + id + ", will retry"));
  // Lapsed, and the re-establishing claim cannot answer either: still kept.
  store->renew_throws = false;
  store->claim_throws = true;
  clock->advance(100);
  provider->renew_owned_leases();
  EXPECT_TRUE(is_tracked(id));
  EXPECT_TRUE(logger->contains(LogLevel::warning, "Could not re-establish lapsed lease for " + id));
}

TEST_F(ProviderOwnershipTest, ReleaseDropsASandboxAPeerHasTakenOver) {
  build();
  const std::string id = provider->acquire("thread-1", "alice");
  ASSERT_TRUE(peer->take(id));
  provider->release(id);
  EXPECT_FALSE(is_tracked(id)) << "a peer's sandbox was parked in our warm pool";
  EXPECT_TRUE(backend->destroys().empty());
}

TEST_F(ProviderOwnershipTest, DestroyRefusesAPeersSandboxAndKeepsTracking) {
  build();
  const std::string id = provider->acquire("thread-1", "alice");
  ASSERT_TRUE(peer->take(id));
  clock->advance(1);
  ASSERT_TRUE(peer->claim(id, true));  // the peer is tearing it down
  provider->destroy(id);
  EXPECT_TRUE(backend->destroys().empty());
  EXPECT_TRUE(is_tracked(id)) << "a refused claim must not untrack a running container";
}

TEST_F(ProviderOwnershipTest, AcquireWaitsOutAPeersTeardownThenCreatesAnew) {
  build();
  const std::string id = core::deterministic_sandbox_id("thread-1", "alice");
  ASSERT_TRUE(peer->claim(id, true));  // a peer is stopping this conversation's container
  std::thread peer_finishes([&] {
    std::this_thread::sleep_for(100ms);
    peer->release(id);
  });
  const std::string acquired = provider->acquire("thread-1", "alice");
  peer_finishes.join();
  EXPECT_EQ(acquired, id);
  EXPECT_TRUE(logger->contains(LogLevel::info, "Sandbox " + id + " is being torn down; waiting"));
  EXPECT_EQ(provider->get(id)->base_url(), "http://" + id);
  EXPECT_EQ(backend->creates().size(), 1u);
  EXPECT_TRUE(backend->destroys().empty()) << "created into a teardown and rolled back";
}

TEST_F(ProviderOwnershipTest, APeersTeardownThatOutlastsTheDeadlineFailsTheAcquire) {
  options.teardown_wait_seconds = 0.2;
  build();
  const std::string id = core::deterministic_sandbox_id("thread-1", "alice");
  ASSERT_TRUE(peer->claim(id, true));
  EXPECT_THROW(provider->acquire("thread-1", "alice"), SandboxBeingDestroyedError);
  EXPECT_FALSE(is_tracked(id));
}

// A wait whose deadline has already passed was logged as "at most -0.0s".
TEST_F(ProviderOwnershipTest, AWaitWithNoTimeLeftIsLoggedAsZeroNotNegative) {
  options.teardown_wait_seconds = 0;
  build();
  const std::string id = core::deterministic_sandbox_id("thread-1", "alice");
  ASSERT_TRUE(peer->claim(id, true));
  EXPECT_THROW(provider->acquire("thread-1", "alice"), SandboxBeingDestroyedError);
  EXPECT_TRUE(logger->contains(LogLevel::info, "waiting for the teardown to finish (at most 0.0s)"))
      << "the wait's line is missing or its bound is not 0.0s";
  EXPECT_FALSE(logger->contains(LogLevel::info, "-0.0s"));
}

// Every pass of the idle checker's reconciliation was logged as the startup's.
TEST_F(ProviderOwnershipTest, APeriodicReconciliationPassIsNotLoggedAsTheStartupOne) {
  build();
  backend->list_running_fn = [] { return std::vector<SandboxInfo>{make_info("p-1", "http://p")}; };
  ASSERT_TRUE(peer->claim("p-1", false));  // a live peer's: skipped, never adopted
  provider->reconcile_orphans();
  EXPECT_EQ(logger->count(LogLevel::info, "Startup reconciliation complete"), 1u);
  provider->reconcile_orphans();
  provider->reconcile_orphans();
  EXPECT_EQ(logger->count(LogLevel::info, "Startup reconciliation complete"), 1u)
      << "a periodic pass said it was the startup's";
  EXPECT_EQ(logger->count(LogLevel::info, "Reconciliation pass complete: 0 adopted"), 2u);
  backend->list_running_fn = nullptr;
}

// Issue 32 C: a startup pass that found no container returned before it recorded that a pass
// had run, so the next (periodic) pass was logged as the startup's.
TEST_F(ProviderOwnershipTest, AfterAStartupPassThatFoundNothingTheNextPassIsPeriodic) {
  build();
  backend->list_running_fn = [] { return std::vector<SandboxInfo>{}; };
  provider->reconcile_orphans();
  backend->list_running_fn = [] { return std::vector<SandboxInfo>{make_info("p-1", "http://p")}; };
  ASSERT_TRUE(peer->claim("p-1", false));
  provider->reconcile_orphans();
  EXPECT_EQ(logger->count(LogLevel::info, "Startup reconciliation complete"), 0u)
      << "a periodic pass said it was the startup's";
  EXPECT_EQ(logger->count(LogLevel::info, "Reconciliation pass complete: 0 adopted"), 1u);
  backend->list_running_fn = nullptr;
}

TEST_F(ProviderOwnershipTest, OrphansAreAdoptedOnlyAfterTheRecoveryGrace) {
  build();
  const SandboxInfo orphan = make_info("orphan-1", "http://orphan-1");
  backend->list_running_fn = [&] { return std::vector<SandboxInfo>{orphan}; };
  ASSERT_TRUE(peer->claim("orphan-1", false));  // a live owner
  provider->reconcile_orphans();
  EXPECT_FALSE(is_tracked("orphan-1")) << "adopted a container a live peer owns";

  clock->advance(50);             // the owner stopped renewing: its lease expired
  provider->reconcile_orphans();  // first seen unowned: the grace starts now
  EXPECT_FALSE(is_tracked("orphan-1"));
  clock->advance(39);
  provider->reconcile_orphans();
  EXPECT_FALSE(is_tracked("orphan-1")) << "adopted before one TTL of grace passed";
  clock->advance(2);
  provider->reconcile_orphans();
  EXPECT_TRUE(is_tracked("orphan-1"));
  EXPECT_EQ(peer->owner("orphan-1").value_or(""), kTestOwnerId);
  EXPECT_TRUE(logger->contains(LogLevel::info, "Adopted container orphan-1 into warm pool"));
}

TEST_F(ProviderOwnershipTest, TheGraceRestartsWhenALiveOwnerRepublishes) {
  build();
  backend->list_running_fn = [] {
    return std::vector<SandboxInfo>{make_info("orphan-2", "http://orphan-2")};
  };
  provider->reconcile_orphans();  // unowned: grace starts
  clock->advance(30);
  ASSERT_TRUE(peer->take("orphan-2"));  // its owner comes back
  provider->reconcile_orphans();
  clock->advance(45);  // the owner's lease expired again; grace must start over
  provider->reconcile_orphans();
  EXPECT_FALSE(is_tracked("orphan-2"));
  clock->advance(41);
  provider->reconcile_orphans();
  EXPECT_TRUE(is_tracked("orphan-2"));
}

TEST_F(ProviderOwnershipTest, TheTeardownHeartbeatKeepsTheDelLeaseAndReleasesIt) {
  options.renewal_interval_seconds = 0.02;  // beat fast; the stop below takes ~150 ms
  build();
  const std::string id = provider->acquire("thread-1", "alice");
  std::optional<LeaseRecord> during;
  backend->destroy_fn = [&](const SandboxInfo&) {
    std::this_thread::sleep_for(150ms);
    during = peer->inspect(id);
  };
  const int claims_before = store->destroy_claims.load();
  provider->destroy(id);
  ASSERT_TRUE(during.has_value());
  EXPECT_TRUE(during->destroying);
  EXPECT_EQ(during->owner_id, kTestOwnerId);
  EXPECT_GE(store->destroy_claims.load() - claims_before, 3) << "the heartbeat did not beat";
  EXPECT_FALSE(peer->owner(id).has_value()) << "the teardown lease outlived the stop";
}

TEST_F(ProviderOwnershipTest, IdlePerThreadLocksArePruned) {
  build();
  provider->acquire("thread-1", "alice");
  auto held = provider.peer().thread_lock({"alice", "thread-2"});
  held->lock();
  {
    std::lock_guard lock(provider.mutex());
    ASSERT_EQ(provider.registry().thread_lock_count(), 2u);
  }
  provider->prune_idle_thread_locks();
  {
    std::lock_guard lock(provider.mutex());
    EXPECT_EQ(provider.registry().thread_lock_count(), 1u);
    EXPECT_TRUE(provider.registry().has_thread_lock({"alice", "thread-2"}))
        << "a held lock was pruned";
  }
  held->unlock();
}

}  // namespace
}  // namespace sandboxd::testing

// The ceilings: with overflow_policy set, `replicas` holds; max_per_user holds per
// user; released sandboxes are evicted first (the user's own for the per-user ceiling); then
// a creation is refused (reject), created within burst_limit (burst) or queued in arrival
// order up to acquire_timeout (wait). Every refusal is a ServiceError of kind capacity that
// names the ceiling and the counts. Deadlines run on the fixture's injected clock.
#include <gmock/gmock.h>

#include <future>

#include "provider_fixtures.hpp"
#include "sandboxd/core/service_errors.hpp"

namespace sandboxd::testing {
namespace {

using core::ErrorKind;
using core::OverflowPolicy;
using core::ServiceError;
using namespace std::chrono_literals;

class ProviderCapacityTest : public ProviderFixture {
 protected:
  // What the backend holds right now and the most it ever held, and the order of its calls.
  void count_live_sandboxes() {
    backend->create_fn = [this](const CreateRequest& request) {
      std::lock_guard lock(live_mutex);
      calls.push_back("create " + request.sandbox_id);
      max_live = std::max(max_live, ++live);
      return make_info(request.sandbox_id, "http://" + request.sandbox_id);
    };
    backend->destroy_fn = [this](const SandboxInfo& info) {
      std::lock_guard lock(live_mutex);
      calls.push_back("destroy " + info.sandbox_id);
      --live;
    };
  }
  std::string refusal(const std::string& thread, const std::string& user) {
    try {
      provider->acquire(thread, user);
    } catch (const ServiceError& e) {
      EXPECT_EQ(e.kind(), ErrorKind::capacity) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no capacity refusal for " << user << "/" << thread;
    return "";
  }
  // replicas 1 under overflow_policy wait (acquire_timeout 30 s), the backend counted.
  void build_with_one_slot_to_wait_for() {
    options.replicas = 1;
    options.overflow_policy = OverflowPolicy::wait;
    options.acquire_timeout_seconds = 30;
    count_live_sandboxes();
    build();
  }
  // Waits (bounded, real time) until `n` creations are queued.
  bool queued(std::size_t n) {
    for (int i = 0; i < 500; ++i) {
      if (provider->counts().waiting == n) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  void TearDown() override {
    backend->clear_scripts();
    ProviderFixture::TearDown();
  }

  std::mutex live_mutex;
  int live = 0, max_live = 0;
  std::vector<std::string> calls;
};

TEST_F(ProviderCapacityTest, RejectRefusesAtTheCeilingAfterEvictingWhatIsReleased) {
  options.replicas = 2;
  options.overflow_policy = OverflowPolicy::reject;
  count_live_sandboxes();
  build();
  const std::string first = provider->acquire("t-1", "alice");
  provider->acquire("t-2", "bob");
  EXPECT_THAT(
      refusal("t-3", "carol"),
      ::testing::AllOf(::testing::HasSubstr("capacity (capacity): all 2 replica slots are in use "
                                            "(2 active, 0 released); overflow_policy reject"),
                       ::testing::HasSubstr("try again later")));
  EXPECT_EQ(backend->creates().size(), 2u) << "a refused creation must not reach the backend";
  EXPECT_EQ(provider->event_counts().rejections_capacity, 1u);

  provider->release(first);
  const std::string third = provider->acquire("t-3", "carol");
  // The released one was stopped before the new one was made: never 3 on the host.
  EXPECT_EQ(calls, (std::vector<std::string>{
                       "create " + first, "create " + core::deterministic_sandbox_id("t-2", "bob"),
                       "destroy " + first, "create " + third}));
  EXPECT_EQ(max_live, 2);
}

TEST_F(ProviderCapacityTest, BurstCreatesUpToItsLimitThenRefuses) {
  options.replicas = 1;
  options.overflow_policy = OverflowPolicy::burst;
  options.burst_limit = 1;
  count_live_sandboxes();
  build();
  provider->acquire("t-1", "alice");
  provider->acquire("t-2", "alice");
  EXPECT_TRUE(logger->contains(LogLevel::warning, "within burst_limit 1"));
  EXPECT_THAT(refusal("t-3", "alice"), ::testing::HasSubstr("burst_limit 1 reached"));
  EXPECT_EQ(max_live, 2);
  EXPECT_EQ(provider->event_counts().bursts, 1u);
}

TEST_F(ProviderCapacityTest, MaxPerUserEvictsTheUsersOwnReleasedSandboxAndRefusesWhenAllActive) {
  options.replicas = 10;  // soft: only the per-user ceiling holds
  options.max_per_user = 2;
  count_live_sandboxes();
  build();
  const std::string a1 = provider->acquire("t-1", "alice");
  provider->acquire("t-2", "alice");
  const std::string b1 = provider->acquire("t-1", "bob");
  provider->release(b1);  // bob's released sandbox is not alice's to evict
  EXPECT_THAT(refusal("t-3", "alice"),
              ::testing::HasSubstr("capacity (per_user): user alice has 2 of max_per_user 2 "
                                   "sandboxes, none of them released"));
  EXPECT_EQ(provider->event_counts().rejections_per_user, 1u);
  provider->acquire("t-2", "bob");  // bob has room

  provider->release(a1);
  provider->acquire("t-3", "alice");
  const auto destroyed = backend->destroys();
  ASSERT_EQ(destroyed.size(), 1u);
  EXPECT_EQ(destroyed[0].sandbox_id, a1) << "alice's own released sandbox makes her room";
  EXPECT_TRUE(provider->find(b1)) << "bob's released sandbox is untouched";
}

TEST_F(ProviderCapacityTest, WaitServesInArrivalOrderAndRefusesAtTheDeadline) {
  build_with_one_slot_to_wait_for();
  const std::string first = provider->acquire("t-1", "alice");
  auto second = std::async(std::launch::async, [&] { return provider->acquire("t-2", "bob"); });
  ASSERT_TRUE(queued(1));
  auto third = std::async(std::launch::async, [&] { return provider->acquire("t-3", "carol"); });
  ASSERT_TRUE(queued(2));
  EXPECT_EQ(second.wait_for(300ms), std::future_status::timeout) << "served with no slot free";

  provider->release(first);  // evictable now: the first in line gets the slot
  EXPECT_EQ(second.get(), core::deterministic_sandbox_id("t-2", "bob"));
  EXPECT_EQ(third.wait_for(300ms), std::future_status::timeout) << "carol jumped the line";
  EXPECT_EQ(provider->counts().waiting, 1u);
  const core::Provider::Capacity seen = provider->capacity();  // the page's ceilings
  EXPECT_EQ(seen.waiting, 1u);
  EXPECT_EQ(seen.replicas, 1);
  EXPECT_EQ(seen.overflow_policy, "wait");
  EXPECT_EQ(seen.in_use_here, 1u);
  EXPECT_FALSE(seen.fleet_wide) << "the memory store keeps no ledger";
  EXPECT_EQ(seen.fleet_reserved, std::nullopt);

  clock->advance(31);  // carol's deadline passes
  try {
    third.get();
    FAIL() << "carol was served";
  } catch (const ServiceError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::capacity);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("capacity (wait_timeout): no slot freed within "
                                               "acquire_timeout 30.0s (waited 31.0s"));
  }
  EXPECT_EQ(provider->counts().waiting, 0u) << "a refused waiter left its ticket behind";
  const auto events = provider->event_counts();
  EXPECT_EQ(events.capacity_waits, 2u);
  EXPECT_EQ(events.rejections_wait_timeout, 1u);
  std::uint64_t waits_ended = 0;  // the histogram counts each wait once, served or refused
  for (const auto count : events.capacity_wait_buckets) waits_ended += count;
  EXPECT_EQ(waits_ended, 2u);
  EXPECT_EQ(max_live, 1);
}

TEST_F(ProviderCapacityTest, ACancelledAsyncAcquireLeavesTheQueueAndTheNextWaiterIsServed) {
  build_with_one_slot_to_wait_for();
  const std::string first = provider->acquire("t-1", "alice");
  auto bob = provider->acquire_async("t-2", "bob");
  ASSERT_TRUE(queued(1));
  auto carol = std::async(std::launch::async, [&] { return provider->acquire("t-3", "carol"); });
  ASSERT_TRUE(queued(2));

  bob.cancel();  // the first in line gives up: its place goes at once, not at its deadline
  ASSERT_TRUE(queued(1)) << "a cancelled acquisition kept its place in the queue";
  provider->release(first);
  EXPECT_EQ(carol.get(), core::deterministic_sandbox_id("t-3", "carol"));
  provider->shutdown();  // waits for bob's acquisition to end
  EXPECT_THAT(
      calls,
      ::testing::Not(::testing::Contains("create " + core::deterministic_sandbox_id("t-2", "bob"))))
      << "the cancelled acquisition still created its sandbox";
  EXPECT_EQ(provider->counts().waiting, 0u);
  EXPECT_EQ(max_live, 1);
}

// A bounded queue (serve sets it to half its workers): one waiter more is refused at once, so
// queued creations cannot take every thread a release would need.
TEST_F(ProviderCapacityTest, AFullQueueRefusesAtOnce) {
  options.replicas = 1;
  options.overflow_policy = OverflowPolicy::wait;
  options.max_waiting = 1;
  build();
  const std::string first = provider->acquire("t-1", "alice");
  auto waiting = std::async(std::launch::async, [&] { return provider->acquire("t-2", "bob"); });
  ASSERT_TRUE(queued(1));
  EXPECT_THAT(refusal("t-3", "carol"),
              ::testing::HasSubstr("capacity (queue_full): 1 creations already wait for a slot, "
                                   "the most this host lets queue"));
  EXPECT_EQ(provider->event_counts().rejections_queue_full, 1u);
  provider->release(first);
  EXPECT_EQ(waiting.get(), core::deterministic_sandbox_id("t-2", "bob")) << "the waiter is served";
}

// Found by the serve test of a queued acquire: the release wakes the waiter, whose eviction
// claims the released sandbox for teardown before the release re-checks the lease; the release
// then took this instance's own teardown for a peer's lease and answered "lease lost" (409).
TEST_F(ProviderCapacityTest, AReleaseRacedByOurOwnEvictionIsStillAReleaseNotALostLease) {
  build();
  const std::string id = provider->acquire("t-1", "alice");
  {
    // Our own eviction, between the release's park and its lease re-check.
    sandboxd::MutexLock lock(provider.mutex());
    provider.registry().reserve_teardown(id);
  }
  ASSERT_TRUE(store->claim(id, /*for_destroy=*/true));
  EXPECT_EQ(provider->release(id), core::ReleaseOutcome::released);
  EXPECT_FALSE(logger->contains(LogLevel::warning, "owned by another instance"));
  {
    sandboxd::MutexLock lock(provider.mutex());
    provider.registry().finish_teardown(id);
  }
}

TEST_F(ProviderCapacityTest, ShutdownTurnsAwayAQueuedCreationAtOnce) {
  options.replicas = 1;
  options.overflow_policy = OverflowPolicy::wait;
  build();
  provider->acquire("t-1", "alice");
  auto waiting = std::async(std::launch::async, [&] { return provider->acquire("t-2", "bob"); });
  ASSERT_TRUE(queued(1));
  provider->shutdown();
  ASSERT_EQ(waiting.wait_for(2s), std::future_status::ready) << "shutdown left a waiter queued";
  EXPECT_THROW(waiting.get(), std::runtime_error);
}

// 4× the ceiling of distinct conversations at once, each using its sandbox for a moment and
// releasing it: the backend never holds more than `replicas`, everyone is served, and no
// ticket or creation count is left behind.
TEST_F(ProviderCapacityTest, FourTimesTheCeilingArrivingAtOnceNeverExceedsIt) {
  options.replicas = 3;
  options.overflow_policy = OverflowPolicy::wait;
  count_live_sandboxes();
  build();
  std::vector<std::future<std::string>> conversations;
  for (int i = 0; i < 12; ++i) {
    conversations.push_back(std::async(std::launch::async, [this, i] {
      const std::string id =
          provider->acquire("t-" + std::to_string(i), "user-" + std::to_string(i));
      std::this_thread::sleep_for(20ms);
      provider->release(id);
      return id;
    }));
  }
  for (auto& conversation : conversations) EXPECT_FALSE(conversation.get().empty());
  EXPECT_LE(max_live, 3) << "the ceiling did not hold";
  EXPECT_EQ(backend->creates().size(), 12u);
  EXPECT_EQ(provider->counts().waiting, 0u);
  sandboxd::MutexLock lock(provider.mutex());
  EXPECT_FALSE(provider.registry().any_creation()) << "a creation count leaked";
}

// Two gateways sharing one SQLite lease file: the ceiling is the deployment's. Each has its own
// registry and backend; only the store's capacity ledger is shared.
TEST_F(ProviderCapacityTest, TwoGatewaysSharingASqliteStoreHoldOneCeiling) {
  options.replicas = 2;
  options.overflow_policy = OverflowPolicy::reject;
  const std::string db = tmp.path().string() + "/leases.db";
  auto store_a = load_sqlite_store(db, "gateway-a", clock, logger);
  auto store_b = load_sqlite_store(db, "gateway-b", clock, logger);
  auto backend_b = std::make_shared<FakeBackend>();
  auto gateway_a = make_provider_over(backend, store_a);
  auto gateway_b = make_provider_over(backend_b, store_b);
  EXPECT_TRUE(logger->contains(LogLevel::info, "Sandbox ceilings are deployment-wide"));

  const std::string a1 = gateway_a->acquire("t-1", "alice");
  gateway_b->acquire("t-2", "bob");
  // What the operator page shows: this gateway's count beside the deployment's.
  const core::Provider::Capacity seen = gateway_a->capacity();
  EXPECT_EQ(seen.replicas, 2);
  EXPECT_EQ(seen.overflow_policy, "reject");
  EXPECT_EQ(seen.in_use_here, 1u);
  EXPECT_TRUE(seen.fleet_wide);
  EXPECT_EQ(seen.fleet_reserved, 2u);
  EXPECT_EQ(seen.fleet_error, "");
  try {
    gateway_a->acquire("t-3", "carol");
    FAIL() << "a third sandbox in a deployment of 2";
  } catch (const ServiceError& e) {
    EXPECT_EQ(e.kind(), ErrorKind::capacity);
    EXPECT_THAT(e.what(), ::testing::HasSubstr("the deployment holds 2 of 2 replica slots "
                                               "(this gateway: 1 active, 0 released)"));
  }
  EXPECT_EQ(backend->creates().size(), 1u) << "the refused creation reached the backend";

  gateway_a->destroy(a1);  // gives its slot back to the deployment
  EXPECT_NO_THROW(gateway_b->acquire("t-3", "carol"));
  gateway_a.reset();
  gateway_b.reset();
  backend_b->clear_scripts();
}

// A store whose capacity ledger is the SQLite store's, with one gate: a renewal of the
// reservations can be held after the provider handed over its snapshot, before the store
// writes it (what a slow store does while a destroy runs).
class GatedLedgerStore final : public OwnershipStore, public CapacityLedger {
 public:
  explicit GatedLedgerStore(std::shared_ptr<OwnershipStore> inner)
      : inner_(std::move(inner)), ledger_(store_capability<CapacityLedger>(*inner_)) {}

  const std::string& owner_id() const override { return inner_->owner_id(); }
  bool supports_cross_process() const override { return inner_->supports_cross_process(); }
  double ttl_seconds() const override { return inner_->ttl_seconds(); }
  bool take(const std::string& id) override { return inner_->take(id); }
  bool claim(const std::string& id, bool for_destroy) override {
    return inner_->claim(id, for_destroy);
  }
  RenewOutcome renew(const std::string& id) override { return inner_->renew(id); }
  void release(const std::string& id) override { inner_->release(id); }
  std::optional<std::string> owner(const std::string& id) override { return inner_->owner(id); }
  std::optional<LeaseRecord> inspect(const std::string& id) override { return inner_->inspect(id); }
  void close() override { inner_->close(); }

  Refusal reserve(const std::string& id, const std::string& user, std::size_t total,
                  std::size_t per_user) override {
    return ledger_->reserve(id, user, total, per_user);
  }
  void renew_reservations(
      const std::vector<std::pair<std::string, std::string>>& sandboxes) override {
    if (hold_renewal.exchange(false)) {
      renewal_started.set_value();
      release_renewal.get_future().wait();
    }
    ledger_->renew_reservations(sandboxes);
  }
  void unreserve(const std::string& id, const std::string& user) override {
    ledger_->unreserve(id, user);
  }
  std::size_t reserved(const std::string& user) override { return ledger_->reserved(user); }

  std::atomic<bool> hold_renewal{false};
  std::promise<void> renewal_started, release_renewal;

 private:
  std::shared_ptr<OwnershipStore> inner_;
  CapacityLedger* ledger_;
};

// Issue 32 B: the renewal took its snapshot of the held sandboxes, a destroy released one of
// them meanwhile, and the renewal's write brought the reservation back: a phantom slot held
// for one TTL against every gateway of the deployment.
TEST_F(ProviderCapacityTest, ARenewalNeverBringsBackAReservationADestroyReleased) {
  options.replicas = 1;
  options.overflow_policy = OverflowPolicy::reject;
  auto gated = std::make_shared<GatedLedgerStore>(
      load_sqlite_store(tmp.path().string() + "/leases.db", "gateway-a", clock, logger));
  provider = make_provider_over(backend, gated);
  const std::string id = provider->acquire("t-1", "alice");
  ASSERT_EQ(gated->reserved(""), 1u);

  gated->hold_renewal = true;
  auto renewal = std::async(std::launch::async, [this] { provider->renew_owned_leases(); });
  gated->renewal_started.get_future().wait();  // its snapshot holds `id`
  auto destroyed = std::async(std::launch::async, [&] { provider->destroy(id); });
  // The destroy may wait for the renewal in flight (it must not be lost to it); let it run as
  // far as it can, then let the renewal write.
  destroyed.wait_for(200ms);
  gated->release_renewal.set_value();
  renewal.get();
  destroyed.get();
  EXPECT_EQ(gated->reserved(""), 0u) << "the renewal brought back a released reservation";
  // The deployment's one slot is free: another conversation gets it.
  EXPECT_NO_THROW(provider->acquire("t-2", "bob"));
}

}  // namespace
}  // namespace sandboxd::testing

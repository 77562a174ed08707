// The ownership-store contract (design §7.2, §7.3), run against every store plugin, each loaded
// through the real plugin loader by its use string. Time moves on a ManualClock: no sleeping.
//
// Cases that need a second owner get one from make_peer(): for the SQLite store, another store
// object on the same file. The memory store keeps one map per store object, so a peer cannot be
// modelled and those cases are skipped for it (with the reason printed).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <latch>
#include <regex>
#include <thread>
#include <vector>

#include "ownership_test_support.hpp"

namespace sandboxd::testing {
namespace {

using ::testing::HasSubstr;

constexpr const char* kSandbox = "sb-1";

// Redis expires leases on the server's own clock, which a ManualClock cannot move; expiry in
// real time is checked for it in redis_store_test.cpp.
#define SKIP_ON_SERVER_CLOCK()                                                           \
  if (GetParam() == kRedisStoreUse)                                                      \
  GTEST_SKIP() << "Redis expires leases on its own clock (see redis_store_test.cpp for " \
                  "expiry in real time)"

#define SKIP_WITHOUT_PEER(peer)                                                      \
  if ((peer) == nullptr)                                                             \
  GTEST_SKIP() << GetParam()                                                         \
               << " keeps one lease map per store object, so a second owner on the " \
                  "same backing cannot be modelled"

class OwnershipContract : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == kRedisStoreUse) {
      if (redis_test_url().empty()) {
        GTEST_SKIP() << "SANDBOXD_TEST_REDIS_URL is not set (scripts/test.sh starts a Redis)";
      }
      redis_prefix_ = "contract:" + std::to_string(::getpid()) + ":" +
                      ::testing::UnitTest::GetInstance()->current_test_info()->name();
    }
    store_ = open("owner-a");
  }

  std::shared_ptr<OwnershipStore> open(const std::string& owner_id,
                                       const std::string& options_json = "{}") {
    std::string options = options_json;
    if (GetParam() == kRedisStoreUse) {  // this run's Redis, and keys of this test only
      const std::string extra =
          "\"url\": \"" + redis_test_url() + "\", \"key_prefix\": \"" + redis_prefix_ + "\"";
      options = options == "{}" ? "{" + extra + "}" : "{" + extra + ", " + options.substr(1);
    }
    return load_store(GetParam(), context(owner_id, options));
  }

  PluginContext context(const std::string& owner_id, const std::string& options_json = "{}") {
    return make_store_context(owner_id, options_json, dir_.path().string(), clock_, logger_);
  }

  // Another owner on the same backing as store_, or nullptr where that cannot exist.
  std::shared_ptr<OwnershipStore> make_peer(const std::string& owner_id = "owner-b") {
    if (GetParam() == kMemoryStoreUse) return nullptr;
    return open(owner_id);
  }

  bool is_sqlite() const { return GetParam() == kSqliteStoreUse; }

  TempDir dir_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
  std::shared_ptr<OwnershipStore> store_;  // owner "owner-a"
  std::string redis_prefix_;
};

// --- identity and TTL ---------------------------------------------------------------------

TEST_P(OwnershipContract, ReportsItsOwnerIdAndWhetherPeersCanSeeItsLeases) {
  EXPECT_EQ(store_->owner_id(), "owner-a");
  EXPECT_EQ(store_->supports_cross_process(), GetParam() != kMemoryStoreUse);
}

TEST_P(OwnershipContract, GeneratesHostnameAndRandomHexOwnerIdWhenHostGivesNone) {
  auto first = open("");
  auto second = open("");
  EXPECT_TRUE(std::regex_match(first->owner_id(), std::regex("[^:]+:[0-9a-f]{32}")))
      << first->owner_id();
  EXPECT_NE(first->owner_id(), second->owner_id());
}

TEST_P(OwnershipContract, DefaultTtlIs30SecondsTimes4AndIsLogged) {
  EXPECT_DOUBLE_EQ(store_->ttl_seconds(), 120.0);
  const std::string expected =
      is_sqlite()
          ? "Sandbox ownership store: sqlite " + dir_.file("sandbox_ownership.db") + " (ttl=120.0s)"
      : GetParam() == kRedisStoreUse
          ? "Sandbox ownership store: redis " + redis_test_url() +
                " (from sandbox.ownership.url, key prefix " + redis_prefix_ + ", ttl=120.0s)"
          : "Sandbox ownership store: memory (single-instance; ttl=120.0s)";
  EXPECT_TRUE(logger_->contains(LogLevel::info, expected)) << expected;
}

TEST_P(OwnershipContract, TtlIsRenewalIntervalTimesMultiplier) {
  SKIP_ON_SERVER_CLOCK();
  auto store = open("owner-t", R"({"renewal_interval_seconds": 2.5, "ttl_multiplier": 3})");
  EXPECT_DOUBLE_EQ(store->ttl_seconds(), 7.5);
  EXPECT_TRUE(logger_->contains(LogLevel::info, "ttl=7.5s)"));

  const double start = clock_->wall_now();
  ASSERT_TRUE(store->take(kSandbox));
  ASSERT_TRUE(store->inspect(kSandbox).has_value());
  EXPECT_DOUBLE_EQ(store->inspect(kSandbox)->expires_at, start + 7.5);
  clock_->advance(7.49);
  EXPECT_EQ(store->owner(kSandbox), "owner-t");
  clock_->advance(0.02);
  EXPECT_EQ(store->owner(kSandbox), std::nullopt);
}

// --- take ---------------------------------------------------------------------------------

TEST_P(OwnershipContract, TakeWritesAnOwnLeaseForUs) {
  EXPECT_TRUE(store_->take(kSandbox));
  auto lease = store_->inspect(kSandbox);
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ(lease->owner_id, "owner-a");
  EXPECT_FALSE(lease->destroying);
  EXPECT_TRUE(store_->take(kSandbox)) << "taking our own own lease again refreshes it";
}

TEST_P(OwnershipContract, TakeTransfersAPeersOwnLease) {
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  ASSERT_TRUE(peer->take(kSandbox));
  EXPECT_TRUE(store_->take(kSandbox));
  EXPECT_EQ(peer->owner(kSandbox), "owner-a");
  EXPECT_EQ(peer->renew(kSandbox), RenewOutcome::lost);
}

TEST_P(OwnershipContract, TakeIsRefusedDuringOurOwnTeardown) {
  ASSERT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true));
  EXPECT_FALSE(store_->take(kSandbox));
  auto lease = store_->inspect(kSandbox);
  ASSERT_TRUE(lease.has_value());
  EXPECT_TRUE(lease->destroying) << "a refused take must not unwind the teardown";
}

TEST_P(OwnershipContract, TakeIsRefusedDuringAPeersTeardown) {
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  ASSERT_TRUE(peer->claim(kSandbox, /*for_destroy=*/true));
  EXPECT_FALSE(store_->take(kSandbox));
  EXPECT_EQ(store_->owner(kSandbox), "owner-b");
}

// --- claim --------------------------------------------------------------------------------

TEST_P(OwnershipContract, ClaimIsExclusiveBetweenOwners) {
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  ASSERT_TRUE(store_->claim(kSandbox));
  EXPECT_FALSE(peer->claim(kSandbox));
  EXPECT_FALSE(peer->claim(kSandbox, /*for_destroy=*/true));
  EXPECT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true)) << "own → del for the holder";
  EXPECT_FALSE(peer->claim(kSandbox));
  EXPECT_FALSE(peer->claim(kSandbox, /*for_destroy=*/true));
  store_->release(kSandbox);
  EXPECT_TRUE(peer->claim(kSandbox));
  EXPECT_EQ(store_->owner(kSandbox), "owner-b");
}

TEST_P(OwnershipContract, ClaimOfOurOwnLeaseRefreshesItsTtl) {
  SKIP_ON_SERVER_CLOCK();
  const double ttl = store_->ttl_seconds();
  ASSERT_TRUE(store_->claim(kSandbox));
  clock_->advance(ttl * 0.6);
  ASSERT_TRUE(store_->claim(kSandbox));
  clock_->advance(ttl * 0.6);
  EXPECT_EQ(store_->owner(kSandbox), "owner-a");
}

TEST_P(OwnershipContract, NonDestroyClaimNeverUnwindsOurOwnTeardown) {
  ASSERT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true));
  EXPECT_FALSE(store_->claim(kSandbox));
  auto lease = store_->inspect(kSandbox);
  ASSERT_TRUE(lease.has_value());
  EXPECT_TRUE(lease->destroying);
  EXPECT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true)) << "the teardown may re-claim";
}

TEST_P(OwnershipContract, EightConcurrentClaimantsHaveExactlyOneWinner) {
  if (make_peer() == nullptr) {
    GTEST_SKIP() << GetParam() << " cannot hold eight owners on one backing";
  }
  constexpr int kClaimants = 8;
  std::vector<std::shared_ptr<OwnershipStore>> stores;
  for (int i = 0; i < kClaimants; ++i) stores.push_back(open("claimant-" + std::to_string(i)));

  for (int round = 0; round < 5; ++round) {
    const std::string sandbox_id = "sb-race-" + std::to_string(round);
    const bool for_destroy = round % 2 == 1;
    std::latch start(kClaimants);
    std::vector<int> won(kClaimants, 0);
    std::vector<std::string> errors(kClaimants);
    std::vector<std::thread> threads;
    for (int i = 0; i < kClaimants; ++i) {
      threads.emplace_back([&, i] {
        start.arrive_and_wait();
        try {
          won[i] = stores[i]->claim(sandbox_id, for_destroy) ? 1 : 0;
        } catch (const std::exception& error) {
          errors[i] = error.what();
        }
      });
    }
    for (auto& thread : threads) thread.join();
    int winners = 0;
    int winner = -1;
    for (int i = 0; i < kClaimants; ++i) {
      EXPECT_EQ(errors[i], "") << "claimant " << i;
      winners += won[i];
      if (won[i] == 1) winner = i;
    }
    ASSERT_EQ(winners, 1) << "round " << round;
    EXPECT_EQ(store_->owner(sandbox_id), "claimant-" + std::to_string(winner));
  }
}

// --- TTL expiry ---------------------------------------------------------------------------

TEST_P(OwnershipContract, OurTeardownMarkerExpiresAfterTheTtl) {
  SKIP_ON_SERVER_CLOCK();
  const double ttl = store_->ttl_seconds();
  ASSERT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true));
  clock_->advance(ttl - 0.01);
  EXPECT_FALSE(store_->take(kSandbox));
  clock_->advance(0.02);
  EXPECT_TRUE(store_->take(kSandbox));
  auto lease = store_->inspect(kSandbox);
  ASSERT_TRUE(lease.has_value());
  EXPECT_FALSE(lease->destroying);
}

TEST_P(OwnershipContract, APeersTeardownMarkerExpiresAfterTheTtl) {
  SKIP_ON_SERVER_CLOCK();
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  const double ttl = peer->ttl_seconds();
  ASSERT_TRUE(peer->claim(kSandbox, /*for_destroy=*/true));
  clock_->advance(ttl - 0.01);
  EXPECT_FALSE(store_->claim(kSandbox));
  EXPECT_FALSE(store_->take(kSandbox));
  clock_->advance(0.02);
  EXPECT_TRUE(store_->claim(kSandbox));
  EXPECT_EQ(peer->owner(kSandbox), "owner-a");
}

TEST_P(OwnershipContract, AnExpiredLeaseBehavesAsAbsentForEveryCall) {
  SKIP_ON_SERVER_CLOCK();
  ASSERT_TRUE(store_->take(kSandbox));
  clock_->advance(store_->ttl_seconds());
  EXPECT_EQ(store_->owner(kSandbox), std::nullopt);
  EXPECT_EQ(store_->inspect(kSandbox), std::nullopt);
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::lapsed);
  store_->release(kSandbox);
  EXPECT_EQ(store_->owner(kSandbox), std::nullopt);
  EXPECT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true));
}

TEST_P(OwnershipContract, APeersExpiredLeaseCanBeClaimed) {
  SKIP_ON_SERVER_CLOCK();
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  ASSERT_TRUE(peer->take(kSandbox));
  clock_->advance(peer->ttl_seconds());
  EXPECT_TRUE(store_->claim(kSandbox));
  EXPECT_EQ(peer->renew(kSandbox), RenewOutcome::lost);
}

// --- renew --------------------------------------------------------------------------------

TEST_P(OwnershipContract, RenewDistinguishesLapsedFromLost) {
  SKIP_ON_SERVER_CLOCK();
  const double ttl = store_->ttl_seconds();
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::lapsed);
  EXPECT_EQ(store_->owner(kSandbox), std::nullopt) << "renew must never re-create a lease";

  ASSERT_TRUE(store_->take(kSandbox));
  clock_->advance(ttl * 0.6);
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::renewed);
  clock_->advance(ttl * 0.6);
  EXPECT_EQ(store_->owner(kSandbox), "owner-a") << "renew refreshed the TTL";

  clock_->advance(ttl);
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::lapsed) << "expired is lapsed, not lost";

  ASSERT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true));
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::lost) << "our own del is lost to renewal";
  auto lease = store_->inspect(kSandbox);
  ASSERT_TRUE(lease.has_value());
  EXPECT_TRUE(lease->destroying) << "a lost renew changes nothing";
}

TEST_P(OwnershipContract, RenewIsLostWhileAPeerHoldsTheLease) {
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  ASSERT_TRUE(peer->take(kSandbox));
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::lost);
  ASSERT_TRUE(peer->claim(kSandbox, /*for_destroy=*/true));
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::lost);
  EXPECT_EQ(store_->owner(kSandbox), "owner-b");
}

// --- release ------------------------------------------------------------------------------

TEST_P(OwnershipContract, ReleaseClearsOurLeaseInEitherState) {
  ASSERT_TRUE(store_->take(kSandbox));
  store_->release(kSandbox);
  EXPECT_EQ(store_->owner(kSandbox), std::nullopt);

  ASSERT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true));
  store_->release(kSandbox);
  EXPECT_EQ(store_->owner(kSandbox), std::nullopt);

  store_->release("sb-never-leased");  // no lease: nothing to do, no error
}

TEST_P(OwnershipContract, ReleaseNeverClearsAPeersLease) {
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  ASSERT_TRUE(peer->take(kSandbox));
  store_->release(kSandbox);
  EXPECT_EQ(peer->owner(kSandbox), "owner-b");

  ASSERT_TRUE(peer->claim(kSandbox, /*for_destroy=*/true));
  store_->release(kSandbox);
  auto lease = peer->inspect(kSandbox);
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ(lease->owner_id, "owner-b");
  EXPECT_TRUE(lease->destroying);
}

// --- owner / inspect ----------------------------------------------------------------------

TEST_P(OwnershipContract, OwnerIsReadOnly) {
  SKIP_ON_SERVER_CLOCK();
  const double ttl = store_->ttl_seconds();
  EXPECT_EQ(store_->owner(kSandbox), std::nullopt);
  EXPECT_EQ(store_->inspect(kSandbox), std::nullopt);
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::lapsed) << "owner() created nothing";

  ASSERT_TRUE(store_->take(kSandbox));
  clock_->advance(ttl - 1.0);
  EXPECT_EQ(store_->owner(kSandbox), "owner-a");
  EXPECT_TRUE(store_->inspect(kSandbox).has_value());
  clock_->advance(1.0);
  EXPECT_EQ(store_->owner(kSandbox), std::nullopt) << "owner()/inspect() did not refresh";
}

TEST_P(OwnershipContract, APeerReadsOurLeaseWithoutChangingIt) {
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  ASSERT_TRUE(store_->take(kSandbox));
  EXPECT_EQ(peer->owner(kSandbox), "owner-a");
  EXPECT_EQ(store_->renew(kSandbox), RenewOutcome::renewed);
}

TEST_P(OwnershipContract, InspectShowsOwnerAndDestroyingDuringATeardown) {
  SKIP_ON_SERVER_CLOCK();
  const double now = clock_->wall_now();
  ASSERT_TRUE(store_->claim(kSandbox, /*for_destroy=*/true));
  auto lease = store_->inspect(kSandbox);
  ASSERT_TRUE(lease.has_value());
  EXPECT_EQ(lease->owner_id, "owner-a");
  EXPECT_TRUE(lease->destroying);
  EXPECT_DOUBLE_EQ(lease->expires_at, now + store_->ttl_seconds());
  EXPECT_EQ(store_->owner(kSandbox), "owner-a");

  if (auto peer = make_peer(); peer != nullptr) {
    auto seen_by_peer = peer->inspect(kSandbox);
    ASSERT_TRUE(seen_by_peer.has_value());
    EXPECT_EQ(seen_by_peer->owner_id, "owner-a");
    EXPECT_TRUE(seen_by_peer->destroying);
  }
}

// --- close --------------------------------------------------------------------------------

TEST_P(OwnershipContract, EveryCallAfterCloseThrowsOwnershipBackendError) {
  ASSERT_TRUE(store_->take(kSandbox));
  store_->close();
  EXPECT_THROW(store_->take(kSandbox), OwnershipBackendError);
  EXPECT_THROW(store_->renew(kSandbox), OwnershipBackendError);
  EXPECT_THROW(store_->release(kSandbox), OwnershipBackendError);
  EXPECT_THROW(store_->owner(kSandbox), OwnershipBackendError);
  EXPECT_THROW(store_->inspect(kSandbox), OwnershipBackendError);
  try {
    store_->claim(kSandbox, /*for_destroy=*/true);
    ADD_FAILURE() << "claim after close did not throw";
  } catch (const OwnershipBackendError& error) {
    EXPECT_THAT(error.what(), HasSubstr("failed to claim sandbox ownership for sb-1: "));
  }
  store_->close();  // closing twice is harmless
}

// --- configuration ------------------------------------------------------------------------

TEST_P(OwnershipContract, RejectsATtlMultiplierBelowTwo) {
  const std::string message = load_error(GetParam(), context("x", R"({"ttl_multiplier": 1.5})"));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.ttl_multiplier"));
  EXPECT_THAT(message, HasSubstr("1.5"));
}

TEST_P(OwnershipContract, RejectsANonPositiveRenewalInterval) {
  for (const char* bad : {"0", "-3"}) {
    const std::string message = load_error(
        GetParam(), context("x", std::string(R"({"renewal_interval_seconds": )") + bad + "}"));
    EXPECT_THAT(message, HasSubstr("sandbox.ownership.renewal_interval_seconds"));
    EXPECT_THAT(message, HasSubstr(std::string("got ") + bad));
  }
}

TEST_P(OwnershipContract, RejectsAWronglyTypedOption) {
  const std::string message =
      load_error(GetParam(), context("x", R"({"renewal_interval_seconds": "fast"})"));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.renewal_interval_seconds"));
  EXPECT_THAT(message, HasSubstr("\"fast\""));
}

TEST_P(OwnershipContract, RejectsATypeThatNamesAnotherStore) {
  const std::string other = GetParam() == kRedisStoreUse ? "sqlite" : "redis";
  const std::string message =
      load_error(GetParam(), context("x", R"({"type": ")" + other + R"("})"));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.type"));
  EXPECT_THAT(message, HasSubstr("'" + other + "'"));
}

TEST_P(OwnershipContract, AcceptsItsOwnTypeAndWarnsAboutUnknownKeys) {
  const std::string own_type = is_sqlite()                    ? "sqlite"
                               : GetParam() == kRedisStoreUse ? "redis"
                                                              : "memory";
  auto store = open("x", R"({"type": ")" + own_type + R"(", "colour": "blue"})");
  EXPECT_NE(store, nullptr);
  EXPECT_TRUE(logger_->contains(LogLevel::warning, "sandbox.ownership.colour"));
  EXPECT_FALSE(logger_->contains(LogLevel::warning, "sandbox.ownership.type"));
}

// --- the capacity ledger ---------------------------------------------------------

#define LEDGER_OR_SKIP(store, ledger)                                                         \
  auto* ledger = store_capability<CapacityLedger>(*(store));                                  \
  if (ledger == nullptr) {                                                                    \
    GTEST_SKIP() << GetParam() << " keeps no capacity ledger (its ceilings are per process)"; \
  }

TEST_P(OwnershipContract, TheLedgerGrantsUpToBothCeilingsBetweenOwners) {
  auto peer = make_peer();
  SKIP_WITHOUT_PEER(peer);
  LEDGER_OR_SKIP(store_, mine);
  auto* theirs = store_capability<CapacityLedger>(*peer);
  using Refusal = CapacityLedger::Refusal;
  EXPECT_EQ(mine->reserve("s1", "alice", 3, 2), Refusal::none);
  EXPECT_EQ(mine->reserve("s2", "alice", 3, 2), Refusal::none);
  EXPECT_EQ(theirs->reserve("s3", "alice", 3, 2), Refusal::per_user) << "alice has 2 of 2";
  EXPECT_EQ(theirs->reserve("s3", "bob", 3, 2), Refusal::none);
  EXPECT_EQ(theirs->reserve("s4", "carol", 3, 2), Refusal::total) << "3 of 3 in the deployment";
  EXPECT_EQ(theirs->reserve("s1", "alice", 3, 2), Refusal::none)
      << "an existing sandbox's reservation is taken over, never refused";
  EXPECT_EQ(mine->reserved(""), 3u);
  EXPECT_EQ(theirs->reserved("alice"), 2u);
  mine->unreserve("s2", "alice");
  EXPECT_EQ(theirs->reserve("s4", "carol", 3, 2), Refusal::none);
  EXPECT_EQ(mine->reserve("s5", "dave", 3, 2), Refusal::total) << "still 3 of 3";
  EXPECT_EQ(mine->reserve("s5", "dave", 0, 0), Refusal::none) << "0: no ceiling";
  mine->unreserve("s5", "dave");
  mine->renew_reservations({{"s9", "erin"}});  // an adopted sandbox: recorded, no ceiling
  EXPECT_EQ(theirs->reserved(""), 4u);
}

TEST_P(OwnershipContract, EightConcurrentReservationsNeverExceedTheCeiling) {
  LEDGER_OR_SKIP(store_, unused);
  (void)unused;
  if (GetParam() == kMemoryStoreUse) GTEST_SKIP();
  std::vector<std::shared_ptr<OwnershipStore>> owners;
  for (int i = 0; i < 8; ++i) owners.push_back(open("owner-" + std::to_string(i)));
  std::atomic<int> granted{0};
  std::latch start(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      auto* ledger = store_capability<CapacityLedger>(*owners[i]);
      if (ledger->reserve("c" + std::to_string(i), "u" + std::to_string(i), 3, 0) ==
          CapacityLedger::Refusal::none) {
        ++granted;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(granted.load(), 3);
}

TEST_P(OwnershipContract, AReservationNobodyRenewsExpiresAfterTheTtl) {
  SKIP_ON_SERVER_CLOCK();
  LEDGER_OR_SKIP(store_, ledger);
  using Refusal = CapacityLedger::Refusal;
  ASSERT_EQ(ledger->reserve("kept", "alice", 2, 0), Refusal::none);
  ASSERT_EQ(ledger->reserve("dropped", "bob", 2, 0), Refusal::none);
  EXPECT_EQ(ledger->reserve("third", "carol", 2, 0), Refusal::total);
  clock_->advance(store_->ttl_seconds() - 1);
  ledger->renew_reservations({{"kept", "alice"}});
  clock_->advance(2);  // "dropped" is one TTL old now; "kept" was renewed
  EXPECT_EQ(ledger->reserved(""), 1u);
  EXPECT_EQ(ledger->reserve("third", "carol", 2, 0), Refusal::none);
}

INSTANTIATE_TEST_SUITE_P(Stores, OwnershipContract,
                         ::testing::Values(kMemoryStoreUse, kSqliteStoreUse, kRedisStoreUse),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.substr(0, info.param.find(':'));
                         });

}  // namespace
}  // namespace sandboxd::testing

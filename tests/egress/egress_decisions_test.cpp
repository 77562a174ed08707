// The gateway's word on refused names (approval `prompt`), without a socket: what the
// proxy's end-to-end test cannot drive cheaply (a grant's expiry on the clock, the bound on
// pending names, two doors deciding one request at once, a grants file that is half wrong).
#include "egress/egress_decisions.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "test_support.hpp"

namespace sandboxd::core {
namespace {

using testing::ManualClock;

class EgressDecisionsTest : public ::testing::Test {
 protected:
  EgressDecisions prompting(std::size_t max_pending = 256) {
    return EgressDecisions(
        clock_,
        {.prompt = true, .temporary_grant_ttl = 300, .max_pending_per_sandbox = max_pending});
  }
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
};

TEST_F(EgressDecisionsTest, ARefusalIsPendingOncePerNameAndPortAndCounted) {
  auto decisions = prompting();
  EXPECT_FALSE(decisions.granted("sb1", "a.test", 443, "CONNECT"));
  clock_->advance(5);
  EXPECT_FALSE(decisions.granted("sb1", "a.test", 443, "CONNECT"));
  EXPECT_FALSE(decisions.granted("sb1", "a.test", 80, "GET"));
  const auto pending = decisions.pending("sb1");
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].port, 443);
  EXPECT_EQ(pending[0].count, 2u);
  EXPECT_EQ(pending[0].last_seen - pending[0].first_seen, 5);
  EXPECT_NE(pending[0].request_id, pending[1].request_id);
  EXPECT_TRUE(decisions.pending("sb2").empty()) << "one sandbox's requests are its own";
}

TEST_F(EgressDecisionsTest, UnderApprovalDenyNothingIsKept) {
  EgressDecisions decisions(clock_, {.prompt = false});
  EXPECT_FALSE(decisions.granted("sb1", "a.test", 443, "CONNECT"));
  EXPECT_TRUE(decisions.pending("sb1").empty());
}

TEST_F(EgressDecisionsTest, NewNamesBeyondTheBoundAreRefusedUnrecordedAndKnownOnesStillCount) {
  auto decisions = prompting(/*max_pending=*/2);
  decisions.granted("sb1", "a.test", 443, "CONNECT");
  decisions.granted("sb1", "b.test", 443, "CONNECT");
  decisions.granted("sb1", "c.test", 443, "CONNECT");
  decisions.granted("sb1", "a.test", 443, "CONNECT");
  const auto pending = decisions.pending("sb1");
  ASSERT_EQ(pending.size(), 2u);
  EXPECT_EQ(pending[0].domain, "a.test");
  EXPECT_EQ(pending[0].count, 2u);
  EXPECT_EQ(pending[1].domain, "b.test");
}

TEST_F(EgressDecisionsTest, ATemporaryGrantEndsOnTheClockAndALifeGrantDoesNot) {
  auto decisions = prompting();
  decisions.decide("sb1", "Temp.Test", EgressDecision::allow_temporary);
  decisions.decide("sb1", "life.test", EgressDecision::allow_sandbox);
  EXPECT_TRUE(decisions.granted("sb1", "temp.test", 443, "CONNECT")) << "normalized";
  EXPECT_FALSE(decisions.granted("sb2", "temp.test", 443, "CONNECT")) << "for sb1 only";
  clock_->advance(299);
  EXPECT_TRUE(decisions.granted("sb1", "temp.test", 443, "CONNECT"));
  clock_->advance(1);
  EXPECT_FALSE(decisions.granted("sb1", "temp.test", 443, "CONNECT"));
  EXPECT_TRUE(decisions.granted("sb1", "life.test", 443, "CONNECT"));
  const auto grants = decisions.grants("sb1");
  ASSERT_EQ(grants.size(), 1u) << "the expired grant is gone";
  EXPECT_EQ(grants[0].domain, "life.test");
  EXPECT_EQ(grants[0].expires, 0);
}

TEST_F(EgressDecisionsTest, EventsAreHandedOutOnceAndDenyPendingKeepsWhatWasHandedOut) {
  auto decisions = prompting();
  decisions.granted("sb1", "a.test", 443, "CONNECT");
  ASSERT_EQ(decisions.consume_events("sb1").size(), 1u);
  EXPECT_TRUE(decisions.consume_events("sb1").empty());
  decisions.granted("sb1", "b.test", 443, "CONNECT");
  decisions.deny_pending("sb1");
  const auto pending = decisions.pending("sb1");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].domain, "a.test") << "the gateway was shown it: its decision is awaited";
}

TEST_F(EgressDecisionsTest, DecidingANameTakesAllItsPendingRequestsAndDenyTakesItsGrant) {
  auto decisions = prompting();
  decisions.granted("sb1", "a.test", 443, "CONNECT");
  decisions.granted("sb1", "a.test", 80, "GET");
  decisions.decide("sb1", "a.test", EgressDecision::allow_sandbox);
  EXPECT_TRUE(decisions.pending("sb1").empty());
  decisions.decide("sb1", "a.test", EgressDecision::deny);
  EXPECT_TRUE(decisions.grants("sb1").empty());
  EXPECT_THROW(decisions.decide("sb1", "10.0.0.1", EgressDecision::allow_sandbox),
               std::invalid_argument);
}

TEST_F(EgressDecisionsTest, TwoDoorsDecidingOneRequestAtOnceDecideItOnce) {
  auto decisions = prompting();
  for (int round = 0; round < 200; ++round) {
    decisions.granted("sb1", "a.test", 443, "CONNECT");
    const std::string id = decisions.pending("sb1").at(0).request_id;
    std::atomic<int> decided{0};
    std::vector<std::thread> doors;
    for (int door = 0; door < 2; ++door) {
      doors.emplace_back([&] {
        if (decisions.decide_request("sb1", id, EgressDecision::allow_temporary)) ++decided;
      });
    }
    for (auto& door : doors) door.join();
    ASSERT_EQ(decided.load(), 1) << "round " << round;
    decisions.decide("sb1", "a.test", EgressDecision::deny);
  }
  EXPECT_FALSE(decisions.decide_request("sb9", "0000000000000000", EgressDecision::deny));
}

TEST_F(EgressDecisionsTest, GrantsRoundTripAndAHalfWrongFileRestoresWhatItCan) {
  auto decisions = prompting();
  decisions.decide("sb1", "a.test", EgressDecision::allow_sandbox);
  decisions.decide("sb2", "b.test", EgressDecision::allow_temporary);
  auto restored = prompting();
  restored.restore_grants(decisions.grants_json());
  EXPECT_EQ(restored.grants("sb1").size(), 1u);
  ASSERT_EQ(restored.grants("sb2").size(), 1u);
  EXPECT_EQ(restored.grants("sb2")[0].expires, clock_->wall_now() + 300);

  auto partial = prompting();
  partial.restore_grants(
      R"({"sb1": {"ok.test": 0, "not a name!": 0, "late.test": "soon"}, "sb2": 7})");
  const auto grants = partial.grants("sb1");
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_EQ(grants[0].domain, "ok.test");
  partial.restore_grants("not json");
  EXPECT_EQ(partial.grants("sb1").size(), 1u);
}

TEST_F(EgressDecisionsTest, AForgottenSandboxLeavesNothingBehind) {
  auto decisions = prompting();
  decisions.granted("sb1", "a.test", 443, "CONNECT");
  decisions.decide("sb1", "b.test", EgressDecision::allow_sandbox);
  decisions.forget("sb1");
  EXPECT_TRUE(decisions.pending("sb1").empty());
  EXPECT_TRUE(decisions.grants("sb1").empty());
  EXPECT_EQ(decisions.grants_json(), "{}");
}

}  // namespace
}  // namespace sandboxd::core

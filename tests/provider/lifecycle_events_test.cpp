// What happens to sandboxes, recorded (issue 36's events): the ring keeps the newest, numbers
// them so a reader resumes after the last it saw and learns what it missed; the provider records
// each acquisition by its path, releases, evictions, reaps, lifetimes, refusals and destroys.
#include "sandboxd/core/lifecycle_events.hpp"

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::LifecycleEventKind;
using core::LifecycleEventLog;

// Whose an event is, as (user, thread); "-" for an unknown part.
std::pair<std::string, std::string> whose(const core::LifecycleEvent& event) {
  return {event.user_id.value_or("-"), event.thread_id.value_or("-")};
}

std::vector<std::string> kinds(const core::LifecycleEventPage& page) {
  std::vector<std::string> out;
  for (const auto& event : page.events) out.push_back(core::to_string(event.kind));
  return out;
}

TEST(LifecycleEventLogTest, KeepsTheNewestAndSaysHowManyAReaderMissed) {
  auto clock = std::make_shared<ManualClock>(500);
  LifecycleEventLog log(clock, 3);
  EXPECT_EQ(log.after(0, 10).last, 0u);
  for (int i = 0; i < 5; ++i) {
    clock->advance(1);
    log.record(LifecycleEventKind::created, "sb-" + std::to_string(i), "alice",
               "t-" + std::to_string(i));
  }
  const auto all = log.after(0, 10);
  EXPECT_EQ(all.last, 5u);
  EXPECT_EQ(all.dropped, 2u) << "events 1 and 2 fell out of a ring of 3";
  ASSERT_EQ(all.events.size(), 3u);
  EXPECT_EQ(all.events.front().sequence, 3u);
  EXPECT_EQ(all.events.front().sandbox_id, "sb-2");
  EXPECT_EQ(all.events.front().time, 503);
  EXPECT_EQ(whose(all.events.back()), (std::pair<std::string, std::string>{"alice", "t-4"}));

  const auto resumed = log.after(3, 10);  // a reader that saw event 3
  EXPECT_EQ(resumed.dropped, 0u);
  ASSERT_EQ(resumed.events.size(), 2u);
  EXPECT_EQ(resumed.events[0].sequence, 4u);
  const auto one = log.after(2, 1);
  ASSERT_EQ(one.events.size(), 1u);
  EXPECT_EQ(one.events[0].sequence, 3u);
  EXPECT_TRUE(log.after(5, 10).events.empty()) << "nothing after the newest";
  EXPECT_TRUE(log.after(99, 10).events.empty()) << "a number from a previous run";
}

TEST_F(ProviderFixture, TheProviderRecordsEachLifecycleStepWithItsConversation) {
  options.replicas = 1;
  options.overflow_policy = core::OverflowPolicy::reject;
  build();
  const auto first = provider->acquire_traced("t-1", "alice");
  provider->release(first.sandbox_id);
  provider->acquire_traced("t-1", "alice");                                  // reclaimed
  EXPECT_THROW(provider->acquire_traced("t-2", "bob"), core::ServiceError);  // full
  provider->release(first.sandbox_id);
  const auto second = provider->acquire_traced("t-2", "bob");  // evicts the first
  provider->destroy(second.sandbox_id);

  const auto page = events->after(0, 100);
  EXPECT_EQ(kinds(page), (std::vector<std::string>{"created", "released", "reclaimed", "refused",
                                                   "released", "evicted", "created", "destroyed"}));
  ASSERT_EQ(page.events.size(), 8u);
  EXPECT_EQ(page.events[0].sandbox_id, first.sandbox_id);
  EXPECT_EQ(whose(page.events[0]), (std::pair<std::string, std::string>{"alice", "t-1"}));
  EXPECT_EQ(whose(page.events[1]), (std::pair<std::string, std::string>{"alice", "t-1"}));
  EXPECT_EQ(page.events[3].reason, "capacity");
  // A ceiling is decided per user: the refusal names the user and no thread.
  EXPECT_EQ(whose(page.events[3]), (std::pair<std::string, std::string>{"bob", "-"}));
  EXPECT_EQ(page.events[5].sandbox_id, first.sandbox_id);
  EXPECT_EQ(page.events[5].reason, "replica_enforcement");
  EXPECT_EQ(whose(page.events[7]), (std::pair<std::string, std::string>{"bob", "t-2"}));
}

TEST_F(ProviderFixture, IdleReapsAndLifetimesAreRecordedWithTheirReason) {
  options.max_lifetime_seconds = 100;
  backend->create_fn = [clock = clock](const CreateRequest& request) {
    SandboxInfo info = make_info(request.sandbox_id, "http://" + request.sandbox_id);
    info.created_at = clock->wall_now();
    return info;
  };
  build();
  const std::string warm = provider->acquire("t-warm", "alice");
  provider->release(warm);
  clock->advance(50);
  const std::string active = provider->acquire("t-active", "alice");
  clock->advance(70);  // warm: 120 s old, released 120 s ago; active: 70 s old, idle 70 s
  provider->cleanup_idle_sandboxes(60);
  auto page = events->after(0, 100);
  ASSERT_FALSE(page.events.empty());
  std::map<std::string, std::string> last_of;
  for (const auto& event : page.events) {
    last_of[event.sandbox_id] = std::string(core::to_string(event.kind)) + " " + event.reason;
  }
  EXPECT_EQ(last_of[active], "reaped idle_timeout");
  EXPECT_EQ(last_of[warm], "reaped idle_timeout") << "the idle pass came first";

  const std::string young = provider->acquire("t-young", "bob");
  clock->advance(100);
  provider->cleanup_idle_sandboxes(1e9);
  page = events->after(page.last, 100);
  ASSERT_EQ(page.events.size(), 2u);  // created, then expired
  EXPECT_EQ(page.events[1].kind, LifecycleEventKind::expired);
  EXPECT_EQ(page.events[1].sandbox_id, young);
  EXPECT_EQ(page.events[1].reason, "max_lifetime_seconds");
  EXPECT_EQ(whose(page.events[1]), (std::pair<std::string, std::string>{"bob", "t-young"}));
}

}  // namespace
}  // namespace sandboxd::testing

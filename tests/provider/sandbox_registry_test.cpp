// The registry's invariants as properties of the type (issue 21 item 1), with no threads, no
// backend and no provider: one state per entry, counts that follow it, marks that keep an
// entry alive and nothing else, nothing installed after shutdown began, a forget that yields
// to work in flight.
#include "lifecycle/sandbox_registry.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "sandboxd/core/sandbox_client.hpp"

namespace sandboxd::core {
namespace {

InfoPtr info(const std::string& id) {
  auto made = std::make_shared<SandboxInfo>();
  made->sandbox_id = id;
  made->sandbox_url = "http://" + id;
  return made;
}
ClientPtr client(const std::string& id) {
  return std::make_shared<BasicSandboxClient>(id, "http://" + id);
}
const ThreadKey kAlice{"alice", "t-1"};
const ThreadKey kBob{"bob", "t-1"};

// One spelling of each state, both ways, for every door and file.
TEST(SandboxStateTest, EachStateHasOneWordAndTheWordGivesItBack) {
  for (const SandboxState state :
       {SandboxState::none, SandboxState::active, SandboxState::warm, SandboxState::paused}) {
    EXPECT_EQ(sandbox_state_from(to_string(state)), state) << to_string(state);
  }
  EXPECT_EQ(to_string(SandboxState::paused), "paused");
  EXPECT_EQ(to_string(SandboxState::active), "active");
  for (const char* word : {"", "Active", "orphan", "warm ", "frozen"}) {
    EXPECT_EQ(sandbox_state_from(word), std::nullopt) << word;
  }
  EXPECT_TRUE(is_released(SandboxState::warm));
  EXPECT_TRUE(is_released(SandboxState::paused));
  EXPECT_FALSE(is_released(SandboxState::active));
  EXPECT_FALSE(is_released(SandboxState::none));
}

// Design §4.3's identity checks are one registry question, asked without threads.
TEST(SandboxRegistryTest, AnIdentityConflictIsAnotherConversationUnderTheSameId) {
  SandboxRegistry registry;
  EXPECT_EQ(registry.identity_conflict("a", kAlice), std::nullopt) << "nothing tracked";
  registry.begin_creation("a", "alice");
  EXPECT_EQ(registry.identity_conflict("a", kBob), std::nullopt) << "marks only";
  registry.end_creation("a");

  registry.install_active("a", client("a"), info("a"), kAlice, 1.0);
  EXPECT_EQ(registry.identity_conflict("a", kAlice), std::nullopt);
  EXPECT_EQ(registry.identity_conflict("a", kBob), kAlice);

  registry.park("a", 2.0);  // warm: its identity is the conversation it served
  EXPECT_EQ(registry.identity_conflict("a", kAlice), std::nullopt);
  EXPECT_EQ(registry.identity_conflict("a", kBob), kAlice);

  // An adopted orphan has no identity: any conversation may take it.
  registry.add_released("orphan", info("orphan"), 3.0, std::nullopt);
  EXPECT_EQ(registry.identity_conflict("orphan", kBob), std::nullopt);
  registry.add_released("p", info("p"), 3.0, kBob, /*paused=*/true);
  EXPECT_EQ(registry.identity_conflict("p", kAlice), kBob) << "paused is released too";

  // An active entry without an identity (a seed fixture's) answers the one conversation mapped
  // to it, and none when two are.
  registry.install_active("b", client("b"), nullptr, std::nullopt, 4.0);
  EXPECT_EQ(registry.identity_conflict("b", kAlice), std::nullopt) << "nothing mapped";
  registry.conversations().assign(kBob, "b");
  EXPECT_EQ(registry.identity_conflict("b", kAlice), kBob);
  EXPECT_EQ(registry.identity_conflict("b", kBob), std::nullopt);
  registry.conversations().assign(ThreadKey{"carol", "t-9"}, "b");
  EXPECT_EQ(registry.identity_conflict("b", kAlice), std::nullopt) << "two mapped: none stored";
}

TEST(SandboxRegistryTest, AnEntryIsActiveOrWarmNeverBothAndTheCountsFollow) {
  SandboxRegistry registry;
  registry.install_active("a", client("a"), info("a"), kAlice, 1.0);
  EXPECT_TRUE(registry.find("a")->active());
  EXPECT_TRUE(registry.is_active("a"));
  EXPECT_FALSE(registry.is_released("a"));
  EXPECT_TRUE(registry.held("a"));
  EXPECT_FALSE(registry.held("nobody"));
  registry.reserve_teardown("marks-only");  // a mark is not a sandbox held
  EXPECT_FALSE(registry.held("marks-only"));
  EXPECT_EQ(registry.active_count(), 1u);
  EXPECT_EQ(registry.warm_count(), 0u);
  EXPECT_EQ(registry.conversations().find(kAlice)->second, "a");

  const auto parked = registry.park("a", 2.0);
  EXPECT_NE(parked.client, nullptr) << "the client is handed back to be closed";
  EXPECT_TRUE(registry.is_released("a"));
  EXPECT_FALSE(registry.is_active("a"));
  EXPECT_TRUE(registry.held("a")) << "a warm sandbox is still held";
  EXPECT_FALSE(registry.find("a")->active());
  EXPECT_EQ(registry.active_count(), 0u);
  EXPECT_EQ(registry.warm_count(), 1u);
  EXPECT_EQ(registry.find("a")->identity, kAlice) << "warm remembers who it served";
  EXPECT_EQ(registry.conversations().find(kAlice), registry.conversations().end());

  // Reclaimed: warm → active again, one entry throughout.
  registry.install_active("a", client("a"), info("a"), kAlice, 3.0);
  EXPECT_EQ(registry.active_count(), 1u);
  EXPECT_EQ(registry.warm_count(), 0u);
  EXPECT_EQ(registry.slots_in_use("other"), 1u);
}

// Paused is one more state of the same entry: released, counted apart from warm and
// toward the replica cap, entered only from the very warm entry the backend froze.
TEST(SandboxRegistryTest, PausedIsAReleasedStateEnteredOnlyFromTheWarmEntryThatWasFrozen) {
  SandboxRegistry registry;
  registry.install_active("a", client("a"), info("a"), kAlice, 1.0);
  const InfoPtr a_info = registry.find("a")->info;
  EXPECT_FALSE(registry.mark_paused("a", a_info, 1.0)) << "an active sandbox is never paused";
  registry.park("a", 2.0);
  EXPECT_FALSE(registry.mark_paused("a", info("a"), 2.0)) << "another info: not the one frozen";
  EXPECT_FALSE(registry.mark_paused("a", a_info, 1.5)) << "released again since the snapshot";
  ASSERT_TRUE(registry.mark_paused("a", a_info, 2.0));
  EXPECT_TRUE(registry.find("a")->paused());
  EXPECT_TRUE(registry.is_released("a"));
  EXPECT_EQ(registry.warm_count(), 0u);
  EXPECT_EQ(registry.paused_count(), 1u);
  EXPECT_EQ(registry.slots_in_use("other"), 1u) << "a paused sandbox holds its slot";
  EXPECT_EQ(registry.find("a")->since, 2.0) << "the release time stays";
  const auto released = registry.released_entries();
  ASSERT_EQ(released.size(), 1u);
  EXPECT_TRUE(released[0].second.paused);
  EXPECT_TRUE(registry.park("a", 3.0).was_warm) << "releasing it again changes nothing";

  ASSERT_TRUE(registry.mark_thawed("a", a_info));
  EXPECT_TRUE(registry.find("a")->warm());
  EXPECT_FALSE(registry.mark_thawed("a", a_info)) << "only a paused entry thaws";
  registry.mark_paused("a", a_info, 2.0);
  registry.install_active("a", client("a"), a_info, kAlice, 4.0);  // resumed
  EXPECT_EQ(registry.paused_count(), 0u);
  EXPECT_EQ(registry.active_count(), 1u);

  registry.add_released("b", info("b"), 1.0, std::nullopt, /*paused=*/true);
  EXPECT_EQ(registry.paused_count(), 1u);
  EXPECT_EQ(registry.take_released().size(), 1u);
  EXPECT_EQ(registry.paused_count(), 0u);
  EXPECT_EQ(registry.find("b"), nullptr);
}

TEST(SandboxRegistryTest, AWarmAddNeverOverwritesATrackedSandbox) {
  SandboxRegistry registry;
  registry.install_active("a", client("a"), info("a"), kAlice, 1.0);
  EXPECT_FALSE(registry.add_released("a", info("a"), 1.0, std::nullopt));
  EXPECT_TRUE(registry.find("a")->active());
  EXPECT_TRUE(registry.add_released("b", info("b"), 1.0, std::nullopt));
  EXPECT_EQ(registry.warm_count(), 1u);
}

TEST(SandboxRegistryTest, NothingIsInstalledAfterShutdownBegan) {
  SandboxRegistry registry;
  EXPECT_TRUE(registry.begin_shutdown());
  EXPECT_FALSE(registry.begin_shutdown()) << "shutdown begins once";
  EXPECT_THROW(registry.install_active("a", client("a"), info("a"), kAlice, 1.0),
               std::runtime_error);
  EXPECT_EQ(registry.find("a"), nullptr);
  EXPECT_EQ(registry.active_count(), 0u);
}

TEST(SandboxRegistryTest, MarksKeepAnEntryAndAnEntryWithNothingLeftIsErased) {
  SandboxRegistry registry;
  registry.begin_creation("c");
  ASSERT_NE(registry.find("c"), nullptr);
  EXPECT_TRUE(registry.any_creation());
  EXPECT_EQ(registry.slots_in_use("other"), 1u) << "a creation in flight takes a slot";
  EXPECT_EQ(registry.slots_in_use("c"), 0u) << "but not its own";
  registry.end_creation("c");
  EXPECT_EQ(registry.find("c"), nullptr) << "no state and no mark: erased";

  registry.install_active("a", client("a"), info("a"), kAlice, 1.0);
  EXPECT_TRUE(registry.reserve_teardown("a"));
  EXPECT_FALSE(registry.reserve_teardown("a")) << "one teardown at a time";
  EXPECT_EQ(registry.teardown_count(), 1u);
  const auto removed = registry.remove("a", nullptr);
  EXPECT_TRUE(removed.removed);
  ASSERT_NE(registry.find("a"), nullptr) << "the teardown mark outlives the state";
  EXPECT_TRUE(registry.tearing_down("a"));
  registry.finish_teardown("a");
  EXPECT_EQ(registry.find("a"), nullptr);
  EXPECT_EQ(registry.teardown_count(), 0u);
}

TEST(SandboxRegistryTest, RemoveTakesOnlyTheInfoItWasAskedAbout) {
  SandboxRegistry registry;
  const InfoPtr current = info("a");
  registry.install_active("a", client("a"), current, kAlice, 1.0);
  EXPECT_FALSE(registry.remove("a", info("a")).removed) << "another info: a newer sandbox";
  EXPECT_TRUE(registry.find("a")->active());
  EXPECT_TRUE(registry.remove("a", current).removed);
  EXPECT_EQ(registry.find("a"), nullptr);
  EXPECT_EQ(registry.conversations().find(kAlice), registry.conversations().end());
}

TEST(SandboxRegistryTest, AForgetYieldsToATeardownAPublishAndANewerAcquisition) {
  SandboxRegistry registry;
  registry.install_active("a", client("a"), info("a"), kAlice, 1.0);
  const char* kept = nullptr;

  registry.begin_publish("a");
  EXPECT_EQ(registry.forget("a", std::nullopt, &kept), nullptr);
  EXPECT_NE(kept, nullptr);
  EXPECT_TRUE(registry.find("a")->active()) << "kept while its lease is being published";
  registry.end_publish("a", /*taken=*/true);
  const auto epoch = registry.epoch_of("a");
  ASSERT_TRUE(epoch.has_value());

  kept = nullptr;
  EXPECT_EQ(registry.forget("a", *epoch - 1, &kept), nullptr) << "an older lease check";
  EXPECT_NE(kept, nullptr);
  EXPECT_TRUE(registry.find("a")->active());

  kept = nullptr;
  EXPECT_NE(registry.forget("a", *epoch, &kept), nullptr) << "the client, to be closed";
  EXPECT_EQ(kept, nullptr);
  EXPECT_EQ(registry.find("a"), nullptr);
  EXPECT_EQ(registry.active_count(), 0u);
}

TEST(SandboxRegistryTest, TakeWarmEmptiesThePoolAndLeavesActiveOnes) {
  SandboxRegistry registry;
  registry.install_active("a", client("a"), info("a"), kAlice, 1.0);
  registry.add_released("w1", info("w1"), 1.0, kBob);
  registry.add_released("w2", info("w2"), 2.0, std::nullopt);
  const auto taken = registry.take_released();
  EXPECT_EQ(taken.size(), 2u);
  EXPECT_EQ(registry.warm_count(), 0u);
  EXPECT_EQ(registry.find("w1"), nullptr);
  EXPECT_TRUE(registry.find("a")->active());
}

// The ceilings' counts are kept beside the entries (O(1) per admission): after any
// sequence of operations they equal what a walk over every entry counts.
TEST(SandboxRegistryTest, TheCeilingCountsAlwaysEqualAWalkOverTheEntries) {
  SandboxRegistry registry;
  const std::vector<std::string> ids = {"a", "b", "c", "d", "e"};
  const std::vector<std::string> users = {"alice", "bob", ""};
  const auto walked_slots = [&](const std::string& creating) {
    std::size_t n = 0;
    registry.for_each([&](const std::string& id, const SandboxEntry& e) {
      if (e.active() || e.released()) {
        ++n;
      } else if (id != creating) {
        n += static_cast<std::size_t>(e.creations);
      }
    });
    return n;
  };
  const auto walked_user = [&](const std::string& user, const std::string& creating) {
    std::size_t n = 0;
    registry.for_each([&](const std::string& id, const SandboxEntry& e) {
      if (e.active() || e.released()) {
        if (e.identity && e.identity->user_id == user) ++n;
      } else if (id != creating && e.creating_user == user) {
        n += static_cast<std::size_t>(e.creations);
      }
    });
    return n;
  };
  std::mt19937 random(23);
  for (int step = 0; step < 20000; ++step) {
    const std::string& id = ids[random() % ids.size()];
    const std::string& user = users[random() % users.size()];
    const ThreadKey key{user.empty() ? "anon" : user, "t-" + id};
    switch (random() % 9) {
      case 0:
        registry.begin_creation(id, user);
        break;
      case 1:
        registry.end_creation(id);
        break;
      case 2:
        if (!registry.find(id) || !registry.find(id)->active()) {
          registry.install_active(id, client(id), info(id), key, step);
        }
        break;
      case 3:
        registry.park(id, step);
        break;
      case 4:
        registry.add_released(id, info(id), step, key, random() % 2 == 0);
        break;
      case 5:
        registry.remove(id, nullptr);
        break;
      case 6: {
        const SandboxEntry* e = registry.find(id);
        if (e && e->released()) registry.erase_released_if(id, e->info);
        break;
      }
      case 7: {
        const char* kept = nullptr;
        registry.forget(id, std::nullopt, &kept);
        break;
      }
      case 8: {
        const SandboxEntry* e = registry.find(id);
        if (e && e->warm()) registry.mark_paused(id, e->info, e->since);
        if (e && e->paused()) registry.mark_thawed(id, e->info);
        break;
      }
    }
    for (const std::string& creating : {std::string("a"), std::string("zz")}) {
      ASSERT_EQ(registry.slots_in_use(creating), walked_slots(creating)) << "step " << step;
      for (const std::string& u : users) {
        ASSERT_EQ(registry.sandboxes_of_user(u, creating), walked_user(u, creating))
            << "step " << step << " user '" << u << "'";
      }
    }
  }
}

}  // namespace
}  // namespace sandboxd::core

// The fair queue of `overflow_policy: wait` as a property of the type: no threads,
// no clock. First come, first served per the ceiling that blocks each waiter.
#include "lifecycle/capacity_queue.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace sandboxd::core {
namespace {

using Blocked = CapacityQueue::Blocked;

TEST(CapacityQueueTest, TheFleetSlotGoesToTheEarliestWaiterThatCanTakeIt) {
  CapacityQueue queue;
  const auto anyone = [](const std::string&) { return true; };
  const auto first = queue.enqueue("alice");
  const auto second = queue.enqueue("bob");
  EXPECT_EQ(queue.blocked_by(second, true, anyone), Blocked::total) << "bob came later";
  EXPECT_EQ(queue.blocked_by(first, true, anyone), Blocked::none);
  EXPECT_EQ(queue.blocked_by(first, false, anyone), Blocked::total) << "no room at all";
  queue.remove(first);
  EXPECT_EQ(queue.blocked_by(second, true, anyone), Blocked::none) << "now bob is first";
  EXPECT_EQ(queue.size(), 1u);
  queue.remove(second);
  queue.remove(second);  // twice: ignored
  EXPECT_EQ(queue.size(), 0u);
}

TEST(CapacityQueueTest, AWaiterBlockedByItsOwnUsersCeilingDoesNotHoldUpOthers) {
  CapacityQueue queue;
  std::set<std::string> full{"alice"};
  const auto has_room = [&](const std::string& user) { return full.count(user) == 0; };
  const auto alice = queue.enqueue("alice");
  const auto alice_again = queue.enqueue("alice");
  const auto bob = queue.enqueue("bob");
  EXPECT_EQ(queue.blocked_by(alice, true, has_room), Blocked::per_user);
  EXPECT_EQ(queue.blocked_by(bob, true, has_room), Blocked::none)
      << "alice cannot take the fleet slot, so bob, next in line, may";
  full.clear();  // one of alice's sandboxes went away
  EXPECT_EQ(queue.blocked_by(bob, true, has_room), Blocked::total) << "alice is first again";
  EXPECT_EQ(queue.blocked_by(alice_again, true, has_room), Blocked::per_user)
      << "alice's own earlier waiter goes first";
  EXPECT_EQ(queue.blocked_by(alice, true, has_room), Blocked::none);
}

}  // namespace
}  // namespace sandboxd::core

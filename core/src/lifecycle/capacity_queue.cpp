#include "capacity_queue.hpp"

#include <algorithm>
#include <set>

namespace sandboxd::core {

std::uint64_t CapacityQueue::enqueue(const std::string& user) {
  const std::uint64_t ticket = next_ticket_++;
  waiting_.push_back({ticket, user});
  return ticket;
}

void CapacityQueue::remove(std::uint64_t ticket) {
  waiting_.remove_if([&](const Waiter& waiter) { return waiter.ticket == ticket; });
}

CapacityQueue::Blocked CapacityQueue::blocked_by(
    std::uint64_t ticket, bool fleet_has_room,
    const std::function<bool(const std::string& user)>& user_has_room) const {
  const auto self = std::find_if(waiting_.begin(), waiting_.end(),
                                 [&](const Waiter& waiter) { return waiter.ticket == ticket; });
  const std::string* user = self == waiting_.end() ? nullptr : &self->user;
  // Earlier waiters: everyone before `self` (all of them for an unknown ticket).
  std::set<std::string> users_seen;
  bool earlier_takes_fleet_slot = false;
  bool earlier_of_same_user = false;
  for (auto it = waiting_.begin(); it != self; ++it) {
    const bool first_of_user = users_seen.insert(it->user).second;
    if (user && it->user == *user) earlier_of_same_user = true;
    if (first_of_user && !earlier_takes_fleet_slot && user_has_room(it->user)) {
      earlier_takes_fleet_slot = true;
    }
  }
  if (user && (earlier_of_same_user || !user_has_room(*user))) return Blocked::per_user;
  if (!fleet_has_room || earlier_takes_fleet_slot) return Blocked::total;
  return Blocked::none;
}

}  // namespace sandboxd::core

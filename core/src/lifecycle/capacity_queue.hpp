// Who waits for a capacity ceiling, in arrival order (issue 23: `overflow_policy: wait` is a
// fair queue, first come first served per the ceiling that blocks it). Pure data: no clock,
// no lock, no I/O. The provider holds it GUARDED_BY its registry mutex, beside the registry
// whose counts decide the room, so "is there room" and "take it" are one step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <string>

namespace sandboxd::core {

class CapacityQueue {
 public:
  enum class Blocked {
    none,      // it may take a slot now
    total,     // the fleet ceiling (replicas), or an earlier waiter that may take the slot
    per_user,  // its user's ceiling (max_per_user), or an earlier waiter of the same user
  };

  // A new waiter at the back; returns its ticket.
  std::uint64_t enqueue(const std::string& user);
  void remove(std::uint64_t ticket);  // served, refused or gone; unknown tickets are ignored
  std::size_t size() const { return waiting_.size(); }

  // Whether `ticket` may take a slot: its user must have room (`user_has_room`) and no earlier
  // waiter of the same user may be waiting; then the fleet must have room and no earlier
  // waiter that could take it (its own user has room and it is its user's first) may be
  // waiting. An unknown ticket is treated as a newcomer at the back.
  Blocked blocked_by(std::uint64_t ticket, bool fleet_has_room,
                     const std::function<bool(const std::string& user)>& user_has_room) const;

 private:
  struct Waiter {
    std::uint64_t ticket;
    std::string user;
  };
  std::list<Waiter> waiting_;
  std::uint64_t next_ticket_ = 1;
};

}  // namespace sandboxd::core

// What happened to sandboxes, newest last (the operator's live view: its events): a
// bounded ring of lifecycle events a host keeps in memory, each numbered so that a reader asks
// for what came after the last one it saw (an event stream's Last-Event-ID) and learns when
// some were dropped before it could read them.
//
// Lock story: `mutex_` guards the ring and the next number; a record is a push under it, a read
// copies what was asked under it. Nothing else is called under it (the clock is read before).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/clock.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::core {

// An acquisition's path (reused, reclaimed, resumed, discovered, created, claimed) is its kind;
// then what a release, the background passes or a door did.
enum class LifecycleEventKind {
  reused,
  reclaimed,
  resumed,
  discovered,
  created,
  claimed,
  released,
  paused,
  evicted,    // a released sandbox stopped to make room (replicas)
  reaped,     // stopped for idleness (idle_timeout)
  expired,    // stopped at max_lifetime_seconds
  adopted,    // an orphan taken over by reconciliation
  destroyed,  // by a door's destroy or at shutdown
  refused,    // a creation refused by a ceiling (its reason says which)
  // stopped because what it wrote outside its mounts (its writable layer) passed disk_limit
  over_disk_limit,
  restored,     // made from a snapshot (its reason names the snapshot)
  snapshotted,  // a snapshot taken of it (its reason names the snapshot)
  // idle past archive_after_seconds: snapshotted, then its container removed (the reason names
  // the snapshot); the conversation's next acquire restores it
  archived,
};
const char* to_string(LifecycleEventKind kind);

struct LifecycleEvent {
  std::uint64_t sequence = 0;  // 1, 2, …: one more per event, never reused
  double time = 0.0;           // wall-clock seconds
  LifecycleEventKind kind = LifecycleEventKind::created;
  std::string sandbox_id;
  // Whose it is, as far as the step knows: an adopted orphan has neither, a capacity refusal
  // (decided per user) the user only.
  std::optional<std::string> user_id;
  std::optional<std::string> thread_id;
  std::string reason;  // "" or why: idle_timeout, replica_enforcement, capacity, …
};

struct LifecycleEventPage {
  std::vector<LifecycleEvent> events;  // in order, after the sequence asked for
  std::uint64_t last = 0;              // the newest event's number (0: none yet)
  // Events after the one asked for that the ring no longer holds (a reader that fell behind).
  std::uint64_t dropped = 0;
};

class LifecycleEventLog {
 public:
  static constexpr std::size_t kDefaultCapacity = 1000;

  explicit LifecycleEventLog(std::shared_ptr<Clock> clock, std::size_t capacity = kDefaultCapacity);

  void record(LifecycleEventKind kind, const std::string& sandbox_id,
              std::optional<std::string> user_id, std::optional<std::string> thread_id,
              std::string reason = "");

  // The events numbered above `after`, at most `limit` of them (the oldest first).
  LifecycleEventPage after(std::uint64_t after, std::size_t limit) const;

  std::size_t capacity() const { return capacity_; }

 private:
  const std::shared_ptr<Clock> clock_;
  const std::size_t capacity_;
  mutable Mutex mutex_;
  std::deque<LifecycleEvent> ring_ GUARDED_BY(mutex_);
  std::uint64_t next_ GUARDED_BY(mutex_) = 1;
};

}  // namespace sandboxd::core

// The ring of lifecycle events (lifecycle_events.hpp).
#include "sandboxd/core/lifecycle_events.hpp"

#include <algorithm>
#include <stdexcept>

namespace sandboxd::core {

const char* to_string(LifecycleEventKind kind) {
  switch (kind) {
    case LifecycleEventKind::reused:
      return "reused";
    case LifecycleEventKind::reclaimed:
      return "reclaimed";
    case LifecycleEventKind::resumed:
      return "resumed";
    case LifecycleEventKind::discovered:
      return "discovered";
    case LifecycleEventKind::created:
      return "created";
    case LifecycleEventKind::claimed:
      return "claimed";
    case LifecycleEventKind::released:
      return "released";
    case LifecycleEventKind::paused:
      return "paused";
    case LifecycleEventKind::evicted:
      return "evicted";
    case LifecycleEventKind::reaped:
      return "reaped";
    case LifecycleEventKind::expired:
      return "expired";
    case LifecycleEventKind::adopted:
      return "adopted";
    case LifecycleEventKind::destroyed:
      return "destroyed";
    case LifecycleEventKind::refused:
      return "refused";
    case LifecycleEventKind::over_disk_limit:
      return "over_disk_limit";
    case LifecycleEventKind::restored:
      return "restored";
    case LifecycleEventKind::snapshotted:
      return "snapshotted";
    case LifecycleEventKind::archived:
      return "archived";
  }
  return "?";
}

LifecycleEventLog::LifecycleEventLog(std::shared_ptr<Clock> clock, std::size_t capacity)
    : clock_(std::move(clock)), capacity_(capacity) {
  if (!clock_) throw std::invalid_argument("LifecycleEventLog needs a clock");
  if (capacity_ == 0) throw std::invalid_argument("LifecycleEventLog capacity must be > 0");
}

void LifecycleEventLog::record(LifecycleEventKind kind, const std::string& sandbox_id,
                               std::optional<std::string> user_id,
                               std::optional<std::string> thread_id, std::string reason) {
  LifecycleEvent event{0,
                       clock_->wall_now(),
                       kind,
                       sandbox_id,
                       std::move(user_id),
                       std::move(thread_id),
                       std::move(reason)};
  MutexLock lock(mutex_);
  event.sequence = next_++;
  if (ring_.size() == capacity_) ring_.pop_front();
  ring_.push_back(std::move(event));
}

LifecycleEventPage LifecycleEventLog::after(std::uint64_t after, std::size_t limit) const {
  LifecycleEventPage page;
  MutexLock lock(mutex_);
  page.last = next_ - 1;
  if (ring_.empty() || after >= page.last) return page;
  const std::uint64_t oldest = ring_.front().sequence;
  if (after + 1 < oldest) page.dropped = oldest - after - 1;
  // Numbers are consecutive in the ring: the first wanted one is found by subtraction.
  const std::size_t first = after < oldest ? 0 : static_cast<std::size_t>(after + 1 - oldest);
  const std::size_t count = std::min(limit, ring_.size() - first);
  page.events.assign(ring_.begin() + static_cast<std::ptrdiff_t>(first),
                     ring_.begin() + static_cast<std::ptrdiff_t>(first + count));
  return page;
}

}  // namespace sandboxd::core

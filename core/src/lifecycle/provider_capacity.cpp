// Provider: the ceilings. With `overflow_policy` set, `replicas` is a ceiling on
// active + released + creating sandboxes; `max_per_user` is one per user. A creation first
// evicts released sandboxes (the user's own for the per-user ceiling) when that makes room;
// when everything is active it queues in arrival order (wait, up to acquire_timeout), creates
// up to burst_limit beyond (burst), or is refused (reject): one ServiceError of kind capacity
// naming the ceiling and the counts (serve answers 429 with Retry-After, sandboxctl exits 7).
//
// With a lease store that keeps a CapacityLedger (SQLite, Redis), the ceilings are
// deployment-wide: a creation admitted here also reserves its slot in the store, atomically
// against every other gateway; reservations are renewed with the leases and expire one TTL
// after a gateway stops renewing them. Without one (the memory store), they hold per process.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "fixed_decimals.hpp"
#include "provider_impl.hpp"
#include "running_cancellation.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "scope_exit.hpp"

namespace sandboxd::core {
namespace {

// How long a queued creation sleeps before it looks again when nothing woke it: a missed
// wake-up (a peer's teardown, a clock moved by a test) costs at most this.
constexpr double kCapacityRecheckSeconds = 0.25;

}  // namespace

std::optional<OverflowPolicy> overflow_policy_from(std::string_view word) {
  if (word == "wait") return OverflowPolicy::wait;
  if (word == "reject") return OverflowPolicy::reject;
  if (word == "burst") return OverflowPolicy::burst;
  return std::nullopt;
}

const char* to_string(OverflowPolicy policy) {
  switch (policy) {
    case OverflowPolicy::soft:
      return "soft";
    case OverflowPolicy::wait:
      return "wait";
    case OverflowPolicy::reject:
      return "reject";
    case OverflowPolicy::burst:
      return "burst";
  }
  return "?";
}

std::string Provider::Impl::capacity_refusal(const char* reason, const std::string& user_id,
                                             double waited_seconds) {
  std::size_t active = 0, released = 0, waiting = 0, of_user = 0;
  {
    MutexLock lock(mutex_);
    active = registry_.active_count();
    released = registry_.warm_count() + registry_.paused_count();
    waiting = capacity_queue_.size();
    if (options_.max_per_user > 0) of_user = registry_.sandboxes_of_user(user_id, "");
  }
  const std::string reason_name = reason;
  std::string message;
  std::optional<std::size_t> deployment_total, deployment_of_user;
  if (ledger_) {
    try {
      deployment_total = ledger_->reserved("");
      if (options_.max_per_user > 0) deployment_of_user = ledger_->reserved(user_id);
    } catch (const std::exception&) {
      // The refusal stands; only its counts are missing.
    }
  }
  if (reason_name == "per_user") {
    message = "user " + user_id + " has " + std::to_string(deployment_of_user.value_or(of_user)) +
              " of max_per_user " + std::to_string(options_.max_per_user) + " sandboxes" +
              (deployment_of_user ? " in the deployment" : "") + ", none of them released here";
  } else {
    // What this gateway holds, the same words whether the ceiling is local or the deployment's.
    std::string here =
        std::to_string(active) + " active, " + std::to_string(released) + " released";
    if (options_.overflow_policy == OverflowPolicy::burst) {
      here += ", burst_limit " + std::to_string(options_.burst_limit) + " reached";
    }
    const std::string replicas = std::to_string(options_.replicas);
    message = deployment_total && *deployment_total >= active + released
                  ? "the deployment holds " + std::to_string(*deployment_total) + " of " +
                        replicas + " replica slots (this gateway: " + here + ")"
                  : "all " + replicas + " replica slots are in use (" + here + ")";
  }
  if (reason_name == "queue_full") {
    message = std::to_string(options_.max_waiting) + " creations already wait for a slot, " +
              "the most this host lets queue: " + message;
  } else if (reason_name == "wait_timeout") {
    message = "no slot freed within acquire_timeout " + fixed(options_.acquire_timeout_seconds, 1) +
              "s (waited " + fixed(waited_seconds, 1) + "s, " + std::to_string(waiting) +
              " still waiting): " + message;
  } else {
    message += "; overflow_policy " + std::string(to_string(options_.overflow_policy));
  }
  return "capacity (" + reason_name + "): " + message + "; try again later";
}

void Provider::Impl::admit_creation(const std::string& sandbox_id, const std::string& user_id) {
  const bool queues = options_.overflow_policy == OverflowPolicy::wait;
  const auto replicas = static_cast<std::size_t>(options_.replicas);
  const auto per_user = static_cast<std::size_t>(options_.max_per_user);
  const double started = now();
  const auto started_steady = std::chrono::steady_clock::now();
  std::optional<std::uint64_t> ticket;
  bool counted_wait = false;
  bool for_deployment_logged = false;
  // An acquisition cancelled meanwhile (its serve client hung up, its acquire_async was
  // cancelled) leaves the queue at once instead of holding its place, and then a slot, until a
  // slot frees or its deadline passes.
  Cancellation* const cancellation = running_cancellation();
  const auto cancelled = [cancellation] {
    return cancellation != nullptr && cancellation->cancelled();
  };
  if (cancellation != nullptr) {
    cancellation->set_wake([this] {
      { MutexLock lock(mutex_); }  // a waiter between its check and its wait is waiting now
      notify_capacity_freed();
    });
  }
  ScopeExit clear_wake([cancellation] {
    if (cancellation != nullptr) cancellation->clear_wake();
  });
  ScopeExit leave_queue([&] {
    if (counted_wait) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started_steady).count();
      events_.capacity_wait_microseconds.fetch_add(static_cast<std::uint64_t>(waited * 1e6),
                                                   std::memory_order_relaxed);
      const auto& bounds = ProviderEventCounts::kCapacityWaitBounds;
      const auto bucket = static_cast<std::size_t>(
          std::lower_bound(bounds.begin(), bounds.end(), waited) - bounds.begin());
      events_.capacity_wait_buckets[bucket].fetch_add(1, std::memory_order_relaxed);
    }
    if (!ticket) return;
    {
      MutexLock lock(mutex_);
      capacity_queue_.remove(*ticket);
    }
    notify_capacity_freed();  // the next waiter may be first now
  });
  const auto refuse = [&](const char* reason, std::atomic<std::uint64_t>& counter) {
    counter.fetch_add(1, std::memory_order_relaxed);
    const std::string message = capacity_refusal(reason, user_id, now() - started);
    log(LogLevel::warning, "Refusing sandbox " + sandbox_id + ": " + message);
    // Ceilings are per user: the thread is not known here.
    if (event_log_) {
      event_log_->record(LifecycleEventKind::refused, sandbox_id, user_id, std::nullopt, reason);
    }
    throw ServiceError(ErrorKind::capacity, message, 1.0);
  };

  while (true) {
    CapacityQueue::Blocked blocked = CapacityQueue::Blocked::none;
    bool bursting = false;
    {
      MutexLock lock(mutex_);
      if (registry_.shut_down()) {
        throw std::runtime_error("the provider is shutting down; not creating sandbox " +
                                 sandbox_id);
      }
      if (cancelled()) {
        throw AsyncAcquisitionCancelled("the acquisition of sandbox " + sandbox_id +
                                        " was cancelled while it waited for a slot");
      }
      if (!ticket) ticket = capacity_queue_.enqueue(user_id);
      const std::size_t in_use = registry_.slots_in_use(sandbox_id);
      const bool fleet_room = options_.overflow_policy == OverflowPolicy::soft || in_use < replicas;
      const auto user_room = [&](const std::string& user) REQUIRES(mutex_) {
        return per_user == 0 ||
               registry_.sandboxes_of_user(user, user == user_id ? sandbox_id : "") < per_user;
      };
      blocked = capacity_queue_.blocked_by(*ticket, fleet_room, user_room);
      const bool can_evict = registry_.warm_count() + registry_.paused_count() > 0;
      if (blocked == CapacityQueue::Blocked::total && !can_evict &&
          options_.overflow_policy == OverflowPolicy::burst &&
          in_use < replicas + static_cast<std::size_t>(options_.burst_limit)) {
        bursting = true;
        blocked = CapacityQueue::Blocked::none;
      }
      if (blocked == CapacityQueue::Blocked::none && !ledger_) {
        capacity_queue_.remove(*ticket);
        ticket.reset();
        registry_.begin_creation(sandbox_id, user_id);
      }
    }
    if (blocked == CapacityQueue::Blocked::none && ledger_) {
      // Room here; now in the deployment, atomically in the store (outside the mutex: I/O).
      // Our ticket stays at the head meanwhile, so nobody here overtakes us.
      const std::size_t total = options_.overflow_policy == OverflowPolicy::soft ? 0
                                : bursting
                                    ? replicas + static_cast<std::size_t>(options_.burst_limit)
                                    : replicas;
      const auto refusal = ledger_->reserve(sandbox_id, user_id, total, per_user);
      if (refusal == CapacityLedger::Refusal::none) {
        MutexLock lock(mutex_);
        capacity_queue_.remove(*ticket);
        ticket.reset();
        registry_.begin_creation(sandbox_id, user_id);
      } else {
        blocked = refusal == CapacityLedger::Refusal::per_user ? CapacityQueue::Blocked::per_user
                                                               : CapacityQueue::Blocked::total;
        bursting = false;
        if (!for_deployment_logged) {
          for_deployment_logged = true;
          log(LogLevel::info, "Sandbox " + sandbox_id + ": the deployment-wide " +
                                  (refusal == CapacityLedger::Refusal::per_user
                                       ? "max_per_user=" + std::to_string(per_user)
                                       : "ceiling of " + std::to_string(total)) +
                                  " is reached (reservations in the lease store)");
        }
      }
    }
    if (blocked == CapacityQueue::Blocked::none) {
      if (bursting) {
        events_.bursts.fetch_add(1, std::memory_order_relaxed);
        log(LogLevel::warning, "All " + std::to_string(options_.replicas) +
                                   " replica slots are in active use; creating sandbox " +
                                   sandbox_id + " within burst_limit " +
                                   std::to_string(options_.burst_limit));
      }
      return;
    }
    // Room a released sandbox holds is made by stopping it, oldest first (paused before warm).
    const bool for_user = blocked == CapacityQueue::Blocked::per_user;
    if (auto evicted =
            evict_oldest_warm(for_user ? std::optional<std::string>(user_id) : std::nullopt)) {
      log(LogLevel::info, "Evicted released sandbox " + *evicted + " to stay within " +
                              (for_user ? "max_per_user=" + std::to_string(per_user)
                                        : "replicas=" + std::to_string(replicas)));
      continue;
    }
    if (!queues) {
      if (for_user) refuse("per_user", events_.rejections_per_user);
      refuse("capacity", events_.rejections_capacity);
    }
    const double remaining = started + options_.acquire_timeout_seconds - now();
    if (remaining <= 0) refuse("wait_timeout", events_.rejections_wait_timeout);
    if (!counted_wait && options_.max_waiting > 0) {
      bool full = false;
      {
        MutexLock lock(mutex_);
        full = capacity_queue_.size() > options_.max_waiting;  // ours is in it already
      }
      if (full) refuse("queue_full", events_.rejections_queue_full);
    }
    if (!counted_wait) {
      counted_wait = true;
      events_.capacity_waits.fetch_add(1, std::memory_order_relaxed);
      log(LogLevel::info, "Sandbox " + sandbox_id + " waits for a slot (" +
                              (for_user ? "max_per_user=" + std::to_string(per_user)
                                        : "replicas=" + std::to_string(replicas)) +
                              ", at most " + fixed(remaining, 1) + "s)");
    }
    MutexLock lock(mutex_);
    if (cancelled()) continue;  // checked under the mutex its wake takes: no lost wake-up
    lock.wait_for(capacity_freed_,
                  std::chrono::duration<double>(std::min(remaining, kCapacityRecheckSeconds)));
  }
}

Provider::Capacity Provider::Impl::capacity() {
  Provider::Capacity capacity;
  capacity.replicas = options_.replicas;
  capacity.overflow_policy = to_string(options_.overflow_policy);
  capacity.burst_limit = options_.burst_limit;
  capacity.max_per_user = options_.max_per_user;
  capacity.max_waiting = options_.max_waiting;
  {
    MutexLock lock(mutex_);
    capacity.waiting = capacity_queue_.size();
    capacity.in_use_here = registry_.slots_in_use("");
  }
  capacity.fleet_wide = ledger_ != nullptr;
  if (ledger_ != nullptr) {
    try {
      capacity.fleet_reserved = ledger_->reserved();
    } catch (const std::exception& e) {
      capacity.fleet_error = e.what();
    }
  }
  return capacity;
}

}  // namespace sandboxd::core

// Provider: the paused tier. A sandbox released longer than pause_after_seconds ago
// is frozen by the backend's SandboxPausing capability: it keeps its memory, processes and
// files and uses no CPU. Acquiring it thaws it (path `resumed`); eviction takes paused ones
// first; the idle timeout still counts from its release. Off unless pause_after_seconds is set
// and the backend can pause, so DeerFlow's behaviour stays the default.
#include <chrono>
#include <cstdio>

#include "fixed_decimals.hpp"
#include "provider_impl.hpp"
#include "scope_exit.hpp"

namespace sandboxd::core {
int Provider::Impl::pause_idle_warm() {
  if (!pausing_enabled()) return 0;
  std::vector<std::pair<std::string, WarmEntry>> due;
  double current = 0;
  {
    MutexLock lock(mutex_);
    current = now();
    for (auto& [id, entry] : registry_.released_entries()) {
      if (!entry.paused && current - entry.released_at >= options_.pause_after_seconds) {
        due.emplace_back(id, std::move(entry));
      }
    }
  }
  sort_by_id(due);
  int paused = 0;
  for (const auto& candidate : due) {
    const std::string& id = candidate.first;
    const WarmEntry& entry = candidate.second;
    const double warm_for = current - entry.released_at;
    if (!policy_->pause_warm({id, entry.released_at, entry.identity, false}, warm_for)) continue;
    // Reserved as a teardown is: a reclaim of this sandbox, an eviction or the reaper waits
    // for the pause to finish instead of racing it, so an acquired sandbox is never frozen.
    // The very entry of the snapshot (still_this_warm_entry), and running, not paused meanwhile.
    const Predicate still_warm =
        [id, same = still_this_warm_entry(id, entry)](const SandboxRegistry& registry) {
          return same(registry) && registry.find(id)->warm();
        };
    if (!reserve_local_teardown(id, still_warm)) continue;
    ScopeExit finish([&] { finish_local_teardown(id); });
    try {
      pausing_->pause(*entry.info);
    } catch (const std::exception& e) {
      events_.pause_failures.fetch_add(1, std::memory_order_relaxed);
      log(LogLevel::warning,
          "Could not pause warm-pool sandbox " + id + " (it stays warm): " + e.what());
      continue;
    }
    bool marked = false;
    {
      MutexLock lock(mutex_);
      marked = registry_.mark_paused(id, entry.info, entry.released_at);
    }
    if (!marked) {
      // Shutdown took it from the pool meanwhile: it is stopped next, frozen or not.
      continue;
    }
    ++paused;
    events_.pauses.fetch_add(1, std::memory_order_relaxed);
    note(LifecycleEventKind::paused, id, entry.identity);
    log_lazily(LogLevel::info, [&] {
      return "Paused warm-pool sandbox " + id + " (released " + fixed(warm_for, 1) + "s ago)";
    });
  }
  return paused;
}

bool Provider::Impl::thaw_for_reclaim(const std::string& sandbox_id, const InfoPtr& info) {
  try {
    pausing_->unpause(*info);
    return true;
  } catch (const std::exception& e) {
    if (check_alive(sandbox_id, *info) == false) {
      drop_unhealthy_sandbox(sandbox_id, "paused container is no longer there", info);
      return false;  // the acquisition goes on to create one
    }
    log(LogLevel::warning, "Could not resume paused sandbox " + sandbox_id + ": " + e.what());
    throw;
  }
}

void Provider::Impl::thaw_found(const SandboxInfo& info) {
  if (!pausing_) return;
  try {
    pausing_->unpause(info);  // "not paused" counts as done
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Could not make sure sandbox " + info.sandbox_id + " is not paused: " + e.what());
  }
}

}  // namespace sandboxd::core

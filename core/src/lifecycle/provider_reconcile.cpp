// Provider: orphan reconciliation (design §8): running containers of ours that nobody here
// tracks, adopted into the warm pool once their lease has been free for one TTL.
#include <cmath>
#include <cstdio>
#include <set>

#include "fixed_decimals.hpp"
#include "provider_impl.hpp"

namespace sandboxd::core {
ReconcileReport Provider::Impl::reconcile_orphans() {
  ReconcileReport report;
  std::vector<SandboxInfo> running;
  try {
    running = backend_->list_running();
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        std::string("Failed to enumerate running containers during reconciliation: ") + e.what());
    report.listed = false;
    return report;
  }
  {
    std::set<std::string> present;
    for (const auto& info : running) present.insert(info.sandbox_id);
    MutexLock lock(mutex_);
    auto& unowned = registry_.unowned_since();
    for (auto it = unowned.begin(); it != unowned.end();) {
      it = present.count(it->first) ? std::next(it) : unowned.erase(it);
    }
  }
  // Whatever it found, this pass ran: the next one is a periodic pass, not the startup's.
  const bool first_pass = !reconciled_once_.exchange(true);
  // Isolation is kept on every pass, not only at hand-outs: whatever the engine undid since (a
  // restart of a container nobody acquires) is re-applied.
  if (isolation_) {
    try {
      for (const std::string& line : isolation_->keep_all_isolation()) {
        log(LogLevel::warning, line);
      }
    } catch (const std::exception& e) {
      log(LogLevel::warning, std::string("Keeping isolation during reconciliation: ") + e.what());
    }
  }
  if (running.empty()) return report;

  const double ttl = ownership_->ttl_seconds();
  report.found = static_cast<int>(running.size());
  int& adopted = report.adopted;
  int& skipped = report.skipped;
  int& deferred = report.deferred;
  for (const auto& info : running) {
    const std::string& id = info.sandbox_id;
    const double current = now();
    const double age = info.created_at > 0 ? current - info.created_at : INFINITY;
    if (ownership_->supports_cross_process()) {
      std::optional<std::string> owner;
      try {
        owner = ownership_->owner(id);
      } catch (const std::exception& e) {
        log(LogLevel::warning, "Could not read sandbox ownership for " + id +
                                   " during reconciliation (deferring adoption): " + e.what());
        ++deferred;
        continue;
      }
      bool adoptable = false;
      {
        MutexLock lock(mutex_);
        auto& unowned = registry_.unowned_since();
        if (owner) {
          unowned.erase(id);
        } else {
          const double first_seen = unowned.try_emplace(id, current).first->second;
          adoptable = current - first_seen >= ttl;
        }
      }
      if (!adoptable) {
        ++deferred;
        log(LogLevel::debug,
            "Deferring adoption of sandbox " + id + " (owned or within recovery grace)");
        continue;
      }
    }
    if (!policy_->adopt_orphan(info)) {
      ++skipped;
      continue;
    }
    if (!claim_ownership(id, false)) {
      ++skipped;
      continue;
    }
    thaw_found(info);  // a previous process may have paused it; it is pooled as running
    {
      MutexLock lock(mutex_);
      if (registry_.held(id)) continue;
      if (registry_.tearing_down(id) || registry_.shut_down()) {
        ++deferred;  // shutting down: a late adoption would never be stopped
        continue;
      }
      registry_.add_released(id, std::make_shared<const SandboxInfo>(info), current, std::nullopt);
      registry_.unowned_since().erase(id);
    }
    ++adopted;
    events_.adoptions.fetch_add(1, std::memory_order_relaxed);
    note(LifecycleEventKind::adopted, id, std::nullopt);
    log(LogLevel::info, "Adopted container " + id + " into warm pool (age: " +
                            (std::isinf(age) ? std::string("inf") : fixed(age, 0)) + "s)");
  }
  log(LogLevel::info, std::string(first_pass ? "Startup reconciliation" : "Reconciliation pass") +
                          " complete: " + std::to_string(adopted) + " adopted into warm pool, " +
                          std::to_string(skipped) + " skipped (live peer ownership), " +
                          std::to_string(deferred) +
                          " deferred (owned or within recovery grace), " +
                          std::to_string(running.size()) + " total found");
  return report;
}

}  // namespace sandboxd::core

// ownership_memory:MemoryOwnershipStore — the in-process lease store (SPEC §7.4). Peers in
// other processes cannot see these leases, so it only suits a single gateway instance.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "sandboxd/lease_rules.hpp"
#include "sandboxd/sdk.hpp"

namespace sandboxd::plugins::ownership_memory {

class MemoryOwnershipStore final : public OwnershipStore {
 public:
  explicit MemoryOwnershipStore(const PluginContext& context)
      : owner_id_(lease_rules::resolve_owner_id(context)), clock_(context.clock) {
    const PluginConfig options = context.options();
    ttl_seconds_ = lease_rules::read_lease_timing(options).ttl_seconds();
    lease_rules::check_type(options, "memory", "ownership_memory:MemoryOwnershipStore");
    lease_rules::warn_unread_keys(options, *context.logger);
    context.logger->info("Sandbox ownership store: memory (single-instance; ttl=" +
                         lease_rules::format_one_decimal(ttl_seconds_) + "s)");
  }

  const std::string& owner_id() const override { return owner_id_; }
  bool supports_cross_process() const override { return false; }
  double ttl_seconds() const override { return ttl_seconds_; }

  bool take(const std::string& sandbox_id) override {
    std::lock_guard lock(mutex_);
    require_open("take", sandbox_id);
    const double now = clock_->monotonic_now();
    if (!lease_rules::may_take(live_lease(sandbox_id, now))) return false;
    leases_[sandbox_id] = Lease{owner_id_, now + ttl_seconds_, false};
    return true;
  }

  bool claim(const std::string& sandbox_id, bool for_destroy) override {
    std::lock_guard lock(mutex_);
    require_open("claim", sandbox_id);
    const double now = clock_->monotonic_now();
    if (!lease_rules::may_claim(live_lease(sandbox_id, now), owner_id_, for_destroy)) {
      return false;
    }
    leases_[sandbox_id] = Lease{owner_id_, now + ttl_seconds_, for_destroy};
    return true;
  }

  RenewOutcome renew(const std::string& sandbox_id) override {
    std::lock_guard lock(mutex_);
    require_open("renew", sandbox_id);
    const double now = clock_->monotonic_now();
    const RenewOutcome outcome =
        lease_rules::renew_outcome(live_lease(sandbox_id, now), owner_id_);
    if (outcome == RenewOutcome::renewed) leases_[sandbox_id].expires_at = now + ttl_seconds_;
    return outcome;
  }

  void release(const std::string& sandbox_id) override {
    std::lock_guard lock(mutex_);
    require_open("release", sandbox_id);
    if (lease_rules::may_release(live_lease(sandbox_id, clock_->monotonic_now()), owner_id_)) {
      leases_.erase(sandbox_id);
    }
  }

  std::optional<std::string> owner(const std::string& sandbox_id) override {
    std::lock_guard lock(mutex_);
    require_open("read", sandbox_id);
    std::optional<lease_rules::LiveLease> live = live_lease(sandbox_id, clock_->monotonic_now());
    if (!live.has_value()) return std::nullopt;
    return live->owner_id;
  }

  // The test-only view SPEC §7.4 asks for; expires_at is on the monotonic clock.
  std::optional<LeaseRecord> inspect(const std::string& sandbox_id) override {
    std::lock_guard lock(mutex_);
    require_open("inspect", sandbox_id);
    if (!live_lease(sandbox_id, clock_->monotonic_now()).has_value()) return std::nullopt;
    const Lease& lease = leases_.at(sandbox_id);
    return LeaseRecord{lease.owner_id, lease.destroying, lease.expires_at};
  }

  void close() override {
    std::lock_guard lock(mutex_);
    closed_ = true;
    leases_.clear();
  }

 private:
  struct Lease {
    std::string owner_id;
    double expires_at = 0.0;  // monotonic seconds
    bool destroying = false;  // "del" state
  };

  // Caller holds mutex_.
  void require_open(const char* action, const std::string& sandbox_id) const {
    if (closed_) {
      throw OwnershipBackendError(std::string("failed to ") + action + " sandbox ownership for " +
                                  sandbox_id + ": the memory ownership store is closed");
    }
  }

  // The lease for sandbox_id if it has not expired; an expired one is deleted here, so expired
  // entries never accumulate past their next read. Caller holds mutex_.
  std::optional<lease_rules::LiveLease> live_lease(const std::string& sandbox_id, double now) {
    auto it = leases_.find(sandbox_id);
    if (it == leases_.end()) return std::nullopt;
    if (!lease_rules::is_live(it->second.expires_at, now)) {
      leases_.erase(it);
      return std::nullopt;
    }
    return lease_rules::LiveLease{it->second.owner_id, it->second.destroying};
  }

  const std::string owner_id_;
  const std::shared_ptr<Clock> clock_;
  double ttl_seconds_ = 0.0;  // set once in the constructor, read-only afterwards

  // Lock story: mutex_ guards leases_ and closed_. Each public call holds it for its whole
  // read-decide-write, which is what makes claim() atomic. Nothing is called out under it
  // except the clock (a plain reading); the logger is only used in the constructor.
  std::mutex mutex_;
  std::unordered_map<std::string, Lease> leases_;
  bool closed_ = false;
};

SANDBOXD_EXPORT_OWNERSHIP_STORE(MemoryOwnershipStore,
                                "in-process ownership leases (single gateway instance)")

}  // namespace sandboxd::plugins::ownership_memory

// ownership_memory:MemoryOwnershipStore — the in-process lease store (design §7.4). Peers in
// other processes cannot see these leases, so it only suits a single gateway instance.
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "sandboxd/lease_rules.hpp"
#include "sandboxd/sdk.hpp"
#include "sandboxd/thread_annotations.hpp"

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
    MutexLock lock(mutex_);
    require_open("take", sandbox_id);
    const double now = clock_->monotonic_now();
    const auto it = find_live(sandbox_id, now);
    if (!lease_rules::may_take(view_of(it))) return false;
    write_ours(it, sandbox_id, now + ttl_seconds_, false);
    return true;
  }

  bool claim(const std::string& sandbox_id, bool for_destroy) override {
    MutexLock lock(mutex_);
    require_open("claim", sandbox_id);
    const double now = clock_->monotonic_now();
    const auto it = find_live(sandbox_id, now);
    if (!lease_rules::may_claim(view_of(it), owner_id_, for_destroy)) return false;
    write_ours(it, sandbox_id, now + ttl_seconds_, for_destroy);
    return true;
  }

  RenewOutcome renew(const std::string& sandbox_id) override {
    MutexLock lock(mutex_);
    require_open("renew", sandbox_id);
    const double now = clock_->monotonic_now();
    const auto it = find_live(sandbox_id, now);
    const RenewOutcome outcome = lease_rules::renew_outcome(view_of(it), owner_id_);
    if (outcome == RenewOutcome::renewed) it->second.expires_at = now + ttl_seconds_;
    return outcome;
  }

  void release(const std::string& sandbox_id) override {
    MutexLock lock(mutex_);
    require_open("release", sandbox_id);
    const auto it = find_live(sandbox_id, clock_->monotonic_now());
    if (lease_rules::may_release(view_of(it), owner_id_)) leases_.erase(it);
  }

  std::optional<std::string> owner(const std::string& sandbox_id) override {
    MutexLock lock(mutex_);
    require_open("read", sandbox_id);
    const auto it = find_live(sandbox_id, clock_->monotonic_now());
    if (it == leases_.end()) return std::nullopt;
    return it->second.owner_id;
  }

  // The test-only view design §7.4 asks for; expires_at is on the monotonic clock.
  std::optional<LeaseRecord> inspect(const std::string& sandbox_id) override {
    MutexLock lock(mutex_);
    require_open("inspect", sandbox_id);
    const auto it = find_live(sandbox_id, clock_->monotonic_now());
    if (it == leases_.end()) return std::nullopt;
    const Lease& lease = it->second;
    return LeaseRecord{lease.owner_id, lease.destroying, lease.expires_at};
  }

  void close() override {
    MutexLock lock(mutex_);
    closed_ = true;
    leases_.clear();
  }

 private:
  struct Lease {
    std::string owner_id;
    double expires_at = 0.0;  // monotonic seconds
    bool destroying = false;  // "del" state
  };

  void require_open(const char* action, const std::string& sandbox_id) const REQUIRES(mutex_) {
    if (closed_) {
      throw OwnershipBackendError(std::string("failed to ") + action + " sandbox ownership for " +
                                  sandbox_id + ": the memory ownership store is closed");
    }
  }

  using Leases = std::unordered_map<std::string, Lease>;

  // The lease for sandbox_id if it has not expired, else end(); an expired one is deleted here,
  // so expired entries never accumulate past their next read.
  Leases::iterator find_live(const std::string& sandbox_id, double now) REQUIRES(mutex_) {
    auto it = leases_.find(sandbox_id);
    if (it != leases_.end() && !lease_rules::is_live(it->second.expires_at, now)) {
      leases_.erase(it);
      return leases_.end();
    }
    return it;
  }
  // What the decision table sees of it, read in place: take and renew run on every acquire
  // and release, and a copied owner id was an allocation each time.
  std::optional<lease_rules::LiveLeaseView> view_of(Leases::iterator it) const REQUIRES(mutex_) {
    if (it == leases_.end()) return std::nullopt;
    return lease_rules::LiveLeaseView{it->second.owner_id, it->second.destroying};
  }
  // Makes the record at `it` (or a new one) our lease; in place, the owner string keeps its
  // buffer, so re-taking our own lease allocates nothing.
  void write_ours(Leases::iterator it, const std::string& sandbox_id, double expires_at,
                  bool destroying) REQUIRES(mutex_) {
    if (it == leases_.end()) {
      leases_.emplace(sandbox_id, Lease{owner_id_, expires_at, destroying});
      return;
    }
    if (it->second.owner_id != owner_id_) it->second.owner_id = owner_id_;
    it->second.expires_at = expires_at;
    it->second.destroying = destroying;
  }

  const std::string owner_id_;
  const std::shared_ptr<Clock> clock_;
  double ttl_seconds_ = 0.0;  // set once in the constructor, read-only afterwards

  // Lock story: mutex_ guards leases_ and closed_ (checked by clang). Each public call holds it
  // for its whole read-decide-write, which is what makes claim() atomic. Nothing is called out
  // under it except the clock (a plain reading); the logger is only used in the constructor.
  mutable Mutex mutex_;
  Leases leases_ GUARDED_BY(mutex_);
  bool closed_ GUARDED_BY(mutex_) = false;
};

SANDBOXD_EXPORT_OWNERSHIP_STORE(MemoryOwnershipStore,
                                "in-process ownership leases (single gateway instance)")

}  // namespace sandboxd::plugins::ownership_memory

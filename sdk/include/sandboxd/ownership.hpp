// The ownership-lease store interface (design §7.2). A lease names the gateway instance that
// must eventually stop a sandbox; "del" marks one that is being torn down. Every call is
// synchronous and throws OwnershipBackendError when the store cannot answer, so callers fail
// closed. Implementations must be safe to call from several threads at once.
#pragma once

#include <optional>
#include <string>

#include "sandboxd/errors.hpp"

namespace sandboxd {

enum class RenewOutcome {
  renewed,  // still ours, TTL refreshed
  lapsed,   // no live lease: expired or the store lost it; free to re-establish
  lost,     // a peer holds it, or it is in teardown ("del") state
};

inline const char* to_string(RenewOutcome outcome) {
  switch (outcome) {
    case RenewOutcome::renewed:
      return "renewed";
    case RenewOutcome::lapsed:
      return "lapsed";
    case RenewOutcome::lost:
      return "lost";
  }
  return "?";
}

// A read-only view of one live lease, for tests, diagnostics and `sandboxctl`.
struct LeaseRecord {
  std::string owner_id;
  bool destroying = false;  // "del" state
  double expires_at = 0.0;  // on the store's own clock (wall or monotonic, store-specific)
};

class OwnershipStore {
 public:
  virtual ~OwnershipStore() = default;

  // This provider instance's identity as written into leases.
  virtual const std::string& owner_id() const = 0;

  // false when peers in other processes cannot see our leases (in-process store).
  virtual bool supports_cross_process() const = 0;

  // Lease time-to-live in seconds (renewal_interval_seconds × ttl_multiplier).
  virtual double ttl_seconds() const = 0;

  // Acquire path: refused (false) while any live lease is in "del" state; otherwise writes
  // own:{me} with a fresh TTL, taking over a peer's "own" lease.
  virtual bool take(const std::string& sandbox_id) = 0;

  // Adopt / reap gate, atomic: refused while another owner holds a live lease (either state),
  // and a non-destroy claim never unwinds our own "del". Otherwise writes own:{me} or, with
  // for_destroy, del:{me}.
  virtual bool claim(const std::string& sandbox_id, bool for_destroy = false) = 0;

  // lapsed when no live lease exists (never re-creates it); renewed for our "own";
  // lost for anything else.
  virtual RenewOutcome renew(const std::string& sandbox_id) = 0;

  // Deletes the lease only when it is ours (either state); otherwise does nothing.
  virtual void release(const std::string& sandbox_id) = 0;

  // Owner id of a live lease (either state), or nothing.
  virtual std::optional<std::string> owner(const std::string& sandbox_id) = 0;

  // The live lease, if any, without changing it.
  virtual std::optional<LeaseRecord> inspect(const std::string& sandbox_id) = 0;

  // Releases resources; later calls throw OwnershipBackendError.
  virtual void close() = 0;
};

}  // namespace sandboxd

// For ownership-store authors (ownership_memory and ownership_sqlite use it): the design §7.2
// decision table, the TTL options both stores read (§7.3, §11)
// and owner-id generation (§7.6). Keeping one copy means the two stores cannot drift apart on
// what a lease means; only how a lease is stored differs.
#pragma once

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include "sandboxd/logger.hpp"
#include "sandboxd/ownership.hpp"
#include "sandboxd/plugin.hpp"
#include "sandboxd/plugin_config.hpp"

namespace sandboxd::lease_rules {

// A live (unexpired) lease as the decision table sees it.
struct LiveLease {
  std::string owner_id;
  bool destroying = false;  // "del" state
};
// The same, read in place from a store's own record (no copy of the owner id): the rules below
// take either.
struct LiveLeaseView {
  std::string_view owner_id;
  bool destroying = false;
};

// take(): the acquire path is refused while anyone (us included) is tearing the sandbox down;
// otherwise it overwrites whatever "own" lease exists.
template <class Live>
bool may_take(const std::optional<Live>& live) {
  return !live.has_value() || !live->destroying;
}

// claim(): refused while another owner holds a live lease in either state; a non-destroy claim
// never unwinds our own teardown.
template <class Live>
bool may_claim(const std::optional<Live>& live, std::string_view me, bool for_destroy) {
  if (!live.has_value()) return true;
  if (live->owner_id != me) return false;
  return for_destroy || !live->destroying;
}

// renew(): only our own "own" lease is refreshed. No lease is LAPSED, which callers treat very
// differently from LOST, so the two must never be merged.
template <class Live>
RenewOutcome renew_outcome(const std::optional<Live>& live, std::string_view me) {
  if (!live.has_value()) return RenewOutcome::lapsed;
  if (live->owner_id == me && !live->destroying) return RenewOutcome::renewed;
  return RenewOutcome::lost;
}

// release(): only our own lease (either state) is deleted.
template <class Live>
bool may_release(const std::optional<Live>& live, std::string_view me) {
  return live.has_value() && live->owner_id == me;
}

// The same rules for a copied lease, as plain functions: a call with std::nullopt (no lease)
// cannot deduce the template above.
inline bool may_take(const std::optional<LiveLease>& live) {
  return may_take<LiveLease>(live);
}
inline bool may_claim(const std::optional<LiveLease>& live, std::string_view me, bool for_destroy) {
  return may_claim<LiveLease>(live, me, for_destroy);
}
inline RenewOutcome renew_outcome(const std::optional<LiveLease>& live, std::string_view me) {
  return renew_outcome<LiveLease>(live, me);
}
inline bool may_release(const std::optional<LiveLease>& live, std::string_view me) {
  return may_release<LiveLease>(live, me);
}

// A lease is live strictly before its expiry instant.
inline bool is_live(double expires_at, double now) {
  return now < expires_at;
}

inline std::string format_one_decimal(double value) {
  std::array<char, 64> text{};
  std::snprintf(text.data(), text.size(), "%.1f", value);
  return text.data();
}

// A day. Above about 9.2e9 s a wait of that length overflows the steady clock's nanoseconds and
// returns at once, so the renewal loop would spin on store writes; nothing needs more than this.
inline constexpr double kMaxRenewalIntervalSeconds = 86400.0;

// The TTL inputs (design §7.3, §11). ttl = renewal_interval_seconds × ttl_multiplier.
struct LeaseTiming {
  double renewal_interval_seconds = 30.0;
  double ttl_multiplier = 4.0;
  double ttl_seconds() const { return renewal_interval_seconds * ttl_multiplier; }
};

// Reads and checks renewal_interval_seconds and ttl_multiplier. Errors name the key path and
// quote the value exactly as the config wrote it.
inline LeaseTiming read_lease_timing(const PluginConfig& options) {
  LeaseTiming timing;
  timing.renewal_interval_seconds =
      options.get_number("renewal_interval_seconds", timing.renewal_interval_seconds);
  if (!(timing.renewal_interval_seconds > 0.0)) {
    options.reject("renewal_interval_seconds",
                   "must be greater than 0 seconds, got " +
                       json_to_string(*options.raw("renewal_interval_seconds")));
  }
  if (timing.renewal_interval_seconds > kMaxRenewalIntervalSeconds) {
    options.reject("renewal_interval_seconds",
                   "must be at most 86400 seconds (a day), got " +
                       json_to_string(*options.raw("renewal_interval_seconds")));
  }
  timing.ttl_multiplier = options.get_number("ttl_multiplier", timing.ttl_multiplier);
  if (!(timing.ttl_multiplier >= 2.0)) {
    // Below 2 a single late renewal would let a live sandbox's lease expire under it.
    options.reject("ttl_multiplier",
                   "must be at least 2 (a lease must outlive one missed "
                   "renewal), got " +
                       json_to_string(*options.raw("ttl_multiplier")));
  }
  if (!std::isfinite(timing.ttl_seconds())) {
    options.reject("renewal_interval_seconds",
                   "renewal_interval_seconds × ttl_multiplier overflows; got " +
                       json_to_string(*options.raw("renewal_interval_seconds")) + " × " +
                       json_to_string(*options.raw("ttl_multiplier")));
  }
  return timing;
}

// `type` is DeerFlow's selector; it is optional here (the use string already chose the class),
// but a contradicting one is a mistake worth stopping for.
inline void check_type(const PluginConfig& options, const std::string& expected_type,
                       const std::string& class_use) {
  const std::optional<std::string> type = options.optional_string("type");
  if (type.has_value() && *type != expected_type) {
    options.reject("type", "is '" + *type + "', but use '" + class_use + "' is the '" +
                               expected_type + "' store; drop `type` or choose the plugin for '" +
                               *type + "'");
  }
}

// Call after every option has been read, so a misspelt key does not pass silently.
inline void warn_unread_keys(const PluginConfig& options, Logger& logger) {
  for (const std::string& key : options.unread_keys()) {
    logger.warning("Ignoring unknown sandbox ownership option " + key);
  }
}

// design §7.6: `{hostname}:{32 hex random}`, unique per store instance. Used only when the host
// did not hand us one.
inline std::string generate_owner_id() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0 || host[0] == '\0') {
    host = {'l', 'o', 'c', 'a', 'l', 'h', 'o', 's', 't'};
  }
  std::random_device entropy;
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(host.data());
  id += ':';
  for (int word = 0; word < 4; ++word) {
    const unsigned int bits = entropy();
    for (int shift = 28; shift >= 0; shift -= 4) id += kHex[(bits >> shift) & 0xFu];
  }
  return id;
}

inline std::string resolve_owner_id(const PluginContext& context) {
  return context.owner_id.empty() ? generate_owner_id() : context.owner_id;
}

}  // namespace sandboxd::lease_rules

// The gateway's word on what allowlist sandboxes asked for beyond their allow-list (approval
// `prompt`; docs/egress.md): per sandbox, the refused names waiting for a decision and the
// grants made, in DeerFlow's terms (`deny`, `allow_temporary`, `allow_sandbox`). The proxy asks
// it once per connection whose name is not on the allow-list; the doors list and decide through
// the proxy's public calls. Apart from the proxy so that it is tested without a socket.
//
// A grant is for a name and a port: deciding a pending request grants what it asked for (its
// name at its port: `GET later.test` is port 80, `CONNECT later.test:443` port 443); a decision
// on a name alone grants that name on both ports the proxy passes. Grants belong to one
// instance of a sandbox (its incarnation, the instance its listener was made for): a new
// instance of the same id (destroyed and made again) starts with none. A pending request the
// gateway has fetched expires `fetched_request_ttl` after it was last asked for, so the bound on
// pending requests never fills with requests nobody will decide.
//
// Lock story: `mutex_` guards `sandboxes_`; it is taken by the proxy's I/O thread and by the
// doors' threads, for map work only (never across I/O, a resolution or a log line).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sandboxd/clock.hpp"
#include "sandboxd/core/egress_proxy.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::core {

class EgressDecisions {
 public:
  struct Limits {
    bool prompt = false;               // approval `prompt`: refusals wait for a decision
    double temporary_grant_ttl = 300;  // seconds an `allow_temporary` grant lasts
    std::size_t max_pending_per_sandbox = 256;
    double fetched_request_ttl = 600;  // seconds a fetched, undecided request is kept
  };
  EgressDecisions(std::shared_ptr<Clock> clock, Limits limits);

  // Whether a grant lets `sandbox_id` reach `domain` (normalized) now; an expired grant is
  // dropped. When none does and approval is `prompt`, the request is kept as pending (one per
  // name and port, counted; a sandbox's new names beyond the bound are refused unrecorded).
  bool granted(const std::string& sandbox_id, const std::string& domain, int port,
               const std::string& method) EXCLUDES(mutex_);

  // The instance of `sandbox_id` now served: decisions recorded for another instance (a
  // destroyed one's, a restart's file) are dropped. An unknown ("") instance on either side
  // keeps them (a backend that names no instance, a file written before instances were kept).
  void bind_incarnation(const std::string& sandbox_id, const std::string& incarnation)
      EXCLUDES(mutex_);
  // Drops every sandbox's decisions but those `keep` answers true for (its id, its instance).
  void retain(const std::function<bool(const std::string& sandbox_id,
                                       const std::string& incarnation)>& keep) EXCLUDES(mutex_);

  std::vector<EgressRequest> pending(const std::string& sandbox_id) const EXCLUDES(mutex_);
  std::vector<EgressGrant> grants(const std::string& sandbox_id) const EXCLUDES(mutex_);
  // The pending requests not handed out before, now marked handed out.
  std::vector<EgressRequest> consume_events(const std::string& sandbox_id) EXCLUDES(mutex_);
  // Drops every pending request not handed out yet.
  void deny_pending(const std::string& sandbox_id) EXCLUDES(mutex_);
  // The word on `domain` (pending or not), for both web ports: its pending requests go; deny
  // drops its grants, the others grant it. Throws std::invalid_argument naming a `domain` that
  // is no domain name.
  void decide(const std::string& sandbox_id, const std::string& domain, EgressDecision decision)
      EXCLUDES(mutex_);
  // The word on pending request `request_id`: its name at its port (and that request) granted
  // or denied; false when there is no such request.
  bool decide_request(const std::string& sandbox_id, const std::string& request_id,
                      EgressDecision decision) EXCLUDES(mutex_);
  // A sandbox gone: its pending requests and grants with it.
  void forget(const std::string& sandbox_id) EXCLUDES(mutex_);

  // The grants of every sandbox as one JSON object ({"sandbox": {"incarnation": "…", "grants":
  // {"domain:port": expires}}}, port 0 for both web ports, expires 0 for the instance's life),
  // and back; restore() skips what it cannot read, and takes the older form ({"sandbox":
  // {"domain": expires}}) as grants of an unknown instance.
  std::string grants_json() const EXCLUDES(mutex_);
  void restore_grants(const std::string& json) EXCLUDES(mutex_);

 private:
  // One sandbox's pending requests (by "domain:port") and grants ((domain, port: 0 for both) →
  // expiry, 0: for the instance's life), for instance `incarnation`.
  struct SandboxDecisions {
    std::string incarnation;
    std::map<std::string, EgressRequest> pending;
    std::map<std::pair<std::string, int>, double> grants;
  };
  // `port` 0: the name on both ports, and every pending request for it.
  void decide_locked(SandboxDecisions& state, const std::string& domain, int port,
                     EgressDecision decision) REQUIRES(mutex_);
  // Room for one more pending request: fetched ones past their time dropped, then the one
  // fetched longest ago when still full. False when every one is still unfetched.
  bool make_pending_room_locked(SandboxDecisions& state, double now) REQUIRES(mutex_);

  const std::shared_ptr<Clock> clock_;
  const Limits limits_;
  mutable Mutex mutex_;
  std::map<std::string, SandboxDecisions> sandboxes_ GUARDED_BY(mutex_);
};

}  // namespace sandboxd::core

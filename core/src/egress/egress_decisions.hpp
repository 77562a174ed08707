// The gateway's word on what allowlist sandboxes asked for beyond their allow-list (issue 34,
// approval `prompt`): per sandbox, the refused names waiting for a decision and the grants
// made, in DeerFlow's terms (`deny`, `allow_temporary`, `allow_sandbox`). The proxy asks it once
// per connection whose name is not on the allow-list; the doors list and decide through the
// proxy's public calls. Apart from the proxy so that it is tested without a socket.
//
// Lock story: `mutex_` guards `sandboxes_`; it is taken by the proxy's I/O thread and by the
// doors' threads, for map work only (never across I/O, a resolution or a log line).
#pragma once

#include <cstddef>
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
  };
  EgressDecisions(std::shared_ptr<Clock> clock, Limits limits);

  // Whether a grant lets `sandbox_id` reach `domain` (normalized) now; an expired grant is
  // dropped. When none does and approval is `prompt`, the request is kept as pending (one per
  // name and port, counted; a sandbox's new names beyond the bound are refused unrecorded).
  bool granted(const std::string& sandbox_id, const std::string& domain, int port,
               const std::string& method) EXCLUDES(mutex_);

  std::vector<EgressRequest> pending(const std::string& sandbox_id) const EXCLUDES(mutex_);
  std::vector<EgressGrant> grants(const std::string& sandbox_id) const EXCLUDES(mutex_);
  // The pending requests not handed out before, now marked handed out.
  std::vector<EgressRequest> consume_events(const std::string& sandbox_id) EXCLUDES(mutex_);
  // Drops every pending request not handed out yet.
  void deny_pending(const std::string& sandbox_id) EXCLUDES(mutex_);
  // The word on `domain` (pending or not): its pending requests go; deny drops its grant, the
  // others grant it. Throws std::invalid_argument naming a `domain` that is no domain name.
  void decide(const std::string& sandbox_id, const std::string& domain, EgressDecision decision)
      EXCLUDES(mutex_);
  // The word on pending request `request_id`, as decide() on its name: false when there is no
  // such request.
  bool decide_request(const std::string& sandbox_id, const std::string& request_id,
                      EgressDecision decision) EXCLUDES(mutex_);
  // A sandbox gone: its pending requests and grants with it.
  void forget(const std::string& sandbox_id) EXCLUDES(mutex_);

  // The grants of every sandbox as one JSON object ({"sandbox": {"domain": expires}}, 0 for a
  // sandbox's life), and back; restore() skips what it cannot read.
  std::string grants_json() const EXCLUDES(mutex_);
  void restore_grants(const std::string& json) EXCLUDES(mutex_);

 private:
  // One sandbox's pending requests (by "domain:port") and grants (domain → expiry, 0: for life).
  struct SandboxDecisions {
    std::map<std::string, EgressRequest> pending;
    std::map<std::string, double> grants;
  };
  void decide_locked(SandboxDecisions& state, const std::string& domain, EgressDecision decision)
      REQUIRES(mutex_);

  const std::shared_ptr<Clock> clock_;
  const Limits limits_;
  mutable Mutex mutex_;
  std::map<std::string, SandboxDecisions> sandboxes_ GUARDED_BY(mutex_);
};

}  // namespace sandboxd::core

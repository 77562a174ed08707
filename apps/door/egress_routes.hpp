// The egress routes of both daemons, over the host's egress proxy
// (core/egress_host.hpp); serve's prefix is /v1/sandboxes, the provisioner's /api/sandboxes:
//   GET  {prefix}/ID/egress               mode, allow-list, pending requests, grants
//   POST {prefix}/ID/egress/events        pending requests not handed out before, now handed
//                                         out (DeerFlow's consume_network_policy_events)
//   POST {prefix}/ID/egress/deny-pending  denies those not handed out yet
//   POST {prefix}/ID/egress/decide        {"request_id" | "domain", "decision":
//                                         "deny" | "allow_temporary" | "allow_sandbox"}
// Each answers one JSON document; a bad body is invalid_argument naming the key.
#pragma once

#include <string>

#include "sandboxd/core/egress_host.hpp"

namespace sandboxd::door {

// Each answers for a tracked sandbox; the answer's JSON.
std::string egress_view(sandboxd::core::EgressHost& egress, const std::string& sandbox_id);
std::string egress_events(sandboxd::core::EgressHost& egress, const std::string& sandbox_id);
std::string egress_deny_pending(sandboxd::core::EgressHost& egress, const std::string& sandbox_id);
// Throws core::ServiceError (invalid_argument) naming the bad key of `body`.
std::string egress_decide(sandboxd::core::EgressHost& egress, const std::string& sandbox_id,
                          const std::string& body);

}  // namespace sandboxd::door

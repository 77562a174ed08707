// What the remote_provisioner plugin reads from the provisioner service's JSON answers
// (design §10.2–§10.5): capabilities, a create, a sandbox, an exact-instance lookup, a listing,
// a sandbox's usage.
// Pure functions over the body, so that unit tests and the `provisioner_answers` fuzz target
// reach them without a service. Whatever answers in the provisioner's place is untrusted: a
// sandbox_url must be http:// or https://, a contract version an integer, and a body that is
// none of these reads as "absent", "unknown" or a std::runtime_error naming the defect.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sandboxd/capabilities.hpp"
#include "sandboxd/types.hpp"

namespace sandboxd::remote_provisioner {

// The answer's body is not a JSON object at all (the caller may add the HTTP status and text).
class AnswerNotAnObject : public std::runtime_error {
 public:
  AnswerNotAnObject() : std::runtime_error("response is not a JSON object") {}
};

// GET /api/capabilities (200): the mount contract the service serves (missing or null → 0).
// Throws AnswerNotAnObject, or std::runtime_error "mount_contract_version is not an integer".
int read_capabilities_answer(const std::string& body);

// A create refused with 409 {"mount_contract_version": N}: N; nothing for any other answer.
std::optional<int> served_contract_of_refusal(long status, const std::string& body);

// POST /api/sandboxes (2xx): the new sandbox as the service describes it, with `created_at` set
// to `now`. Throws AnswerNotAnObject, or std::runtime_error naming what is missing or wrong.
SandboxInfo read_create_answer(const std::string& sandbox_id, const std::string& body, double now);

// GET /api/sandboxes/{id} (200) for a health check: whether its status is "Running". Throws
// AnswerNotAnObject.
bool read_running_status(const std::string& body);

// GET /api/sandboxes/{id} (200) for discovery: the sandbox only when the answer carries a
// usable URL and a verified identity (user, thread, contract); nullopt otherwise.
std::optional<SandboxInfo> read_discovered_sandbox(const std::string& sandbox_id,
                                                   const std::string& body, double now);

// GET /api/sandboxes/{id}/instance (200): found (with info when it serves), absent (no
// incarnation), or unknown for an answer of any other shape.
SandboxDiscoveryResult read_instance_answer(const std::string& sandbox_id, const std::string& body,
                                            double now);

// GET /api/sandboxes (200): the listed sandboxes with an id and a usable URL; each entry
// without them is skipped and shown (shortened) in `skipped`. nullopt when the body is not
// {"sandboxes": [...]}.
struct SandboxListing {
  std::vector<SandboxInfo> sandboxes;
  std::vector<std::string> skipped;
};
std::optional<SandboxListing> read_list_answer(const std::string& body, double now);

// Whether an answer says the service has no such route at all: FastAPI's 404
// {"detail": "Not Found"} (DeerFlow's provisioner, and sandboxd-provisioner's route table, for
// a path nothing serves), as opposed to a 404 naming a sandbox it does not run.
bool is_unknown_route_answer(long status, const std::string& body);

// GET /api/sandboxes/{id}/usage (200): the figures the provisioner's engine gave; a member that
// is missing or null stays empty. Throws AnswerNotAnObject, or std::runtime_error naming a
// member that is not a finite number >= 0 (a whole one for online_cpus, the bytes and pids).
SandboxUsage::Reading read_usage_answer(const std::string& body);
// The same answer's `writable_layer_bytes` (what the sandbox wrote outside its mounts), or
// nullopt when the provisioner's engine did not give it. Throws like read_usage_answer.
std::optional<std::uint64_t> read_writable_layer_bytes(const std::string& body);

}  // namespace sandboxd::remote_provisioner

// The body of POST /api/sandboxes (design §10.8's request model), read and checked before any of
// it reaches a path, a container name or the backend. Unknown keys are ignored, as FastAPI does.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxd/types.hpp"

namespace sandboxd::provisioner {

// A schema violation: answered 422 in FastAPI's shape,
// {"detail": [{"loc": ["body", field], "msg": message, "type": type}]}.
class SchemaViolation : public std::invalid_argument {
 public:
  SchemaViolation(std::string field, const std::string& message, std::string type)
      : std::invalid_argument(message), field_(std::move(field)), type_(std::move(type)) {}
  const std::string& field() const { return field_; }
  const std::string& type() const { return type_; }

 private:
  std::string field_;
  std::string type_;
};

struct CreateBody {
  std::string sandbox_id;
  std::string thread_id;  // the request's, or sandbox_id when it was null
  std::string user_id = "default";
  std::vector<Mount> extra_mounts;
  bool include_legacy_skills = false;  // accepted, ignored: the legacy view is always mounted
  bool provision_lark_cli_runtime = false;
  bool provision_lark_cli_broker = false;
  std::optional<int> required_mount_contract_version;
};

// Identifier rules. Sandbox and thread ids: ^[A-Za-z0-9_-]{1,64}$ (the snapshot puts no
// pattern on sandbox_id, but it names a container and, as the default thread id, a directory);
// user ids: ^[A-Za-z0-9_-]{1,128}$.
bool is_valid_sandbox_id(std::string_view id);
bool is_valid_thread_id(std::string_view id);
bool is_valid_user_id(std::string_view id);

// Throws SchemaViolation.
CreateBody parse_create_body(std::string_view body);

// The 422 body for a violation.
std::string schema_violation_json(const SchemaViolation& violation);

}  // namespace sandboxd::provisioner

// Value types shared by the core and every plugin (design §1).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd {

// The mount contract sandboxes are created under now (design §1.3). 0 means legacy / unknown.
inline constexpr int kSandboxMountContractVersion = 2;

// Port the sandbox HTTP API listens on inside every sandbox.
inline constexpr int kSandboxContainerPort = 8080;

// Container paths a provisioner accepts as extra mounts. The gateway's filter and the
// provisioner's validation must use this one list (design §10.6).
inline constexpr std::array<std::string_view, 8> kProvisionerExtraMountPaths = {
    "/mnt/acp-workspace",
    "/mnt/skills/custom",
    "/mnt/skills/integrations",
    "/mnt/integrations/lark-cli/config",
    "/mnt/integrations/lark-cli/config/locks",
    "/mnt/integrations/lark-cli/data",
    "/mnt/integrations/lark-cli/runtime",
    "/mnt/user-data/.upload-conversions",
};
inline constexpr std::size_t kMaxProvisionerExtraMounts = 10;

// One bind mount. host_path is a raw string in the host's native style (it may be a Windows
// path on a POSIX gateway), so it is never normalised by the SDK.
struct Mount {
  std::string host_path;
  std::string container_path;
  bool read_only = false;

  bool operator==(const Mount&) const = default;
};

// What a backend knows about one running sandbox (design §1.1); which fields the core reads, and
// what for, is in docs/writing-a-backend.md ("create").
struct SandboxInfo {
  std::string sandbox_id;
  std::string sandbox_url;  // e.g. http://127.0.0.1:49152; may be empty for a listed container
  std::optional<std::string> container_name;
  std::optional<std::string> container_id;
  double created_at = 0.0;               // wall-clock seconds; 0.0 means "unknown age"
  std::optional<std::string> user_id;    // identity verified by the backend, when it can
  std::optional<std::string> thread_id;  // identity verified by the backend, when it can
  int mount_contract_version = 0;
  // The network policy it was made under, as its backend records it on the sandbox ("open",
  // "isolated", "allowlist:{digest}"; "" for one made before policies existed, which is
  // "open"). A sandbox is never reused under another policy: it is replaced.
  std::string network_policy;
  // Headers every request to sandbox_url must carry (a relay's token), as DeerFlow's
  // SandboxInfo.request_headers; empty for a URL that needs none.
  std::map<std::string, std::string> request_headers;

  bool operator==(const SandboxInfo&) const = default;
};

// Arguments of SandboxBackend::create (design §1.9).
struct CreateRequest {
  std::optional<std::string> thread_id;  // absent for anonymous sandboxes
  std::string sandbox_id;
  std::vector<Mount> extra_mounts;
  std::optional<std::string> user_id;
  bool provision_lark_cli_runtime = false;
  bool provision_lark_cli_broker = false;
};

// A snapshot of the backend's negotiated mount contract, taken once per acquisition attempt.
struct MountContractSnapshot {
  int version = kSandboxMountContractVersion;
  bool capability_known = true;

  bool operator==(const MountContractSnapshot&) const = default;
};

// Exact-instance lookup result used by crash-recovery journals (design §1.4).
struct SandboxDiscoveryResult {
  enum class Status { found, absent, unknown };

  Status status = Status::unknown;
  std::optional<SandboxInfo> info;  // only for found, and even then may be empty
  std::optional<std::string> backend_namespace;
  std::optional<std::string> incarnation_id;

  static SandboxDiscoveryResult found(std::optional<SandboxInfo> info,
                                      std::string backend_namespace, std::string incarnation_id) {
    return {Status::found, std::move(info), std::move(backend_namespace),
            std::move(incarnation_id)};
  }
  static SandboxDiscoveryResult absent(std::optional<std::string> backend_namespace = {}) {
    return {Status::absent, std::nullopt, std::move(backend_namespace), std::nullopt};
  }
  static SandboxDiscoveryResult unknown() { return {}; }
};

}  // namespace sandboxd

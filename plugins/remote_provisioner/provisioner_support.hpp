// Pieces of the remote provisioner backend that need no plugin context: a small libcurl HTTP
// client, the extra-mount payload filter (design §10.6) and style-preserving host path helpers.
//
// Thread safety: every request creates and cleans up its own CURL easy handle, so calls run in
// parallel without shared libcurl state. The free functions are pure.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sandboxd/types.hpp"

namespace sandboxd::remote_provisioner {

// No HTTP answer arrived: connection refused, DNS failure, timeout...
class TransportError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HttpResponse {
  long status = 0;
  std::string body;

  bool ok() const { return status >= 200 && status < 300; }
  // The body trimmed and shortened, for error messages.
  std::string text() const;
  // "HTTP {code} {text}".
  std::string describe() const;
};

// One request. `api_key` goes into an X-API-Key header when non-empty; `json_body` is sent as
// application/json when non-empty. Environment proxies are used only where
// sandboxd::trust_env(url) allows. Throws TransportError when no HTTP answer arrives; HTTP
// error statuses are returned.
HttpResponse http_request(const std::string& method, const std::string& url,
                          const std::string& api_key, double timeout_seconds,
                          const std::string& json_body = "");

// Container paths the provisioner accepts as extra mounts (identical to its own allowlist).
const std::vector<std::string>& forwarded_container_paths();

inline constexpr const char* kUploadsContainerPath = "/mnt/user-data/uploads";
inline constexpr const char* kUploadConversionsContainerPath = "/mnt/user-data/.upload-conversions";
inline constexpr const char* kLarkCliRuntimeContainerPath = "/mnt/integrations/lark-cli/runtime";

// Python `_provisioner_extra_mounts_payload`: the composed mounts filtered to the allowlist, in
// input order, first entry winning on a repeated container path. The lark-cli runtime entry is
// dropped when either lark flag is set. A conversion mount must be read-only and sit next to
// the uploads mount; otherwise std::invalid_argument("Upload conversion mount ...").
std::vector<Mount> provisioner_extra_mounts_payload(const std::vector<Mount>& mounts,
                                                    bool provision_lark_cli_runtime = false,
                                                    bool provision_lark_cli_broker = false);

// The payload as a JSON array of {"host_path", "container_path", "read_only"}.
std::string extra_mounts_to_json(const std::vector<Mount>& payload);

}  // namespace sandboxd::remote_provisioner

// A small client for the Docker Engine REST API (also served by `podman system service`),
// over a unix socket or plain TCP, with libcurl.
//
// Thread safety: every request uses its own CURL easy handle, created and cleaned up inside
// the call, so no libcurl state is shared between threads and requests run in parallel. The
// only shared mutable state is the negotiated API version, guarded by `version_mutex_`.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "docker_support.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::local_docker {

// The request never got an HTTP answer: socket missing, connection refused, reset...
class EngineUnreachableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The request did not finish within its timeout (it may still be in flight in the engine).
class EngineTimeoutError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct HttpResponse {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased; last value wins

  bool ok() const { return status >= 200 && status < 300; }
  // The engine's error text: the "message" member of a JSON error body, else the raw body.
  std::string message() const;
};

// Receives a streamed response body piece by piece (for image pulls).
using BodySink = std::function<void(std::string_view chunk)>;

// The versions we speak: HostConfig.Mounts needs 1.30; nothing we send or read changed up to
// 1.47 (Docker 27). Tested against 1.41 (Docker 20.10, podman 4.3).
inline constexpr ApiVersion kMinApiVersion{1, 30};
inline constexpr ApiVersion kMaxApiVersion{1, 47};

class EngineClient {
 public:
  explicit EngineClient(EngineEndpoint endpoint);

  const EngineEndpoint& endpoint() const { return endpoint_; }

  // A versioned call: `path` starts with '/' and gets the "/v{version}" prefix, negotiating
  // the version on first use. `body` (JSON) is sent when non-empty. When `sink` is set the
  // body goes to it and HttpResponse::body stays empty. Throws EngineUnreachableError or
  // EngineTimeoutError when no HTTP answer arrives; HTTP error statuses are returned.
  HttpResponse call(const std::string& method, const std::string& path, double timeout_seconds,
                    const std::string& body = "", const BodySink& sink = nullptr);

  // The negotiated version, e.g. "1.41": the newest in both the engine's
  // [MinAPIVersion, ApiVersion] and ours. Asked once, from the API-Version header of GET
  // /_ping, and from GET /version only when that header is missing or newer than ours (podman
  // 4.3 takes ~3 s to answer /version, /_ping takes milliseconds). No overlap is an error naming
  // both ranges. A failure is not cached.
  std::string api_version();

  // An unversioned call (/_ping, /version).
  HttpResponse raw_call(const std::string& method, const std::string& path, double timeout_seconds,
                        const std::string& body = "", const BodySink& sink = nullptr);

 private:
  EngineEndpoint endpoint_;
  Mutex version_mutex_;
  std::optional<std::string> version_ GUARDED_BY(version_mutex_);
};

}  // namespace sandboxd::local_docker

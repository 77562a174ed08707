// The relay (design "Network isolation and the relay"): the only way into a
// sandbox that no host address reaches (network mode `isolated`, or `open` without a published
// port). It listens on one TCP address of its own; a sandbox's URL is
// `http://HOST:PORT/s/{sandbox_id}`, and every request to it must carry that sandbox's token in
// `X-Sandboxd-Relay-Token` (relay_tokens.hpp), bound to the sandbox's instance. The relay
// looks the sandbox up and checks the token against that instance before it reads a body byte
// or opens anything, removes it, and forwards the request to that sandbox only,
// through a socket made in the sandbox's network namespace: HTTP/1.1 with kept-alive client
// connections, bodies streamed both ways (chunked or not, never buffered whole), and an
// `Upgrade` (WebSocket) answered 101 turned into a two-way byte pipe; interim answers (1xx) are
// passed on and the final answer still read for the request it answers. A missing token is
// 401, a sandbox this host does not track 404, a token of another sandbox or of an earlier
// instance of this one 403, all with no byte from any sandbox.
//
// Built for hostile clients as the doors' server is: one I/O thread owns every socket (no
// thread per connection); the head has a deadline, every later read or write a deadline for
// making progress, buffers are bounded; at `max_connections` the oldest connection that has not
// presented a valid token is closed for a new one, else the new one is answered 503.
// serve, sandboxd-provisioner and a gateway embedding the core each run one.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "sandboxd/core/relay_tokens.hpp"
#include "sandboxd/core/sandbox_endpoint.hpp"
#include "sandboxd/core/sandbox_service.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxd::core {

class Provider;

// The sandboxes a relay serves: nullopt for one it must not reach (not tracked here). Asked on
// one of the relay's dialer threads, never its I/O thread, so it may block (an engine inspect):
// a slow answer holds that one request.
using RelayTargets = std::function<std::optional<SandboxEndpoint>(const std::string& sandbox_id)>;

struct RelayOptions {
  std::string host = "127.0.0.1";  // a numeric address
  int port = 0;                    // 0: the kernel chooses
  // The URL handed to clients names this host instead of `host` (a name or address clients
  // reach the relay at); "" uses `host`.
  std::string advertised_host;
  std::size_t max_connections = 1024;
  std::size_t max_header_bytes = 16 * 1024;
  std::chrono::milliseconds head_timeout{10'000};      // a request's line and headers, whole
  std::chrono::milliseconds idle_timeout{30'000};      // a kept-alive connection's next request
  std::chrono::milliseconds progress_timeout{60'000};  // any body read or write making no headway
  std::chrono::milliseconds connect_timeout{5'000};    // to the sandbox
  std::chrono::milliseconds answer_timeout{900'000};   // the sandbox's answer head (long execs)
  std::chrono::milliseconds tunnel_idle_timeout{600'000};  // an upgraded (WebSocket) pipe
};

struct RelayStats {
  std::uint64_t forwarded = 0;        // requests the sandbox answered
  std::uint64_t upgraded = 0;         // of them, switched to a two-way pipe (WebSocket)
  std::uint64_t missing_token = 0;    // 401
  std::uint64_t wrong_token = 0;      // 403
  std::uint64_t unknown_sandbox = 0;  // 404: a valid token, but not tracked here
  std::uint64_t upstream_failed = 0;  // 502: the sandbox could not be reached or broke off
  std::uint64_t refused_busy = 0;     // 503: every connection slot held a valid request
  std::uint64_t open_connections = 0;
};

class Relay final : public SandboxAddressing {
 public:
  // The sandboxes `provider` tracks (active or released).
  Relay(Provider& provider, RelayTokens tokens, RelayOptions options,
        std::shared_ptr<Logger> logger);
  // The sandboxes `targets` names (sandboxd-provisioner's, which has no Provider).
  Relay(RelayTargets targets, RelayTokens tokens, RelayOptions options,
        std::shared_ptr<Logger> logger);
  ~Relay() override;  // stop()
  Relay(const Relay&) = delete;
  Relay& operator=(const Relay&) = delete;

  // Binds (throws std::runtime_error naming the address) and starts the I/O thread.
  void start();
  // Closes every connection and joins the I/O thread. Idempotent.
  void stop();

  std::string base_url() const;  // "http://127.0.0.1:PORT"
  int port() const;
  std::string url_for(const std::string& sandbox_id) const override;
  std::map<std::string, std::string> headers_for(const SandboxInfo& info) const override;
  RelayStats stats() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// A started relay whose URLs outlive restarts, for serve and sandboxd-provisioner: tokens under
// the secret in `state_dir` (relay_tokens.hpp), and, with `reuse_port`, the port the last relay
// on `state_dir` took (kept in {state_dir}/relay-port) if it is free again, else a new one, with
// a warning that URLs handed out before no longer work. Without it, `options.port` as given.
// Throws std::runtime_error naming the secret's or the address's problem.
std::unique_ptr<Relay> start_relay_in(const std::filesystem::path& state_dir, RelayTargets targets,
                                      RelayOptions options, const std::shared_ptr<Logger>& logger,
                                      bool reuse_port);

// "HOST:PORT" ("[v6]:PORT" too) into options.host and options.port; throws
// std::invalid_argument naming `where` and the value.
void parse_relay_listen(const std::string& text, const std::string& where, RelayOptions& options);

}  // namespace sandboxd::core

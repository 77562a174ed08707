// How a relay reaches one sandbox's API: what Provider::endpoint and a relay's
// target lookup answer.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "sandboxd/backend.hpp"
#include "sandboxd/capabilities.hpp"

namespace sandboxd::core {

struct SandboxEndpoint {
  std::string host;  // numeric, as the sandbox URL names it ("127.0.0.1" inside its namespace)
  int port = 0;
  bool paused = false;               // frozen: it answers nothing until an acquire thaws it
  std::string incarnation;           // which instance it is (relay_tokens.hpp's incarnation_of)
  std::function<int()> open_socket;  // a socket in its network namespace (the caller owns it)
};

// Where `info`'s URL points (host and port of http://HOST:PORT[/…], an [IPv6] host unwrapped),
// with a socket maker through `access` when `access` says it is namespaced (`backend` is kept
// alive by the maker). nullopt when the URL names no port.
std::optional<SandboxEndpoint> endpoint_of(const SandboxInfo& info,
                                           const std::shared_ptr<SandboxBackend>& backend,
                                           NamespacedSandboxes* access);

// Whether `backend` makes every new sandbox namespaced under its configured network policy
// (network mode isolated, or open without a published port): such a host must run a relay.
bool makes_namespaced_sandboxes(SandboxBackend& backend);

}  // namespace sandboxd::core

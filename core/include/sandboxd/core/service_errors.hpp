// Typed failures of the operations every door offers (design "Core shape": typed outcomes).
// An error carries a kind; each door maps kinds once: the CLI to exit codes, an HTTP door to
// statuses. `classify` turns what the provider, a backend or a store throws into a kind, so no
// door infers outcomes on its own.
#pragma once

#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

namespace sandboxd::core {

enum class ErrorKind {
  invalid_argument,  // a bad id, body or option: the caller's to fix
  not_found,         // the sandbox is not tracked here
  conflict,          // a peer's lease or teardown refused it, or the lease store cannot answer
  capacity,          // a ceiling (replicas, per user, a quota) refused it; retry later
  unavailable,       // the backend (engine, provisioner, cluster) failed or is unreachable
  config,            // the config, a plugin or the state directory is unusable
  internal,          // a bug or an unexpected failure of this machine
  unsupported,       // the backend does not offer what was asked (snapshots on kubernetes)
};

// The kind's name on the wire ("usage", "not_found", "ownership", "capacity", "backend",
// "config", "internal", "unsupported"): what `--json` errors and HTTP error bodies carry as
// "kind".
const char* kind_name(ErrorKind kind);

class ServiceError : public std::runtime_error {
 public:
  ServiceError(ErrorKind kind, const std::string& message,
               std::optional<double> retry_after_seconds = std::nullopt)
      : std::runtime_error(message), kind_(kind), retry_after_(retry_after_seconds) {}
  ErrorKind kind() const { return kind_; }
  // For capacity refusals: when trying again may succeed.
  std::optional<double> retry_after_seconds() const { return retry_after_; }

 private:
  ErrorKind kind_;
  std::optional<double> retry_after_;
};

// The kind of anything thrown by the provider, a plugin or the config layer: ServiceError
// keeps its own; invalid ids are invalid_argument; a teardown in progress, an identity
// collision and an unreachable lease store are conflicts; config, plugin and state-directory
// errors are config; a logic error or no memory is internal; anything else is `fallback`
// (around a provider call, the backend's: unavailable).
ErrorKind classify(const std::exception& error, ErrorKind fallback = ErrorKind::internal);

// `error` as a ServiceError (itself when it is one), its message prefixed for conflicts from
// the lease store ("the lease store cannot answer: ...").
ServiceError as_service_error(const std::exception& error,
                              ErrorKind fallback = ErrorKind::internal);

}  // namespace sandboxd::core

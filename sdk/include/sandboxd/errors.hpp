// Error kinds that cross the plugin boundary (design §1.7). They are header-only so that the
// core and a plugin built separately agree on them; GCC matches exception types across shared
// libraries by name.
#pragma once

#include <stdexcept>
#include <string>

namespace sandboxd {

// The ownership store could not answer. Callers fail closed.
class OwnershipBackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An acquisition met a sandbox that a peer (or this process) is tearing down.
class SandboxBeingDestroyedError : public std::runtime_error {
 public:
  explicit SandboxBeingDestroyedError(const std::string& sandbox_id)
      : std::runtime_error("sandbox " + sandbox_id + " is being destroyed by another instance"),
        sandbox_id_(sandbox_id) {}
  const std::string& sandbox_id() const { return sandbox_id_; }

 private:
  std::string sandbox_id_;
};

// A sandbox id is tracked for a different (user, thread) than the one requesting it.
class SandboxIdentityCollisionError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The backend's mount contract moved during an acquisition; the caller retries with a new id.
class MountContractChangedError : public std::runtime_error {
 public:
  MountContractChangedError(int previous_version, int current_version)
      : std::runtime_error("sandbox mount contract changed from version " +
                           std::to_string(previous_version) + " to " +
                           std::to_string(current_version)),
        previous_version_(previous_version),
        current_version_(current_version) {}
  int previous_version() const { return previous_version_; }
  int current_version() const { return current_version_; }

 private:
  int previous_version_;
  int current_version_;
};

// The backend's own capacity refused a create (a cluster's ResourceQuota answered 403): the
// same outcome for callers as the core's ceilings (capacity; CLI exit 7, HTTP 429).
class BackendCapacityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A plugin rejected its configuration. key_path names the offending key in full, for example
// "sandbox.ownership.path", so the host can say which line of which file to fix.
class PluginConfigError : public std::runtime_error {
 public:
  PluginConfigError(std::string key_path, const std::string& problem)
      : std::runtime_error(key_path + ": " + problem), key_path_(std::move(key_path)) {}
  const std::string& key_path() const { return key_path_; }

 private:
  std::string key_path_;
};

}  // namespace sandboxd

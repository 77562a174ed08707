// The directories the service mounts into sandboxes, made and checked on the host. The service
// owns these mounts, so a host path must stay inside its state root once symlinks are
// resolved: a symlink under the root that points elsewhere is refused, not followed. (The check
// runs before and after creating, so only a component swapped between the check and the
// engine's bind mount could slip through; the state root must be writable by trusted parties
// only, as DeerFlow's is.)
#pragma once

#include <stdexcept>
#include <string>

namespace sandboxd::provisioner {

// A host path that resolves outside its root. `what()` is the message the client sees.
class PathEscapesRoot : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Creating the directory failed for another reason (permissions, a file in the way).
class DirectoryUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where `path` resolves to, with every existing component's symlinks followed (the missing
// tail is taken lexically). Throws PathEscapesRoot, with `escape_message` + " (resolves to
// {real})", when that is not inside the resolved `root`.
std::string resolved_inside(const std::string& path, const std::string& root,
                            const std::string& escape_message);

// resolved_inside, then create the directory (and its parents, mode 0755) when missing, then
// check again. Throws PathEscapesRoot or DirectoryUnavailable.
void ensure_directory_inside(const std::string& path, const std::string& root,
                             const std::string& escape_message);

}  // namespace sandboxd::provisioner

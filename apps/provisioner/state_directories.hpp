// The directories the service mounts into sandboxes, made and checked on the host. The service
// owns these mounts, so a host path must stay inside its state root: a path that resolves
// elsewhere is refused with where it resolves to, and the directory is then made by walking
// from the root one component at a time without following any link (host_fs.hpp), so a link a
// sandbox left in its user data (inside-pointing or not) is refused, never followed. The root
// itself is checked at start-up (owned by the service's user, writable by nobody else).
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

// A read-only mount source that does not exist (the service makes only what it owns).
class DirectoryMissing : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where `path` resolves to, with every existing component's symlinks followed (the missing
// tail is taken lexically). Throws PathEscapesRoot, with `escape_message` + " (resolves to
// {real})", when that is not inside the resolved `root`.
std::string resolved_inside(const std::string& path, const std::string& root,
                            const std::string& escape_message);

// resolved_inside, then create the directory (and its parents, mode 0755 minus the umask)
// from `root` down without following a link. Throws PathEscapesRoot (a link on the way is one,
// named) or DirectoryUnavailable.
void ensure_directory_inside(const std::string& path, const std::string& root,
                             const std::string& escape_message);

// The same checks for a directory that must already exist (a read-only mount source): throws
// DirectoryMissing when it does not, PathEscapesRoot for a link on the way.
void require_directory_inside(const std::string& path, const std::string& root,
                              const std::string& escape_message);

}  // namespace sandboxd::provisioner

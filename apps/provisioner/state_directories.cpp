#include "state_directories.hpp"

#include <filesystem>
#include <system_error>

namespace sandboxd::provisioner {
namespace {

namespace fs = std::filesystem;

bool is_inside(const fs::path& path, const fs::path& root) {
  auto p = path.begin();
  for (auto r = root.begin(); r != root.end(); ++r, ++p) {
    if (r->empty()) continue;  // a trailing separator
    if (p == path.end() || *p != *r) return false;
  }
  return true;
}

fs::path resolved(const fs::path& path) {
  std::error_code error;
  fs::path out = fs::weakly_canonical(path, error);
  if (error) {
    throw DirectoryUnavailable("cannot resolve " + path.string() + ": " + error.message());
  }
  return out;
}

}  // namespace

std::string resolved_inside(const std::string& path, const std::string& root,
                            const std::string& escape_message) {
  const fs::path real = resolved(fs::path(path).lexically_normal());
  const fs::path real_root = resolved(fs::path(root).lexically_normal());
  if (!is_inside(real, real_root)) {
    throw PathEscapesRoot(escape_message + " (resolves to " + real.string() + ")");
  }
  return real.string();
}

void ensure_directory_inside(const std::string& path, const std::string& root,
                             const std::string& escape_message) {
  resolved_inside(path, root, escape_message);
  std::error_code error;
  fs::create_directories(path, error);
  if (error) {
    throw DirectoryUnavailable("cannot create directory " + path + ": " + error.message());
  }
  if (!fs::is_directory(path, error)) {
    throw DirectoryUnavailable("cannot use " + path + " as a mount source: not a directory");
  }
  resolved_inside(path, root, escape_message);
}

}  // namespace sandboxd::provisioner

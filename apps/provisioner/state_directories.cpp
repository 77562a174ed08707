#include "state_directories.hpp"

#include <filesystem>
#include <system_error>
#include <vector>

#include "sandboxd/host_fs.hpp"

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

namespace {

// Opens `path` from `root` down, component by component, without following a link; with
// `create`, missing directories are made (0755 minus the umask).
void walk_inside(const std::string& path, const std::string& root,
                 const std::string& escape_message, bool create) {
  resolved_inside(path, root, escape_message);
  const fs::path normal_root = fs::path(root).lexically_normal();
  std::vector<std::string> parts;
  for (const auto& part : fs::path(path).lexically_normal().lexically_relative(normal_root)) {
    if (part.empty() || part == ".") continue;
    if (part == "..") throw PathEscapesRoot(escape_message);
    parts.push_back(part.string());
  }
  if (parts.empty()) {
    // The root itself holds every user's state: a sandbox mount is always below it.
    throw PathEscapesRoot(escape_message +
                          " (it is the state root itself; a sandbox mount must be a directory "
                          "below it)");
  }
  try {
    const host_fs::UniqueFd top = host_fs::open_trusted_dir(normal_root);
    host_fs::DirOptions options;
    if (create) options.create_mode = 0755;
    host_fs::open_dirs(top.get(), parts, normal_root, options);
  } catch (const host_fs::UnsafePathError& unsafe) {
    throw PathEscapesRoot(escape_message + ": " + unsafe.what());
  } catch (const fs::filesystem_error& error) {
    if (!create && error.code() == std::errc::no_such_file_or_directory) {
      throw DirectoryMissing(path);
    }
    throw DirectoryUnavailable("cannot create directory " + path + ": " + error.code().message());
  }
}

}  // namespace

void ensure_directory_inside(const std::string& path, const std::string& root,
                             const std::string& escape_message) {
  walk_inside(path, root, escape_message, /*create=*/true);
}

void require_directory_inside(const std::string& path, const std::string& root,
                              const std::string& escape_message) {
  walk_inside(path, root, escape_message, /*create=*/false);
}

}  // namespace sandboxd::provisioner

#include "extra_mount_validation.hpp"

#include <algorithm>
#include <filesystem>
#include <set>

namespace sandboxd::provisioner {
namespace {

namespace fs = std::filesystem;

std::string normalized(const std::string& path) {
  std::string text = fs::path(path).lexically_normal().string();
  while (text.size() > 1 && text.back() == '/') text.pop_back();
  return text;
}

bool is_inside(const std::string& path, const std::string& root) {
  if (root.empty()) return false;
  if (root == "/") return true;
  return path == root || path.rfind(root + "/", 0) == 0;
}

// Where extra-mount sources may live: the host base dir, or (legacy layout with no base) the
// parent of a THREADS_HOST_PATH that ends in "threads".
std::string state_root(const StateRoots& roots) {
  if (!roots.host_base_dir.empty()) return normalized(roots.host_base_dir);
  const fs::path threads = fs::path(normalized(roots.threads_host_path));
  if (threads.filename() == "threads") return threads.parent_path().string();
  return "";
}

}  // namespace

std::vector<Mount> validated_extra_mounts(const std::vector<Mount>& mounts,
                                          const std::string& thread_id, const std::string& user_id,
                                          const StateRoots& roots) {
  if (mounts.size() > kMaxProvisionerExtraMounts) {
    throw ExtraMountRejected("Too many extra mounts; max is " +
                             std::to_string(kMaxProvisionerExtraMounts));
  }
  const std::string root = state_root(roots);
  std::set<std::string> seen;
  std::vector<Mount> out;
  for (const Mount& mount : mounts) {
    if (mount.host_path.empty() || mount.host_path.front() != '/') {
      throw ExtraMountRejected("Extra mount host path must be absolute: " + mount.host_path);
    }
    const std::string host = normalized(mount.host_path);
    if (!is_inside(host, root)) {
      throw ExtraMountRejected("Extra mount host path is outside DeerFlow state: " +
                               mount.host_path);
    }
    if (mount.container_path.empty() || mount.container_path.front() != '/') {
      throw ExtraMountRejected("Extra mount path must be absolute: " + mount.container_path);
    }
    const std::string container = normalized(mount.container_path);
    if (std::find(kProvisionerExtraMountPaths.begin(), kProvisionerExtraMountPaths.end(),
                  container) == kProvisionerExtraMountPaths.end()) {
      throw ExtraMountRejected("Unsupported extra mount path: " + mount.container_path);
    }
    if (!seen.insert(container).second) {
      throw ExtraMountRejected("Duplicate extra mount path: " + mount.container_path);
    }
    if (container == "/mnt/user-data/.upload-conversions") {
      const std::string expected = normalized(root + "/users/" + user_id + "/threads/" + thread_id +
                                              "/user-data/.upload-conversions");
      if (!mount.read_only) {
        throw ExtraMountRejected("Upload conversion mount must be read-only: " + mount.host_path);
      }
      if (host != expected) {
        throw ExtraMountRejected("Upload conversion mount must be " + expected + ", got " +
                                 mount.host_path);
      }
    }
    out.push_back({host, container, mount.read_only});
  }
  return out;
}

}  // namespace sandboxd::provisioner

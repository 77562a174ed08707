#include "host_mounts.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sandboxd/host_fs.hpp>
#include <stdexcept>

namespace sandboxd::local_docker {
using host_fs::UniqueFd;
namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(const std::string& field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string digits = field.substr(i + 1, 3);
      if (digits.size() == 3 &&
          std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out += static_cast<char>(std::stoi(digits, nullptr, 8));
        i += 3;
        continue;
      }
    }
    out += field[i];
  }
  return out;
}

bool is_mount_point(const std::filesystem::path& path) {
  for (const auto& point : mount_points_under(path)) {
    if (point == path) return true;
  }
  return false;
}

}  // namespace

void make_shared_mount(const std::filesystem::path& root) {
  if (!is_mount_point(root)) {
    if (::mount(root.c_str(), root.c_str(), nullptr, MS_BIND, nullptr) != 0) {
      const int error = errno;
      throw std::runtime_error("mount --bind " + root.string() +
                               " onto itself failed: " + errno_text(error));
    }
  }
  if (::mount(nullptr, root.c_str(), nullptr, MS_SHARED, nullptr) != 0) {
    const int error = errno;
    throw std::runtime_error("mount --make-shared " + root.string() +
                             " failed: " + errno_text(error));
  }
}

void bind_directory(const std::string& source, const std::filesystem::path& target,
                    bool read_only) {
  if (source.empty() || source.front() != '/') {
    throw std::runtime_error("bind source \"" + source + "\" is not an absolute path");
  }
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const int raw =
      static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, source.c_str(), &how, sizeof(how)));
  if (raw < 0) {
    const int error = errno;
    throw std::runtime_error("cannot open " + source + " to bind it" +
                             (error == ELOOP ? std::string(": a component is a symbolic link")
                                             : ": " + errno_text(error)));
  }
  UniqueFd source_fd(raw);
  UniqueFd tree(static_cast<int>(
      ::open_tree(source_fd.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)));
  if (tree.get() < 0) {
    const int error = errno;
    throw std::runtime_error("cannot clone a mount of " + source + ": " + errno_text(error));
  }
  if (read_only) {
    mount_attr attr{};
    attr.attr_set = MOUNT_ATTR_RDONLY;
    if (::mount_setattr(tree.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
      const int error = errno;
      throw std::runtime_error("cannot make the mount of " + source +
                               " read-only: " + errno_text(error));
    }
  }
  // The target is a directory of our own slots root (trusted, private); it is opened without
  // following a link in its last component all the same.
  const UniqueFd target_fd(::open(target.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (target_fd.get() < 0) {
    const int error = errno;
    throw std::runtime_error("cannot open slot directory " + target.string() + ": " +
                             errno_text(error));
  }
  if (::move_mount(tree.get(), "", target_fd.get(), "",
                   MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    const int error = errno;
    throw std::runtime_error("cannot mount " + source + " on " + target.string() + ": " +
                             errno_text(error));
  }
}

void detach_mount(const std::filesystem::path& target) {
  if (::umount2(target.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) == 0) return;
  const int error = errno;
  if (error == EINVAL || error == ENOENT) return;  // not a mount point, or gone
  throw std::runtime_error("cannot unmount " + target.string() + ": " + errno_text(error));
}

std::vector<std::filesystem::path> mount_points_under(const std::filesystem::path& root) {
  std::ifstream in("/proc/self/mountinfo");
  std::vector<std::filesystem::path> out;
  const std::string prefix = root.string();
  std::string line;
  while (std::getline(in, line)) {
    // id parent major:minor root mount-point options ...
    std::size_t pos = 0;
    for (int field = 0; field < 4 && pos != std::string::npos; ++field) {
      pos = line.find(' ', pos);
      if (pos != std::string::npos) ++pos;
    }
    if (pos == std::string::npos) continue;
    const std::size_t end = line.find(' ', pos);
    const std::string point = unescape_mountinfo(line.substr(pos, end - pos));
    if (point == prefix ||
        (point.size() > prefix.size() && point.compare(0, prefix.size(), prefix) == 0 &&
         point[prefix.size()] == '/')) {
      out.emplace_back(point);
    }
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.string().size() > b.string().size(); });
  return out;
}

}  // namespace sandboxd::local_docker

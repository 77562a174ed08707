#include "host_mounts.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

namespace sandboxd::local_docker {
using host_fs::UniqueFd;
namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

// Stacked mounts on one directory are detached one by one; more than this is not ours.
constexpr int kMaxStackedMounts = 16;

struct MountIdentity {
  bool mount_root = false;  // STATX_ATTR_MOUNT_ROOT, where the kernel reports it
  bool root_known = false;
  std::uint64_t mount_id = 0;  // STATX_MNT_ID
  bool id_known = false;
};

MountIdentity identify(int fd, const char* name, int flags) {
  struct statx sx {};
  MountIdentity out;
  if (::statx(fd, name, flags | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &sx) != 0) {
    const int error = errno;
    throw std::runtime_error(std::string("statx failed: ") + errno_text(error));
  }
  if (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) {
    out.root_known = true;
    out.mount_root = (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  }
  if (sx.stx_mask & STATX_MNT_ID) {
    out.id_known = true;
    out.mount_id = sx.stx_mnt_id;
  }
  return out;
}

std::uint64_t mount_id_of(int fd) {
  const MountIdentity id = identify(fd, "", AT_EMPTY_PATH);
  if (!id.id_known) throw std::runtime_error("the kernel reports no mount id (statx STATX_MNT_ID)");
  return id.mount_id;
}

// The directory `name` under `dirfd`, no link followed, O_PATH; invalid when it is not one.
UniqueFd open_child_dir(int dirfd, const std::string& name) {
  return UniqueFd(::openat(dirfd, name.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

// Up to `max_entries` names in the directory `path` opened without links ("." and ".." left
// out).
std::vector<std::string> child_names(int dirfd, std::size_t max_entries) {
  std::vector<std::string> names;
  const int fd = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return names;
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return names;
  }
  while (const dirent* entry = ::readdir(dir)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (names.size() >= max_entries) break;
    names.push_back(name);
  }
  ::closedir(dir);
  return names;
}

}  // namespace

std::filesystem::path normal_absolute(const std::filesystem::path& path) {
  if (!path.is_absolute()) {
    throw std::invalid_argument("\"" + path.string() + "\" is not an absolute path");
  }
  std::filesystem::path out = path.lexically_normal();
  if (!out.has_filename() && out != out.root_path()) out = out.parent_path();
  return out;
}

UniqueFd open_dir_without_links(const std::filesystem::path& dir) {
  open_how how{};
  how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const int raw =
      static_cast<int>(::syscall(SYS_openat2, AT_FDCWD, dir.c_str(), &how, sizeof(how)));
  if (raw < 0) {
    const int error = errno;
    throw std::runtime_error("cannot open " + dir.string() +
                             (error == ELOOP ? std::string(": a component is a symbolic link")
                                             : ": " + errno_text(error)));
  }
  return UniqueFd(raw);
}

std::string links_on_the_way(const std::filesystem::path& dir) {
  std::filesystem::path existing = dir;
  struct stat st {};
  while (::lstat(existing.c_str(), &st) != 0 && existing != existing.root_path()) {
    existing = existing.parent_path();
  }
  try {
    open_dir_without_links(existing);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

bool is_mount_root(int fd) {
  const MountIdentity self = identify(fd, "", AT_EMPTY_PATH);
  if (self.root_known) return self.mount_root;
  // Older kernels: a mount root has another mount id than its parent ("/" is one).
  UniqueFd parent(::openat(fd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!parent) return true;
  return mount_id_of(parent.get()) != self.mount_id;
}

bool make_shared_mount(const std::filesystem::path& root) {
  bool made = false;
  {
    const UniqueFd before = open_dir_without_links(root);
    if (!is_mount_root(before.get())) {
      made = true;
      UniqueFd tree(static_cast<int>(
          ::open_tree(before.get(), "", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_EMPTY_PATH)));
      if (tree.get() < 0) {
        const int error = errno;
        throw std::runtime_error("cannot clone a mount of " + root.string() + ": " +
                                 errno_text(error));
      }
      if (::move_mount(tree.get(), "", before.get(), "",
                       MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
        const int error = errno;
        throw std::runtime_error("mount --bind " + root.string() +
                                 " onto itself failed: " + errno_text(error));
      }
    }
  }
  // Opened again: a descriptor opened before the bind names the directory beneath it.
  const UniqueFd mounted = open_dir_without_links(root);
  mount_attr attr{};
  attr.propagation = MS_SHARED;
  if (::mount_setattr(mounted.get(), "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
    const int error = errno;
    throw std::runtime_error("mount --make-shared " + root.string() +
                             " failed: " + errno_text(error));
  }
  return made;
}

bool is_self_bind(const std::filesystem::path& dir) {
  UniqueFd fd;
  try {
    fd = open_dir_without_links(dir);
  } catch (const std::exception&) {
    return false;
  }
  if (!is_mount_root(fd.get())) return false;
  const UniqueFd parent(::openat(fd.get(), "..", O_PATH | O_DIRECTORY | O_CLOEXEC));
  struct stat self {
  }, up{};
  return parent && ::fstat(fd.get(), &self) == 0 && ::fstat(parent.get(), &up) == 0 &&
         self.st_dev == up.st_dev;
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
  // The target is a directory of our own slots root (trusted, private); no link in its path
  // is followed all the same.
  UniqueFd target_fd;
  try {
    target_fd = open_dir_without_links(target);
  } catch (const std::exception& e) {
    throw std::runtime_error(std::string("slot directory: ") + e.what());
  }
  if (::move_mount(tree.get(), "", target_fd.get(), "",
                   MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    const int error = errno;
    throw std::runtime_error("cannot mount " + source + " on " + target.string() + ": " +
                             errno_text(error));
  }
}

void detach_mount(const std::filesystem::path& target, bool every_layer) {
  for (int round = 0; round < (every_layer ? kMaxStackedMounts : 1); ++round) {
    UniqueFd fd;
    try {
      fd = open_dir_without_links(target);
    } catch (const std::exception&) {
      return;  // gone, or no directory: nothing mounted on it that is ours
    }
    if (!is_mount_root(fd.get())) return;
    if (::umount2(target.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
      const int error = errno;
      if (error == ENOENT) return;
      throw std::runtime_error("cannot unmount " + target.string() + ": " + errno_text(error));
    }
  }
  if (!every_layer) return;
  throw std::runtime_error("cannot unmount " + target.string() + ": still a mount point after " +
                           std::to_string(kMaxStackedMounts) + " detaches");
}

void detach_child_mounts(const std::filesystem::path& dir, std::size_t max_entries) {
  UniqueFd parent;
  try {
    parent = open_dir_without_links(dir);
  } catch (const std::exception&) {
    return;  // gone
  }
  for (const std::string& name : child_names(parent.get(), max_entries)) {
    const UniqueFd child = open_child_dir(parent.get(), name);
    if (child && is_mount_root(child.get())) detach_mount(dir / name);
  }
}

bool has_mounts_two_levels_down(const std::filesystem::path& dir, std::size_t max_entries) {
  UniqueFd top;
  try {
    top = open_dir_without_links(dir);
  } catch (const std::exception&) {
    return false;
  }
  std::size_t seen = 0;
  for (const std::string& name : child_names(top.get(), max_entries)) {
    const UniqueFd child = open_child_dir(top.get(), name);
    if (!child) continue;
    if (is_mount_root(child.get())) return true;
    const UniqueFd readable(
        ::openat(top.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!readable) continue;
    for (const std::string& grandchild : child_names(readable.get(), max_entries)) {
      if (++seen > max_entries) return true;  // too many to tell: keep what is mounted
      const UniqueFd leaf = open_child_dir(readable.get(), grandchild);
      if (leaf && is_mount_root(leaf.get())) return true;
    }
  }
  return false;
}

namespace {

Removal remove_entry(int dirfd, const std::string& name, std::uint64_t mount_id,
                     std::size_t& budget) {
  Removal out;
  if (budget == 0) {
    out.complete = false;
    out.budget_ran_out = true;
    return out;
  }
  --budget;
  if (::unlinkat(dirfd, name.c_str(), 0) == 0 || errno == ENOENT) return out;
  if (errno != EISDIR) {
    out.complete = false;  // left as it is (EBUSY: a file that is a mount point)
    return out;
  }
  const int fd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    out.complete = false;
    return out;
  }
  UniqueFd owned(fd);
  // A directory that is a mount root, or on another mount: its contents are not ours to
  // remove (a conversation's files bound there, say). Leave it and say so.
  if (is_mount_root(fd) || mount_id_of(fd) != mount_id) {
    out.complete = false;
    out.mount_refused = name;
    return out;
  }
  const std::vector<std::string> children = child_names(fd, budget + 1);
  for (const std::string& child : children) {
    const Removal inner = remove_entry(fd, child, mount_id, budget);
    if (!inner.complete) {
      out.complete = false;
      out.budget_ran_out = out.budget_ran_out || inner.budget_ran_out;
      if (out.mount_refused.empty() && !inner.mount_refused.empty()) {
        out.mount_refused = name + "/" + inner.mount_refused;
      }
      if (inner.budget_ran_out) break;
    }
  }
  if (out.complete && ::unlinkat(dirfd, name.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT) {
    out.complete = false;
  }
  return out;
}

}  // namespace

Removal remove_tree_at(int dirfd, const std::string& name, std::size_t& budget) {
  return remove_entry(dirfd, name, mount_id_of(dirfd), budget);
}

}  // namespace sandboxd::local_docker

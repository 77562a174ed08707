#include "host/tree_copy.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "sandboxd/host_fs.hpp"

namespace sandboxd::core {
namespace {

using host_fs::UniqueFd;

[[noreturn]] void fail(const std::filesystem::path& where, const std::string& what, int error) {
  throw std::runtime_error(what + " " + where.string() + ": " + std::strerror(error));
}

// The names in directory `dir` ("." and ".." left out), read through a descriptor of its own.
std::vector<std::string> names_in(int dir, const std::filesystem::path& shown) {
  const int listing = ::openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (listing < 0) fail(shown, "cannot list", errno);
  DIR* stream = ::fdopendir(listing);
  if (stream == nullptr) {
    const int error = errno;
    ::close(listing);
    fail(shown, "cannot list", error);
  }
  std::vector<std::string> names;
  errno = 0;
  while (const dirent* entry = ::readdir(stream)) {
    const std::string name = entry->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(stream);
  return names;
}

// An entry's kind, without following a link; mount roots told apart (a bind mount of the same
// filesystem has the same device, so the device alone would not say).
struct Entry {
  mode_t mode = 0;
  std::uint64_t size = 0;
  bool mount_root = false;
};

Entry entry_at(int dir, const std::string& name, const std::filesystem::path& shown) {
  struct statx sx {};
  if (::statx(dir, name.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT,
              STATX_TYPE | STATX_MODE | STATX_SIZE, &sx) != 0) {
    fail(shown, "cannot inspect", errno);
  }
  Entry out;
  out.mode = sx.stx_mode;
  out.size = sx.stx_size;
  out.mount_root = (sx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0 &&
                   (sx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  return out;
}

class Walk {
 public:
  Walk(const TreeBounds& bounds) : bounds_(bounds) {}
  TreeCount count;

  void counted(const std::filesystem::path& shown) {
    if (++count.entries > bounds_.max_entries) {
      throw std::runtime_error("stopped at " + shown.string() + ": more than " +
                               std::to_string(bounds_.max_entries) + " entries");
    }
  }
  void deeper(int depth, const std::filesystem::path& shown) const {
    if (depth > bounds_.max_depth) {
      throw std::runtime_error("stopped at " + shown.string() + ": deeper than " +
                               std::to_string(bounds_.max_depth) + " levels");
    }
  }
  void add_bytes(std::uint64_t bytes, const std::filesystem::path& shown) {
    count.bytes += bytes;
    if (count.bytes > bounds_.max_bytes) {
      throw std::runtime_error("stopped at " + shown.string() + ": more than " +
                               std::to_string(bounds_.max_bytes) + " bytes");
    }
  }

  void copy(int from, int into, int depth, const std::filesystem::path& shown) {
    deeper(depth, shown);
    for (const std::string& name : names_in(from, shown)) {
      const std::filesystem::path path = shown / name;
      const Entry entry = entry_at(from, name, path);
      if (entry.mount_root) {
        ++count.skipped;
        continue;
      }
      if (S_ISDIR(entry.mode)) {
        counted(path);
        const UniqueFd child(
            ::openat(from, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!child) fail(path, "cannot open", errno);
        if (::mkdirat(into, name.c_str(), 0700) != 0 && errno != EEXIST) {
          fail(path, "cannot copy", errno);
        }
        const UniqueFd made(
            ::openat(into, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!made) fail(path, "cannot copy", errno);
        copy(child.get(), made.get(), depth + 1, path);
        // Its mode and owner once its contents are in (a 0555 directory takes no files).
        keep_attributes(child.get(), made.get());
      } else if (S_ISREG(entry.mode)) {
        counted(path);
        add_bytes(entry.size, path);
        copy_file(from, into, name, entry.mode, path);
      } else if (S_ISLNK(entry.mode)) {
        counted(path);
        char target[PATH_MAX];
        const ssize_t length = ::readlinkat(from, name.c_str(), target, sizeof target - 1);
        if (length < 0) fail(path, "cannot read link", errno);
        target[length] = '\0';
        if (::symlinkat(target, into, name.c_str()) != 0) fail(path, "cannot copy link", errno);
        if (bounds_.keep_owner) {
          struct stat link {};
          if (::fstatat(from, name.c_str(), &link, AT_SYMLINK_NOFOLLOW) == 0) {
            ::fchownat(into, name.c_str(), link.st_uid, link.st_gid, AT_SYMLINK_NOFOLLOW);
          }
        }
      } else {
        ++count.skipped;  // a fifo, socket or device is no user data
      }
    }
  }

  void copy_file(int from, int into, const std::string& name, mode_t mode,
                 const std::filesystem::path& shown) {
    const UniqueFd in(::openat(from, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK));
    if (!in) fail(shown, "cannot open", errno);
    struct stat st {};
    if (::fstat(in.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
      ++count.skipped;  // swapped for something else under us: not copied
      return;
    }
    const UniqueFd out(::openat(into, name.c_str(),
                                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                                static_cast<mode_t>(mode & 0777)));
    if (!out) fail(shown, "cannot copy", errno);
    // What the file held when it was opened, no more: one that grows meanwhile is cut there.
    off_t offset = 0;
    while (offset < st.st_size) {
      const std::size_t left = static_cast<std::size_t>(st.st_size - offset);
      const ssize_t sent =
          ::sendfile(out.get(), in.get(), &offset, std::min<std::size_t>(left, 1 << 20));
      if (sent < 0) {
        if (errno == EINTR) continue;
        fail(shown, "cannot copy", errno);
      }
      if (sent == 0) break;  // it shrank
    }
    keep_attributes(in.get(), out.get());
  }

  // The source's permission bits (never set-id or sticky bits) and, when asked, its owner.
  void keep_attributes(int source, int copy) const {
    struct stat st {};
    if (::fstat(source, &st) != 0) return;
    if (bounds_.keep_owner) (void)::fchown(copy, st.st_uid, st.st_gid);
    (void)::fchmod(copy, st.st_mode & 0777);
  }

  void clear(int dir, int depth, const std::filesystem::path& shown) {
    deeper(depth, shown);
    for (const std::string& name : names_in(dir, shown)) {
      const std::filesystem::path path = shown / name;
      const Entry entry = entry_at(dir, name, path);
      if (entry.mount_root) {
        ++count.skipped;  // never below a mount point, nor the mount point itself
        continue;
      }
      counted(path);
      if (S_ISDIR(entry.mode)) {
        const UniqueFd child(
            ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!child) fail(path, "cannot open", errno);
        const std::uint64_t skipped_before = count.skipped;
        clear(child.get(), depth + 1, path);
        if (count.skipped == skipped_before && ::unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0) {
          fail(path, "cannot remove", errno);
        }
      } else {
        count.bytes += S_ISREG(entry.mode) ? entry.size : 0;
        if (::unlinkat(dir, name.c_str(), 0) != 0 && errno != ENOENT) {
          fail(path, "cannot remove", errno);
        }
      }
    }
  }

  void measure(int dir, int depth, const std::filesystem::path& shown) {
    deeper(depth, shown);
    for (const std::string& name : names_in(dir, shown)) {
      const std::filesystem::path path = shown / name;
      const Entry entry = entry_at(dir, name, path);
      if (entry.mount_root) {
        ++count.skipped;
        continue;
      }
      counted(path);
      if (S_ISDIR(entry.mode)) {
        const UniqueFd child(
            ::openat(dir, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
        if (!child) fail(path, "cannot open", errno);
        measure(child.get(), depth + 1, path);
      } else if (S_ISREG(entry.mode)) {
        add_bytes(entry.size, path);
      }
    }
  }

 private:
  const TreeBounds bounds_;
};

}  // namespace

TreeCount copy_tree(int from, int into, const TreeBounds& bounds,
                    const std::filesystem::path& shown_from) {
  Walk walk(bounds);
  walk.copy(from, into, 0, shown_from);
  return walk.count;
}

TreeCount clear_tree(int dir, const TreeBounds& bounds, const std::filesystem::path& shown) {
  Walk walk(bounds);
  walk.clear(dir, 0, shown);
  return walk.count;
}

TreeCount measure_tree(int dir, const TreeBounds& bounds, const std::filesystem::path& shown) {
  Walk walk(bounds);
  walk.measure(dir, 0, shown);
  return walk.count;
}

}  // namespace sandboxd::core

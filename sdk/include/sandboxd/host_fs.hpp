// Host filesystem access that never follows a symbolic link (design "Host integrity").
//
// A sandbox can write parts of the gateway's state directory (its conversation's user data, its
// user's lark-cli data) and can put a link there at any moment. So the host walks such trees
// one component at a time from a directory it trusts, opening each with O_NOFOLLOW, and acts
// (chmod, mkdir, create) on the descriptor it opened, never on a name looked up again. A state
// directory is trusted only if the effective user owns it and nobody else can write it or any
// directory above it (sticky directories such as /tmp excepted).
//
// Linux only. Header-only, for the core, the apps and plugins (a backend that makes host
// directories for its sandboxes uses the same rules).
#pragma once

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

namespace sandboxd::host_fs {

// A link, or an entry of the wrong type, where the host refuses to go on. The message names
// the path.
class UnsafePathError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A directory the host will not use as its state: someone else owns it or can write it.
class UntrustedDirectoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An owned file descriptor.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() { return std::exchange(fd_, -1); }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

[[noreturn]] inline void throw_errno(const char* what, const std::filesystem::path& path,
                                     int error) {
  throw std::filesystem::filesystem_error(what, path,
                                          std::error_code(error, std::generic_category()));
}

inline std::string octal_mode(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

// "uid 65534 (nobody)", or "uid 1234" when the account has no name.
inline std::string describe_uid(uid_t uid) {
  std::string out = "uid " + std::to_string(uid);
  struct passwd entry {};
  struct passwd* found = nullptr;
  char buffer[1024];
  if (::getpwuid_r(uid, &entry, buffer, sizeof buffer, &found) == 0 && found != nullptr) {
    out += std::string(" (") + found->pw_name + ")";
  }
  return out;
}

inline struct stat stat_of(int fd, const std::filesystem::path& shown) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw_errno("cannot inspect", shown, errno);
  return st;
}

// chmod on what `fd` refers to. An O_PATH descriptor cannot be fchmod()ed, so it goes through
// /proc/self/fd/N, a link to the open file itself (not to a name that could be swapped). The
// caller has checked that `fd` is not a symbolic link.
inline void set_mode(int fd, mode_t mode, const std::filesystem::path& shown) {
  if (::fchmod(fd, mode) == 0) return;
  if (errno != EBADF) throw_errno("cannot set permissions", shown, errno);
  const std::string self = "/proc/self/fd/" + std::to_string(fd);
  if (::chmod(self.c_str(), mode) != 0) {
    const int error = errno;
    throw_errno(
        error == ENOENT ? "cannot set permissions (is /proc mounted?)" : "cannot set permissions",
        shown, error);
  }
}

[[noreturn]] inline void refuse_link(const std::filesystem::path& shown) {
  throw UnsafePathError("refusing to follow the symbolic link " + shown.string() +
                        ": the host never follows a link inside a directory a sandbox can write "
                        "(remove it to go on)");
}

// Why `name` under `dirfd` could not be opened as a directory: a link, another type, or the
// errno itself. Always throws.
[[noreturn]] inline void refuse_entry(int dirfd, const std::string& name,
                                      const std::filesystem::path& shown, int error) {
  struct stat st {};
  if ((error == ELOOP || error == ENOTDIR) &&
      ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) refuse_link(shown);
    throw UnsafePathError(shown.string() + " is not a directory");
  }
  throw_errno("cannot open directory", shown, error);
}

struct DirOptions {
  // Make the directory with this mode (minus the umask) when it is missing.
  std::optional<mode_t> create_mode;
  // Give it exactly this mode when it has another (whatever the umask or the sandbox did).
  std::optional<mode_t> exact_mode;
  // Only when the directory was made by this call: give it exactly this mode.
  std::optional<mode_t> mode_if_created;
};

// Opens the directory `name` (one path component) under `dirfd` without following a link, as an
// O_PATH descriptor usable as the dirfd of further *at calls. `shown` names it in errors.
inline UniqueFd open_subdir(int dirfd, const std::string& name, const std::filesystem::path& shown,
                            const DirOptions& options = {}) {
  constexpr int kFlags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  bool created = false;
  int fd = ::openat(dirfd, name.c_str(), kFlags);
  if (fd < 0 && errno == ENOENT && options.create_mode) {
    if (::mkdirat(dirfd, name.c_str(), *options.create_mode) == 0) {
      created = true;
    } else if (errno != EEXIST) {
      throw_errno("cannot create directory", shown, errno);
    }
    fd = ::openat(dirfd, name.c_str(), kFlags);
  }
  if (fd < 0) refuse_entry(dirfd, name, shown, errno);
  UniqueFd dir(fd);
  const std::optional<mode_t> wanted =
      options.exact_mode ? options.exact_mode : (created ? options.mode_if_created : std::nullopt);
  if (wanted) {
    const struct stat st = stat_of(dir.get(), shown);
    if ((st.st_mode & 07777) != *wanted) set_mode(dir.get(), *wanted, shown);
  }
  return dir;
}

// open_subdir for each component of `relative` in turn (plain names: no "", ".", ".." or
// separators inside a component); every component is created with `options.create_mode` when
// missing and `options.mode_if_created` applies to each one made; `options.exact_mode` only to
// the last. `base_shown` names `dirfd` in errors.
inline UniqueFd open_dirs(int dirfd, const std::vector<std::string>& relative,
                          const std::filesystem::path& base_shown, const DirOptions& options = {}) {
  if (relative.empty()) {
    const int fd = ::openat(dirfd, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) throw_errno("cannot open directory", base_shown, errno);
    return UniqueFd(fd);
  }
  UniqueFd current;
  std::filesystem::path shown = base_shown;
  for (std::size_t i = 0; i < relative.size(); ++i) {
    const std::string& name = relative[i];
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      throw std::invalid_argument("not a plain path component: '" + name + "'");
    }
    shown /= name;
    DirOptions step = options;
    if (i + 1 < relative.size()) step.exact_mode.reset();
    current = open_subdir(current ? current.get() : dirfd, name, shown, step);
  }
  return current;
}

// Opens an absolute directory the caller trusts (a state directory already checked), following
// links in it as given. O_PATH, usable as a dirfd.
inline UniqueFd open_trusted_dir(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_errno("cannot open directory", dir, errno);
  return UniqueFd(fd);
}

// Opens the regular file `name` under `dirfd` with `flags` (O_RDWR, O_CREAT…) plus O_NOFOLLOW:
// a link there is refused, and so is anything but a regular file. `mode` applies to a file
// this call creates.
inline UniqueFd open_file(int dirfd, const std::string& name, int flags, mode_t mode,
                          const std::filesystem::path& shown) {
  const int fd = ::openat(dirfd, name.c_str(), flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode);
  if (fd < 0) {
    const int error = errno;
    struct stat st {};
    if (error == ELOOP && ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISLNK(st.st_mode)) {
      refuse_link(shown);
    }
    throw_errno("cannot open", shown, error);
  }
  UniqueFd file(fd);
  const struct stat st = stat_of(file.get(), shown);
  if (!S_ISREG(st.st_mode)) throw UnsafePathError(shown.string() + " is not a regular file");
  // O_NONBLOCK only kept a FIFO planted there from blocking the open; files ignore it, but the
  // caller's descriptor should behave as asked.
  const int status = ::fcntl(file.get(), F_GETFL);
  if (status >= 0 && !(flags & O_NONBLOCK)) ::fcntl(file.get(), F_SETFL, status & ~O_NONBLOCK);
  return file;
}

// What the open file `fd` holds, read whole; a file of more than `max_bytes` is refused
// (std::filesystem::filesystem_error, EFBIG, naming `shown`) rather than read in part.
inline std::string read_fd(int fd, std::size_t max_bytes, const std::filesystem::path& shown) {
  std::string text;
  char chunk[4096];
  while (true) {
    const ssize_t got = ::read(fd, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) throw_errno("cannot read", shown, errno);
    if (got == 0) return text;
    if (text.size() + static_cast<std::size_t>(got) > max_bytes) {
      const std::string what =
          "refusing to read more than " + std::to_string(max_bytes) + " bytes of";
      throw_errno(what.c_str(), shown, EFBIG);
    }
    text.append(chunk, static_cast<std::size_t>(got));
  }
}

// The regular file `name` under `dirfd` (no link followed, as open_file), read whole: at most
// `max_bytes`.
inline std::string read_file_at(int dirfd, const std::string& name, std::size_t max_bytes,
                                const std::filesystem::path& shown) {
  const UniqueFd file = open_file(dirfd, name, O_RDONLY, 0, shown);
  return read_fd(file.get(), max_bytes, shown);
}

// Replaces the regular file `name` under `dirfd` with `content` so that a crash leaves the old
// file or the new one, never a part of either: written under a fresh temporary name beside
// it (O_EXCL, no link followed), fsync'ed, renamed over `name`, and then the directory
// fsync'ed, without which a power loss can bring the old entry back after the rename. `mode`
// applies to the new file; `shown` names `name` in errors (std::filesystem::filesystem_error).
inline void replace_file_at(int dirfd, const std::string& name, std::string_view content,
                            mode_t mode, const std::filesystem::path& shown) {
  static std::atomic<unsigned> sequence{0};
  const std::string temporary = "." + name + ".tmp-" + std::to_string(::getpid()) + "-" +
                                std::to_string(sequence.fetch_add(1));
  const std::filesystem::path temporary_shown = shown.parent_path() / temporary;
  const int fd = ::openat(dirfd, temporary.c_str(),
                          O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) throw_errno("cannot write", temporary_shown, errno);
  UniqueFd file(fd);
  const auto fail = [&](const char* what, const std::filesystem::path& path, int error) {
    ::unlinkat(dirfd, temporary.c_str(), 0);
    throw_errno(what, path, error);
  };
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t written = ::write(file.get(), content.data() + done, content.size() - done);
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) fail("cannot write", temporary_shown, written < 0 ? errno : EIO);
    done += static_cast<std::size_t>(written);
  }
  if (::fsync(file.get()) != 0) fail("cannot write", temporary_shown, errno);
  file.reset();
  if (::renameat(dirfd, temporary.c_str(), dirfd, name.c_str()) != 0) {
    fail("cannot replace", shown, errno);
  }
  // fsync needs a descriptor opened for reading; `dirfd` may be O_PATH.
  const UniqueFd directory(::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!directory || ::fsync(directory.get()) != 0) {
    throw_errno("cannot make the new file durable (fsync of its directory)", shown, errno);
  }
}

// Why a directory (lstat'ed as `st`) may not hold our state, or "" when it may: it is a
// directory, the effective user owns it, and neither group nor others can write it.
inline std::string untrusted_reason(const struct stat& st) {
  if (S_ISLNK(st.st_mode)) return "is a symbolic link";
  if (!S_ISDIR(st.st_mode)) return "is not a directory";
  if (st.st_uid != ::geteuid()) {
    return "belongs to another user than this process's (" + describe_uid(::geteuid()) + ")";
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return std::string("is writable by ") + ((st.st_mode & S_IWOTH) ? "every user" : "its group");
  }
  return "";
}

// Throws UntrustedDirectoryError unless `dir` (absolute, links already resolved) is ours: a
// directory owned by the effective user that nobody else can write, under ancestors that are
// owned by root or by us and writable by nobody else unless sticky (so nobody can rename it
// away and put their own in its place). `what` names it ("state directory"); the message says
// what to do.
inline void require_trusted_dir(const std::filesystem::path& dir, std::string_view what) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) throw_errno("cannot inspect", dir, errno);
  const std::string reason = untrusted_reason(st);
  if (!reason.empty()) {
    throw UntrustedDirectoryError(
        std::string(what) + " " + dir.string() + " " + reason + " (owner " +
        describe_uid(st.st_uid) + ", mode " + octal_mode(st.st_mode) +
        "): refusing to keep state where someone else could plant links or files; use a "
        "directory of your own that only you can write");
  }
  for (std::filesystem::path parent = dir.parent_path(); !parent.empty();
       parent = parent.parent_path()) {
    struct stat up {};
    if (::stat(parent.c_str(), &up) != 0) throw_errno("cannot inspect", parent, errno);
    const bool owner_ok = up.st_uid == 0 || up.st_uid == ::geteuid();
    const bool others_write = (up.st_mode & (S_IWGRP | S_IWOTH)) != 0;
    if (!owner_ok || (others_write && !(up.st_mode & S_ISVTX))) {
      throw UntrustedDirectoryError(
          std::string(what) + " " + dir.string() + " lies under " + parent.string() + ", which " +
          (owner_ok ? std::string("others can write and which has no sticky bit")
                    : "belongs to " + describe_uid(up.st_uid)) +
          " (mode " + octal_mode(up.st_mode) +
          "): whoever can write it could swap the state directory for their own");
    }
    if (parent == parent.root_path()) break;
  }
}

// Refuses a path whose resolution would follow a symbolic link that neither root nor the
// effective user owns (the kernel's protected_symlinks rule, which realpath-style resolution
// bypasses): someone who made /tmp/deer-flow a link into one of our private directories
// must not get our state put there. `as_given` is the path before resolution.
inline void require_trusted_links(const std::filesystem::path& as_given, std::string_view what) {
  std::filesystem::path prefix;
  for (const auto& part : std::filesystem::absolute(as_given)) {
    prefix /= part;
    struct stat st {};
    if (::lstat(prefix.c_str(), &st) != 0) return;  // the rest does not exist yet
    if (S_ISLNK(st.st_mode) && st.st_uid != 0 && st.st_uid != ::geteuid()) {
      throw UntrustedDirectoryError(
          std::string(what) + " " + as_given.string() + " goes through the symbolic link " +
          prefix.string() + ", which belongs to " + describe_uid(st.st_uid) +
          ": refusing to follow another user's link to find where to keep state");
    }
  }
}

// Creates `dir` (absolute) with mode 0700 when it is missing (its missing parents 0700 too, as
// the XDG base directory rules ask of state directories), then require_trusted_dir.
inline void ensure_trusted_dir(const std::filesystem::path& dir, std::string_view what) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno != ENOENT) throw_errno("cannot inspect", dir, errno);
    std::vector<std::filesystem::path> missing;
    for (std::filesystem::path p = dir; !p.empty(); p = p.parent_path()) {
      if (::lstat(p.c_str(), &st) == 0) break;
      missing.push_back(p);
      if (p == p.root_path()) break;
    }
    for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
      if (::mkdir(it->c_str(), 0700) != 0 && errno != EEXIST) {
        throw_errno("cannot create directory", *it, errno);
      }
    }
    // mkdir's mode is reduced by the umask, never widened: 0700 or narrower. Make it exactly
    // 0700 on the directory just made (not followed: it must still be the one we made).
    UniqueFd made(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!made) throw_errno("cannot open directory", dir, errno);
    if ((stat_of(made.get(), dir).st_mode & 07777) != 0700) set_mode(made.get(), 0700, dir);
  }
  require_trusted_dir(dir, what);
}

}  // namespace sandboxd::host_fs

#include "sandboxd/core/thread_storage.hpp"

#include <endian.h>
#include <fcntl.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/magic.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "sandboxd/host_fs.hpp"

namespace sandboxd::core {
namespace {

std::string errno_text(int error) {
  return std::strerror(error);
}

std::string filesystem_name(long type) {
  switch (static_cast<unsigned long>(type)) {
    case EXT4_SUPER_MAGIC:
      return "ext4";
    case XFS_SUPER_MAGIC:
      return "XFS";
    case TMPFS_MAGIC:
      return "tmpfs";
    case OVERLAYFS_SUPER_MAGIC:
      return "overlayfs";
    case BTRFS_SUPER_MAGIC:
      return "btrfs";
    default: {
      char text[32];
      std::snprintf(text, sizeof text, "filesystem type 0x%lx", static_cast<unsigned long>(type));
      return text;
    }
  }
}

// The subvolume id of the subvolume root open as `fd` (its inode is 256), or 0.
std::uint64_t subvolume_id(int fd) {
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_ino != BTRFS_FIRST_FREE_OBJECTID) return 0;
  btrfs_ioctl_ino_lookup_args lookup{};
  lookup.treeid = 0;
  lookup.objectid = BTRFS_FIRST_FREE_OBJECTID;
  if (::ioctl(fd, BTRFS_IOC_INO_LOOKUP, &lookup) != 0) return 0;
  return lookup.treeid;
}

// One item of the quota tree, (0, `type`, `qgroup`), copied into `out` (at most `size` bytes).
bool quota_item(int fd, std::uint32_t type, std::uint64_t qgroup, void* out, std::size_t size) {
  btrfs_ioctl_search_args search{};
  btrfs_ioctl_search_key& key = search.key;
  key.tree_id = BTRFS_QUOTA_TREE_OBJECTID;
  key.min_objectid = key.max_objectid = 0;
  key.min_type = key.max_type = type;
  key.min_offset = key.max_offset = qgroup;
  key.min_transid = 0;
  key.max_transid = std::numeric_limits<std::uint64_t>::max();
  key.nr_items = 1;
  if (::ioctl(fd, BTRFS_IOC_TREE_SEARCH, &search) != 0 || key.nr_items < 1) return false;
  btrfs_ioctl_search_header header{};
  std::memcpy(&header, search.buf, sizeof header);
  if (header.type != type || header.offset != qgroup || header.len < size) return false;
  std::memcpy(out, search.buf + sizeof header, size);
  return true;
}

}  // namespace

std::optional<std::uint64_t> parse_size(std::string_view text) {
  std::size_t at = 0;
  while (at < text.size() && text[at] == ' ') ++at;
  std::uint64_t value = 0;
  const std::size_t digits_from = at;
  while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at]))) {
    const std::uint64_t digit = static_cast<std::uint64_t>(text[at] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
    ++at;
  }
  if (at == digits_from) return std::nullopt;
  std::string unit;
  for (; at < text.size(); ++at) {
    if (text[at] == ' ') continue;
    unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[at])));
  }
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else {
    const char prefix = unit[0];
    const std::string rest = unit.substr(1);
    if (!(rest.empty() || rest == "b" || rest == "ib")) return std::nullopt;
    switch (prefix) {
      case 'k':
        shift = 10;
        break;
      case 'm':
        shift = 20;
        break;
      case 'g':
        shift = 30;
        break;
      case 't':
        shift = 40;
        break;
      default:
        return std::nullopt;
    }
  }
  if (shift > 0 && value > (std::numeric_limits<std::uint64_t>::max() >> shift)) {
    return std::nullopt;
  }
  return value << shift;
}

std::string show_size(std::uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  if (value == static_cast<double>(static_cast<std::uint64_t>(value))) {
    std::snprintf(text, sizeof text, "%.0f %s", value, units[unit]);
  } else {
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
  }
  return text;
}

std::shared_ptr<const ThreadStorage> ThreadStorage::unbounded() {
  auto storage = std::make_shared<ThreadStorage>();
  storage->description_ = "not bounded (disk_limit 0)";
  return storage;
}

std::shared_ptr<const ThreadStorage> ThreadStorage::for_base_dir(
    const std::filesystem::path& base_dir, std::uint64_t limit_bytes, std::string source,
    bool look_only) {
  auto storage = std::make_shared<ThreadStorage>();
  storage->limit_bytes_ = limit_bytes;
  if (limit_bytes == 0) {
    storage->description_ = "not bounded (disk_limit 0, from " + source +
                            "): one conversation can fill the disk under " + base_dir.string();
    return storage;
  }
  const std::string bound = show_size(limit_bytes) + " per conversation (disk_limit, from " +
                            source + ")";
  std::filesystem::path probed = base_dir;
  if (look_only) {
    std::error_code missing;
    while (!std::filesystem::exists(probed, missing) && probed.has_parent_path() &&
           probed != probed.parent_path()) {
      probed = probed.parent_path();
    }
  }
  const host_fs::UniqueFd dir(::open(probed.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  struct statfs fs {};
  if (!dir || ::fstatfs(dir.get(), &fs) != 0) {
    storage->description_ = "NOT bounded: " + bound + " asked, but " + base_dir.string() +
                            " cannot be read: " + errno_text(errno);
    return storage;
  }
  if (static_cast<unsigned long>(fs.f_type) != BTRFS_SUPER_MAGIC) {
    storage->description_ =
        "NOT bounded: " + bound + " asked, but the state directory " + base_dir.string() +
        " is on " + filesystem_name(fs.f_type) +
        ", where this version cannot hold one conversation to a bound; put the state directory "
        "(base_dir) on a btrfs filesystem (sandboxd enables its quotas and makes each "
        "conversation a subvolume limited to the bound), or set disk_limit 0 to say unbounded "
        "is meant";
    return storage;
  }
  if (look_only) {
    storage->mechanism_ = Mechanism::btrfs_qgroup;  // what a host here would use
    storage->description_ = "bounded when a host starts: " + bound + ", each conversation's "
                            "directory a btrfs subvolume with its quota group limited to it (" +
                            base_dir.string() + " is on btrfs; its quotas are enabled then, "
                            "which needs root)";
    return storage;
  }
  btrfs_ioctl_quota_ctl_args enable{};
  enable.cmd = BTRFS_QUOTA_CTL_ENABLE;
  if (::ioctl(dir.get(), BTRFS_IOC_QUOTA_CTL, &enable) != 0) {
    const int error = errno;
    storage->description_ =
        "NOT bounded: " + bound + " asked; " + base_dir.string() +
        " is on btrfs but its quotas could not be enabled (" + errno_text(error) +
        (error == EPERM ? ": enabling them needs root, or run `btrfs quota enable` on it once"
                        : std::string()) +
        ")";
    return storage;
  }
  storage->mechanism_ = Mechanism::btrfs_qgroup;
  storage->description_ = "bounded: " + bound +
                          ", each conversation's directory a btrfs subvolume with its quota "
                          "group limited to it (" +
                          base_dir.string() + " is on btrfs, quotas on); a write past it fails "
                          "with EDQUOT in that conversation only";
  return storage;
}

bool ThreadStorage::make(int parent_fd, const std::string& name,
                         const std::filesystem::path& shown) const {
  if (!bounded()) return false;
  btrfs_ioctl_vol_args create{};
  if (name.empty() || name.size() >= sizeof create.name || name.find('/') != std::string::npos ||
      name == "." || name == "..") {
    throw std::runtime_error("cannot make " + shown.string() + ": not a name");
  }
  std::memcpy(create.name, name.c_str(), name.size());
  // The caller's descriptors may be O_PATH ones, which take no ioctl: the directory itself,
  // opened through them (no path is followed).
  const host_fs::UniqueFd parent(::openat(parent_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!parent) {
    throw std::runtime_error("cannot open the directory above " + shown.string() + ": " +
                             errno_text(errno));
  }
  if (::ioctl(parent.get(), BTRFS_IOC_SUBVOL_CREATE, &create) != 0) {
    if (errno == EEXIST) return true;  // another process made it meanwhile
    throw std::runtime_error("cannot make " + shown.string() + " a bounded subvolume: " +
                             errno_text(errno));
  }
  const host_fs::UniqueFd made(
      ::openat(parent.get(), name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  btrfs_ioctl_qgroup_limit_args limit{};
  limit.qgroupid = 0;  // the subvolume of the descriptor
  limit.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
  limit.lim.max_rfer = limit_bytes_;
  if (!made || ::ioctl(made.get(), BTRFS_IOC_QGROUP_LIMIT, &limit) != 0) {
    const int error = errno;
    btrfs_ioctl_vol_args destroy{};
    std::memcpy(destroy.name, name.c_str(), name.size());
    ::ioctl(parent.get(), BTRFS_IOC_SNAP_DESTROY, &destroy);  // nothing half made is left
    throw std::runtime_error("cannot limit " + shown.string() + " to " + show_size(limit_bytes_) +
                             ": " + errno_text(error));
  }
  return true;
}

std::optional<ThreadStorage::Usage> ThreadStorage::usage(int dir_fd) const {
  if (mechanism_ != Mechanism::btrfs_qgroup) return std::nullopt;
  const host_fs::UniqueFd dir(::openat(dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return std::nullopt;
  const std::uint64_t id = subvolume_id(dir.get());
  if (id == 0) return std::nullopt;
  btrfs_qgroup_info_item info{};
  if (!quota_item(dir.get(), BTRFS_QGROUP_INFO_KEY, id, &info, sizeof info)) return std::nullopt;
  Usage out;
  out.bytes = le64toh(info.rfer);
  btrfs_qgroup_limit_item limit{};
  if (quota_item(dir.get(), BTRFS_QGROUP_LIMIT_KEY, id, &limit, sizeof limit) &&
      (le64toh(limit.flags) & BTRFS_QGROUP_LIMIT_MAX_RFER) != 0) {
    out.limit = le64toh(limit.max_rfer);
  }
  return out;
}

}  // namespace sandboxd::core

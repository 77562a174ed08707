// A conversation's storage, bounded (docs/storage.md). A sandbox writes its conversation's host
// directories (user-data's workspace, uploads and outputs, acp-workspace); unbounded, one tenant
// fills the host's disk and every other conversation, the engine's storage and sandboxd's own
// state fail with it. With a bound (`disk_limit`), each conversation's directory is made as a
// unit the kernel holds to it: a write past the bound fails with EDQUOT, inside that
// conversation only.
//
// Mechanism, decided once per state directory from what its filesystem gives:
//   - btrfs: the conversation's directory ({base}/users/{u}/threads/{t}, or threads/{t} in the
//     legacy layout) is a subvolume whose quota group is limited to the bound (sandboxd enables
//     the filesystem's quotas; needs root). Bytes count, file data and metadata; inode counts
//     are not limited separately (each inode's metadata counts as bytes).
//   - none: anything else (ext4, XFS without project quotas in this version, tmpfs…), or a
//     process without the privilege; check-config says which and what to change.
// A conversation directory made before the bound was set stays a plain, unbounded directory
// (its files are never moved); it says so where its usage is shown.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sandboxd::core {

// "10g", "512m", "64k", "1t" (powers of 1024; a "b"/"ib" suffix and upper case allowed), or a
// plain number of bytes; "0" is 0. nullopt for anything else (negative, fractional with no unit,
// overflowing).
std::optional<std::uint64_t> parse_size(std::string_view text);
// "10 GiB", "512 MiB", "0 B".
std::string show_size(std::uint64_t bytes);

// The default bound per conversation: what a sandbox may write before its writes fail.
inline constexpr const char* kDefaultDiskLimit = "10g";
// The default free-space floor under the state directory and the engine's storage: below it new
// sandboxes are refused, so sandboxd's own state and running sandboxes keep room.
inline constexpr const char* kDefaultMinFreeDisk = "512m";

class ThreadStorage {
 public:
  enum class Mechanism { none, btrfs_qgroup };

  // The bound `limit_bytes` (0: none) for conversations under `base_dir` (which exists), with
  // the mechanism its filesystem gives this process. `source` says where the bound came from
  // ("sandbox.disk_limit", "default"). Never throws for a host that cannot bound: that is a
  // Mechanism::none with the reason in description(). With `look_only` (check-config) nothing
  // is changed: btrfs quotas are not enabled, and the answer says a host would; a missing
  // base_dir is judged by the nearest directory above it that exists.
  static std::shared_ptr<const ThreadStorage> for_base_dir(const std::filesystem::path& base_dir,
                                                           std::uint64_t limit_bytes,
                                                           std::string source,
                                                           bool look_only = false);
  // No bound at all (an embedder's Paths by default).
  static std::shared_ptr<const ThreadStorage> unbounded();

  Mechanism mechanism() const { return mechanism_; }
  std::uint64_t limit_bytes() const { return limit_bytes_; }
  bool bounded() const { return mechanism_ != Mechanism::none && limit_bytes_ > 0; }
  // check-config's line: what is bounded and how, or why not and what to change.
  const std::string& description() const { return description_; }

  // Makes the conversation directory `name` below `parent_fd` (it does not exist) bounded:
  // a subvolume limited to the bound. False when this storage bounds nothing (the caller makes
  // a plain directory); true when made, or when another process made it meanwhile. Throws
  // std::runtime_error naming `shown` when it cannot (nothing is left half made).
  bool make(int parent_fd, const std::string& name, const std::filesystem::path& shown) const;

  struct Usage {
    std::uint64_t bytes = 0;  // referenced by the conversation's directory
    std::uint64_t limit = 0;  // 0: no limit on it
  };
  // What the conversation directory open as `dir_fd` uses, as of the filesystem's last commit
  // (btrfs counts quota groups at each transaction commit, every 30 s by default); nullopt when
  // it is not a bounded one (a plain directory) or the filesystem would not say.
  std::optional<Usage> usage(int dir_fd) const;

 private:
  Mechanism mechanism_ = Mechanism::none;
  std::uint64_t limit_bytes_ = 0;
  std::string description_;
};

}  // namespace sandboxd::core

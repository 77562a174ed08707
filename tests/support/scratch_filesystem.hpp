// A small filesystem a test mounts for itself (root only): a tmpfs of a given size, or a
// loop-mounted btrfs image, unmounted (lazily, so a test that failed midway leaves nothing
// mounted) and removed when it goes. What a test fills to see a full disk, or bounds by quota.
#pragma once

#include <sys/mount.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "test_support.hpp"

namespace sandboxd::testing {

class ScratchFilesystem {
 public:
  enum class Kind { tmpfs, btrfs };

  // Why one cannot be made here ("" when it can): not root, or mkfs.btrfs missing.
  static std::string unavailable(Kind kind) {
    if (::geteuid() != 0) return "mounting a filesystem needs root";
    if (kind == Kind::btrfs && std::system("command -v mkfs.btrfs >/dev/null 2>&1") != 0) {
      return "mkfs.btrfs is missing (btrfs-progs; scripts/setup.sh installs it)";
    }
    return "";
  }

  ScratchFilesystem(Kind kind, const std::string& size) {
    mount_point_ = dir_.path() / "mnt";
    std::filesystem::create_directories(mount_point_);
    if (kind == Kind::tmpfs) {
      const std::string options = "size=" + size + ",mode=0700";
      mounted_ = ::mount("tmpfs", mount_point_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                         options.c_str()) == 0;
      return;
    }
    const std::string image = (dir_.path() / "btrfs.img").string();
    mounted_ = std::system(("truncate -s " + size + " " + image + " && mkfs.btrfs -q " + image +
                            " >/dev/null 2>&1 && mount -o loop " + image + " " +
                            mount_point_.string())
                               .c_str()) == 0;
  }
  ~ScratchFilesystem() {
    if (mounted_) ::umount2(mount_point_.c_str(), MNT_DETACH);
  }
  ScratchFilesystem(const ScratchFilesystem&) = delete;
  ScratchFilesystem& operator=(const ScratchFilesystem&) = delete;

  bool mounted() const { return mounted_; }
  const std::filesystem::path& path() const { return mount_point_; }

 private:
  TempDir dir_;
  std::filesystem::path mount_point_;
  bool mounted_ = false;
};

}  // namespace sandboxd::testing

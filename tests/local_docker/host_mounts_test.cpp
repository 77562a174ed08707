// Host mounts and claim records of local_docker's pre-started slots (issue 32 A.2 and B), on
// real bind mounts in a private temporary directory, without an engine. Root only: each test
// is skipped with a message otherwise.
//
// Whether a directory is a mount point is asked of the kernel about the open directory, never
// read from /proc/self/mountinfo by path string; a recursive removal never enters a mount,
// whatever mounted it and however its path is spelled; a claim record matches only the
// container it names.
#include "host_mounts.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

#include "slot_pool.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
namespace ld = sandboxd::local_docker;
using sandboxd::host_fs::UniqueFd;

class HostMountsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "bind mounts need root; run as root to test them";
    char pattern[] = "/tmp/sandboxd-host-mounts-XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (dir_.empty()) return;
    for (const fs::path& point : mounted_) ::umount2(point.c_str(), MNT_DETACH);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Binds `source` onto `target` (both made), remembered for TearDown.
  void bind(const fs::path& source, const fs::path& target) {
    fs::create_directories(source);
    fs::create_directories(target);
    ASSERT_EQ(::mount(source.c_str(), target.c_str(), nullptr, MS_BIND, nullptr), 0)
        << target << ": " << std::strerror(errno);
    mounted_.push_back(target);
  }

  static void write(const fs::path& file, const std::string& text) {
    fs::create_directories(file.parent_path());
    std::ofstream(file) << text;
  }

  static bool mount_root(const fs::path& path) {
    const UniqueFd fd(::open(path.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    return fd && ld::is_mount_root(fd.get());
  }

  fs::path dir_;
  std::vector<fs::path> mounted_;
};

TEST_F(HostMountsTest, IsAMountIsAskedOfTheOpenDirectory) {
  bind(dir_ / "data", dir_ / "slot" / "0");
  fs::create_directories(dir_ / "slot" / "1");
  EXPECT_TRUE(mount_root(dir_ / "slot" / "0"));
  EXPECT_FALSE(mount_root(dir_ / "slot" / "1"));
  EXPECT_FALSE(mount_root(dir_ / "slot"));
  // However the path is spelled: the same directory, the same answer.
  EXPECT_TRUE(mount_root(dir_.string() + "//slot/./0"));
}

TEST_F(HostMountsTest, ARemovalNeverEntersAMount) {
  const fs::path data = dir_ / "conversation" / "user-data";
  write(data / "precious.txt", "keep me\n");
  bind(data, dir_ / "slots" / "s-1" / "0");
  write(dir_ / "slots" / "s-1" / "junk" / "file", "ours\n");
  const UniqueFd slots(::open((dir_ / "slots").c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  std::size_t budget = 100;
  const ld::Removal removal = ld::remove_tree_at(slots.get(), "s-1", budget);
  EXPECT_FALSE(removal.complete);
  EXPECT_EQ(removal.mount_refused, "s-1/0");
  EXPECT_TRUE(fs::exists(data / "precious.txt")) << "the removal went through a live bind";
  EXPECT_FALSE(fs::exists(dir_ / "slots" / "s-1" / "junk")) << "what was ours stays";
}

TEST_F(HostMountsTest, DetachingASlotsMountsTakesEveryStackedLayer) {
  bind(dir_ / "a", dir_ / "slot" / "0");
  bind(dir_ / "b", dir_ / "slot" / "0");  // stacked: a second claim of the same directory
  bind(dir_ / "c", dir_ / "slot" / "1");
  // Spelled as an operator might: the descriptor decides, so the spelling does not matter.
  ld::detach_child_mounts(dir_.string() + "/./slot/", 100);
  EXPECT_FALSE(mount_root(dir_ / "slot" / "0"));
  EXPECT_FALSE(mount_root(dir_ / "slot" / "1"));
  mounted_.clear();
}

TEST_F(HostMountsTest, PathsAreMadeNormalOnce) {
  EXPECT_EQ(ld::normal_absolute("/var//lib/./sandboxd/"), fs::path("/var/lib/sandboxd"));
  EXPECT_EQ(ld::normal_absolute("/var/lib/x/../sandboxd//"), fs::path("/var/lib/sandboxd"));
  EXPECT_EQ(ld::normal_absolute("/"), fs::path("/"));
  EXPECT_THROW(ld::normal_absolute("relative/slots"), std::invalid_argument);
}

TEST_F(HostMountsTest, AComponentThatIsALinkIsNamed) {
  fs::create_directories(dir_ / "real" / "slots");
  fs::create_directory_symlink(dir_ / "real", dir_ / "link");
  EXPECT_EQ(ld::links_on_the_way(dir_ / "real" / "slots"), "");
  EXPECT_NE(ld::links_on_the_way(dir_ / "link" / "slots").find("symbolic link"), std::string::npos);
  // Not made yet: its deepest existing ancestor is what is checked.
  EXPECT_NE(ld::links_on_the_way(dir_ / "link" / "later" / "slots").find("symbolic link"),
            std::string::npos);
}

// Issue 32 B: a claim record matched any container when the container id was empty, and a
// destroy without one could release a live claim's mounts.
TEST_F(HostMountsTest, AClaimRecordMatchesOnlyTheContainerItNames) {
  write(dir_ / "claims" / "sb1.json",
        R"({"sandbox_id":"sb1","container_id":"abc123def456","slot":"t-1"})");
  EXPECT_FALSE(ld::SlotPool::claimed(dir_, "sb1", "").has_value());
  EXPECT_FALSE(ld::SlotPool::claimed(dir_, "sb1", "fff000").has_value());
  EXPECT_TRUE(ld::SlotPool::claimed(dir_, "sb1", "abc123").has_value());
  EXPECT_TRUE(ld::SlotPool::claimed(dir_, "sb1", "abc123def456").has_value());
  EXPECT_TRUE(ld::SlotPool::read_record(dir_, "sb1").has_value());
  // forget_claim without a container id leaves the record and its slot directory alone.
  bind(dir_ / "conversation", dir_ / "slots" / "t-1" / "0");
  write(dir_ / "conversation" / "precious.txt", "keep me\n");
  sandboxd::testing::CapturingLogger logger;
  ld::SlotPool::forget_claim(dir_, "sb1", "", logger);
  EXPECT_TRUE(fs::exists(dir_ / "claims" / "sb1.json"));
  EXPECT_TRUE(mount_root(dir_ / "slots" / "t-1" / "0"));
  // Named: its mounts are detached, then its directory goes, the conversation's files stay.
  ld::SlotPool::forget_claim(dir_, "sb1", "abc123def456", logger);
  EXPECT_FALSE(fs::exists(dir_ / "claims" / "sb1.json"));
  EXPECT_FALSE(fs::exists(dir_ / "slots" / "t-1"));
  EXPECT_TRUE(fs::exists(dir_ / "conversation" / "precious.txt"));
  mounted_.clear();
}

}  // namespace

// A conversation's storage, bounded (core/include/sandboxd/core/thread_storage.hpp,
// docs/storage.md), and sandboxd's own state on a full disk. Issue 45: inside one sandbox,
// dd of 1 GiB into the workspace completed and the host's free space fell with it; nothing
// bounded it. Real filesystems: a loop-mounted btrfs the test makes (quotas enabled by the code
// under test), a small tmpfs filled to the last byte. Root only (mounts); skipped otherwise.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <string>

#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/thread_storage.hpp"
#include "sandboxd/host_fs.hpp"
#include "scratch_filesystem.hpp"

namespace sandboxd::testing {
namespace {

using core::parse_size;
using core::show_size;
using core::ThreadStorage;

TEST(StorageSizes, SizesReadAsOperatorsWriteThem) {
  EXPECT_EQ(parse_size("10g"), 10ull << 30);
  EXPECT_EQ(parse_size("10G"), 10ull << 30);
  EXPECT_EQ(parse_size("512m"), 512ull << 20);
  EXPECT_EQ(parse_size("512MiB"), 512ull << 20);
  EXPECT_EQ(parse_size("64kb"), 64ull << 10);
  EXPECT_EQ(parse_size("1t"), 1ull << 40);
  EXPECT_EQ(parse_size("123"), 123u);
  EXPECT_EQ(parse_size("0"), 0u);
  for (const char* bad : {"", "g", "-1g", "1.5g", "10x", "10gg", "99999999999999999999",
                          "20000000000t"}) {
    EXPECT_EQ(parse_size(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(show_size(10ull << 30), "10 GiB");
  EXPECT_EQ(show_size(1536ull << 20), "1.5 GiB");
  EXPECT_EQ(show_size(0), "0 B");
}

// Writes `mib` MiB of zeros into `file` until a write fails; how many bytes went in, and the
// errno of the write that failed (0: none did).
std::pair<std::uint64_t, int> fill(const std::filesystem::path& file, int mib) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return {0, errno};
  const std::string block(1 << 20, '\0');
  std::uint64_t written = 0;
  int error = 0;
  for (int i = 0; i < mib && error == 0; ++i) {
    const ssize_t got = ::write(fd, block.data(), block.size());
    if (got < 0) error = errno;
    if (got > 0) written += static_cast<std::uint64_t>(got);
  }
  if (error == 0 && ::fsync(fd) != 0) error = errno;
  ::close(fd);
  return {written, error};
}

TEST(ConversationStorage, ANonBtrfsStateDirectorySaysPlainlyItCannotBeBounded) {
  TempDir dir;  // the machine's /tmp: ext4, overlayfs or tmpfs, never btrfs here
  const auto storage = ThreadStorage::for_base_dir(dir.path(), 20u << 20, "sandbox.disk_limit");
  EXPECT_FALSE(storage->bounded());
  EXPECT_NE(storage->description().find("NOT bounded"), std::string::npos);
  EXPECT_NE(storage->description().find("btrfs"), std::string::npos) << "what to change";
  EXPECT_NE(storage->description().find("sandbox.disk_limit"), std::string::npos);
  const auto none = ThreadStorage::for_base_dir(dir.path(), 0, "sandbox.disk_limit");
  EXPECT_NE(none->description().find("not bounded (disk_limit 0"), std::string::npos);
}

TEST(ConversationStorage, AConversationWritingPastItsBoundStopsThereAndItsNeighbourDoesNot) {
  if (const auto why = ScratchFilesystem::unavailable(ScratchFilesystem::Kind::btrfs);
      !why.empty()) {
    GTEST_SKIP() << why;
  }
  ScratchFilesystem btrfs(ScratchFilesystem::Kind::btrfs, "512M");
  ASSERT_TRUE(btrfs.mounted());
  const auto storage = ThreadStorage::for_base_dir(btrfs.path(), 20u << 20, "the test");
  ASSERT_TRUE(storage->bounded()) << storage->description();
  core::Paths paths(btrfs.path(), btrfs.path().string());
  paths.set_storage(storage);

  paths.ensure_thread_dirs("t-1", "alice");
  paths.ensure_thread_dirs("t-1", "bob");
  // The probe of the issue, in alice's workspace: stopped at her bound.
  const auto [alice_wrote, alice_error] =
      fill(paths.sandbox_work_dir("t-1", "alice") / "big", 60);
  EXPECT_EQ(alice_error, EDQUOT) << "60 MiB went in past a 20 MiB bound: " << alice_wrote;
  EXPECT_LE(alice_wrote, 21u << 20);
  // Her neighbour's writes go on.
  const auto [bob_wrote, bob_error] = fill(paths.sandbox_outputs_dir("t-1", "bob") / "data", 10);
  EXPECT_EQ(bob_error, 0);
  EXPECT_EQ(bob_wrote, 10u << 20);

  // Usage against the bound, per conversation, as of the filesystem's last commit (btrfs
  // counts quota groups at each transaction commit: every 30 s by default; sync commits now).
  ::sync();
  const auto alice = paths.thread_storage_usage("t-1", "alice");
  ASSERT_TRUE(alice.has_value());
  EXPECT_EQ(alice->limit, 20u << 20);
  EXPECT_GE(alice->bytes, 15u << 20);
  const auto bob = paths.thread_storage_usage("t-1", "bob");
  ASSERT_TRUE(bob.has_value());
  EXPECT_GE(bob->bytes, 10u << 20);
  EXPECT_LT(bob->bytes, alice->bytes);

  // The bound follows the conversation: its directory is ensured again (the next sandbox of
  // it) and keeps its files and its bound; a file deleted gives the room back.
  paths.ensure_thread_dirs("t-1", "alice");
  EXPECT_TRUE(std::filesystem::exists(paths.sandbox_work_dir("t-1", "alice") / "big"));
  EXPECT_EQ(paths.thread_storage_usage("t-1", "alice")->limit, 20u << 20);
  std::filesystem::remove(paths.sandbox_work_dir("t-1", "alice") / "big");
  ::sync();
  const auto [again, again_error] = fill(paths.sandbox_work_dir("t-1", "alice") / "small", 5);
  EXPECT_EQ(again_error, 0);

  // A conversation directory made before the bound was set is left as it is (its files are
  // never moved): unbounded, and its usage says so (none).
  std::filesystem::create_directories(btrfs.path() / "users" / "carol" / "threads" / "t-1");
  paths.ensure_thread_dirs("t-1", "carol");
  EXPECT_FALSE(paths.thread_storage_usage("t-1", "carol").has_value());
}

// sandboxd's own state on a full disk: a write that cannot complete leaves the file as it was
// and nothing half written beside it, and the next write after space returns succeeds.
TEST(StateOnAFullDisk, AReplacedFileIsWholeOrAsItWasAndTheNextWriteSucceeds) {
  if (const auto why = ScratchFilesystem::unavailable(ScratchFilesystem::Kind::tmpfs);
      !why.empty()) {
    GTEST_SKIP() << why;
  }
  ScratchFilesystem full(ScratchFilesystem::Kind::tmpfs, "2M");
  ASSERT_TRUE(full.mounted());
  const host_fs::UniqueFd dir = host_fs::open_trusted_dir(full.path());
  host_fs::replace_file_at(dir.get(), "state.json", "{\"v\":1}\n", 0600, full.path() / "state.json");
  fill(full.path() / "filler", 4);  // the rest of the disk
  const std::string big(512 * 1024, 'x');
  EXPECT_THROW(host_fs::replace_file_at(dir.get(), "state.json", big, 0600,
                                        full.path() / "state.json"),
               std::filesystem::filesystem_error);
  std::ifstream kept(full.path() / "state.json");
  std::string content((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "{\"v\":1}\n") << "the state file was left half written";
  for (const auto& entry : std::filesystem::directory_iterator(full.path())) {
    EXPECT_EQ(entry.path().filename().string().find(".tmp-"), std::string::npos)
        << "a temporary file was left: " << entry.path();
  }
  std::filesystem::remove(full.path() / "filler");
  host_fs::replace_file_at(dir.get(), "state.json", big, 0600, full.path() / "state.json");
  EXPECT_EQ(std::filesystem::file_size(full.path() / "state.json"), big.size());
}

}  // namespace
}  // namespace sandboxd::testing

// The host never follows a symbolic link inside a tree a sandbox can write (issue 20 A.1, A.2).
//
// A sandbox can write its conversation's user data (all of it through sandboxd-provisioner,
// which mounts user-data whole), and the lark-cli data directory of its user. Code in it can put
// a symlink anywhere there at any moment, so every mkdir, chmod and open the gateway makes in
// those trees must act on what it opened without following links, and every walk is bounded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fs_fixtures.hpp"
#include "sandboxd/core/mounts.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/host_fs.hpp"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace sandboxd::core {
namespace {

using sandboxd::testing::CleanPathEnvTest;
using sandboxd::testing::mode_of;

class HostIntegrityTest : public CleanPathEnvTest {
 protected:
  fs::path base() const { return tmp_.path() / "state"; }
  fs::path thread_dir() const { return base() / "users" / "alice" / "threads" / "t1"; }
  // A directory of the gateway's user outside the state directory, private, with a file.
  fs::path outside() const { return tmp_.path() / "private"; }
  void SetUp() override {
    fs::create_directories(base());
    fs::create_directories(outside());
    std::ofstream(outside() / "secret") << "x";
    fs::permissions(outside() / "secret", fs::perms::owner_read | fs::perms::owner_write,
                    fs::perm_options::replace);
    fs::permissions(outside(), fs::perms::owner_all, fs::perm_options::replace);
  }
  Paths paths() const { return Paths(base(), base().string()); }

  // ensure_thread_dirs refuses, naming the link, and leaves what it points at alone.
  void expect_refused_and_outside_untouched(const fs::path& link) {
    try {
      paths().ensure_thread_dirs("t1", std::string("alice"));
      ADD_FAILURE() << "ensure_thread_dirs followed or ignored the symlink at " << link;
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(link.string()));
      EXPECT_THAT(e.what(), HasSubstr("symbolic link"));
    }
    EXPECT_EQ(mode_of(outside()), 0700u) << "a host directory outside the state was chmodded";
    EXPECT_EQ(mode_of(outside() / "secret"), 0600u);
    for (const char* name :
         {"workspace", "uploads", "outputs", ".upload-conversions", "acp-workspace", "user-data"}) {
      EXPECT_FALSE(fs::exists(outside() / name)) << name << " was created through the link";
    }
  }
};

// Through sandboxd-provisioner the whole user-data directory is the sandbox's: it can replace
// `workspace` by a link to any host path, and the next acquire used to chmod that path 0777.
TEST_F(HostIntegrityTest, AThreadDirectoryReplacedByASymlinkIsNeverChmodded) {
  for (const char* name : {"workspace", "uploads", "outputs", ".upload-conversions"}) {
    SCOPED_TRACE(name);
    fs::remove_all(thread_dir());
    fs::create_directories(thread_dir() / "user-data");
    fs::create_directory_symlink(outside(), thread_dir() / "user-data" / name);
    expect_refused_and_outside_untouched(thread_dir() / "user-data" / name);
  }
}

TEST_F(HostIntegrityTest, ALinkAnywhereOnTheWayToTheThreadDirectoryIsNotFollowed) {
  fs::create_directories(thread_dir());
  fs::create_directory_symlink(outside(), thread_dir() / "acp-workspace");
  expect_refused_and_outside_untouched(thread_dir() / "acp-workspace");

  fs::remove_all(base() / "users");
  fs::create_directories(thread_dir());
  fs::create_directory_symlink(outside(), thread_dir() / "user-data");
  expect_refused_and_outside_untouched(thread_dir() / "user-data");

  // A link planted higher up (a state directory someone else could write, A.2) is refused too.
  fs::remove_all(base() / "users");
  fs::create_directories(base() / "users" / "alice");
  fs::create_directory_symlink(outside(), base() / "users" / "alice" / "threads");
  expect_refused_and_outside_untouched(base() / "users" / "alice" / "threads");
}

TEST_F(HostIntegrityTest, ThreadDirectoriesAreStillCreatedWorldWritableWithoutLinks) {
  paths().ensure_thread_dirs("t1", std::string("alice"));
  for (const char* leaf : {"user-data/workspace", "user-data/uploads", "user-data/outputs",
                           "user-data/.upload-conversions", "acp-workspace"}) {
    EXPECT_EQ(mode_of(thread_dir() / leaf), 0777u) << leaf;
  }
  // Idempotent, and a mode the sandbox changed is put back.
  fs::permissions(thread_dir() / "user-data" / "outputs", fs::perms::owner_all,
                  fs::perm_options::replace);
  paths().ensure_thread_dirs("t1", std::string("alice"));
  EXPECT_EQ(mode_of(thread_dir() / "user-data" / "outputs"), 0777u);
}

TEST_F(HostIntegrityTest, AFileInPlaceOfAThreadDirectoryIsRefusedByName) {
  fs::create_directories(thread_dir() / "user-data");
  std::ofstream(thread_dir() / "user-data" / "uploads") << "x";
  try {
    paths().ensure_thread_dirs("t1", std::string("alice"));
    ADD_FAILURE() << "expected a refusal";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr((thread_dir() / "user-data" / "uploads").string()));
  }
}

// The sandbox swaps an entry of its lark-cli data directory between a file and a symlink to a
// host file while the gateway tightens the tree for another sandbox of the same user. The walk
// used to check with fstatat(NOFOLLOW) and then chmod by name, following the link in between.
TEST_F(HostIntegrityTest, ACredentialTreeRacedWithSymlinkSwapsNeverChmodsAHostFile) {
  const fs::path root = base() / "users" / "alice" / "integrations" / "lark-cli";
  fs::create_directories(root / "config");
  fs::create_directories(root / "data");
  const fs::path victim_file = outside() / "secret";
  fs::permissions(outside(),
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  fs::perm_options::replace);
  fs::permissions(victim_file,
                  fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                      fs::perms::others_read,
                  fs::perm_options::replace);  // 0644
  const fs::path victim_dir = tmp_.path() / "public";
  fs::create_directories(victim_dir);
  fs::permissions(victim_dir,
                  fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                      fs::perms::others_read | fs::perms::others_exec,
                  fs::perm_options::replace);  // 0755

  std::atomic<bool> stop{false};
  std::thread sandbox([&] {
    const fs::path file_entry = root / "data" / "token";
    const fs::path dir_entry = root / "data" / "cache";
    const fs::path staged_file = root / "data" / ".staged-file";
    const fs::path staged_dir = root / "data" / ".staged-dir";
    while (!stop.load()) {
      // A real file, then (by rename, atomically) a link to the host file, over and over.
      { std::ofstream(staged_file) << "t"; }
      ::chmod(staged_file.c_str(), 0644);
      ::rename(staged_file.c_str(), file_entry.c_str());
      ::symlink(victim_file.c_str(), staged_file.c_str());
      ::rename(staged_file.c_str(), file_entry.c_str());
      ::mkdir(staged_dir.c_str(), 0755);
      ::rmdir(dir_entry.c_str());
      ::unlink(dir_entry.c_str());
      ::rename(staged_dir.c_str(), dir_entry.c_str());
      ::symlink(victim_dir.c_str(), staged_dir.c_str());
      ::unlink(dir_entry.c_str());
      ::rmdir(dir_entry.c_str());
      ::rename(staged_dir.c_str(), dir_entry.c_str());
    }
  });
  const Paths p = paths();
  int refusals = 0, passes = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < deadline && passes + refusals < 20000) {
    try {
      p.ensure_lark_cli_credential_tree("alice");
      ++passes;
    } catch (const std::exception&) {
      ++refusals;  // a link seen and refused: what the gateway should do
    }
    if (mode_of(victim_file) != 0644u || mode_of(victim_dir) != 0755u) break;
  }
  stop.store(true);
  sandbox.join();
  std::cout << "[ host-integrity ] " << passes + refusals << " tightenings raced with symlink "
            << "swaps (" << refusals << " refused a link); host file mode " << std::oct
            << mode_of(victim_file) << ", host directory mode " << mode_of(victim_dir) << std::dec
            << "\n";
  EXPECT_EQ(mode_of(victim_file), 0644u) << "the walk chmodded a host file through a link";
  EXPECT_EQ(mode_of(victim_dir), 0755u) << "the walk chmodded a host directory through a link";
  EXPECT_GT(passes + refusals, 100);
}

// What a host tree looks like to the gateway's user: every entry's type, mode, owner and
// content, so any change a walk made through a link shows.
std::map<std::string, std::string> fingerprint(const fs::path& root) {
  std::map<std::string, std::string> out;
  for (const auto& entry : fs::recursive_directory_iterator(root)) {
    struct stat st {};
    ::lstat(entry.path().c_str(), &st);
    std::string line = std::to_string(st.st_mode) + " " + std::to_string(st.st_uid) + " " +
                       std::to_string(st.st_gid);
    if (S_ISREG(st.st_mode)) {
      std::ifstream in(entry.path());
      line += " " + std::string(std::istreambuf_iterator<char>(in), {});
    }
    out[entry.path().string()] = line;
  }
  struct stat st {};
  ::lstat(root.c_str(), &st);
  out[root.string()] = std::to_string(st.st_mode);
  return out;
}

// Issue 20 C: a thread plays alice's sandbox of thread t1 on every mount it can write (its
// whole user-data, as sandboxd-provisioner mounts it, and alice's lark-cli data) and swaps
// entries between directories, files and links to host paths outside the state, while the
// gateway composes the mounts of sandboxes for alice's conversations (t1 again and new ones),
// exactly as an acquisition does. Nothing outside the state may change.
TEST_F(HostIntegrityTest, ASandboxRacingLinksInEveryWritableMountChangesNothingOutside) {
  const fs::path victim = tmp_.path() / "host";
  fs::create_directories(victim / "etc");
  std::ofstream(victim / "etc" / "shadow") << "root:x\n";
  ::chmod((victim / "etc" / "shadow").c_str(), 0640);
  ::chmod((victim / "etc").c_str(), 0755);
  ::chmod(victim.c_str(), 0711);
  const auto before = fingerprint(victim);

  auto paths = std::make_shared<const Paths>(base(), base().string());
  MountComposerOptions options;
  options.ambient_user = [] { return std::optional<std::string>("alice"); };
  const MountComposer composer(paths, options);
  composer.compose_extra_mounts("t1", std::string("alice"), true);  // t1 exists, as after a turn

  const fs::path user_data = thread_dir() / "user-data";
  const fs::path lark_data = base() / "users/alice/integrations/lark-cli/data";
  const std::vector<fs::path> writable = {
      user_data / "workspace",           user_data / "uploads", user_data / "outputs",
      user_data / ".upload-conversions", lark_data / "token",   lark_data / "cache"};
  const std::vector<fs::path> targets = {victim, victim / "etc", victim / "etc" / "shadow"};
  std::atomic<bool> stop{false};
  std::atomic<long> swaps{0};
  std::thread sandbox([&] {
    std::size_t turn = 0;
    std::error_code ignored;
    while (!stop.load()) {
      for (const fs::path& entry : writable) {
        const fs::path staged = entry.string() + ".staged";
        const fs::path old = entry.string() + ".old";
        fs::remove_all(staged, ignored);
        fs::remove_all(old, ignored);
        if (turn++ % 4 != 3) {
          // A link to a host path, swapped in atomically (a directory there is moved aside
          // first: a link cannot be renamed over a directory).
          ::symlink(targets[turn % targets.size()].c_str(), staged.c_str());
          if (::rename(staged.c_str(), entry.c_str()) != 0) {
            ::rename(entry.c_str(), old.c_str());
            ::rename(staged.c_str(), entry.c_str());
          }
        } else {  // back to an innocent directory now and then
          ::mkdir(staged.c_str(), 0700);
          ::unlink(entry.c_str());
          ::rename(staged.c_str(), entry.c_str());
        }
        ++swaps;
      }
    }
  });
  int composed = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  for (int i = 0; std::chrono::steady_clock::now() < deadline; ++i) {
    const std::string thread = (i % 2 == 0) ? "t1" : "t" + std::to_string(i);
    try {
      composer.compose_extra_mounts(thread, std::string("alice"), true);
    } catch (const std::exception&) {
      // A refused link makes that acquisition fail; the gateway never follows it.
    }
    ++composed;
  }
  stop.store(true);
  sandbox.join();
  std::cout << "[ host-integrity ] " << composed << " mount compositions for alice raced "
            << swaps.load() << " link swaps in her sandbox's writable mounts; host tree "
            << (fingerprint(victim) == before ? "unchanged" : "CHANGED") << "\n";
  EXPECT_EQ(fingerprint(victim), before) << "a host path outside the state changed";
  EXPECT_GT(composed, 50);
}

// A sandbox can make its data directory as deep and as wide as it likes; the walk stops at its
// bounds and says so instead of running for as long as the sandbox wants.
TEST_F(HostIntegrityTest, TheCredentialWalkIsBoundedAndSaysWhereItStopped) {
  const fs::path root = base() / "users" / "alice" / "integrations" / "lark-cli";
  fs::path deep = root / "data";
  for (int i = 0; i < kCredentialWalkMaxDepth + 5; ++i) deep /= "d";
  fs::create_directories(deep);
  std::ofstream(deep / "token") << "x";
  ::chmod((deep / "token").c_str(), 0644);
  const CredentialTreeReport report = paths().ensure_lark_cli_credential_tree("alice");
  EXPECT_FALSE(report.complete);
  EXPECT_THAT(report.note, HasSubstr("deeper than"));
  EXPECT_EQ(mode_of(deep / "token"), 0644u) << "beyond the bound nothing is touched";
  EXPECT_EQ(mode_of(root / "data" / "d"), 0700u) << "what is within the bound is tightened";

  fs::remove_all(root / "data");
  fs::create_directories(root / "data");
  for (std::size_t i = 0; i < kCredentialWalkMaxEntries + 10; ++i) {
    std::ofstream(root / "data" / ("f" + std::to_string(i))) << "x";
  }
  const CredentialTreeReport wide = paths().ensure_lark_cli_credential_tree("alice");
  EXPECT_FALSE(wide.complete);
  EXPECT_THAT(wide.note, HasSubstr(std::to_string(kCredentialWalkMaxEntries) + " entries"));

  fs::remove_all(root / "data");
  fs::create_directories(root / "data");
  EXPECT_TRUE(paths().ensure_lark_cli_credential_tree("alice").complete);
}

// host_fs::read_file_at: the file whole within its bound, never a link, never read in part.
TEST_F(HostIntegrityTest, AStateFileIsReadWholeWithinItsBoundAndNeverThroughALink) {
  fs::create_directories(base());
  std::ofstream(base() / "small") << "twelve bytes";
  std::ofstream(base() / "large") << std::string(5000, 'x');
  fs::create_symlink(outside() / "secret", base() / "link");
  const host_fs::UniqueFd dir = host_fs::open_trusted_dir(base());
  EXPECT_EQ(host_fs::read_file_at(dir.get(), "small", 12, base() / "small"), "twelve bytes");
  try {
    host_fs::read_file_at(dir.get(), "large", 4096, base() / "large");
    FAIL() << "a file over its bound was read";
  } catch (const fs::filesystem_error& e) {
    EXPECT_EQ(e.code(), std::errc::file_too_large);
    EXPECT_THAT(e.what(), HasSubstr("more than 4096 bytes"));
  }
  EXPECT_THROW(host_fs::read_file_at(dir.get(), "link", 4096, base() / "link"),
               host_fs::UnsafePathError);
}

}  // namespace
}  // namespace sandboxd::core

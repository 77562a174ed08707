// Copying and emptying trees a sandbox could write (core/src/host/tree_copy.hpp; snapshots):
// a link is copied as a link and never followed (its target outside the tree is never read,
// nor written), a fifo is skipped, a mount point inside is neither descended into nor removed,
// modes (never set-id bits) and owners are kept, and the bounds stop a walk naming the bound.
#include "host/tree_copy.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "sandboxd/host_fs.hpp"
#include "test_support.hpp"

namespace sandboxd::testing {
namespace {

namespace fs = std::filesystem;
using core::clear_tree;
using core::copy_tree;
using core::TreeBounds;

host_fs::UniqueFd open_dir(const fs::path& path) {
  return host_fs::UniqueFd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
}

void write(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

std::string read(const fs::path& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(TreeCopy, LinksAreCopiedAsLinksAndSpecialFilesLeft) {
  TempDir from, into, outside;
  write(outside.path() / "secret", "the host's");
  fs::create_directories(from.path() / "a" / "b");
  write(from.path() / "a" / "b" / "file", "data");
  ::chmod((from.path() / "a" / "b" / "file").c_str(), 04755);  // set-uid: never copied
  fs::create_symlink(outside.path() / "secret", from.path() / "a" / "planted");
  fs::create_symlink(outside.path(), from.path() / "escape");
  ASSERT_EQ(::mkfifo((from.path() / "pipe").c_str(), 0600), 0);
  const auto count = copy_tree(open_dir(from.path()).get(), open_dir(into.path()).get(),
                               TreeBounds{}, from.path());
  EXPECT_EQ(read(into.path() / "a" / "b" / "file"), "data");
  struct stat st {};
  ASSERT_EQ(::stat((into.path() / "a" / "b" / "file").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u) << "a set-id bit was copied";
  EXPECT_TRUE(fs::is_symlink(into.path() / "a" / "planted"));
  EXPECT_EQ(fs::read_symlink(into.path() / "a" / "planted"), outside.path() / "secret");
  EXPECT_TRUE(fs::is_symlink(into.path() / "escape"));
  EXPECT_FALSE(fs::exists(into.path() / "pipe"));
  EXPECT_EQ(count.skipped, 1u);
  EXPECT_EQ(count.bytes, 4u);
  // Clearing the copy removes the links, never what they name.
  clear_tree(open_dir(into.path()).get(), TreeBounds{}, into.path());
  EXPECT_TRUE(fs::is_empty(into.path()));
  EXPECT_EQ(read(outside.path() / "secret"), "the host's");
  EXPECT_TRUE(fs::exists(outside.path()));
}

TEST(TreeCopy, TheBoundsStopAWalkAndSayWhich) {
  TempDir from, into;
  fs::path deep = from.path();
  for (int i = 0; i < 10; ++i) deep /= "d";
  fs::create_directories(deep);
  write(from.path() / "big", std::string(1000, 'b'));
  TreeBounds shallow;
  shallow.max_depth = 3;
  try {
    copy_tree(open_dir(from.path()).get(), open_dir(into.path()).get(), shallow, from.path());
    FAIL() << "a walk went past its depth";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("deeper than 3 levels"), std::string::npos) << e.what();
  }
  TempDir again;
  TreeBounds small;
  small.max_bytes = 100;
  try {
    copy_tree(open_dir(from.path()).get(), open_dir(again.path()).get(), small, from.path());
    FAIL() << "a walk went past its bytes";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 100 bytes"), std::string::npos) << e.what();
  }
}

// A mount point inside a tree (a bind mount on the same filesystem, told apart by its mount
// root flag, not its device) is neither copied into nor emptied.
TEST(TreeCopy, AMountPointInsideIsNeverDescendedIntoNorRemoved) {
  if (::geteuid() != 0) GTEST_SKIP() << "a bind mount needs root";
  TempDir tree, elsewhere;
  write(elsewhere.path() / "kept", "not the tree's");
  fs::create_directories(tree.path() / "mounted");
  ASSERT_EQ(::mount(elsewhere.path().c_str(), (tree.path() / "mounted").c_str(), nullptr, MS_BIND,
                    nullptr),
            0);
  write(tree.path() / "own", "the tree's");
  const auto count = clear_tree(open_dir(tree.path()).get(), TreeBounds{}, tree.path());
  EXPECT_EQ(count.skipped, 1u);
  EXPECT_EQ(read(elsewhere.path() / "kept"), "not the tree's") << "removed below a mount point";
  EXPECT_FALSE(fs::exists(tree.path() / "own"));
  ::umount2((tree.path() / "mounted").c_str(), MNT_DETACH);
}

}  // namespace
}  // namespace sandboxd::testing

// Base dirs, validation, host path joining, the layout and thread/credential dirs (design §2).
#include "sandboxd/core/paths.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "fs_fixtures.hpp"

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace sandboxd::core {
namespace {

using sandboxd::testing::CleanPathEnvTest;
using sandboxd::testing::mode_of;
using sandboxd::testing::TempDir;

constexpr const char* kWindowsBase = R"(C:\Users\demo\deer-flow\backend\.deer-flow)";

template <typename F>
std::string invalid_argument_message(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected std::invalid_argument";
  return {};
}

// ── base directories (§2.1, §2.2) ──

class BaseDirTest : public CleanPathEnvTest {};

TEST_F(BaseDirTest, ExplicitDirIsResolvedThroughSymlinksAndDotDot) {
  fs::create_directories(tmp_.path() / "real" / "sub");
  fs::create_directory_symlink(tmp_.path() / "real", tmp_.path() / "link");
  EXPECT_EQ(resolve_base_dir((tmp_.path() / "link").string()), tmp_.path() / "real");
  EXPECT_EQ(resolve_base_dir((tmp_.path() / "real" / "sub" / "..").string()), tmp_.path() / "real");
  // Missing tail: kept, without a trailing separator.
  EXPECT_EQ(resolve_base_dir((tmp_.path() / "link" / "missing" / "").string()),
            tmp_.path() / "real" / "missing");
}

TEST_F(BaseDirTest, ExplicitDirBeatsDeerFlowHome) {
  set_env("DEER_FLOW_HOME", (tmp_.path() / "home").string());
  EXPECT_EQ(resolve_base_dir((tmp_.path() / "explicit").string()), tmp_.path() / "explicit");
  EXPECT_EQ(resolve_base_dir(), tmp_.path() / "home");
}

TEST_F(BaseDirTest, ProjectRootGivesDotDeerFlowUnderIt) {
  set_env("DEER_FLOW_PROJECT_ROOT", tmp_.str());
  EXPECT_EQ(resolve_base_dir(), tmp_.path() / ".deer-flow");
}

TEST_F(BaseDirTest, ProjectRootThatDoesNotExistIsAnErrorNamingIt) {
  const std::string missing = (tmp_.path() / "nowhere").string();
  set_env("DEER_FLOW_PROJECT_ROOT", missing);
  const auto message = invalid_argument_message([] { resolve_base_dir(); });
  EXPECT_THAT(message, HasSubstr("DEER_FLOW_PROJECT_ROOT"));
  EXPECT_THAT(message, HasSubstr(missing));
}

TEST_F(BaseDirTest, ProjectRootThatIsAFileIsAnError) {
  const fs::path file = tmp_.path() / "file";
  std::ofstream(file) << "x";
  set_env("DEER_FLOW_PROJECT_ROOT", file.string());
  EXPECT_THROW(resolve_base_dir(), std::invalid_argument);
}

TEST_F(BaseDirTest, FallsBackToCwdDotDeerFlow) {
  const fs::path old_cwd = fs::current_path();
  fs::current_path(tmp_.path());
  const fs::path resolved = resolve_base_dir();
  fs::current_path(old_cwd);
  EXPECT_EQ(resolved, tmp_.path() / ".deer-flow");
}

TEST_F(BaseDirTest, HostBaseDirIsTheRawEnvValueElseTheBaseDir) {
  EXPECT_EQ(host_base_dir(tmp_.path()), tmp_.str());
  const std::string raw = R"(C:\x\..\y\\)";
  set_env("DEER_FLOW_HOST_BASE_DIR", raw);
  EXPECT_EQ(host_base_dir(tmp_.path()), raw);
  const auto paths = Paths::from_environment(tmp_.str());
  EXPECT_EQ(paths.base_dir(), tmp_.path());
  EXPECT_EQ(paths.host_base_dir(), raw);
}

// ── validation (§2.3) ──

TEST(ValidateIdsTest, ThreadIdAcceptsUpTo64SafeCharacters) {
  EXPECT_NO_THROW(validate_thread_id("thread_A-9"));
  EXPECT_NO_THROW(validate_thread_id(std::string(64, 'a')));
  for (const std::string& bad :
       std::vector<std::string>{"", "../escape", "a/b", "a.b", "a b", std::string(65, 'a')}) {
    EXPECT_THAT(invalid_argument_message([&] { validate_thread_id(bad); }),
                StartsWith("Invalid thread_id: expected 1-64 ASCII letters, digits, hyphens, or "
                           "underscores"))
        << bad;
  }
  EXPECT_THAT(invalid_argument_message([] { validate_thread_id("../escape"); }),
              HasSubstr("'../escape'"));
}

TEST(ValidateIdsTest, UserIdMessageUsesPythonRepr) {
  // One bound wherever ids enter (DeerFlow's provider had none, its
  // provisioner allows 128): the message shows only the start of a long value.
  EXPECT_NO_THROW(validate_user_id(std::string(128, 'u')));
  EXPECT_EQ(invalid_argument_message([] { validate_user_id(std::string(129, 'u')); }),
            "Invalid user_id '" + std::string(32, 'u') +
                "'... (129 characters): at most 128 characters are allowed.");
  EXPECT_EQ(invalid_argument_message([] { validate_user_id("a/b"); }),
            "Invalid user_id 'a/b': only alphanumeric characters, hyphens, and underscores are "
            "allowed.");
  EXPECT_EQ(invalid_argument_message([] { validate_user_id("it's"); }),
            "Invalid user_id \"it's\": only alphanumeric characters, hyphens, and underscores "
            "are allowed.");
  EXPECT_THROW(validate_user_id(""), std::invalid_argument);
}

TEST(ValidateIdsTest, IntegrationIdAllowsDotsButNotDotOrDotDot) {
  EXPECT_NO_THROW(validate_integration_id("lark-cli"));
  EXPECT_NO_THROW(validate_integration_id("a.b_c"));
  EXPECT_THROW(validate_integration_id("."), std::invalid_argument);
  EXPECT_THROW(validate_integration_id(".."), std::invalid_argument);
  EXPECT_THROW(validate_integration_id("a/b"), std::invalid_argument);
  EXPECT_THROW(validate_integration_id(""), std::invalid_argument);
}

TEST(PythonReprTest, QuotesAndEscapesLikePython) {
  EXPECT_EQ(python_repr("alice"), "'alice'");
  EXPECT_EQ(python_repr("a'b\"c"), R"('a\'b"c')");
  EXPECT_EQ(python_repr("a\\b\n\x01"), R"('a\\b\n\x01')");
}

// ── join_host_path (§2.6) ──

// Python: test_join_host_path_preserves_windows_drive_letter_style
TEST(JoinHostPathTest, JoinHostPathPreservesWindowsDriveLetterStyle) {
  EXPECT_EQ(join_host_path(kWindowsBase, {"threads", "thread-9", "user-data", "outputs"}),
            R"(C:\Users\demo\deer-flow\backend\.deer-flow\threads\thread-9\user-data\outputs)");
}

TEST(JoinHostPathTest, NoPartsReturnsBaseUnchanged) {
  EXPECT_EQ(join_host_path("/a//b/./", {}), "/a//b/./");
  EXPECT_EQ(join_host_path(R"(C:/x\\y)", std::vector<std::string>{}), R"(C:/x\\y)");
}

TEST(JoinHostPathTest, UncBaseKeepsItsDoubleBackslash) {
  EXPECT_EQ(join_host_path(R"(\\server\share)", {"threads", "t"}), R"(\\server\share\threads\t)");
  EXPECT_EQ(join_host_path(R"(\\server\\share\)", {"x"}), R"(\\server\share\x)");
}

TEST(JoinHostPathTest, MixedSeparatorsBecomeBackslashes) {
  EXPECT_EQ(join_host_path(R"(C:/Users\demo//data)", {"x"}), R"(C:\Users\demo\data\x)");
  EXPECT_EQ(join_host_path("d:/state", {"x"}), R"(d:\state\x)");
  // Any backslash selects Windows style, even without a drive letter.
  EXPECT_EQ(join_host_path(R"(rel\dir/sub)", {"x"}), R"(rel\dir\sub\x)");
  EXPECT_EQ(join_host_path(R"(C:\)", {"x"}), R"(C:\x)");
}

TEST(JoinHostPathTest, DotSegmentsDropAndRepeatedSeparatorsCollapse) {
  EXPECT_EQ(join_host_path("/a/./b//c///", {"d", "e"}), "/a/b/c/d/e");
  EXPECT_EQ(join_host_path("./a", {"b"}), "a/b");
  EXPECT_EQ(join_host_path(R"(C:\a\.\b\\)", {"c"}), R"(C:\a\b\c)");
  EXPECT_EQ(join_host_path("/", {"x"}), "/x");
}

TEST(JoinHostPathTest, DotDotIsNeverResolved) {
  EXPECT_EQ(join_host_path("/a/b/..", {"c"}), "/a/b/../c");
  EXPECT_EQ(join_host_path(R"(C:\a\..)", {"c"}), R"(C:\a\..\c)");
}

// ── layout (§2.4) ──

class LayoutTest : public CleanPathEnvTest {};

TEST_F(LayoutTest, UserScopedAndLegacyThreadLayout) {
  const Paths paths(tmp_.path(), tmp_.str());
  const fs::path b = tmp_.path();
  EXPECT_EQ(paths.thread_dir("t1", std::nullopt), b / "threads" / "t1");
  EXPECT_EQ(paths.thread_dir("t1", "alice"), b / "users" / "alice" / "threads" / "t1");
  EXPECT_EQ(paths.sandbox_work_dir("t1", "alice"),
            b / "users" / "alice" / "threads" / "t1" / "user-data" / "workspace");
  EXPECT_EQ(paths.upload_conversions_dir("t1", std::nullopt),
            b / "threads" / "t1" / "user-data" / ".upload-conversions");
  EXPECT_EQ(paths.acp_workspace_dir("t1", "alice"),
            b / "users" / "alice" / "threads" / "t1" / "acp-workspace");
  EXPECT_EQ(paths.lock_file("t1", "alice", "0024bd1b2a0836b9"),
            b / "users" / "alice" / "threads" / "t1" / "0024bd1b2a0836b9.lock");
  EXPECT_THROW(paths.lock_file("t1", "alice", "../x"), std::invalid_argument);
  EXPECT_EQ(paths.public_skills_view_dir(), b / "skills_view" / "public");
  EXPECT_EQ(paths.user_legacy_skills_view_dir("bob"),
            b / "users" / "bob" / "skills_view" / "legacy");
  EXPECT_EQ(paths.user_integration_data_dir("bob", "lark-cli"),
            b / "users" / "bob" / "integrations" / "lark-cli" / "data");
  EXPECT_EQ(paths.integration_sandbox_cli_dir("lark-cli"),
            b / "integrations" / "lark-cli" / "sandbox-cli");
}

TEST_F(LayoutTest, HostPathsUseTheHostBase) {
  const Paths paths(tmp_.path(), kWindowsBase);
  const std::string h = kWindowsBase;
  EXPECT_EQ(paths.host_thread_dir("t1", "alice"), h + R"(\users\alice\threads\t1)");
  EXPECT_EQ(paths.host_upload_conversions_dir("t1", std::nullopt),
            h + R"(\threads\t1\user-data\.upload-conversions)");
  EXPECT_EQ(paths.host_user_integration_config_dir("alice", "lark-cli"),
            h + R"(\users\alice\integrations\lark-cli\config)");
  EXPECT_EQ(paths.host_integration_sandbox_cli_dir("lark-cli"),
            h + R"(\integrations\lark-cli\sandbox-cli)");
  EXPECT_EQ(paths.host_public_skills_view_dir(), h + R"(\skills_view\public)");
}

TEST_F(LayoutTest, InvalidUserIdIsRejectedInPaths) {
  const Paths paths(tmp_.path(), tmp_.str());
  EXPECT_THROW(paths.thread_dir("t1", "../bob"), std::invalid_argument);
  EXPECT_THROW(paths.host_sandbox_work_dir("t1", "a/b"), std::invalid_argument);
}

// Python: test_host_thread_dir_rejects_invalid_thread_id
TEST_F(LayoutTest, HostThreadDirRejectsInvalidThreadId) {
  const auto paths = Paths::from_environment(tmp_.str());
  EXPECT_THAT(invalid_argument_message([&] { paths.host_thread_dir("../escape", std::nullopt); }),
              StartsWith("Invalid thread_id"));
  EXPECT_THROW(paths.thread_dir("../escape", std::nullopt), std::invalid_argument);
}

// ── ensure_thread_dirs (§2.5) ──

class EnsureThreadDirsTest : public CleanPathEnvTest {};

// Python: test_ensure_thread_dirs_creates_acp_workspace
TEST_F(EnsureThreadDirsTest, EnsureThreadDirsCreatesAcpWorkspace) {
  const auto paths = Paths::from_environment(tmp_.str());
  paths.ensure_thread_dirs("thread-1", std::nullopt);
  const fs::path thread = tmp_.path() / "threads" / "thread-1";
  EXPECT_TRUE(fs::is_directory(thread / "user-data" / "workspace"));
  EXPECT_TRUE(fs::is_directory(thread / "user-data" / "uploads"));
  EXPECT_TRUE(fs::is_directory(thread / "user-data" / "outputs"));
  EXPECT_TRUE(fs::is_directory(thread / "acp-workspace"));
  EXPECT_TRUE(fs::is_directory(thread / "user-data" / ".upload-conversions"));
}

// Python: test_ensure_thread_dirs_acp_workspace_is_world_writable
TEST_F(EnsureThreadDirsTest, EnsureThreadDirsAcpWorkspaceIsWorldWritable) {
  const mode_t old_umask = ::umask(022);  // mkdir alone would give 0755
  const auto paths = Paths::from_environment(tmp_.str());
  paths.ensure_thread_dirs("thread-2", std::nullopt);
  ::umask(old_umask);
  const fs::path thread = tmp_.path() / "threads" / "thread-2";
  EXPECT_EQ(mode_of(thread / "acp-workspace"), 0777u);
  for (const char* leaf : {"workspace", "uploads", "outputs", ".upload-conversions"}) {
    EXPECT_EQ(mode_of(thread / "user-data" / leaf), 0777u) << leaf;
  }
}

TEST_F(EnsureThreadDirsTest, IsIdempotentAndRestoresModes) {
  const Paths paths(tmp_.path(), tmp_.str());
  paths.ensure_thread_dirs("t", "alice");
  const fs::path work =
      tmp_.path() / "users" / "alice" / "threads" / "t" / "user-data" / "workspace";
  fs::permissions(work, fs::perms::owner_all, fs::perm_options::replace);
  paths.ensure_thread_dirs("t", "alice");
  EXPECT_EQ(mode_of(work), 0777u);
}

// Inside one acquisition the directories are ensured once; the scope covers only its
// own conversation, only on its own thread, and ends with the scope.
TEST_F(EnsureThreadDirsTest, AnEnsuredScopeSkipsTheRepeatForItsConversationOnly) {
  const Paths paths(tmp_.path(), tmp_.str());
  const fs::path work =
      tmp_.path() / "users" / "alice" / "threads" / "t" / "user-data" / "workspace";
  paths.ensure_thread_dirs("t", "alice");
  {
    const Paths::ThreadDirsEnsured ensured("t", "alice");
    fs::permissions(work, fs::perms::owner_all, fs::perm_options::replace);
    paths.ensure_thread_dirs("t", "alice");
    EXPECT_EQ(mode_of(work), 0700u) << "the repeat inside the scope must not touch the disk";
    paths.ensure_thread_dirs("t", "bob");
    EXPECT_TRUE(fs::is_directory(tmp_.path() / "users" / "bob" / "threads" / "t" / "user-data"));
    std::thread([&] { paths.ensure_thread_dirs("t", "alice"); }).join();
    EXPECT_EQ(mode_of(work), 0777u) << "another thread is not covered";
    fs::permissions(work, fs::perms::owner_all, fs::perm_options::replace);
  }
  paths.ensure_thread_dirs("t", "alice");
  EXPECT_EQ(mode_of(work), 0777u) << "after the scope the call works again";
}

// ── lark-cli credential tree (§2.7) ──

class LarkCredentialTreeTest : public CleanPathEnvTest {
 protected:
  fs::path root() const { return tmp_.path() / "users" / "alice" / "integrations" / "lark-cli"; }
  std::string runtime_error_message() {
    const Paths paths(tmp_.path(), tmp_.str());
    try {
      paths.ensure_lark_cli_credential_tree("alice");
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected std::runtime_error";
    return {};
  }
};

TEST_F(LarkCredentialTreeTest, CreatesOwnerOnlyTree) {
  const mode_t old_umask = ::umask(0);
  fs::create_directories(root() / "data" / "nested");
  fs::create_directories(root() / "config");
  std::ofstream(root() / "config" / "config.json") << "{}";  // created 0666 under umask 0
  ::umask(old_umask);
  ASSERT_EQ(mode_of(root() / "config" / "config.json"), 0666u);
  const Paths paths(tmp_.path(), tmp_.str());
  paths.ensure_lark_cli_credential_tree("alice");
  EXPECT_EQ(mode_of(root()), 0700u);
  EXPECT_EQ(mode_of(root() / "config"), 0700u);
  EXPECT_EQ(mode_of(root() / "data"), 0700u);
  EXPECT_EQ(mode_of(root() / "data" / "nested"), 0700u);
  EXPECT_EQ(mode_of(root() / "config" / "config.json"), 0600u);
  EXPECT_FALSE(fs::exists(root() / "config" / "locks"));  // the seed dropped the locks dir
}

TEST_F(LarkCredentialTreeTest, AClosedNestedDirectoryIsOpenedToItsOwnerAndItsFilesTightened) {
  fs::create_directories(root() / "data" / "closed" / "deeper");
  std::ofstream(root() / "data" / "closed" / "deeper" / "token") << "x";
  fs::permissions(root() / "data" / "closed" / "deeper" / "token", fs::perms::all,
                  fs::perm_options::replace);
  fs::permissions(root() / "data" / "closed", fs::perms::none, fs::perm_options::replace);
  const Paths paths(tmp_.path(), tmp_.str());
  paths.ensure_lark_cli_credential_tree("alice");
  EXPECT_EQ(mode_of(root() / "data" / "closed"), 0700u);
  EXPECT_EQ(mode_of(root() / "data" / "closed" / "deeper"), 0700u);
  EXPECT_EQ(mode_of(root() / "data" / "closed" / "deeper" / "token"), 0600u);
}

TEST_F(LarkCredentialTreeTest, ADirectoryListedInSeveralReadsIsWalkedWhole) {
  // 400 entries with long names take several getdents64 reads of the walker's buffer.
  fs::create_directories(root() / "data");
  const std::string long_name(200, 'f');
  for (int i = 0; i < 400; ++i) {
    const fs::path file = root() / "data" / (long_name + std::to_string(i));
    std::ofstream(file) << "x";
    fs::permissions(file, fs::perms::all, fs::perm_options::replace);
  }
  const Paths paths(tmp_.path(), tmp_.str());
  paths.ensure_lark_cli_credential_tree("alice");
  int loose = 0;
  for (const auto& entry : fs::directory_iterator(root() / "data")) {
    if (mode_of(entry.path()) != 0600u) ++loose;
  }
  EXPECT_EQ(loose, 0) << "files the walk never reached";
  // And the very same walk refuses a symlink met after the first read.
  fs::create_symlink(tmp_.path(), root() / "data" / (long_name + "link"));
  EXPECT_THAT(runtime_error_message(), HasSubstr("must not be a symlink"));
}

TEST_F(LarkCredentialTreeTest, RootSymlinkIsRefused) {
  fs::create_directories(tmp_.path() / "elsewhere");
  fs::create_directories(root().parent_path());
  fs::create_directory_symlink(tmp_.path() / "elsewhere", root());
  EXPECT_EQ(runtime_error_message(),
            "Lark CLI credential path must not be a symlink: " + root().string());
}

TEST_F(LarkCredentialTreeTest, RequiredChildSymlinkIsRefused) {
  fs::create_directories(tmp_.path() / "elsewhere");
  fs::create_directories(root());
  fs::create_directory_symlink(tmp_.path() / "elsewhere", root() / "config");
  EXPECT_EQ(runtime_error_message(),
            "Lark CLI credential path must not be a symlink: " + (root() / "config").string());
}

TEST_F(LarkCredentialTreeTest, SymlinkAtAnyDepthIsRefusedAndItsTargetUntouched) {
  const fs::path outside = tmp_.path() / "outside";
  fs::create_directories(outside);
  fs::permissions(outside, fs::perms::all, fs::perm_options::replace);
  fs::create_directories(root() / "data" / "a" / "b");
  fs::create_directory_symlink(outside, root() / "data" / "a" / "b" / "link");
  EXPECT_EQ(runtime_error_message(), "Lark CLI credential path must not be a symlink: " +
                                         (root() / "data" / "a" / "b" / "link").string());
  EXPECT_EQ(mode_of(outside), 0777u);
}

TEST_F(LarkCredentialTreeTest, FileSymlinkIsRefused) {
  fs::create_directories(root() / "config");
  std::ofstream(tmp_.path() / "secret") << "x";
  fs::create_symlink(tmp_.path() / "secret", root() / "config" / "app.json");
  EXPECT_THAT(runtime_error_message(), HasSubstr("must not be a symlink"));
}

TEST_F(LarkCredentialTreeTest, OtherFileTypesAreRefused) {
  fs::create_directories(root() / "data");
  const fs::path fifo = root() / "data" / "pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(runtime_error_message(),
            "Unsupported file type in Lark CLI credential tree: " + fifo.string());
}

}  // namespace
}  // namespace sandboxd::core

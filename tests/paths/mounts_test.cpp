// Mount composition (design §3).
#include "sandboxd/core/mounts.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "fs_fixtures.hpp"
#include "sandboxd/core/creation_planner.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/sandbox_id.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using ::testing::HasSubstr;

namespace sandboxd::core {
namespace {

using sandboxd::testing::CapturingLogger;
using sandboxd::testing::CleanPathEnvTest;
using sandboxd::testing::mode_of;

constexpr const char* kWindowsBase = R"(C:\Users\demo\deer-flow\backend\.deer-flow)";

std::optional<Mount> find_mount(const std::vector<Mount>& mounts, std::string_view container) {
  for (const auto& m : mounts) {
    if (m.container_path == container) return m;
  }
  return std::nullopt;
}

std::vector<std::string> container_paths(const std::vector<Mount>& mounts) {
  std::vector<std::string> out;
  for (const auto& m : mounts) out.push_back(m.container_path);
  return out;
}

class MountsTest : public CleanPathEnvTest {
 protected:
  // Python's Paths(base_dir=...) read at call time; ours reads the environment here.
  std::shared_ptr<const Paths> paths_for(const fs::path& base) {
    return std::make_shared<const Paths>(Paths::from_environment(base.string()));
  }
  MountComposerOptions options_with_ambient(std::optional<std::string> ambient) {
    MountComposerOptions options;
    options.ambient_user = [ambient] { return ambient; };
    options.logger = logger_;
    return options;
  }
  std::string str(const fs::path& p) const { return p.string(); }

  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
};

// ── thread mounts (§3.1) ──

// Python: test_get_thread_mounts_includes_acp_workspace
TEST_F(MountsTest, GetThreadMountsIncludesAcpWorkspace) {
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient(std::nullopt));
  const auto mounts = composer.thread_mounts("thread-3", std::nullopt);
  const auto acp = find_mount(mounts, "/mnt/acp-workspace");
  ASSERT_TRUE(acp) << "ACP workspace mount is missing";
  EXPECT_EQ(acp->host_path, str(tmp_.path() / "threads" / "thread-3" / "acp-workspace"));
  EXPECT_TRUE(acp->read_only) << "ACP workspace should be read-only inside the sandbox";
}

// Python: test_get_thread_mounts_includes_user_data_dirs
TEST_F(MountsTest, GetThreadMountsIncludesUserDataDirs) {
  const MountComposer composer(paths_for(tmp_.path()));  // ambient user: "default"
  const auto mounts = composer.thread_mounts("thread-4", std::nullopt);
  const auto paths = container_paths(mounts);
  EXPECT_THAT(paths, ::testing::Contains("/mnt/user-data/workspace"));
  EXPECT_THAT(paths, ::testing::Contains("/mnt/user-data/uploads"));
  EXPECT_THAT(paths, ::testing::Contains("/mnt/user-data/outputs"));
  EXPECT_EQ(
      find_mount(mounts, "/mnt/user-data/workspace")->host_path,
      str(tmp_.path() / "users" / "default" / "threads" / "thread-4" / "user-data" / "workspace"));
}

// Python: test_get_thread_mounts_includes_upload_conversions_read_only
TEST_F(MountsTest, GetThreadMountsIncludesUploadConversionsReadOnly) {
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient(std::nullopt));
  const auto mounts = composer.thread_mounts("thread-4", std::nullopt);
  const fs::path expected_host =
      tmp_.path() / "threads" / "thread-4" / "user-data" / ".upload-conversions";
  const auto conversions = find_mount(mounts, "/mnt/user-data/.upload-conversions");
  ASSERT_TRUE(conversions);
  EXPECT_EQ(*conversions, (Mount{str(expected_host), "/mnt/user-data/.upload-conversions", true}));
  EXPECT_TRUE(fs::is_directory(expected_host));
}

// Python: test_get_thread_mounts_uses_explicit_user_id
TEST_F(MountsTest, GetThreadMountsUsesExplicitUserId) {
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient("default"));
  const auto mounts = composer.thread_mounts("thread-4", "ou-user");
  const fs::path user_data =
      tmp_.path() / "users" / "ou-user" / "threads" / "thread-4" / "user-data";
  EXPECT_EQ(find_mount(mounts, "/mnt/user-data/workspace")->host_path,
            str(user_data / "workspace"));
  EXPECT_EQ(find_mount(mounts, "/mnt/user-data/uploads")->host_path, str(user_data / "uploads"));
  EXPECT_EQ(find_mount(mounts, "/mnt/user-data/outputs")->host_path, str(user_data / "outputs"));
  EXPECT_EQ(find_mount(mounts, "/mnt/user-data/.upload-conversions")->host_path,
            str(user_data / ".upload-conversions"));
}

// Python: test_get_thread_mounts_preserves_windows_host_path_style
TEST_F(MountsTest, GetThreadMountsPreservesWindowsHostPathStyle) {
  set_env("DEER_FLOW_HOST_BASE_DIR", kWindowsBase);
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient(std::nullopt));
  const auto mounts = composer.thread_mounts("thread-10", std::nullopt);
  const std::string h = kWindowsBase;
  EXPECT_EQ(find_mount(mounts, "/mnt/user-data/workspace")->host_path,
            h + R"(\threads\thread-10\user-data\workspace)");
  EXPECT_EQ(find_mount(mounts, "/mnt/user-data/uploads")->host_path,
            h + R"(\threads\thread-10\user-data\uploads)");
  EXPECT_EQ(find_mount(mounts, "/mnt/user-data/outputs")->host_path,
            h + R"(\threads\thread-10\user-data\outputs)");
  EXPECT_EQ(find_mount(mounts, "/mnt/user-data/.upload-conversions")->host_path,
            h + R"(\threads\thread-10\user-data\.upload-conversions)");
  EXPECT_EQ(find_mount(mounts, "/mnt/acp-workspace")->host_path,
            h + R"(\threads\thread-10\acp-workspace)");
  // Directories are still created on the container-visible base.
  EXPECT_TRUE(fs::is_directory(tmp_.path() / "threads" / "thread-10" / "acp-workspace"));
}

TEST_F(MountsTest, ThreadMountsComeInReferenceOrder) {
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient(std::nullopt));
  const fs::path t = tmp_.path() / "threads" / "t";
  const std::vector<Mount> expected = {
      {str(t / "user-data" / "workspace"), "/mnt/user-data/workspace", false},
      {str(t / "user-data" / "uploads"), "/mnt/user-data/uploads", false},
      {str(t / "user-data" / "outputs"), "/mnt/user-data/outputs", false},
      {str(t / "user-data" / ".upload-conversions"), "/mnt/user-data/.upload-conversions", true},
      {str(t / "acp-workspace"), "/mnt/acp-workspace", true},
  };
  EXPECT_EQ(composer.thread_mounts("t", std::nullopt), expected);
}

TEST_F(MountsTest, InvalidThreadIdPropagates) {
  const MountComposer composer(paths_for(tmp_.path()));
  EXPECT_THROW(composer.thread_mounts("../escape", std::nullopt), std::invalid_argument);
  EXPECT_THROW(composer.compose_extra_mounts(std::string("../escape"), "alice", true),
               std::invalid_argument);
}

TEST_F(MountsTest, EffectiveUserRule) {
  MountComposer defaulted(paths_for(tmp_.path()));
  EXPECT_EQ(defaulted.effective_user(std::nullopt), "default");
  EXPECT_EQ(defaulted.effective_user("alice"), "alice");
  const MountComposer ambient(paths_for(tmp_.path()), options_with_ambient("carol"));
  EXPECT_EQ(ambient.effective_user(std::nullopt), "carol");
  EXPECT_EQ(ambient.effective_user(""), "carol");  // Python's `user_id or ambient`
  EXPECT_EQ(ambient.effective_user("alice"), "alice");
  const MountComposer none(paths_for(tmp_.path()), options_with_ambient(std::nullopt));
  EXPECT_EQ(none.effective_user(std::nullopt), std::nullopt);
}

// ── skills mounts (§3.2, §3.3) ──

// Python: test_get_user_skill_mounts_mounts_only_global_integrations
TEST_F(MountsTest, GetUserSkillMountsMountsOnlyGlobalIntegrations) {
  fs::create_directories(tmp_.path() / "skills" / "public");
  const fs::path home = tmp_.path() / "home";
  const MountComposer composer(paths_for(home));
  const auto alice = composer.user_skill_mounts("alice");
  const auto bob = composer.user_skill_mounts("bob");
  ASSERT_EQ(container_paths(alice), std::vector<std::string>{"/mnt/skills/integrations"});
  ASSERT_EQ(container_paths(bob), std::vector<std::string>{"/mnt/skills/integrations"});
  EXPECT_NE(alice[0].host_path, bob[0].host_path);
  EXPECT_EQ(alice[0].host_path, str(home / "users" / "alice" / "skills_view" / "integrations"));
  EXPECT_EQ(bob[0].host_path, str(home / "users" / "bob" / "skills_view" / "integrations"));
  EXPECT_TRUE(alice[0].read_only);
}

TEST_F(MountsTest, SkillsMountsUseConfiguredContainerPathAndRunProjection) {
  std::vector<std::string> projected;
  MountComposerOptions options;
  options.skills_container_path = "/opt/skills";
  options.skills_projection = [&projected](const std::string& user) { projected.push_back(user); };
  const MountComposer composer(paths_for(tmp_.path()), options);
  const fs::path b = tmp_.path();
  const std::vector<Mount> expected = {
      {str(b / "skills_view" / "public"), "/opt/skills/public", true},
      {str(b / "users" / "alice" / "skills_view" / "custom"), "/opt/skills/custom", true},
      {str(b / "users" / "alice" / "skills_view" / "legacy"), "/opt/skills/legacy", true},
  };
  EXPECT_EQ(composer.skills_mounts("alice"), expected);
  EXPECT_EQ(composer.user_skill_mounts(std::nullopt)[0].container_path, "/opt/skills/integrations");
  EXPECT_EQ(projected, (std::vector<std::string>{"alice", "default"}));
}

TEST_F(MountsTest, ProjectionFailureIsOnlyAWarning) {
  MountComposerOptions options;
  options.logger = logger_;
  options.skills_projection = [](const std::string&) { throw std::runtime_error("boom"); };
  const MountComposer composer(paths_for(tmp_.path()), options);
  EXPECT_EQ(composer.skills_mounts("alice").size(), 3u);
  EXPECT_TRUE(logger_->contains(LogLevel::warning,
                                "Could not ensure skills projection for user alice: boom"));
  EXPECT_NO_THROW(composer.ensure_skills_projection("alice"));
}

TEST_F(MountsTest, SkillsMountFailureWarnsAndReturnsEmpty) {
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient(std::nullopt));
  EXPECT_TRUE(composer.skills_mounts("bad/user").empty());
  EXPECT_TRUE(
      logger_->contains(LogLevel::warning, "Could not setup skills mounts: Invalid user_id"));
  EXPECT_TRUE(composer.user_skill_mounts(std::nullopt).empty());
  EXPECT_TRUE(logger_->contains(LogLevel::warning, "Could not setup user skill mounts: "));
}

// ── lark-cli mounts (§3.4) ──

// Python: test_get_lark_cli_runtime_mounts_uses_user_auth_dirs
TEST_F(MountsTest, GetLarkCliRuntimeMountsUsesUserAuthDirs) {
  const fs::path runtime_dir = tmp_.path() / "integrations" / "lark-cli" / "sandbox-cli";
  fs::create_directories(runtime_dir);
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient("default"));
  const auto mounts = composer.lark_cli_runtime_mounts("alice");
  const fs::path auth = tmp_.path() / "users" / "alice" / "integrations" / "lark-cli";
  EXPECT_EQ(find_mount(mounts, kLarkCliSandboxConfigDir),
            (Mount{str(auth / "config"), std::string(kLarkCliSandboxConfigDir), true}));
  EXPECT_EQ(find_mount(mounts, kLarkCliSandboxDataDir),
            (Mount{str(auth / "data"), std::string(kLarkCliSandboxDataDir), false}));
  EXPECT_EQ(mode_of(auth / "config"), 0700u);
  EXPECT_EQ(mode_of(auth / "data"), 0700u);
  EXPECT_EQ(find_mount(mounts, "/mnt/integrations/lark-cli/runtime"),
            (Mount{str(runtime_dir), "/mnt/integrations/lark-cli/runtime", true}));
  // The seed removed the writable config/locks over-mount.
  EXPECT_FALSE(find_mount(mounts, "/mnt/integrations/lark-cli/config/locks"));
  EXPECT_EQ(mounts.size(), 3u);
}

TEST_F(MountsTest, LarkCliRuntimeMountNeedsTheRuntimeDir) {
  const MountComposer composer(paths_for(tmp_.path()));
  EXPECT_EQ(container_paths(composer.lark_cli_runtime_mounts("alice")),
            (std::vector<std::string>{"/mnt/integrations/lark-cli/config",
                                      "/mnt/integrations/lark-cli/data"}));
}

TEST_F(MountsTest, LarkCliMountsUseWindowsHostBase) {
  set_env("DEER_FLOW_HOST_BASE_DIR", kWindowsBase);
  fs::create_directories(tmp_.path() / "integrations" / "lark-cli" / "sandbox-cli");
  const MountComposer composer(paths_for(tmp_.path()));
  const auto mounts = composer.lark_cli_runtime_mounts("alice");
  const std::string h = kWindowsBase;
  EXPECT_EQ(find_mount(mounts, kLarkCliSandboxConfigDir)->host_path,
            h + R"(\users\alice\integrations\lark-cli\config)");
  EXPECT_EQ(find_mount(mounts, kLarkCliSandboxRuntimeDir)->host_path,
            h + R"(\integrations\lark-cli\sandbox-cli)");
}

TEST_F(MountsTest, LarkCliSymlinkMakesTheMountListEmptyWithAWarning) {
  const fs::path auth = tmp_.path() / "users" / "alice" / "integrations" / "lark-cli";
  fs::create_directories(auth / "data");
  fs::create_directories(tmp_.path() / "elsewhere");
  fs::create_directory_symlink(tmp_.path() / "elsewhere", auth / "data" / "tokens");
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient("default"));
  EXPECT_TRUE(composer.lark_cli_runtime_mounts("alice").empty());
  EXPECT_TRUE(
      logger_->contains(LogLevel::warning,
                        "Could not setup Lark CLI runtime mounts: Lark CLI credential path must "
                        "not be a symlink: " +
                            str(auth / "data" / "tokens")));
}

// ── composition (§3.5) ──

// Docker refuses a bind mount whose source does not exist (podman creates it silently), so
// every source the composer hands the backend must exist once composition returns; the
// read-only skills views are gateway-owned and readable by the sandbox's user.
TEST_F(MountsTest, EveryComposedMountSourceExistsBeforeTheBackendIsCalled) {
  const fs::path home = tmp_.path() / "home";
  const MountComposer composer(paths_for(home), options_with_ambient("default"));
  const auto mounts = composer.compose_extra_mounts(std::string("thread-1"), "alice", true);
  ASSERT_FALSE(mounts.empty());
  for (const auto& mount : mounts) {
    EXPECT_TRUE(fs::is_directory(mount.host_path))
        << mount.container_path << " <- " << mount.host_path;
  }
  for (const char* view :
       {"skills_view/public", "users/alice/skills_view/custom", "users/alice/skills_view/legacy",
        "users/alice/skills_view/integrations"}) {
    EXPECT_EQ(mode_of(home / view), 0755u) << view;
  }
}

// Python: test_get_extra_mounts_provisioner_payload_has_unique_container_paths (the
// composition and de-duplication part; the payload and provisioner parts belong to the remote
// plugin and the provisioner).
TEST_F(MountsTest, GetExtraMountsProvisionerPayloadHasUniqueContainerPaths) {
  fs::create_directories(tmp_.path() / "skills" / "public");
  const fs::path home = tmp_.path() / "home";
  fs::create_directories(home / "integrations" / "lark-cli" / "sandbox-cli");
  const MountComposer composer(paths_for(home), options_with_ambient("default"));

  const auto mounts = composer.compose_extra_mounts(std::string("thread-1"), "alice", true);
  const auto paths = container_paths(mounts);
  EXPECT_EQ(std::set<std::string>(paths.begin(), paths.end()).size(), paths.size());
  for (const char* expected :
       {"/mnt/skills/custom", "/mnt/skills/integrations", "/mnt/integrations/lark-cli/config",
        "/mnt/integrations/lark-cli/data", "/mnt/integrations/lark-cli/runtime"}) {
    EXPECT_THAT(paths, ::testing::Contains(expected));
  }
  const auto conversions = find_mount(mounts, "/mnt/user-data/.upload-conversions");
  ASSERT_TRUE(conversions);
  EXPECT_TRUE(conversions->read_only);

  // The full order: thread data, skills, integration skills, lark-cli.
  EXPECT_EQ(paths,
            (std::vector<std::string>{
                "/mnt/user-data/workspace", "/mnt/user-data/uploads", "/mnt/user-data/outputs",
                "/mnt/user-data/.upload-conversions", "/mnt/acp-workspace", "/mnt/skills/public",
                "/mnt/skills/custom", "/mnt/skills/legacy", "/mnt/skills/integrations",
                "/mnt/integrations/lark-cli/config", "/mnt/integrations/lark-cli/data",
                "/mnt/integrations/lark-cli/runtime"}));
}

class StubbedComposer : public MountComposer {
 public:
  using MountComposer::MountComposer;
  std::vector<Mount> skills = {};
  std::vector<Mount> user_skills = {};
  std::vector<Mount> lark = {};
  std::vector<Mount> skills_mounts(const std::optional<std::string>&) const override {
    return skills;
  }
  std::vector<Mount> user_skill_mounts(const std::optional<std::string>&) const override {
    return user_skills;
  }
  std::vector<Mount> lark_cli_runtime_mounts(const std::optional<std::string>&) const override {
    return lark;
  }
};

// Python: test_nonmounted_remote_provider_omits_read_only_conversion_mount (the drop part; the
// mount-mode decision is the provider's).
TEST_F(MountsTest, NonmountedRemoteProviderOmitsReadOnlyConversionMount) {
  const StubbedComposer composer(paths_for(tmp_.path()), options_with_ambient("default"));
  const auto mounts = composer.compose_extra_mounts(std::string("thread-1"), "alice", false);
  const auto paths = container_paths(mounts);
  EXPECT_THAT(paths, ::testing::Contains("/mnt/user-data/uploads"));
  EXPECT_THAT(paths, ::testing::Not(::testing::Contains("/mnt/user-data/.upload-conversions")));
  EXPECT_EQ(paths.size(), 4u);

  const auto mounted = composer.compose_extra_mounts(std::string("thread-1"), "alice", true);
  EXPECT_TRUE(find_mount(mounted, "/mnt/user-data/.upload-conversions"));
}

TEST_F(MountsTest, DuplicateContainerPathsKeepTheFirstAndWarn) {
  StubbedComposer composer(paths_for(tmp_.path()), options_with_ambient("default"));
  composer.skills = {{"/h/custom", "/mnt/skills/custom", true}};
  composer.user_skills = {{"/h/other", "/mnt/skills/custom", true},
                          {"/h/ws", "/mnt/user-data/workspace", false}};
  const auto mounts = composer.compose_extra_mounts(std::string("t"), "alice", true);
  EXPECT_EQ(find_mount(mounts, "/mnt/skills/custom")->host_path, "/h/custom");
  EXPECT_NE(find_mount(mounts, "/mnt/user-data/workspace")->host_path, "/h/ws");
  EXPECT_EQ(mounts.size(), 6u);
  EXPECT_TRUE(logger_->contains(
      LogLevel::warning,
      "Skipping duplicate sandbox mount for container path /mnt/skills/custom from host /h/other"));
  EXPECT_TRUE(logger_->contains(
      LogLevel::warning,
      "Skipping duplicate sandbox mount for container path /mnt/user-data/workspace from host "
      "/h/ws"));
}

TEST(DedupeMountsTest, FirstOccurrenceWinsWithoutALogger) {
  const std::vector<Mount> mounts = {{"/a", "/c", false}, {"/b", "/c", true}, {"/d", "/e", false}};
  EXPECT_EQ(dedupe_mounts_by_container_path(mounts, nullptr),
            (std::vector<Mount>{{"/a", "/c", false}, {"/d", "/e", false}}));
}

TEST_F(MountsTest, CompositionLogsEachGroup) {
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient("default"));
  composer.compose_extra_mounts(std::string("thread-1"), "alice", true);
  const std::string workspace =
      str(tmp_.path() / "users" / "alice" / "threads" / "thread-1" / "user-data" / "workspace");
  EXPECT_TRUE(logger_->contains(LogLevel::info, "Adding thread mounts for thread thread-1: [('" +
                                                    workspace +
                                                    "', '/mnt/user-data/workspace', False), "));
  EXPECT_TRUE(logger_->contains(LogLevel::info, "Adding skills mounts: [("));
  EXPECT_TRUE(logger_->contains(LogLevel::info, "Adding user skill mounts: [("));
  EXPECT_TRUE(logger_->contains(LogLevel::info, "Adding Lark CLI runtime mounts: [("));
}

TEST_F(MountsTest, NoThreadMeansNoThreadMounts) {
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient("default"));
  const auto mounts = composer.compose_extra_mounts(std::nullopt, std::nullopt, true);
  EXPECT_FALSE(find_mount(mounts, "/mnt/user-data/workspace"));
  EXPECT_EQ(find_mount(mounts, "/mnt/skills/custom")->host_path,
            str(tmp_.path() / "users" / "default" / "skills_view" / "custom"));
  EXPECT_FALSE(logger_->contains("Adding thread mounts"));
}

TEST_F(MountsTest, NullAmbientUserGivesLegacyThreadMountsAndNoUserScopedMounts) {
  const MountComposer composer(paths_for(tmp_.path()), options_with_ambient(std::nullopt));
  const auto mounts = composer.compose_extra_mounts(std::string("t"), std::nullopt, true);
  EXPECT_EQ(mounts.size(), 5u);
  EXPECT_EQ(find_mount(mounts, "/mnt/acp-workspace")->host_path,
            str(tmp_.path() / "threads" / "t" / "acp-workspace"));
  EXPECT_TRUE(logger_->contains(LogLevel::warning, "Could not setup Lark CLI runtime mounts: "));
}

TEST(FormatMountsTest, RendersLikeAPythonListOfTuples) {
  EXPECT_EQ(format_mounts({}), "[]");
  EXPECT_EQ(format_mounts({{"/h", "/c", false}, {R"(C:\x)", "/d", true}}),
            R"([('/h', '/c', False), ('C:\\x', '/d', True)])");
}

// ── the host's creation planner (what the provider asks before a create) ──

TEST_F(MountsTest, TheHostPlannerGivesTheContractsIdsAndTheComposersMounts) {
  const fs::path home = tmp_.path() / "home";
  auto composer =
      std::make_shared<const MountComposer>(paths_for(home), options_with_ambient("default"));
  const HostCreationPlanner planner(composer);

  EXPECT_EQ(planner.sandbox_id(std::string("thread-1"), "alice", 2),
            deterministic_sandbox_id("thread-1", "alice", 2));
  EXPECT_NE(planner.sandbox_id(std::string("thread-1"), "alice", 2),
            planner.sandbox_id(std::string("thread-1"), "alice", 0));
  const std::string anonymous = planner.sandbox_id(std::nullopt, "alice", 2);
  EXPECT_EQ(anonymous.size(), 8u);
  EXPECT_NE(anonymous, planner.sandbox_id(std::nullopt, "alice", 2));

  EXPECT_EQ(
      container_paths(planner.extra_mounts(std::string("thread-1"), "alice", false)),
      container_paths(composer->compose_extra_mounts(std::string("thread-1"), "alice", false)));
  EXPECT_FALSE(find_mount(planner.extra_mounts(std::string("thread-1"), "alice", false),
                          "/mnt/user-data/.upload-conversions"))
      << "without thread-data mounts the read-only conversions mount is dropped";
}

}  // namespace
}  // namespace sandboxd::core

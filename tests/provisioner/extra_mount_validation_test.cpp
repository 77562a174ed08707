// design §10.8 extra-mount validation, and seed row 16's last step: the gateway's full mount
// composition, filtered into the provisioner payload, passes the provisioner's validation with
// exactly the seven expected container paths.
#include "extra_mount_validation.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <set>

#include "provisioner_support.hpp"
#include "sandboxd/core/mounts.hpp"
#include "test_support.hpp"

namespace sandboxd::provisioner {
namespace {

using ::testing::HasSubstr;

const StateRoots kRoots{"/state", "/state/threads"};

std::string rejection(const std::vector<Mount>& mounts) {
  try {
    validated_extra_mounts(mounts, "thread-1", "alice", kRoots);
  } catch (const ExtraMountRejected& e) {
    return e.what();
  }
  return "";
}

TEST(ExtraMountValidationTest, AcceptsAllowedMountsAndNormalisesHostPaths) {
  const auto out = validated_extra_mounts(
      {{"/state/users/alice/skills_view/./custom/", "/mnt/skills/custom", true},
       {"/state/users/alice/threads/thread-1/user-data/.upload-conversions",
        "/mnt/user-data/.upload-conversions", true}},
      "thread-1", "alice", kRoots);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].host_path, "/state/users/alice/skills_view/custom");
  EXPECT_TRUE(out[1].read_only);
}

TEST(ExtraMountValidationTest, EachRuleNamesTheOffendingPath) {
  EXPECT_EQ(rejection(std::vector<Mount>(11, {"/state/a", "/mnt/acp-workspace", true})),
            "Too many extra mounts; max is 10");
  EXPECT_EQ(rejection({{"state/a", "/mnt/acp-workspace", true}}),
            "Extra mount host path must be absolute: state/a");
  EXPECT_EQ(rejection({{"/etc/passwd", "/mnt/acp-workspace", true}}),
            "Extra mount host path is outside DeerFlow state: /etc/passwd");
  EXPECT_EQ(rejection({{"/state/../etc", "/mnt/acp-workspace", true}}),
            "Extra mount host path is outside DeerFlow state: /state/../etc");
  EXPECT_EQ(rejection({{"/state/a", "mnt/acp-workspace", true}}),
            "Extra mount path must be absolute: mnt/acp-workspace");
  EXPECT_EQ(rejection({{"/state/a", "/mnt/user-data/workspace", false}}),
            "Unsupported extra mount path: /mnt/user-data/workspace");
  EXPECT_EQ(rejection({{"/state/a", "/mnt/acp-workspace", true},
                       {"/state/b", "/mnt/acp-workspace/", true}}),
            "Duplicate extra mount path: /mnt/acp-workspace/");
}

TEST(ExtraMountValidationTest, ConversionMountMustBeReadOnlyAndTheRequestersOwn) {
  const std::string own = "/state/users/alice/threads/thread-1/user-data/.upload-conversions";
  EXPECT_THAT(rejection({{own, "/mnt/user-data/.upload-conversions", false}}),
              HasSubstr("Upload conversion mount"));
  EXPECT_THAT(rejection({{"/state/users/bob/threads/thread-1/user-data/.upload-conversions",
                          "/mnt/user-data/.upload-conversions", true}}),
              HasSubstr("Upload conversion mount"));
  EXPECT_EQ(rejection({{own, "/mnt/user-data/.upload-conversions", true}}), "");
}

TEST(ExtraMountValidationTest, LegacyLayoutUsesTheParentOfTheThreadsPath) {
  const StateRoots legacy{"", "/legacy/threads"};
  EXPECT_NO_THROW(validated_extra_mounts({{"/legacy/x", "/mnt/acp-workspace", true}}, "thread-1",
                                         "alice", legacy));
  EXPECT_THROW(validated_extra_mounts({{"/other/x", "/mnt/acp-workspace", true}}, "thread-1",
                                      "alice", legacy),
               ExtraMountRejected);
}

// Python: test_get_extra_mounts_provisioner_payload_has_unique_container_paths (the
// provisioner-validation part): the gateway's real composition for alice/thread-1 → payload →
// validation → exactly these seven container paths.
TEST(ExtraMountValidationTest, GatewayCompositionPassesProvisionerValidation) {
  const testing::TempDir tmp;
  const std::string home = tmp.str();
  std::filesystem::create_directories(home + "/integrations/lark-cli/sandbox-cli");
  auto paths = std::make_shared<const core::Paths>(home, home);
  core::MountComposerOptions options;
  options.ambient_user = [] { return std::optional<std::string>("default"); };
  options.logger = std::make_shared<testing::CapturingLogger>();
  core::MountComposer composer(paths, options);

  const auto mounts = composer.compose_extra_mounts("thread-1", "alice", /*mounted=*/true);
  const auto payload = remote_provisioner::provisioner_extra_mounts_payload(mounts);
  const auto validated =
      validated_extra_mounts(payload, "thread-1", "alice", StateRoots{home, home + "/threads"});

  std::vector<std::string> container_paths;
  for (const auto& mount : validated) container_paths.push_back(mount.container_path);
  EXPECT_EQ(std::set<std::string>(container_paths.begin(), container_paths.end()).size(),
            container_paths.size());
  EXPECT_EQ(std::set<std::string>(container_paths.begin(), container_paths.end()),
            (std::set<std::string>{
                "/mnt/user-data/.upload-conversions",
                "/mnt/acp-workspace",
                "/mnt/skills/custom",
                "/mnt/skills/integrations",
                "/mnt/integrations/lark-cli/config",
                "/mnt/integrations/lark-cli/data",
                "/mnt/integrations/lark-cli/runtime",
            }));
}

}  // namespace
}  // namespace sandboxd::provisioner

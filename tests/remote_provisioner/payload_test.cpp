// Unit tests of the extra-mount payload sent to the provisioner (design §10.6) and of the
// style-preserving host path helpers it uses.
#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "provisioner_support.hpp"
#include "sandboxd/host_path.hpp"

namespace {

namespace rp = sandboxd::remote_provisioner;
using sandboxd::Mount;

const std::string kThreadDir = "/state/users/alice/threads/thread-1";

void expect_rejected(const std::vector<Mount>& mounts) {
  try {
    rp::provisioner_extra_mounts_payload(mounts);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& error) {
    EXPECT_EQ(std::string(error.what()).rfind("Upload conversion mount", 0), 0u) << error.what();
  }
}

// Python: test_provisioner_payload_rejects_unsafe_conversion_mount (case 1: writable)
TEST(ProvisionerPayloadTest, RejectsWritableConversionMount) {
  expect_rejected({
      {kThreadDir + "/user-data/uploads", "/mnt/user-data/uploads", false},
      {kThreadDir + "/user-data/.upload-conversions", "/mnt/user-data/.upload-conversions", false},
  });
}

// Python: test_provisioner_payload_rejects_unsafe_conversion_mount (case 2: foreign user)
TEST(ProvisionerPayloadTest, RejectsConversionMountOfAnotherUser) {
  expect_rejected({
      {kThreadDir + "/user-data/uploads", "/mnt/user-data/uploads", false},
      {"/state/users/bob/threads/thread-1/user-data/.upload-conversions",
       "/mnt/user-data/.upload-conversions", true},
  });
}

TEST(ProvisionerPayloadTest, RejectsConversionMountWithoutUploadsMount) {
  expect_rejected({
      {kThreadDir + "/user-data/.upload-conversions", "/mnt/user-data/.upload-conversions", true},
  });
}

// The full local composition (design §3.5) for thread-1 / alice, as the provider builds it.
std::vector<Mount> composed_mounts() {
  const std::string ud = kThreadDir + "/user-data";
  return {
      {ud + "/workspace", "/mnt/user-data/workspace", false},
      {ud + "/uploads", "/mnt/user-data/uploads", false},
      {ud + "/outputs", "/mnt/user-data/outputs", false},
      {ud + "/.upload-conversions", "/mnt/user-data/.upload-conversions", true},
      {kThreadDir + "/acp-workspace", "/mnt/acp-workspace", true},
      {"/state/skills/public", "/mnt/skills/public", true},
      {"/state/skills/legacy", "/mnt/skills/legacy", true},
      {"/state/users/alice/skills/custom", "/mnt/skills/custom", true},
      {"/state/users/alice/skills_view/integrations", "/mnt/skills/integrations", true},
      {"/state/users/alice/integrations/lark-cli/config", "/mnt/integrations/lark-cli/config",
       false},
      {"/state/users/alice/integrations/lark-cli/data", "/mnt/integrations/lark-cli/data", false},
      {"/state/integrations/lark-cli/sandbox-cli", "/mnt/integrations/lark-cli/runtime", true},
  };
}

// Python: test_get_extra_mounts_provisioner_payload_has_unique_container_paths (payload part;
// the composition part is MountsTest/ProviderSeedTest, the provisioner's validation is
// tests/provisioner/extra_mount_validation_test.cpp)
TEST(ProvisionerPayloadTest, PayloadHasUniqueContainerPaths) {
  std::vector<Mount> mounts = composed_mounts();
  // A repeated container path later in the list loses (first wins).
  mounts.push_back({"/elsewhere/custom", "/mnt/skills/custom", false});
  const auto payload = rp::provisioner_extra_mounts_payload(mounts);

  std::vector<std::string> paths;
  for (const auto& mount : payload) paths.push_back(mount.container_path);
  EXPECT_EQ(std::set<std::string>(paths.begin(), paths.end()).size(), paths.size());
  EXPECT_EQ(std::set<std::string>(paths.begin(), paths.end()),
            (std::set<std::string>{
                "/mnt/user-data/.upload-conversions",
                "/mnt/acp-workspace",
                "/mnt/skills/custom",
                "/mnt/skills/integrations",
                "/mnt/integrations/lark-cli/config",
                "/mnt/integrations/lark-cli/data",
                "/mnt/integrations/lark-cli/runtime",
            }));
  // Input order is kept.
  EXPECT_EQ(paths.front(), "/mnt/user-data/.upload-conversions");
  EXPECT_EQ(paths.back(), "/mnt/integrations/lark-cli/runtime");
  for (const auto& mount : payload) {
    if (mount.container_path == "/mnt/user-data/.upload-conversions") {
      EXPECT_TRUE(mount.read_only);
    }
    if (mount.container_path == "/mnt/skills/custom") {
      EXPECT_EQ(mount.host_path, "/state/users/alice/skills/custom");
    }
  }
}

TEST(ProvisionerPayloadTest, LarkFlagsDropTheRuntimeMount) {
  for (auto [runtime, broker] : {std::pair{true, false}, std::pair{false, true}}) {
    const auto payload = rp::provisioner_extra_mounts_payload(composed_mounts(), runtime, broker);
    for (const auto& mount : payload) {
      EXPECT_NE(mount.container_path, "/mnt/integrations/lark-cli/runtime");
    }
    EXPECT_EQ(payload.size(), 6u);
  }
}

TEST(ProvisionerPayloadTest, NothingForwardableGivesAnEmptyPayload) {
  EXPECT_TRUE(rp::provisioner_extra_mounts_payload({
                                                       {"/a", "/mnt/user-data/workspace", false},
                                                       {"/b", "/mnt/skills/public", true},
                                                   })
                  .empty());
}

TEST(ProvisionerPayloadTest, AcceptsWindowsStyleConversionMount) {
  const std::string base = R"(C:\Users\demo\deer-flow\backend\.deer-flow\threads\thread-9)";
  const auto payload = rp::provisioner_extra_mounts_payload({
      {base + R"(\user-data\uploads)", "/mnt/user-data/uploads", false},
      {base + R"(\user-data\.upload-conversions)", "/mnt/user-data/.upload-conversions", true},
  });
  ASSERT_EQ(payload.size(), 1u);
  EXPECT_EQ(payload[0].host_path, base + R"(\user-data\.upload-conversions)");
}

TEST(ProvisionerPayloadTest, JsonShape) {
  EXPECT_EQ(rp::extra_mounts_to_json({{"/h", "/mnt/acp-workspace", true}}),
            R"([{"host_path":"/h","container_path":"/mnt/acp-workspace","read_only":true}])");
}

TEST(HostPathTest, ParentAndJoinPreserveStyle) {
  EXPECT_EQ(sandboxd::host_path_parent("/a/b//c/"), "/a/b");
  EXPECT_EQ(sandboxd::join_host_path("/a/./b", {".x"}), "/a/b/.x");
  EXPECT_EQ(sandboxd::host_path_parent(R"(C:\a\b)"), R"(C:\a)");
  EXPECT_EQ(sandboxd::join_host_path("C:/a/b", {"c"}), R"(C:\a\b\c)");
  EXPECT_EQ(sandboxd::join_host_path(R"(\\server\share)", {"c"}), R"(\\server\share\c)");
  EXPECT_EQ(sandboxd::host_path_parent("/a"), "/");
  EXPECT_EQ(sandboxd::normalize_host_path("/a/../b"), "/a/../b");
}

}  // namespace

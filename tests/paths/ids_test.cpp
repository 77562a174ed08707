// Deterministic and random sandbox ids, external-id sanitising (design §4.1, §4.2, §2.3).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "sandboxd/core/random_hex.hpp"
#include "sandboxd/core/sandbox_id.hpp"
#include "sandboxd/types.hpp"

namespace sandboxd::core {
namespace {

// Computed outside this code base, with Python's hashlib:
//   python3 -c 'import hashlib;
//   print(hashlib.sha256(b"mount-v2:user-a:thread-a").hexdigest()[:16])'
constexpr const char* kPinnedUserAThreadAV2 = "0024bd1b2a0836b9";
// Same tool: b"mount-v0:user-a:thread-a", b"mount-v3:user-a:thread-a".
constexpr const char* kPinnedUserAThreadAV0 = "458395083c20a7e1";
constexpr const char* kPinnedUserAThreadAV3 = "e46b5bea7e22ebf9";
// Same tool: b"mount-v2:alice:thread-upgrade" and the pre-upgrade b"alice:thread-upgrade".
constexpr const char* kPinnedAliceUpgradeV2 = "e0138786f59e6d3b";
constexpr const char* kPinnedAlicePreUpgrade = "a04de498b20eb6aa";
// Same tool: the shared 8-char legacy id of ("user-9721","thread-9721") and
// ("user-94361","thread-94361").
constexpr const char* kLegacyCollidingId = "7f7b984c";

bool is_lower_hex(const std::string& s) {
  return s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST(SandboxIdTest, Sha256HexMatchesKnownVector) {
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(SandboxIdTest, PinnedDeterministicIdMatchesPythonHashlib) {
  EXPECT_EQ(deterministic_sandbox_id("thread-a", "user-a", 2), kPinnedUserAThreadAV2);
  EXPECT_EQ(deterministic_sandbox_id("thread-a", "user-a"), kPinnedUserAThreadAV2);
  EXPECT_EQ(kSandboxMountContractVersion, 2);
}

TEST(SandboxIdTest, ContractVersionsZeroTwoThreeGiveDifferentIds) {
  const auto v0 = deterministic_sandbox_id("thread-a", "user-a", 0);
  const auto v2 = deterministic_sandbox_id("thread-a", "user-a", 2);
  const auto v3 = deterministic_sandbox_id("thread-a", "user-a", 3);
  EXPECT_NE(v0, v2);
  EXPECT_NE(v2, v3);
  EXPECT_NE(v0, v3);
  EXPECT_EQ(v0, kPinnedUserAThreadAV0);
  EXPECT_EQ(v3, kPinnedUserAThreadAV3);
}

TEST(SandboxIdTest, UserAndThreadAreNotInterchangeable) {
  EXPECT_NE(deterministic_sandbox_id("a", "b"), deterministic_sandbox_id("b", "a"));
}

// Python: test_aio_wider_id_separates_known_legacy_collision
TEST(SandboxIdTest, AioWiderIdSeparatesKnownLegacyCollision) {
  const auto old_a = sha256_hex("user-9721:thread-9721").substr(0, 8);
  const auto old_b = sha256_hex("user-94361:thread-94361").substr(0, 8);
  ASSERT_EQ(old_a, old_b);
  ASSERT_EQ(old_a, kLegacyCollidingId);
  EXPECT_NE(deterministic_sandbox_id("thread-9721", "user-9721"),
            deterministic_sandbox_id("thread-94361", "user-94361"));
}

// Python: test_aio_mount_contract_upgrade_does_not_reuse_pre_upgrade_container_id
TEST(SandboxIdTest, AioMountContractUpgradeDoesNotReusePreUpgradeContainerId) {
  const auto pre_upgrade_id = sha256_hex("alice:thread-upgrade").substr(0, 16);
  ASSERT_EQ(pre_upgrade_id, kPinnedAlicePreUpgrade);
  const auto current_id = deterministic_sandbox_id("thread-upgrade", "alice");
  EXPECT_NE(current_id, pre_upgrade_id);
  EXPECT_EQ(current_id, sha256_hex("mount-v" + std::to_string(kSandboxMountContractVersion) +
                                   ":alice:thread-upgrade")
                            .substr(0, 16));
  EXPECT_EQ(current_id, kPinnedAliceUpgradeV2);
}

TEST(SandboxIdTest, RandomIdIsEightLowercaseHexCharsAndVaries) {
  const auto a = random_sandbox_id();
  const auto b = random_sandbox_id();
  EXPECT_EQ(a.size(), 8u);
  EXPECT_TRUE(is_lower_hex(a)) << a;
  EXPECT_TRUE(is_lower_hex(b)) << b;
  EXPECT_NE(a, b);  // 2^-32 chance of a false failure
}

// The core's one hex writer (host/random_hex.hpp): owner ids, secret placeholders and egress
// request ids come from random_hex.
TEST(RandomHexTest, BytesAreTwoLowercaseCharactersEachAndRandomOnesVary) {
  const unsigned char bytes[] = {0x00, 0x0f, 0xa5, 0xff};
  EXPECT_EQ(to_hex(bytes, sizeof bytes), "000fa5ff");
  const std::string a = random_hex(8, "a test id");
  const std::string b = random_hex(8, "a test id");
  EXPECT_EQ(a.size(), 16u);
  EXPECT_TRUE(is_lower_hex(a)) << a;
  EXPECT_NE(a, b);  // 2^-64 chance of a false failure
}

TEST(SanitizeExternalIdTest, SafeIdIsUnchanged) {
  EXPECT_EQ(sanitize_external_id("alice_01-x"), "alice_01-x");
}

TEST(SanitizeExternalIdTest, UnsafeCharactersAreReplacedAndDigestAppended) {
  // Digest: python3 -c 'import hashlib; print(hashlib.sha256(b"a b").hexdigest()[:16])'
  EXPECT_EQ(sanitize_external_id("a b"), "a-b-c8687a08aa5d6ed2");
  // One '-' per code point, as Python's re.sub does; digest of "é" in UTF-8, same tool.
  EXPECT_EQ(sanitize_external_id("\xc3\xa9"), "--4a99557e4033c353");
}

TEST(SanitizeExternalIdTest, EmptyIdIsRejected) {
  EXPECT_THROW(sanitize_external_id(""), std::invalid_argument);
}

}  // namespace
}  // namespace sandboxd::core

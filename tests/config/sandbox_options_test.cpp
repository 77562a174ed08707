// The table of sandbox options (core/src/config/sandbox_options.hpp, issue 35 item 2): every walk
// over it sees every option, the config's and the provider's defaults agree, README documents
// each key, and an embedder's hand-built ProviderOptions get the config's bounds.
#include "config/sandbox_options.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <fstream>
#include <sstream>
#include <string>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/provider.hpp"

namespace sandboxd::core {
namespace {

using ::testing::HasSubstr;

SandboxConfig minimal_config() {
  return parse_config(R"({"sandbox": {}})", "cfg.json");
}

TEST(SandboxOptionsTest, TheProviderDefaultsAreTheConfigDefaults) {
  ProviderOptions copied;
  // Scramble first, so that a field the copy skips keeps a value that differs from its default.
  copied.replicas = 97;
  copied.idle_timeout = 97;
  copied.teardown_wait_seconds = 97;
  copied.pause_after_seconds = 97;
  copied.overflow_policy = OverflowPolicy::burst;
  copied.acquire_timeout_seconds = 97;
  copied.burst_limit = 97;
  copied.max_per_user = 97;
  copied.thread_data_mounts = true;
  copied.max_lifetime_seconds = 97;
  copy_sandbox_options(SandboxConfig{}, copied);
  const ProviderOptions defaults;
  EXPECT_EQ(copied.replicas, defaults.replicas);
  EXPECT_EQ(copied.idle_timeout, defaults.idle_timeout);
  EXPECT_EQ(copied.teardown_wait_seconds, defaults.teardown_wait_seconds);
  EXPECT_EQ(copied.pause_after_seconds, defaults.pause_after_seconds);
  EXPECT_EQ(copied.overflow_policy, defaults.overflow_policy);
  EXPECT_EQ(copied.acquire_timeout_seconds, defaults.acquire_timeout_seconds);
  EXPECT_EQ(copied.burst_limit, defaults.burst_limit);
  EXPECT_EQ(copied.max_per_user, defaults.max_per_user);
  EXPECT_EQ(copied.thread_data_mounts, defaults.thread_data_mounts);
  EXPECT_EQ(copied.max_lifetime_seconds, defaults.max_lifetime_seconds);
}

TEST(SandboxOptionsTest, EveryOptionReachesTheProviderFromAFile) {
  const SandboxConfig config = parse_config(R"({"sandbox": {
      "replicas": 7, "idle_timeout": 70, "teardown_wait_seconds": 7.5,
      "pause_after_seconds": 17, "overflow_policy": "wait", "acquire_timeout": 27,
      "burst_limit": 0, "max_per_user": 2, "thread_data_mounts": false,
      "max_lifetime_seconds": 3600}})",
                                            "cfg.json");
  ProviderOptions options;
  copy_sandbox_options(config, options);
  EXPECT_EQ(options.replicas, 7);
  EXPECT_EQ(options.idle_timeout, 70);
  EXPECT_EQ(options.teardown_wait_seconds, 7.5);
  EXPECT_EQ(options.pause_after_seconds, 17);
  EXPECT_EQ(options.overflow_policy, OverflowPolicy::wait);
  EXPECT_EQ(options.acquire_timeout_seconds, 27);
  EXPECT_EQ(options.max_per_user, 2);
  EXPECT_EQ(options.thread_data_mounts, std::optional<bool>(false));
  EXPECT_EQ(options.max_lifetime_seconds, 3600);
}

TEST(SandboxOptionsTest, MaxLifetimeIsBoundedToAYear) {
  EXPECT_EQ(parse_config(R"({"sandbox": {"max_lifetime_seconds": 31536000}})", "cfg.json")
                .max_lifetime_seconds,
            31536000);
  try {
    parse_config(R"({"sandbox": {"max_lifetime_seconds": 31536001}})", "cfg.json");
    ADD_FAILURE() << "a year and a second accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "cfg.json: sandbox.max_lifetime_seconds: expected a number of seconds >= 0 and <= "
              "31536000 (0: never), got 31536001");
  }
}

TEST(SandboxOptionsTest, CheckConfigShowsEveryOption) {
  rapidjson::Document shown;
  shown.Parse(render_redacted(minimal_config()).c_str());
  ASSERT_TRUE(shown.IsObject());
  for (const SandboxOption& option : sandbox_options()) {
    EXPECT_TRUE(shown.HasMember(option.key)) << option.key;
  }
}

TEST(SandboxOptionsTest, EveryOptionIsAKnownKeyAndAWrongTypeIsRefusedWithItsSentence) {
  for (const SandboxOption& option : sandbox_options()) {
    EXPECT_TRUE(is_known_sandbox_key(option.key)) << option.key;
    const std::string text = std::string(R"({"sandbox": {")") + option.key + R"(": [1]}})";
    try {
      parse_config(text, "cfg.json");
      ADD_FAILURE() << option.key << ": an array was accepted";
    } catch (const ConfigError& e) {
      EXPECT_EQ(std::string(e.what()), std::string("cfg.json: sandbox.") + option.key +
                                           ": expected " + option.expected + ", got [1]");
    }
  }
  EXPECT_FALSE(is_known_sandbox_key("max_lifetime"));
}

TEST(SandboxOptionsTest, ReadmeHasARowForEveryOption) {
  std::ifstream readme(std::string(SANDBOXD_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(readme) << "README.md not found under " << SANDBOXD_SOURCE_DIR;
  std::stringstream text;
  text << readme.rdbuf();
  for (const SandboxOption& option : sandbox_options()) {
    EXPECT_THAT(text.str(), HasSubstr(std::string("| `") + option.key + "` |")) << option.key;
  }
}

TEST(SandboxOptionsTest, HandBuiltProviderOptionsGetTheConfigBounds) {
  EXPECT_NO_THROW(check_provider_options(ProviderOptions{}));
  ProviderOptions no_wait;
  no_wait.teardown_wait_seconds = 0;  // an embedder may give up at once; a config may not
  EXPECT_NO_THROW(check_provider_options(no_wait));

  ProviderOptions zero_replicas;
  zero_replicas.replicas = 0;
  try {
    check_provider_options(zero_replicas);
    ADD_FAILURE() << "replicas 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "ProviderOptions.replicas: expected an integer > 0, got 0 (the config key "
              "sandbox.replicas takes the same values)");
  }
  ProviderOptions week_and_a_day;
  week_and_a_day.pause_after_seconds = 691200;
  EXPECT_THROW(check_provider_options(week_and_a_day), std::invalid_argument);
  ProviderOptions negative_wait;
  negative_wait.acquire_timeout_seconds = -1;
  try {
    check_provider_options(negative_wait);
    ADD_FAILURE() << "acquire_timeout_seconds -1 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(std::string(e.what()),
                HasSubstr("ProviderOptions.acquire_timeout_seconds: expected a number of seconds "
                          "> 0 and <= 3600 (or 0), got -1"));
  }
}

}  // namespace
}  // namespace sandboxd::core

// Configuration loader (design §11, §7.6, §3.6; design "Configuration").
// Carries the seed's test_load_config_preserves_thread_data_mounts_override (3 cases).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/plugin_config.hpp"
#include "test_support.hpp"

namespace sandboxd::core {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

// Environment variables any test here may read; cleared before and restored after each test.
const char* const kTouchedVariables[] = {"DEER_FLOW_SANDBOX_OWNERSHIP_REDIS_URL",
                                         "DEER_FLOW_STREAM_BRIDGE_REDIS_URL",
                                         "SANDBOXD_TEST_SECRET",
                                         "SANDBOXD_TEST_PROVISIONER_KEY",
                                         "SANDBOXD_TEST_UNSET_VAR",
                                         "SANDBOXD_TEST_OWNERSHIP_KEY"};

class ConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kTouchedVariables) {
      if (const char* value = std::getenv(name)) saved_env_[name] = value;
      unsetenv(name);
    }
    std::string pattern = (fs::temp_directory_path() / "sandboxd-config-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = fs::path(pattern);
  }

  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
    for (const char* name : kTouchedVariables) {
      auto it = saved_env_.find(name);
      if (it == saved_env_.end()) {
        unsetenv(name);
      } else {
        setenv(name, it->second.c_str(), 1);
      }
    }
  }

  // Writes `text` to `relative` under the temp dir and returns the full path.
  std::string write_file(const std::string& text, const std::string& relative = "config.json") {
    const fs::path path = dir_ / relative;
    fs::create_directories(path.parent_path());
    std::ofstream out(path, std::ios::binary);
    out << text;
    out.close();
    EXPECT_TRUE(out.good());
    return path.string();
  }

  SandboxConfig load(const std::string& text) { return load_config_file(write_file(text)); }

  // The ConfigError message for `text` loaded from a real file; fails the test if none.
  std::string error_for(const std::string& text) {
    const std::string path = write_file(text);
    try {
      load_config_file(path);
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(path));
      return e.what();
    }
    ADD_FAILURE() << "no ConfigError for " << text;
    return "";
  }

  static rapidjson::Document json(const std::string& text) {
    rapidjson::Document doc;
    doc.Parse(text.c_str());
    EXPECT_FALSE(doc.HasParseError()) << text;
    return doc;
  }

  static std::string str(const rapidjson::Value& v) {
    EXPECT_TRUE(v.IsString());
    return v.IsString() ? std::string(v.GetString(), v.GetStringLength()) : "";
  }

  fs::path dir_;
  std::map<std::string, std::string> saved_env_;
};

// ── seed: test_load_config_preserves_thread_data_mounts_override (×3) ──────────────────────

struct ThreadDataMountsCase {
  std::string sandbox_overrides;  // extra members of the sandbox section
  std::optional<bool> expected;
};

void PrintTo(const ThreadDataMountsCase& c, std::ostream* os) {
  *os << (c.sandbox_overrides.empty() ? "{}" : c.sandbox_overrides);
}

class ThreadDataMountsTest : public ConfigTest,
                             public ::testing::WithParamInterface<ThreadDataMountsCase> {};

TEST_P(ThreadDataMountsTest, LoadConfigPreservesThreadDataMountsOverride) {
  const auto& param = GetParam();
  const SandboxConfig config =
      load(R"({"sandbox": {"use": "deerflow.community.aio_sandbox:AioSandboxProvider")" +
           param.sandbox_overrides + "}}");
  EXPECT_EQ(config.thread_data_mounts, param.expected);

  // And the value reaches a Provider built from that file (issue 13 E). The local engine
  // backend bind-mounts by default, so `false` is the override that changes the answer; its
  // construction talks to no engine.
  const SandboxConfig full = load(
      R"({"sandbox": {"use": "deerflow.community.aio_sandbox:AioSandboxProvider",
          "backend": {"use": "local_docker:LocalContainerBackend",
                      "socket": "unix:///nonexistent/engine.sock"}, "base_dir": ")" +
      dir_.string() + R"(", "plugin_dirs": [")" + SANDBOXD_TEST_PLUGIN_DIR + "\"]" +
      param.sandbox_overrides + "}}");
  auto logger = std::make_shared<testing::CapturingLogger>();
  Provider::HostOptions host;
  host.start = false;
  const auto provider = Provider::from_config(full, logger, {}, host);
  EXPECT_EQ(provider->uses_thread_data_mounts(), param.expected.value_or(true))
      << "from_config dropped thread_data_mounts";
  provider->shutdown();
}

INSTANTIATE_TEST_SUITE_P(
    SeedCases, ThreadDataMountsTest,
    ::testing::Values(ThreadDataMountsCase{"", std::nullopt},
                      ThreadDataMountsCase{R"(, "thread_data_mounts": true)", true},
                      ThreadDataMountsCase{R"(, "thread_data_mounts": false)", false}));

TEST_F(ConfigTest, ExplicitNullThreadDataMountsStaysNull) {
  EXPECT_EQ(load(R"({"sandbox": {"thread_data_mounts": null}})").thread_data_mounts, std::nullopt);
}

// ── defaults ────────────────────────────────────────────────────────────────────────────────

TEST_F(ConfigTest, EmptySandboxSectionGivesDefaults) {
  const std::string path = write_file(R"({"sandbox": {}})");
  const SandboxConfig config = load_config_file(path);
  EXPECT_EQ(config.source_file, path);
  EXPECT_EQ(config.backend.use, kLocalDockerUse);
  EXPECT_EQ(config.backend.key_path, "sandbox.backend");
  EXPECT_EQ(config.backend.options_json, "{}");
  EXPECT_EQ(config.ownership.use, kMemoryOwnershipUse);
  EXPECT_EQ(config.ownership.key_path, "sandbox.ownership");
  EXPECT_EQ(config.ownership.options_json, "{}");
  EXPECT_EQ(config.base_dir, std::nullopt);
  EXPECT_EQ(config.replicas, 3);
  EXPECT_EQ(config.idle_timeout, 600);
  EXPECT_EQ(config.thread_data_mounts, std::nullopt);
  EXPECT_TRUE(config.plugin_dirs.empty());
  EXPECT_EQ(config.skills_container_path, "/mnt/skills");
  EXPECT_DOUBLE_EQ(config.renewal_interval_seconds, 30.0);
  EXPECT_DOUBLE_EQ(config.ttl_multiplier, 4.0);
  EXPECT_DOUBLE_EQ(config.ttl_seconds(), 120.0);
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
  EXPECT_THAT(config.mapping_notes,
              Contains(AllOf(HasSubstr("sandbox.backend"), HasSubstr(kLocalDockerUse))));
}

TEST_F(ConfigTest, ExplicitValuesAreRead) {
  const SandboxConfig config = load(R"({
    "skills": {"container_path": "/opt/skills"},
    "sandbox": {
      "backend": {"use": "local_docker:LocalContainerBackend", "image": "img:1"},
      "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore", "path": "/tmp/l.db",
                    "renewal_interval_seconds": 10, "ttl_multiplier": 2.5},
      "base_dir": "/var/lib/sandboxd", "replicas": 7, "idle_timeout": 0,
      "plugin_dirs": ["/opt/plugins"]
    }})");
  EXPECT_EQ(config.skills_container_path, "/opt/skills");
  EXPECT_EQ(config.backend.use, kLocalDockerUse);
  EXPECT_EQ(config.ownership.use, kSqliteOwnershipUse);
  EXPECT_EQ(config.base_dir, "/var/lib/sandboxd");
  EXPECT_EQ(config.replicas, 7);
  EXPECT_EQ(config.idle_timeout, 0);
  EXPECT_EQ(config.plugin_dirs, std::vector<std::string>{"/opt/plugins"});
  EXPECT_DOUBLE_EQ(config.renewal_interval_seconds, 10.0);
  EXPECT_DOUBLE_EQ(config.ttl_multiplier, 2.5);
  EXPECT_DOUBLE_EQ(config.ttl_seconds(), 25.0);
  EXPECT_TRUE(config.warnings.empty());

  // options_json is the whole sub-section, `use` included.
  auto backend = json(config.backend.options_json);
  EXPECT_EQ(str(backend["use"]), kLocalDockerUse);
  EXPECT_EQ(str(backend["image"]), "img:1");
  auto ownership = json(config.ownership.options_json);
  EXPECT_EQ(str(ownership["use"]), kSqliteOwnershipUse);
  EXPECT_EQ(str(ownership["path"]), "/tmp/l.db");
  EXPECT_EQ(ownership["renewal_interval_seconds"].GetInt(), 10);
}

TEST_F(ConfigTest, DeerFlowProviderUseIsAcceptedWithANote) {
  const SandboxConfig config =
      load(R"({"sandbox": {"use": "deerflow.community.aio_sandbox:AioSandboxProvider"}})");
  EXPECT_TRUE(config.warnings.empty());
  EXPECT_THAT(config.mapping_notes,
              Contains(AllOf(HasSubstr("sandbox.use"), HasSubstr("AioSandboxProvider"),
                             HasSubstr("ignored"))));
}

TEST_F(ConfigTest, ParseConfigUsesTheSourceNameInErrors) {
  try {
    parse_config(R"({"sandbox": {"replicas": 0}})", "inline-source");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("inline-source: sandbox.replicas"));
  }
  EXPECT_EQ(parse_config(R"({"sandbox": {}})", "inline-source").source_file, "inline-source");
}

// ── validation errors: file, key path, expectation and bad value ───────────────────────────

struct BadValueCase {
  std::string name;
  std::string text;
  std::vector<std::string> fragments;  // all must be in the message
};

void PrintTo(const BadValueCase& c, std::ostream* os) {
  *os << c.name;
}

class BadValueTest : public ConfigTest, public ::testing::WithParamInterface<BadValueCase> {};

TEST_P(BadValueTest, ErrorNamesFileKeyPathAndValue) {
  const std::string message = error_for(GetParam().text);
  for (const auto& fragment : GetParam().fragments) {
    EXPECT_THAT(message, HasSubstr(fragment));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Validation, BadValueTest,
    ::testing::Values(
        BadValueCase{"ReplicasNegative",
                     R"({"sandbox": {"replicas": -1}})",
                     {"config.json: sandbox.replicas: expected an integer > 0, got -1"}},
        BadValueCase{"ReplicasZero",
                     R"({"sandbox": {"replicas": 0}})",
                     {"sandbox.replicas", "integer > 0", "got 0"}},
        BadValueCase{"ReplicasString",
                     R"({"sandbox": {"replicas": "3"}})",
                     {"sandbox.replicas", "integer > 0", "got \"3\""}},
        BadValueCase{"ReplicasFraction",
                     R"({"sandbox": {"replicas": 1.5}})",
                     {"sandbox.replicas", "integer > 0", "got 1.5"}},
        BadValueCase{"ReplicasTooLarge",
                     R"({"sandbox": {"replicas": 99999999999}})",
                     {"sandbox.replicas", "integer > 0", "got 99999999999"}},
        BadValueCase{"IdleTimeoutNegative",
                     R"({"sandbox": {"idle_timeout": -5}})",
                     {"sandbox.idle_timeout", "integer >= 0", "got -5"}},
        BadValueCase{"IdleTimeoutBool",
                     R"({"sandbox": {"idle_timeout": true}})",
                     {"sandbox.idle_timeout", "integer >= 0", "got true"}},
        BadValueCase{"PauseAfterNegative",
                     R"({"sandbox": {"pause_after_seconds": -1}})",
                     {"config.json: sandbox.pause_after_seconds: expected a number of seconds >= 0 "
                      "and <= 604800 (0: never), got -1"}},
        BadValueCase{"PauseAfterString",
                     R"({"sandbox": {"pause_after_seconds": "60"}})",
                     {"sandbox.pause_after_seconds", "got \"60\""}},
        BadValueCase{"ThreadDataMountsString",
                     R"({"sandbox": {"thread_data_mounts": "yes"}})",
                     {"sandbox.thread_data_mounts", "true, false or null", "got \"yes\""}},
        BadValueCase{"BaseDirNumber",
                     R"({"sandbox": {"base_dir": 5}})",
                     {"sandbox.base_dir", "path string", "got 5"}},
        BadValueCase{"PluginDirsString",
                     R"({"sandbox": {"plugin_dirs": "plugins"}})",
                     {"sandbox.plugin_dirs", "array", "got \"plugins\""}},
        BadValueCase{"PluginDirsItem",
                     R"({"sandbox": {"plugin_dirs": ["ok", 1]}})",
                     {"sandbox.plugin_dirs[1]", "directory string", "got 1"}},
        BadValueCase{
            "SandboxMissing", R"({"skills": {}})", {"sandbox", "missing required section"}},
        BadValueCase{
            "SandboxNotObject", R"({"sandbox": [1]})", {"sandbox: expected an object", "got [1]"}},
        BadValueCase{"RootNotObject", R"([1, 2])", {"JSON object at the top level", "[1,2]"}},
        BadValueCase{
            "SandboxUseNumber", R"({"sandbox": {"use": 5}})", {"sandbox.use", "a string", "got 5"}},
        BadValueCase{"BackendNotObject",
                     R"({"sandbox": {"backend": "local_docker"}})",
                     {"sandbox.backend", "an object", "got \"local_docker\""}},
        BadValueCase{"BackendUseMissing",
                     R"({"sandbox": {"backend": {"image": "x"}}})",
                     {"sandbox.backend.use", "required", "module:Class"}},
        BadValueCase{"BackendUseNumber",
                     R"({"sandbox": {"backend": {"use": 42}}})",
                     {"sandbox.backend.use", "module:Class", "got 42"}},
        BadValueCase{"OwnershipNotObject",
                     R"({"sandbox": {"ownership": "memory"}})",
                     {"sandbox.ownership", "an object", "got \"memory\""}},
        BadValueCase{"OwnershipUseNumber",
                     R"({"sandbox": {"ownership": {"use": 7}}})",
                     {"sandbox.ownership.use", "module:Class", "got 7"}},
        BadValueCase{"OwnershipTypeNumber",
                     R"({"sandbox": {"ownership": {"type": 3}}})",
                     {"sandbox.ownership.type", "a string", "got 3"}},
        BadValueCase{"OwnershipUnknownType",
                     R"({"sandbox": {"ownership": {"type": "bogus"}}})",
                     {"sandbox.ownership.type", "Unknown sandbox ownership type: 'bogus'"}},
        BadValueCase{"OwnershipUseAndTypeDisagree",
                     R"({"sandbox": {"ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                                                   "type": "memory"}}})",
                     {"sandbox.ownership.use", "sandbox.ownership.type", "disagree", "\"memory\"",
                      "ownership_sqlite:SqliteOwnershipStore"}},
        BadValueCase{"RenewalIntervalZero",
                     R"({"sandbox": {"ownership": {"renewal_interval_seconds": 0}}})",
                     {"sandbox.ownership.renewal_interval_seconds", "number > 0", "got 0"}},
        BadValueCase{"RenewalIntervalString",
                     R"({"sandbox": {"ownership": {"renewal_interval_seconds": "30"}}})",
                     {"sandbox.ownership.renewal_interval_seconds", "number > 0", "got \"30\""}},
        BadValueCase{"TtlMultiplierTooSmall",
                     R"({"sandbox": {"ownership": {"ttl_multiplier": 1.5}}})",
                     {"sandbox.ownership.ttl_multiplier", "number >= 2", "got 1.5"}},
        BadValueCase{"SkillsContainerPathNumber",
                     R"({"sandbox": {}, "skills": {"container_path": 3}})",
                     {"skills.container_path", "absolute container path", "got 3"}},
        BadValueCase{"SkillsContainerPathRelative",
                     R"({"sandbox": {}, "skills": {"container_path": "skills"}})",
                     {"skills.container_path", "absolute container path", "got \"skills\""}},
        BadValueCase{"ProvisionerUrlNumber",
                     R"({"sandbox": {"provisioner_url": 8002}})",
                     {"sandbox.provisioner_url", "a string", "got 8002"}},
        BadValueCase{"DuplicateKey",
                     R"({"sandbox": {"replicas": 2, "replicas": 5}})",
                     {"sandbox.replicas", "more than once"}}),
    [](const auto& info) { return info.param.name; });

TEST_F(ConfigTest, ConflictErrorDoesNotEchoSecretValues) {
  const std::string message = error_for(R"({"sandbox": {"provisioner_api_key": "pk-conflict-secret",
                                "backend": {"use": "remote_provisioner:RemoteSandboxBackend"}}})");
  EXPECT_THAT(message, HasSubstr("sandbox.provisioner_api_key"));
  EXPECT_THAT(message, HasSubstr("sandbox.backend.provisioner_api_key"));
  EXPECT_THAT(message, Not(HasSubstr("pk-conflict-secret")));
}

// Off by default; read as a number; a value the idle timeout makes useless is said.
TEST_F(ConfigTest, PauseAfterSecondsIsReadAndAUselessOneIsWarnedAbout) {
  EXPECT_EQ(parse_config(R"({"sandbox": {}})", "c").pause_after_seconds, 0.0);
  const SandboxConfig config =
      parse_config(R"({"sandbox": {"pause_after_seconds": 90.5, "idle_timeout": 600}})", "c");
  EXPECT_EQ(config.pause_after_seconds, 90.5);
  EXPECT_TRUE(config.warnings.empty());
  const SandboxConfig useless =
      parse_config(R"({"sandbox": {"pause_after_seconds": 600, "idle_timeout": 300}})", "c");
  ASSERT_EQ(useless.warnings.size(), 1u);
  EXPECT_THAT(useless.warnings[0],
              HasSubstr("sandbox.pause_after_seconds (600) is not below sandbox.idle_timeout "
                        "(300): released sandboxes are reaped before they would be paused"));
}

TEST_F(ConfigTest, TtlMultiplierOfTwoIsAccepted) {
  const SandboxConfig config = load(R"({"sandbox": {"ownership": {"ttl_multiplier": 2}}})");
  EXPECT_DOUBLE_EQ(config.ttl_multiplier, 2.0);
  EXPECT_DOUBLE_EQ(config.ttl_seconds(), 60.0);
}

TEST_F(ConfigTest, IntegralFloatIsAnInteger) {
  EXPECT_EQ(load(R"({"sandbox": {"replicas": 4.0}})").replicas, 4);
}

// ── malformed JSON and unreadable files ─────────────────────────────────────────────────────

TEST_F(ConfigTest, MalformedJsonReportsLineAndColumn) {
  // Line 4 is missing the comma that should follow line 3; RapidJSON stops at column 5.
  const std::string message = error_for(
      "{\n"
      "  \"sandbox\": {\n"
      "    \"replicas\": 3\n"
      "    \"idle_timeout\": 1\n"
      "  }\n"
      "}\n");
  EXPECT_THAT(message, HasSubstr("malformed JSON at line 4, column 5"));
  EXPECT_THAT(message, HasSubstr("Missing a comma or '}' after an object member."));
}

TEST_F(ConfigTest, MalformedJsonOnFirstLine) {
  // RapidJSON notices the bad literal at the '}' after "tru" (column 29).
  const std::string message = error_for(R"({"sandbox": {"replicas": tru}})");
  EXPECT_THAT(message, HasSubstr("line 1, column 29"));
  EXPECT_THAT(message, HasSubstr("Invalid value."));
}

TEST_F(ConfigTest, EmptyFileIsMalformed) {
  EXPECT_THAT(error_for(""), HasSubstr("line 1, column 1: The document is empty."));
}

TEST_F(ConfigTest, MissingFileNamesPathAndReason) {
  const std::string path = (dir_ / "absent.json").string();
  try {
    load_config_file(path);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  }
}

TEST_F(ConfigTest, DirectoryInsteadOfFileIsAnError) {
  try {
    load_config_file(dir_.string());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir_.string()));
    EXPECT_THAT(e.what(), HasSubstr("Is a directory"));
  }
}

// ── unknown keys ────────────────────────────────────────────────────────────────────────────

TEST_F(ConfigTest, UnknownSandboxKeyWarns) {
  const SandboxConfig config = load(R"({"sandbox": {"replica": 3, "idel_timeout": 5}})");
  EXPECT_THAT(config.warnings, Contains("unknown key sandbox.replica (ignored)"));
  EXPECT_THAT(config.warnings, Contains("unknown key sandbox.idel_timeout (ignored)"));
  EXPECT_EQ(config.replicas, 3);
}

TEST_F(ConfigTest, KeysInsidePluginSectionsAreLeftToThePlugin) {
  const SandboxConfig config = load(R"({"sandbox": {
      "backend": {"use": "local_docker:LocalContainerBackend", "frobnicate": 1},
      "ownership": {"use": "ownership_memory:MemoryOwnershipStore", "wibble": 2}}})");
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
  EXPECT_THAT(json(config.backend.options_json)["frobnicate"].GetInt(), 1);
  EXPECT_THAT(json(config.ownership.options_json)["wibble"].GetInt(), 2);
}

// ── DeerFlow flat keys ──────────────────────────────────────────────────────────────────────

TEST_F(ConfigTest, FlatKeysMapToLocalDockerBackend) {
  const SandboxConfig config = load(R"({"sandbox": {
      "use": "deerflow.community.aio_sandbox:AioSandboxProvider",
      "image": "my/image:2", "port": 9000, "container_prefix": "pfx",
      "mounts": [{"host_path": "/h", "container_path": "/c", "read_only": true}],
      "environment": {"A": "b"}}})");
  EXPECT_EQ(config.backend.use, kLocalDockerUse);
  auto options = json(config.backend.options_json);
  EXPECT_EQ(str(options["use"]), kLocalDockerUse);
  EXPECT_EQ(str(options["image"]), "my/image:2");
  EXPECT_EQ(options["port"].GetInt(), 9000);
  EXPECT_EQ(str(options["container_prefix"]), "pfx");
  ASSERT_TRUE(options["mounts"].IsArray());
  EXPECT_EQ(str(options["mounts"][0]["container_path"]), "/c");
  EXPECT_TRUE(options["mounts"][0]["read_only"].GetBool());
  EXPECT_EQ(str(options["environment"]["A"]), "b");
  for (const char* key : {"image", "port", "container_prefix", "mounts", "environment"}) {
    EXPECT_THAT(config.mapping_notes,
                Contains(std::string("sandbox.") + key + " → sandbox.backend." + key));
  }
  EXPECT_THAT(config.mapping_notes,
              Contains(AllOf(HasSubstr("provisioner_url is not set"), HasSubstr(kLocalDockerUse))));
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
}

TEST_F(ConfigTest, FlatProvisionerUrlMapsToRemoteBackend) {
  const SandboxConfig config = load(R"({"sandbox": {
      "provisioner_url": "http://provisioner:8002", "provisioner_api_key": "plain-key"}})");
  EXPECT_EQ(config.backend.use, kRemoteProvisionerUse);
  auto options = json(config.backend.options_json);
  EXPECT_EQ(str(options["use"]), kRemoteProvisionerUse);
  EXPECT_EQ(str(options["provisioner_url"]), "http://provisioner:8002");
  EXPECT_EQ(str(options["provisioner_api_key"]), "plain-key");
  EXPECT_THAT(config.mapping_notes,
              Contains("sandbox.provisioner_url → sandbox.backend.provisioner_url"));
  EXPECT_THAT(config.mapping_notes,
              Contains("sandbox.provisioner_api_key → sandbox.backend.provisioner_api_key"));
  EXPECT_THAT(config.mapping_notes, Contains(AllOf(HasSubstr("provisioner_url is set"),
                                                   HasSubstr(kRemoteProvisionerUse))));
}

TEST_F(ConfigTest, EmptyProvisionerUrlMeansLocalDocker) {
  const SandboxConfig config = load(R"({"sandbox": {"provisioner_url": "", "image": "i"}})");
  EXPECT_EQ(config.backend.use, kLocalDockerUse);
}

TEST_F(ConfigTest, FlatKeyAndBackendSectionConflict) {
  const std::string message = error_for(R"({"sandbox": {
      "backend": {"use": "local_docker:LocalContainerBackend", "image": "a"},
      "image": "b"}})");
  EXPECT_THAT(message, HasSubstr("sandbox.image"));
  EXPECT_THAT(message, HasSubstr("sandbox.backend.image"));
  EXPECT_THAT(message, HasSubstr("both"));
}

TEST_F(ConfigTest, FlatProvisionerUrlWithBackendSectionConflicts) {
  const std::string message = error_for(R"({"sandbox": {
      "backend": {"use": "local_docker:LocalContainerBackend"},
      "provisioner_url": "http://p:8002"}})");
  EXPECT_THAT(message, HasSubstr("sandbox.provisioner_url"));
  EXPECT_THAT(message, HasSubstr("sandbox.backend"));
}

// DeerFlow's network modes (`sandbox.network`) are a policy the backend enforces:
// they join the backend's options in the flat shape and beside a backend section alike.
TEST_F(ConfigTest, TheSandboxNetworkPolicyJoinsTheBackendsOptionsInEitherShape) {
  const SandboxConfig flat = load(R"({"sandbox": {
      "use": "deerflow.community.aio_sandbox:AioSandboxProvider", "image": "i",
      "network": {"mode": "isolated", "allow_domains": ["pypi.org"]}}})");
  auto options = json(flat.backend.options_json);
  ASSERT_TRUE(options.HasMember("network")) << flat.backend.options_json;
  EXPECT_EQ(str(options["network"]["mode"]), "isolated");
  EXPECT_EQ(str(options["network"]["allow_domains"][0]), "pypi.org");
  EXPECT_THAT(flat.mapping_notes, Contains("sandbox.network → sandbox.backend.network"));
  EXPECT_TRUE(flat.warnings.empty()) << flat.warnings.front();

  const SandboxConfig sectioned = load(R"({"sandbox": {
      "backend": {"use": "local_docker:LocalContainerBackend"},
      "network": {"mode": "isolated"}}})");
  options = json(sectioned.backend.options_json);
  ASSERT_TRUE(options.HasMember("network")) << sectioned.backend.options_json;
  EXPECT_EQ(str(options["network"]["mode"]), "isolated");
  EXPECT_TRUE(sectioned.warnings.empty()) << sectioned.warnings.front();

  // Only the policy: a network given alone keeps the defaults' shape.
  const SandboxConfig none = load(R"({"sandbox": {"network": {"mode": "open"}}})");
  EXPECT_EQ(none.backend.use, kLocalDockerUse);
  EXPECT_TRUE(json(none.backend.options_json).HasMember("network")) << none.backend.options_json;

  const std::string message = error_for(R"({"sandbox": {
      "backend": {"use": "local_docker:LocalContainerBackend", "network": {"mode": "open"}},
      "network": {"mode": "isolated"}}})");
  EXPECT_THAT(message, HasSubstr("sandbox.network"));
  EXPECT_THAT(message, HasSubstr("sandbox.backend.network"));
  EXPECT_THAT(message, HasSubstr("both"));
}

// ── $NAME substitution and redaction ────────────────────────────────────────────────────────

TEST_F(ConfigTest, DollarNamesAreReadFromTheEnvironment) {
  setenv("SANDBOXD_TEST_SECRET", "s3cr3t-env-value", 1);
  setenv("SANDBOXD_TEST_PROVISIONER_KEY", "pk-0123456789", 1);
  const SandboxConfig config = load(R"({"sandbox": {
      "provisioner_url": "http://provisioner:8002",
      "provisioner_api_key": "$SANDBOXD_TEST_PROVISIONER_KEY",
      "environment": {"API_KEY": "$SANDBOXD_TEST_SECRET", "PORT": 8080, "FLAG": true,
                      "PLAIN": "text"}}})");
  auto options = json(config.backend.options_json);
  EXPECT_EQ(str(options["provisioner_api_key"]), "pk-0123456789");
  EXPECT_EQ(str(options["environment"]["API_KEY"]), "s3cr3t-env-value");
  EXPECT_EQ(str(options["environment"]["PORT"]), "8080");
  EXPECT_EQ(str(options["environment"]["FLAG"]), "true");
  EXPECT_EQ(str(options["environment"]["PLAIN"]), "text");
  EXPECT_TRUE(config.warnings.empty());
}

// Issue 32 C: an unset variable is an error naming the key and the variable, as DeerFlow
// raises (it read as an empty string and a warning).
TEST_F(ConfigTest, AnUnsetVariableIsAnError) {
  try {
    load(R"({"sandbox": {"environment": {"MISSING": "$SANDBOXD_TEST_UNSET_VAR"}}})");
    FAIL() << "an unset variable was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("sandbox.environment.MISSING: environment variable "
                                    "SANDBOXD_TEST_UNSET_VAR is not set"));
  }
}

TEST_F(ConfigTest, DollarNamesInsideBackendAndOwnershipSections) {
  setenv("SANDBOXD_TEST_SECRET", "s3cr3t-env-value", 1);
  setenv("SANDBOXD_TEST_OWNERSHIP_KEY", "own-key-value", 1);
  const SandboxConfig config = load(R"({"sandbox": {
      "backend": {"use": "remote_provisioner:RemoteSandboxBackend",
                  "provisioner_api_key": "$SANDBOXD_TEST_SECRET",
                  "environment": {"TOKEN": "$SANDBOXD_TEST_SECRET"},
                  "image": "$NOT_SUBSTITUTED"},
      "ownership": {"use": "ownership_sqlite:SqliteOwnershipStore",
                    "service_api_key": "$SANDBOXD_TEST_OWNERSHIP_KEY"}}})");
  auto backend = json(config.backend.options_json);
  EXPECT_EQ(str(backend["provisioner_api_key"]), "s3cr3t-env-value");
  EXPECT_EQ(str(backend["environment"]["TOKEN"]), "s3cr3t-env-value");
  EXPECT_EQ(str(backend["image"]), "$NOT_SUBSTITUTED");  // only environment and *api_key
  auto ownership = json(config.ownership.options_json);
  EXPECT_EQ(str(ownership["service_api_key"]), "own-key-value");
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
}

TEST_F(ConfigTest, AMissingVariableErrorNeverShowsAValue) {
  setenv("SANDBOXD_TEST_SECRET", "s3cr3t-env-value", 1);
  try {
    load(R"({"sandbox": {
      "backend": {"use": "remote_provisioner:RemoteSandboxBackend",
                  "environment": {"A": "$SANDBOXD_TEST_SECRET"},
                  "provisioner_api_key": "$SANDBOXD_TEST_UNSET_VAR"}}})");
    FAIL() << "an unset variable was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("SANDBOXD_TEST_UNSET_VAR"));
    EXPECT_THAT(e.what(), HasSubstr("sandbox.backend.provisioner_api_key"));
    EXPECT_THAT(e.what(), Not(HasSubstr("s3cr3t-env-value")));
  }
}

TEST_F(ConfigTest, RenderRedactedHidesSecrets) {
  setenv("SANDBOXD_TEST_SECRET", "s3cr3t-env-value", 1);
  setenv("SANDBOXD_TEST_PROVISIONER_KEY", "pk-0123456789", 1);
  const SandboxConfig config = load(R"({"sandbox": {
      "provisioner_url": "http://provisioner:8002",
      "provisioner_api_key": "$SANDBOXD_TEST_PROVISIONER_KEY",
      "environment": {"API_KEY": "$SANDBOXD_TEST_SECRET", "LITERAL": "literal-env-value"},
      "ownership": {"type": "sqlite", "path": "/tmp/leases.db",
                    "extra": {"nested": [{"db_password": "hunter2-pw"}],
                              "AuthToken": "tok-abcdef",
                              "url": "redis://user:pw-in-url@host:6379/0"}}}})");
  // The secrets really are in the resolved options, so their absence below means redaction.
  ASSERT_THAT(config.backend.options_json, HasSubstr("pk-0123456789"));
  ASSERT_THAT(config.backend.options_json, HasSubstr("s3cr3t-env-value"));
  ASSERT_THAT(config.ownership.options_json, HasSubstr("hunter2-pw"));

  const std::string text = render_redacted(config);
  EXPECT_THAT(text, HasSubstr("<redacted>"));
  for (const char* secret : {"s3cr3t-env-value", "pk-0123456789", "literal-env-value", "hunter2-pw",
                             "tok-abcdef", "pw-in-url"}) {
    EXPECT_THAT(text, Not(HasSubstr(secret))) << secret;
  }

  auto doc = json(text);
  ASSERT_TRUE(doc.IsObject());
  EXPECT_EQ(str(doc["source_file"]), config.source_file);
  EXPECT_EQ(str(doc["backend"]["use"]), kRemoteProvisionerUse);
  const auto& backend_options = doc["backend"]["options"];
  EXPECT_EQ(str(backend_options["provisioner_url"]), "http://provisioner:8002");
  EXPECT_EQ(str(backend_options["provisioner_api_key"]), "<redacted>");
  EXPECT_EQ(str(backend_options["environment"]["API_KEY"]), "<redacted>");
  EXPECT_EQ(str(backend_options["environment"]["LITERAL"]), "<redacted>");
  const auto& ownership = doc["ownership"];
  EXPECT_EQ(str(ownership["use"]), kSqliteOwnershipUse);
  EXPECT_EQ(str(ownership["options"]["path"]), "/tmp/leases.db");
  EXPECT_EQ(str(ownership["options"]["extra"]["nested"][0]["db_password"]), "<redacted>");
  EXPECT_EQ(str(ownership["options"]["extra"]["AuthToken"]), "<redacted>");
  EXPECT_EQ(str(ownership["options"]["extra"]["url"]), "redis://<redacted>@host:6379/0");
  EXPECT_TRUE(doc["base_dir"].IsNull());
  EXPECT_EQ(doc["replicas"].GetInt(), 3);
  EXPECT_EQ(doc["idle_timeout"].GetInt(), 600);
  EXPECT_TRUE(doc["thread_data_mounts"].IsNull());
  EXPECT_TRUE(doc["plugin_dirs"].IsArray());
  EXPECT_EQ(str(doc["skills_container_path"]), "/mnt/skills");
  EXPECT_DOUBLE_EQ(doc["renewal_interval_seconds"].GetDouble(), 30.0);
  EXPECT_DOUBLE_EQ(doc["ttl_multiplier"].GetDouble(), 4.0);
  EXPECT_DOUBLE_EQ(doc["ttl_seconds"].GetDouble(), 120.0);
  EXPECT_GE(doc["mapping_notes"].Size(), 3u);
  EXPECT_TRUE(doc["warnings"].IsArray());
}

TEST_F(ConfigTest, RenderRedactedShowsSettings) {
  const SandboxConfig config = load(R"({"sandbox": {"base_dir": "/srv/sb", "replicas": 5,
      "idle_timeout": 60, "thread_data_mounts": false, "plugin_dirs": ["/p"]}})");
  auto doc = json(render_redacted(config));
  EXPECT_EQ(str(doc["base_dir"]), "/srv/sb");
  EXPECT_EQ(doc["replicas"].GetInt(), 5);
  EXPECT_EQ(doc["idle_timeout"].GetInt(), 60);
  ASSERT_TRUE(doc["thread_data_mounts"].IsBool());
  EXPECT_FALSE(doc["thread_data_mounts"].GetBool());
  EXPECT_EQ(str(doc["plugin_dirs"][0]), "/p");
  EXPECT_EQ(str(doc["backend"]["key_path"]), "sandbox.backend");
}

TEST_F(ConfigTest, SecretKeyNames) {
  for (const char* key : {"api_key", "provisioner_api_key", "X-Api-Key", "apiKey", "client_secret",
                          "PASSWORD", "auth_token", "credentials"}) {
    EXPECT_TRUE(is_secret_key_name(key)) << key;
  }
  for (const char* key : {"image", "port", "path", "environment", "use"}) {
    EXPECT_FALSE(is_secret_key_name(key)) << key;
  }
}

// ── ownership type mapping and inference ────────────────────────────────────────────────────

TEST_F(ConfigTest, OwnershipTypeMemoryMapsToMemoryStore) {
  const SandboxConfig config =
      load(R"({"sandbox": {"ownership": {"type": "memory", "ttl_multiplier": 3}}})");
  EXPECT_EQ(config.ownership.use, kMemoryOwnershipUse);
  auto options = json(config.ownership.options_json);
  EXPECT_EQ(str(options["use"]), kMemoryOwnershipUse);
  EXPECT_FALSE(options.HasMember("type"));
  EXPECT_EQ(options["ttl_multiplier"].GetInt(), 3);
  EXPECT_THAT(config.mapping_notes, Contains(AllOf(HasSubstr("sandbox.ownership.type \"memory\""),
                                                   HasSubstr(kMemoryOwnershipUse))));
}

TEST_F(ConfigTest, OwnershipTypeSqliteMapsToSqliteStore) {
  const SandboxConfig config =
      load(R"({"sandbox": {"ownership": {"type": "sqlite", "path": "/tmp/x.db"}}})");
  EXPECT_EQ(config.ownership.use, kSqliteOwnershipUse);
  auto options = json(config.ownership.options_json);
  EXPECT_EQ(str(options["use"]), kSqliteOwnershipUse);
  EXPECT_EQ(str(options["path"]), "/tmp/x.db");
  EXPECT_FALSE(options.HasMember("type"));
  EXPECT_THAT(config.mapping_notes, Contains(AllOf(HasSubstr("sandbox.ownership.type \"sqlite\""),
                                                   HasSubstr(kSqliteOwnershipUse))));
}

TEST_F(ConfigTest, OwnershipUseAndTypeThatAgreeAreAccepted) {
  const SandboxConfig config = load(R"({"sandbox": {"ownership":
      {"use": "ownership_sqlite:SqliteOwnershipStore", "type": "sqlite"}}})");
  EXPECT_EQ(config.ownership.use, kSqliteOwnershipUse);
}

TEST_F(ConfigTest, OwnershipSectionWithoutUseOrTypeIsMemory) {
  const SandboxConfig config =
      load(R"({"sandbox": {"ownership": {"renewal_interval_seconds": 5}}})");
  EXPECT_EQ(config.ownership.use, kMemoryOwnershipUse);
  EXPECT_DOUBLE_EQ(config.ttl_seconds(), 20.0);
}

TEST_F(ConfigTest, UnknownOwnershipTypeMessage) {
  const std::string message = error_for(R"({"sandbox": {"ownership": {"type": "bogus"}}})");
  EXPECT_THAT(message, HasSubstr("Unknown sandbox ownership type: 'bogus'"));
  EXPECT_THAT(message, HasSubstr("config.json"));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.type"));
}

TEST_F(ConfigTest, OwnershipTypeRedisSelectsTheRedisStoreWithDeerFlowsKeys) {
  const SandboxConfig config = load(R"({"sandbox": {"ownership": {"type": "redis",
      "redis_url": "redis://:pw-in-url@redis:6379/2", "key_prefix": "df:owner"}}})");
  EXPECT_EQ(config.ownership.use, kRedisOwnershipUse);
  EXPECT_THAT(config.ownership.options_json, HasSubstr("\"redis_url\""));
  EXPECT_THAT(config.mapping_notes,
              Contains(HasSubstr("sandbox.ownership.type \"redis\" → sandbox.ownership.use")));
  EXPECT_THAT(render_redacted(config), Not(HasSubstr("pw-in-url")));
}

TEST_F(ConfigTest, RedisStreamBridgeSelectsTheRedisStoreWithTheBridgesUrl) {
  const SandboxConfig config = load(R"({"stream_bridge": {"type": "redis",
      "redis_url": "redis://:bridge-pw@redis:6379/0"}, "sandbox": {}})");
  EXPECT_EQ(config.ownership.use, kRedisOwnershipUse);
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
  EXPECT_THAT(config.ownership.options_json, HasSubstr("redis://:bridge-pw@redis:6379/0"));
  EXPECT_THAT(config.mapping_notes, Contains(HasSubstr("stream_bridge.type is \"redis\"")));
  for (const auto& note : config.mapping_notes) EXPECT_THAT(note, Not(HasSubstr("bridge-pw")));
  EXPECT_THAT(render_redacted(config), Not(HasSubstr("bridge-pw")));
}

TEST_F(ConfigTest, RedisEnvironmentVariablesSelectTheRedisStore) {
  for (const char* variable :
       {"DEER_FLOW_SANDBOX_OWNERSHIP_REDIS_URL", "DEER_FLOW_STREAM_BRIDGE_REDIS_URL"}) {
    unsetenv("DEER_FLOW_SANDBOX_OWNERSHIP_REDIS_URL");
    unsetenv("DEER_FLOW_STREAM_BRIDGE_REDIS_URL");
    setenv(variable, "redis://:env-pw@redis:6379/0", 1);
    const SandboxConfig config = load(R"({"sandbox": {}})");
    EXPECT_EQ(config.ownership.use, kRedisOwnershipUse) << variable;
    EXPECT_THAT(config.mapping_notes, Contains(HasSubstr(variable)));
    // The store reads the variable itself (design §7.6's chain), so the config never holds it.
    EXPECT_THAT(config.ownership.options_json, Not(HasSubstr("env-pw")));
    for (const auto& note : config.mapping_notes) EXPECT_THAT(note, Not(HasSubstr("env-pw")));
  }
}

TEST_F(ConfigTest, ExplicitOwnershipSectionSuppressesRedisInference) {
  setenv("DEER_FLOW_SANDBOX_OWNERSHIP_REDIS_URL", "redis://redis:6379/0", 1);
  const SandboxConfig config = load(R"({"stream_bridge": {"type": "redis"},
      "sandbox": {"ownership": {"type": "memory"}}})");
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
}

TEST_F(ConfigTest, MemoryStreamBridgeDoesNotWarn) {
  const SandboxConfig config = load(R"({"stream_bridge": {"type": "memory"}, "sandbox": {}})");
  EXPECT_TRUE(config.warnings.empty()) << config.warnings.front();
}

// ── plugin_dirs ─────────────────────────────────────────────────────────────────────────────

TEST_F(ConfigTest, RelativePluginDirsResolveAgainstTheConfigFile) {
  const std::string path =
      write_file(R"({"sandbox": {"plugin_dirs": ["plugins", "/abs/dir", "../other", "./a/../b"]}})",
                 "etc/sandboxd/config.json");
  const SandboxConfig config = load_config_file(path);
  const fs::path base = fs::absolute(dir_ / "etc" / "sandboxd").lexically_normal();
  ASSERT_EQ(config.plugin_dirs.size(), 4u);
  EXPECT_EQ(config.plugin_dirs[0], (base / "plugins").string());
  EXPECT_EQ(config.plugin_dirs[1], "/abs/dir");
  EXPECT_EQ(config.plugin_dirs[2], (base.parent_path() / "other").string());
  EXPECT_EQ(config.plugin_dirs[3], (base / "b").string());
}

TEST_F(ConfigTest, ParseConfigResolvesRelativePluginDirsAgainstTheGivenBase) {
  const SandboxConfig config =
      parse_config(R"({"sandbox": {"plugin_dirs": ["p"]}})", "inline", "/srv/conf");
  EXPECT_EQ(config.plugin_dirs, std::vector<std::string>{"/srv/conf/p"});
}

// ── hostile input (issue 13 A.4, A.7) ──

TEST_F(ConfigTest, DeeplyNestedJsonIsRefusedWithItsPositionNotACrash) {
  const std::string message = error_for("{\"sandbox\":" + std::string(1000000, '['));
  EXPECT_THAT(message,
              HasSubstr("malformed JSON at line 1, column 75: nested deeper than 64 levels"));
}

TEST(PluginConfigTest, AWrongTypeUnderEnvironmentIsDescribedByItsTypeOnly) {
  try {
    sandboxd::PluginConfig options(R"({"environment":{"X":{"nested":"s3cr3t-2"}}})",
                                   "sandbox.backend");
    options.get_string_map("environment");
    FAIL() << "expected a PluginConfigError";
  } catch (const sandboxd::PluginConfigError& error) {
    EXPECT_STREQ(
        error.what(),
        "sandbox.backend.environment.X: expected a string, got an object (value redacted)");
  }
  try {
    sandboxd::PluginConfig options(R"({"image":{"very":"long"}})", "sandbox.backend");
    options.get_string("image", "");
    FAIL() << "expected a PluginConfigError";
  } catch (const sandboxd::PluginConfigError& error) {
    EXPECT_STREQ(error.what(),
                 R"(sandbox.backend.image: expected a string, got an object {"very":"long"})");
  }
}

}  // namespace
}  // namespace sandboxd::core

// DeerFlow's own config.yaml read as is (issue 25 item 1). The files are shaped like DeerFlow's
// config.example.yaml and written here from DeerFlow's documented keys: the aio sandbox section
// with and without provisioner_url, ownership memory and redis (explicit, and inferred from the
// stream bridge), mounts and environment, beside the sections that are DeerFlow's alone.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/configured_plugins.hpp"
#include "sandboxd/core/paths.hpp"
#include "test_support.hpp"

namespace sandboxd::core {
namespace {

namespace fs = std::filesystem;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::StartsWith;

// What DeerFlow's config.example.yaml has around the sandbox section, none of it ours.
constexpr const char* kDeerFlowPreamble = R"(config_version: 3
models:
  - name: gpt-4
    display_name: GPT-4
    use: langchain_openai:ChatOpenAI
    model: gpt-4
    api_key: $SANDBOXD_TEST_UNSET_MODEL_KEY
    max_tokens: 4096
    temperature: 0.7
tool_groups:
  - name: web
  - name: bash
tools:
  - name: web_search
    group: web
    use: deerflow.community.tavily.tools:web_search_tool
    max_results: 5
title:
  enabled: true
memory:
  enabled: true
  storage_path: .deer-flow/memory.json
)";

class DeerFlowYamlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-yaml-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    setenv("SANDBOXD_TEST_YAML_KEY", "k-123", 1);
    setenv("SANDBOXD_TEST_YAML_ENV", "from-the-environment", 1);
    unsetenv("SANDBOXD_TEST_UNSET_MODEL_KEY");
    unsetenv("SANDBOXD_TEST_YAML_UNSET");
  }
  void TearDown() override {
    unsetenv("SANDBOXD_TEST_YAML_KEY");
    unsetenv("SANDBOXD_TEST_YAML_ENV");
    fs::remove_all(dir_);
  }

  std::string write(const std::string& text, const std::string& name = "config.yaml") {
    const fs::path path = dir_ / name;
    std::ofstream(path) << text;
    return path.string();
  }
  std::string error_for(const std::string& text, const std::string& name = "config.yaml") {
    const std::string path = write(text, name);
    try {
      load_config_file(path);
    } catch (const ConfigError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no ConfigError for:\n" << text;
    return "";
  }
  static rapidjson::Document options(const PluginSection& section) {
    rapidjson::Document doc;
    doc.Parse(section.options_json.c_str());
    EXPECT_FALSE(doc.HasParseError());
    return doc;
  }

  fs::path dir_;
};

TEST_F(DeerFlowYamlTest, TheAioSectionWithoutAProvisionerIsTheLocalEngine) {
  const std::string path = write(std::string(kDeerFlowPreamble) + R"(
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  image: enterprise-public-cn-beijing.cr.volces.com/vefaas-public/all-in-one-sandbox:latest
  port: 8080
  replicas: 3
  idle_timeout: 600
  container_prefix: deer-flow-sandbox
  allow_host_bash: false
  mounts:
    - host_path: /srv/shared
      container_path: /mnt/shared
      read_only: true
  environment:
    NODE_ENV: production
    TOKEN: $SANDBOXD_TEST_YAML_ENV
    WORKERS: 4
skills:
  container_path: /mnt/skills
)");
  const SandboxConfig config = load_config_file(path);
  EXPECT_EQ(config.backend.use, kLocalDockerUse);
  EXPECT_EQ(config.ownership.use, kMemoryOwnershipUse);
  EXPECT_EQ(config.replicas, 3);
  EXPECT_EQ(config.idle_timeout, 600);
  EXPECT_EQ(config.skills_container_path, "/mnt/skills");
  const auto backend = options(config.backend);
  EXPECT_EQ(backend["port"].GetInt(), 8080);
  EXPECT_EQ(std::string(backend["container_prefix"].GetString()), "deer-flow-sandbox");
  ASSERT_TRUE(backend["mounts"].IsArray());
  EXPECT_TRUE(backend["mounts"][0]["read_only"].IsBool());
  EXPECT_TRUE(backend["mounts"][0]["read_only"].GetBool());
  EXPECT_EQ(std::string(backend["environment"]["TOKEN"].GetString()), "from-the-environment");
  EXPECT_EQ(std::string(backend["environment"]["WORKERS"].GetString()), "4");
  // DeerFlow's other sections are its own: no warning for models, tools, memory or their
  // unset $VARs, and allow_host_bash is one note, not a warning.
  EXPECT_THAT(config.warnings, IsEmpty());
  EXPECT_THAT(config.mapping_notes,
              Contains(StartsWith("read as DeerFlow's config.yaml: its sandbox:, skills: and "
                                  "stream_bridge: sections (6 other top-level sections")));
  EXPECT_THAT(config.mapping_notes, Contains(HasSubstr("sandbox.allow_host_bash → ignored")));
}

TEST_F(DeerFlowYamlTest, TheAioSectionWithAProvisionerIsTheRemoteBackend) {
  const SandboxConfig config = load_config_file(write(std::string(kDeerFlowPreamble) + R"(
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  provisioner_url: http://provisioner:8002
  provisioner_api_key: $SANDBOXD_TEST_YAML_KEY
  idle_timeout: 0
  sandboxd_socket: /srv/deer-flow/sandboxd.sock
)"));
  // The Python provider's own keys share the section: quiet, not "unknown".
  EXPECT_THAT(config.warnings, IsEmpty());
  EXPECT_THAT(config.mapping_notes, Contains(HasSubstr("sandbox.sandboxd_socket → ignored")));
  EXPECT_EQ(config.backend.use, kRemoteProvisionerUse);
  EXPECT_EQ(config.idle_timeout, 0);
  const auto backend = options(config.backend);
  EXPECT_EQ(std::string(backend["provisioner_url"].GetString()), "http://provisioner:8002");
  EXPECT_EQ(std::string(backend["provisioner_api_key"].GetString()), "k-123");
  // check-config never shows it.
  EXPECT_THAT(render_redacted(config), Not(HasSubstr("k-123")));
}

TEST_F(DeerFlowYamlTest, OwnershipIsMemoryOrRedisAsDeerFlowSaysIt) {
  const SandboxConfig explicit_redis = load_config_file(write(R"(
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  ownership:
    type: redis
    redis_url: redis://127.0.0.1:6379/0
)"));
  EXPECT_EQ(explicit_redis.ownership.use, kRedisOwnershipUse);

  const SandboxConfig memory = load_config_file(write(R"(
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  ownership:
    type: memory
)",
                                                      "memory.yaml"));
  EXPECT_EQ(memory.ownership.use, kMemoryOwnershipUse);

  const SandboxConfig inferred = load_config_file(write(R"(
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
stream_bridge:
  type: redis
  redis_url: redis://127.0.0.1:6380/1
)",
                                                        "bridge.yaml"));
  EXPECT_EQ(inferred.ownership.use, kRedisOwnershipUse);
  EXPECT_THAT(inferred.mapping_notes, Contains(HasSubstr("stream_bridge.type is \"redis\"")));
}

TEST_F(DeerFlowYamlTest, ScalarsAreTypedAsPyYamlTypesThemAndQuotedOnesStayText) {
  const SandboxConfig config = load_config_file(write(R"(
sandbox:
  replicas: 2
  thread_data_mounts: yes
  environment:
    QUOTED_NUMBER: "0123"
    QUOTED_BOOL: 'true'
    PLAIN_OFF: off
    DOLLAR_QUOTED: "$SANDBOXD_TEST_YAML_ENV"
)"));
  EXPECT_EQ(config.replicas, 2);
  EXPECT_EQ(config.thread_data_mounts, std::optional<bool>(true));
  const auto backend = options(config.backend);
  EXPECT_EQ(std::string(backend["environment"]["QUOTED_NUMBER"].GetString()), "0123");
  EXPECT_EQ(std::string(backend["environment"]["QUOTED_BOOL"].GetString()), "true");
  EXPECT_EQ(std::string(backend["environment"]["PLAIN_OFF"].GetString()), "false");
  EXPECT_EQ(std::string(backend["environment"]["DOLLAR_QUOTED"].GetString()),
            "from-the-environment");
}

TEST_F(DeerFlowYamlTest, NumbersAreYamlOnesAndInfinityOrNanIsRefusedByLine) {
  const SandboxConfig config = load_config_file(write(R"(
sandbox:
  replicas: 1_2
  teardown_wait_seconds: 1_0.5
)"));
  EXPECT_EQ(config.replicas, 12);
  EXPECT_DOUBLE_EQ(config.teardown_wait_seconds, 10.5);
  for (const char* value : {".inf", "-.Inf", ".NaN"}) {
    EXPECT_THAT(
        error_for(std::string("sandbox:\n  teardown_wait_seconds: ") + value + "\n"),
        HasSubstr(std::string("config.yaml:2: sandbox.teardown_wait_seconds: expected a finite "
                              "number, got ") +
                  value));
  }
  // Quoted, it is text, and the parser says what it expected.
  EXPECT_THAT(error_for("sandbox:\n  teardown_wait_seconds: \".inf\"\n"),
              Not(HasSubstr("finite number")));
}

TEST_F(DeerFlowYamlTest, EveryErrorNamesTheFileTheLineAndTheKeyPath) {
  EXPECT_THAT(error_for(R"(models: []
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  replicas: many
)"),
              HasSubstr("config.yaml:4: sandbox.replicas: expected an integer > 0, got \"many\""));
  EXPECT_THAT(error_for("sandbox:\n  image: [unclosed\n"),
              HasSubstr("config.yaml: malformed YAML at line 3, column 1"));
  EXPECT_THAT(error_for("- just\n- a list\n"),
              HasSubstr("expected a YAML mapping at the top level"));
  EXPECT_THAT(error_for("tools: []\n"), HasSubstr("sandbox: missing required section \"sandbox\""));
  EXPECT_THAT(error_for("sandbox:\n  ownership:\n    type: etcd\n"),
              HasSubstr("config.yaml:3: sandbox.ownership.type: Unknown sandbox ownership type"));
}

// Issue 32 C: an unset variable read as an empty string, so a file DeerFlow refuses started
// sandboxd with an empty provisioner API key. It is an error naming the file, the line, the
// key and the variable, as DeerFlow raises.
TEST_F(DeerFlowYamlTest, AnUnsetVariableIsAnErrorNamingFileLineKeyAndVariable) {
  EXPECT_THAT(error_for(R"(
sandbox:
  environment:
    SECRET: $SANDBOXD_TEST_YAML_UNSET
)"),
              HasSubstr("config.yaml:4: sandbox.environment.SECRET: environment variable "
                        "SANDBOXD_TEST_YAML_UNSET is not set"));
  EXPECT_THAT(error_for(R"(
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  provisioner_url: http://provisioner:8002
  provisioner_api_key: $SANDBOXD_TEST_YAML_UNSET
)"),
              HasSubstr("config.yaml:5: sandbox.provisioner_api_key: environment variable "
                        "SANDBOXD_TEST_YAML_UNSET is not set"));
}

// Issue 32 C: DeerFlow's shipped config.example.yaml, its container option with every key it
// sets uncommented: DeerFlow's own tool settings are known, so not one warning.
TEST_F(DeerFlowYamlTest, DeerFlowsShippedExampleLoadsWithoutAWarning) {
  setenv("SANDBOXD_TEST_MY_API_KEY", "k", 1);
  setenv("SANDBOXD_TEST_DATABASE_URL", "postgres://db", 1);
  const SandboxConfig config = load_config_file(write(R"(
config_version: 9
models: []
sandbox:
  use: deerflow.community.aio_sandbox:AioSandboxProvider
  allow_host_bash: false
  bash_output_max_chars: 20000
  read_file_output_max_chars: 50000
  ls_output_max_chars: 20000
  bash_command_timeout: 600
  image: enterprise-public-cn-beijing.cr.volces.com/vefaas-public/all-in-one-sandbox:1.11.0
  port: 8080
  replicas: 3
  container_prefix: deer-flow-sandbox
  thread_data_mounts: true
  mounts:
    - host_path: /path/on/host
      container_path: /home/user/shared
      read_only: false
  environment:
    NODE_ENV: production
    DEBUG: "false"
    API_KEY: $SANDBOXD_TEST_MY_API_KEY
    DATABASE_URL: $SANDBOXD_TEST_DATABASE_URL
  ownership:
    type: memory
skills:
  container_path: /mnt/skills
)"));
  EXPECT_TRUE(config.warnings.empty()) << ::testing::PrintToString(config.warnings);
  EXPECT_EQ(config.backend.use, kLocalDockerUse);
  EXPECT_THAT(config.mapping_notes, Contains(HasSubstr("bash_output_max_chars")));
  // BoxLite's reclaim check is DeerFlow's too.
  const SandboxConfig boxlite_key =
      load_config_file(write("sandbox:\n  health_check_skip_seconds: 0.0\n", "b.yaml"));
  EXPECT_TRUE(boxlite_key.warnings.empty()) << ::testing::PrintToString(boxlite_key.warnings);
}

// Issue 32 C: a `use:` naming another DeerFlow provider says what sandboxd runs instead; the
// shipped example as it is (LocalSandboxProvider) gives exactly that one warning.
TEST_F(DeerFlowYamlTest, AnotherDeerFlowProviderIsAWarningNamingWhatRunsInstead) {
  const SandboxConfig local = load_config_file(write(R"(
sandbox:
  use: deerflow.sandbox.local:LocalSandboxProvider
  allow_host_bash: false
  bash_output_max_chars: 20000
  read_file_output_max_chars: 50000
  ls_output_max_chars: 20000
  bash_command_timeout: 600
)"));
  ASSERT_EQ(local.warnings.size(), 1u) << ::testing::PrintToString(local.warnings);
  EXPECT_THAT(local.warnings[0],
              HasSubstr("sandbox.use \"deerflow.sandbox.local:LocalSandboxProvider\" names "
                        "DeerFlow's LocalSandboxProvider, which sandboxd does not run"));
  EXPECT_THAT(local.warnings[0], HasSubstr("local_docker:LocalContainerBackend"));
  for (const char* use : {"deerflow.community.boxlite:BoxliteProvider",
                          "deerflow.community.tenki:TenkiSandboxProvider"}) {
    const SandboxConfig other =
        load_config_file(write(std::string("sandbox:\n  use: ") + use + "\n", "o.yaml"));
    ASSERT_EQ(other.warnings.size(), 1u) << use;
    EXPECT_THAT(other.warnings[0], HasSubstr("which sandboxd does not run")) << use;
  }
  const SandboxConfig aio = load_config_file(
      write("sandbox:\n  use: deerflow.community.aio_sandbox:AioSandboxProvider\n", "a.yaml"));
  EXPECT_TRUE(aio.warnings.empty());
}

TEST_F(DeerFlowYamlTest, JsonStaysJsonAndYamlIsFoundByItsContentToo) {
  const SandboxConfig json = load_config_file(write(R"({"sandbox": {"replicas": 4}})", "a.json"));
  EXPECT_EQ(json.replicas, 4);
  EXPECT_THAT(json.mapping_notes, Not(Contains(HasSubstr("DeerFlow's config.yaml"))));
  // No extension to go by: the content is not a JSON object, so it is YAML.
  const SandboxConfig yaml =
      load_config_file(write("# deer-flow\nsandbox:\n  replicas: 5\n", "sandbox.conf"));
  EXPECT_EQ(yaml.replicas, 5);
  // A JSON object in a .conf file is still JSON, with JSON's errors.
  EXPECT_THAT(error_for("{\"sandbox\": {\"replicas\": }}", "other.conf"),
              HasSubstr("malformed JSON at line 1"));
}

TEST_F(DeerFlowYamlTest, APluginsComplaintAboutAFlatKeyNamesItsLine) {
  const SandboxConfig config = load_config_file(write(R"(
sandbox:
  image: busybox
  mounts:
    - host_path: /srv/shared
      container_path: /mnt/shared
      read_only: maybe
)"));
  HostServices services;
  services.logger = std::make_shared<testing::CapturingLogger>();
  services.clock = std::make_shared<SystemClock>();
  services.owner_id = "test-owner";
  services.base_dir = dir_.string();
  try {
    load_configured_plugins(config, services);
    FAIL() << "the plugin accepted read_only: maybe";
  } catch (const PluginLoadError& e) {
    EXPECT_THAT(e.what(), HasSubstr("config.yaml:7: sandbox.backend.mounts[0].read_only: "
                                    "expected a boolean"));
  }
}

}  // namespace
}  // namespace sandboxd::core

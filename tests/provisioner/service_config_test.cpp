// sandboxd-provisioner's configuration: flag, then file, then environment, then default; every
// refusal names the value and where it came from, and never shows the API key.
#include "service_config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "test_support.hpp"

namespace sandboxd::provisioner {
namespace {

using sandboxd::testing::TempDir;

EnvironmentLookup env_of(std::map<std::string, std::string> values) {
  return [values](const std::string& name) -> std::optional<std::string> {
    auto it = values.find(name);
    if (it == values.end()) return std::nullopt;
    return it->second;
  };
}

std::string error_of(const ServiceFlags& flags, const EnvironmentLookup& env) {
  try {
    load_service_config(flags, env);
  } catch (const ServiceConfigError& error) {
    return error.what();
  }
  return "";
}

class ServiceConfigTest : public ::testing::Test {
 protected:
  ServiceFlags with_file(const std::string& section) {
    std::ofstream(dir_.file("p.json")) << R"({"provisioner": )" << section << "}";
    ServiceFlags flags;
    flags.config_file = dir_.file("p.json");
    return flags;
  }
  TempDir dir_;
};

TEST_F(ServiceConfigTest, DefaultsFollowTheSpec) {
  const ServiceConfig config = load_service_config({}, env_of({}));
  EXPECT_EQ(config.listen_host, "127.0.0.1");
  EXPECT_EQ(config.listen_port, 8002);
  EXPECT_EQ(config.api_key, "");
  EXPECT_EQ(config.roots.host_base_dir, "/.deer-flow");
  EXPECT_EQ(config.roots.threads_host_path, "/.deer-flow/threads");
  EXPECT_EQ(config.mount_contract_version, 2);
  EXPECT_EQ(config.backend_use, "local_docker:LocalContainerBackend");
  EXPECT_EQ(config.backend_json, R"({"use":"local_docker:LocalContainerBackend"})");
}

TEST_F(ServiceConfigTest, EnvironmentFillsWhatTheFileLeavesOutAndFlagsWin) {
  const auto env = env_of({{"PROVISIONER_API_KEY", "env-key"},
                           {"DEER_FLOW_HOST_BASE_DIR", "/srv/df"},
                           {"SANDBOX_IMAGE", "img:env"},
                           {"SANDBOX_CONTAINER_PORT", "8080"}});
  ServiceConfig config = load_service_config({}, env);
  EXPECT_EQ(config.api_key, "env-key");
  EXPECT_EQ(config.api_key_source, "PROVISIONER_API_KEY");
  EXPECT_EQ(config.roots.threads_host_path, "/srv/df/threads");
  EXPECT_EQ(config.backend_json,
            R"({"use":"local_docker:LocalContainerBackend","image":"img:env"})");

  ServiceFlags flags = with_file(
      R"({"api_key": "file-key", "listen": "127.0.0.1:9100", "mount_contract_version": 2,
          "backend": {"use": "local_docker:LocalContainerBackend", "image": "img:file"}})");
  flags.listen = "127.0.0.1:9200";
  flags.mount_contract_version = 0;
  config = load_service_config(flags, env);
  EXPECT_EQ(config.api_key, "file-key");
  EXPECT_EQ(config.listen_port, 9200);
  EXPECT_EQ(config.mount_contract_version, 0);
  EXPECT_NE(config.backend_json.find("img:file"), std::string::npos) << config.backend_json;
  EXPECT_EQ(config.backend_json.find("img:env"), std::string::npos) << config.backend_json;
}

TEST_F(ServiceConfigTest, EveryRefusalNamesTheValueAndItsSource) {
  const std::string file = dir_.file("p.json");
  EXPECT_EQ(error_of({}, env_of({{"SANDBOX_CONTAINER_PORT", "http"}})),
            "SANDBOX_CONTAINER_PORT='http': expected a whole number from 1 to 65535");
  EXPECT_EQ(error_of({}, env_of({{"SANDBOX_CONTAINER_PORT", "70000"}})),
            "SANDBOX_CONTAINER_PORT='70000': expected a whole number from 1 to 65535");
  EXPECT_EQ(error_of({}, env_of({{"SANDBOX_CONTAINER_PORT", "9000"}})),
            "SANDBOX_CONTAINER_PORT: 9000 is not supported: sandboxd backends publish the "
            "sandbox API on container port 8080");
  EXPECT_EQ(error_of({}, env_of({{"DEER_FLOW_HOST_BASE_DIR", "relative/dir"}})),
            "DEER_FLOW_HOST_BASE_DIR: expected an absolute path, got 'relative/dir'");
  ServiceFlags listen;
  listen.listen = "127.0.0.1:http";
  EXPECT_EQ(error_of(listen, env_of({})),
            "--listen: port 'http' of '127.0.0.1:http' is not a number from 0 to 65535");
  ServiceFlags version;
  version.mount_contract_version = 1;
  EXPECT_EQ(error_of(version, env_of({})),
            "--mount-contract-version: expected 0 (legacy) or 2, got 1");

  EXPECT_EQ(error_of(with_file(R"({"listen": 8002})"), env_of({})),
            file + ": provisioner.listen: expected a string, got a number 8002");
  EXPECT_EQ(error_of(with_file(R"({"backend": {"socket": "unix:///x"}})"), env_of({})),
            file +
                ": provisioner.backend.use: is required: a \"module:Class\" string such as "
                "local_docker:LocalContainerBackend");
  EXPECT_EQ(error_of(with_file(R"({"backend_timeout_seconds": 0})"), env_of({})),
            file + ": provisioner.backend_timeout_seconds: expected seconds from 1 to 3600, got 0");
  EXPECT_EQ(error_of(with_file("[1]"), env_of({})),
            file + ": expected an object with a \"provisioner\" object in it");
  ServiceFlags missing;
  missing.config_file = dir_.file("absent.json");
  EXPECT_EQ(error_of(missing, env_of({})),
            dir_.file("absent.json") + ": cannot read the config file: No such file or directory");
}

TEST_F(ServiceConfigTest, TheApiKeyIsNeverShown) {
  const std::string numeric = error_of(with_file(R"({"api_key": 123456789})"), env_of({}));
  EXPECT_NE(numeric.find("provisioner.api_key"), std::string::npos) << numeric;
  EXPECT_EQ(numeric.find("123456789"), std::string::npos) << numeric;
  const std::string broken = error_of({}, env_of({{"PROVISIONER_API_KEY", "abc\r\nX-Evil: 1"}}));
  EXPECT_EQ(broken, "PROVISIONER_API_KEY: the API key contains a line break (value not shown)");
}

TEST_F(ServiceConfigTest, UnknownKeysAreReportedNotFatal) {
  const ServiceConfig config = load_service_config(with_file(R"({"api_kye": "x"})"), env_of({}));
  ASSERT_EQ(config.notes.size(), 1u);
  EXPECT_EQ(config.notes[0], dir_.file("p.json") +
                                 ": provisioner.api_kye is not a setting of sandboxd-provisioner; "
                                 "ignored");
}

}  // namespace
}  // namespace sandboxd::provisioner

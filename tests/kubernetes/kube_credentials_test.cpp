// The kubernetes backend's credentials reader on files alone: a kubeconfig's current
// or named context, relative files, inline base64 data, an `exec` user refused naming it, a
// missing context named; in-cluster files and the environment it needs.
#include "kube_credentials.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

namespace sandboxd::kubernetes {
namespace {

class KubeCredentialsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = std::filesystem::temp_directory_path() /
          ("kube-credentials-" + std::to_string(::getpid()) + "-" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return (dir / name).string();
  }
  std::string message_of(const std::string& kubeconfig, std::optional<std::string> context = {}) {
    try {
      kubeconfig_credentials(kubeconfig, context);
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir;
};

constexpr const char* kTwoContexts = R"(apiVersion: v1
kind: Config
current-context: dev
clusters:
- name: dev-cluster
  cluster: {server: "https://127.0.0.1:6443/", certificate-authority: certs/ca.crt}
- name: prod-cluster
  cluster: {server: "https://10.0.0.1", certificate-authority-data: "UEVNIQ==", insecure-skip-tls-verify: true}
users:
- name: dev-user
  user: {token: dev-token}
- name: prod-user
  user: {tokenFile: token, client-key-data: "S0VZ"}
- name: cloud-user
  user:
    exec: {apiVersion: client.authentication.k8s.io/v1, command: aws}
contexts:
- name: dev
  context: {cluster: dev-cluster, user: dev-user, namespace: sandboxes}
- name: prod
  context: {cluster: prod-cluster, user: prod-user}
- name: cloud
  context: {cluster: dev-cluster, user: cloud-user}
)";

TEST_F(KubeCredentialsTest, TheCurrentContextWithFilesRelativeToTheKubeconfig) {
  const std::string path = write("config", kTwoContexts);
  const KubeCredentials c = kubeconfig_credentials(path, std::nullopt);
  EXPECT_EQ(c.server, "https://127.0.0.1:6443");
  EXPECT_EQ(c.namespace_, "sandboxes");
  EXPECT_EQ(c.ca_file, (dir / "certs/ca.crt").string());
  EXPECT_EQ(c.token, "dev-token");
  EXPECT_FALSE(c.insecure_skip_tls_verify);
  EXPECT_NE(c.source.find("(context dev)"), std::string::npos) << c.source;
}

TEST_F(KubeCredentialsTest, ANamedContextWithInlineDataAndATokenFileReadOnEveryRequest) {
  const std::string path = write("config", kTwoContexts);
  const KubeCredentials c = kubeconfig_credentials(path, std::string("prod"));
  EXPECT_EQ(c.ca_pem, "PEM!");
  EXPECT_EQ(c.client_key_pem, "KEY");
  EXPECT_TRUE(c.insecure_skip_tls_verify);
  write("token", "first\n");
  http::Request request;
  c.apply_to(request);
  EXPECT_EQ(request.headers.back(), "Authorization: Bearer first");
  write("token", "rotated\n");
  http::Request again;
  c.apply_to(again);
  EXPECT_EQ(again.headers.back(), "Authorization: Bearer rotated")
      << "a rotated token was not read";
}

TEST_F(KubeCredentialsTest, AnExecUserAMissingContextAndBadYamlAreNamed) {
  const std::string path = write("config", kTwoContexts);
  EXPECT_NE(
      message_of(path, std::string("cloud"))
          .find("user 'cloud-user' authenticates through 'exec', which runs a helper program"),
      std::string::npos);
  EXPECT_NE(message_of(path, std::string("staging")).find("no context named 'staging'"),
            std::string::npos);
  EXPECT_NE(message_of(write("broken", "clusters: [")).find("is not valid YAML"),
            std::string::npos);
  EXPECT_NE(message_of((dir / "absent").string()).find("cannot read kubeconfig"),
            std::string::npos);
}

TEST_F(KubeCredentialsTest, InClusterNeedsTheServiceEnvironmentAndTheAccountsFiles) {
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_THROW(in_cluster_credentials(dir.string()), std::runtime_error);
  ::setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  try {
    in_cluster_credentials(dir.string());
    ADD_FAILURE() << "no token file, yet accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/token is missing"), std::string::npos) << e.what();
  }
  write("token", "t");
  write("ca.crt", "ca");
  write("namespace", "sandboxes\n");
  const KubeCredentials c = in_cluster_credentials(dir.string());
  EXPECT_EQ(c.server, "https://10.96.0.1:443");
  EXPECT_EQ(c.namespace_, "sandboxes");
  EXPECT_EQ(c.token_file, (dir / "token").string());
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  ::unsetenv("KUBERNETES_SERVICE_PORT");
}

}  // namespace
}  // namespace sandboxd::kubernetes

// The kubernetes backend called directly, as the core calls it, against the stand-in API server
// (issue 24): the sandbox URL in each url_mode (node_port, cluster_dns, pod_ip), which the
// end-to-end tests through sandboxctl cannot reach for the last two (their URLs resolve only
// inside a cluster, so the core's readiness probe stops there); discover, list_running,
// is_alive and destroy then agree with it, and pod_ip makes no Service.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/http.hpp"
#include "sandboxd/sdk.hpp"
#include "test_support.hpp"

extern char** environ;

namespace sandboxd::testing {
namespace {

// tests/support/kube_standin.py as a child process, over TLS with one token.
class KubeStandin {
 public:
  explicit KubeStandin(const std::string& dir) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe");
    std::vector<std::string> args = {"python3", KUBE_STANDIN, "--token",
                                     "tok",     "--tls-dir",  dir + "/tls"};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    const int spawned = ::posix_spawnp(&pid_, "python3", &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(out[1]);
    if (spawned != 0) throw std::runtime_error("cannot start the stand-in");
    std::string line;
    char c = 0;
    while (::read(out[0], &c, 1) == 1 && c != '\n') line += c;
    ::close(out[0]);
    std::smatch m;
    if (!std::regex_search(line, m, std::regex("listening (https://\\S+)"))) {
      throw std::runtime_error("the stand-in did not start: " + line);
    }
    url_ = m[1];
    ca_ = dir + "/tls/ca.crt";
    kubeconfig_ = dir + "/kubeconfig";
    std::ofstream(kubeconfig_) << "apiVersion: v1\nkind: Config\ncurrent-context: s\n"
                               << "clusters:\n- name: s\n  cluster: {server: \"" << url_
                               << "\", certificate-authority: " << ca_ << "}\n"
                               << "users:\n- name: u\n  user: {token: tok}\n"
                               << "contexts:\n- name: s\n  context: {cluster: s, user: u, "
                                  "namespace: sandboxes}\n";
  }
  ~KubeStandin() {
    ::kill(pid_, SIGTERM);
    ::waitpid(pid_, nullptr, 0);
  }
  const std::string& kubeconfig() const { return kubeconfig_; }
  // The stand-in's own answer to GET `path` (the Kubernetes API, as a client would ask it).
  http::Response get(const std::string& path) const {
    http::Request request;
    request.url = url_ + path;
    request.ca_file = ca_;
    request.headers.push_back("Authorization: Bearer tok");
    return http::perform(request);
  }

 private:
  pid_t pid_ = -1;
  std::string url_, ca_, kubeconfig_;
};

class KubernetesBackendTest : public ::testing::Test {
 protected:
  std::shared_ptr<SandboxBackend> load(const std::string& extra) {
    PluginContext context;
    context.config_json = "{\"kubeconfig\": \"" + standin.kubeconfig() +
                          "\", \"image\": \"all-in-one\"" + extra + "}";
    context.config_key_path = "sandbox.backend";
    context.logger = logger;
    context.clock = std::make_shared<ManualClock>(100.0);
    context.base_dir = dir.str();
    return core::PluginLoader({SANDBOXD_TEST_PLUGIN_DIR})
        .load_backend("kubernetes:KubernetesBackend", context, "kubernetes test");
  }
  static CreateRequest request_for(const std::string& id) {
    CreateRequest request;
    request.sandbox_id = id;
    request.user_id = "alice";
    request.thread_id = "t-" + id;
    return request;
  }

  TempDir dir;
  KubeStandin standin{dir.str()};
  std::shared_ptr<CapturingLogger> logger = std::make_shared<CapturingLogger>();
};

TEST_F(KubernetesBackendTest, EachUrlModeGivesItsUrlAndTheOtherCallsAgreeWithIt) {
  struct Mode {
    const char* extra;
    std::string id;
    std::regex url;
    bool service;
  };
  const std::vector<Mode> modes = {
      {R"(, "url_mode": "node_port", "node_host": "127.0.0.1")", "aaaa000000000001",
       std::regex(R"(http://127\.0\.0\.1:3\d{4})"), true},
      {R"(, "url_mode": "cluster_dns")", "aaaa000000000002",
       std::regex(R"(http://sandbox-aaaa000000000002-svc\.sandboxes\.svc\.cluster\.local:8080)"),
       true},
      {R"(, "url_mode": "pod_ip")", "aaaa000000000003", std::regex(R"(http://192\.0\.2\.\d+:8080)"),
       false},
  };
  for (const Mode& mode : modes) {
    SCOPED_TRACE(mode.extra);
    auto backend = load(mode.extra);
    const SandboxInfo made = backend->create(request_for(mode.id));
    EXPECT_TRUE(std::regex_match(made.sandbox_url, mode.url)) << made.sandbox_url;
    EXPECT_EQ(made.container_name, "sandbox-" + mode.id);
    EXPECT_EQ(
        standin.get("/api/v1/namespaces/sandboxes/services/sandbox-" + mode.id + "-svc").status,
        mode.service ? 200 : 404);
    const auto found = backend->discover(mode.id);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->sandbox_url, made.sandbox_url);
    EXPECT_EQ(found->user_id, std::optional<std::string>("alice"));
    bool listed = false;
    for (const SandboxInfo& info : backend->list_running()) {
      if (info.sandbox_id == mode.id) listed = info.sandbox_url == made.sandbox_url;
    }
    EXPECT_TRUE(listed) << "list_running did not give the same URL";
    EXPECT_TRUE(backend->is_alive(made));
    backend->destroy(made);
    EXPECT_FALSE(backend->is_alive(made));
    EXPECT_FALSE(backend->discover(mode.id).has_value());
    EXPECT_EQ(
        standin.get("/api/v1/namespaces/sandboxes/services/sandbox-" + mode.id + "-svc").status,
        404);
  }
}

TEST_F(KubernetesBackendTest, PvcMountsAreSubPathsUnderTheBaseDirAndOthersAreRefused) {
  auto backend = load(R"(, "url_mode": "pod_ip", "volumes": "pvc", "pvc_name": "deer-flow-data")");
  CreateRequest request = request_for("bbbb000000000001");
  request.extra_mounts = {
      {dir.str() + "/users/alice/threads/t-1/user-data", "/mnt/user-data", false},
      {dir.str() + "/skills/public", "/mnt/skills/public", true}};
  const SandboxInfo made = backend->create(request);
  const http::Response pod =
      standin.get("/api/v1/namespaces/sandboxes/pods/sandbox-bbbb000000000001");
  EXPECT_NE(pod.body.find(R"("subPath": "users/alice/threads/t-1/user-data")"), std::string::npos)
      << pod.body;
  EXPECT_NE(pod.body.find(R"("claimName": "deer-flow-data")"), std::string::npos);
  EXPECT_NE(pod.body.find(R"("readOnly": true)"), std::string::npos);
  backend->destroy(made);

  request = request_for("bbbb000000000002");
  request.extra_mounts = {{"/etc", "/mnt/etc", true}};
  EXPECT_THROW(backend->create(request), std::invalid_argument);
}

}  // namespace
}  // namespace sandboxd::testing

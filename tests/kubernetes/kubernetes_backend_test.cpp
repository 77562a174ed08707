// The kubernetes backend called directly, as the core calls it, against the stand-in API server
//: the sandbox URL in each url_mode (node_port, cluster_dns, pod_ip), which the
// end-to-end tests through sandboxctl cannot reach for the last two (their URLs resolve only
// inside a cluster, so the core's readiness probe stops there); discover, list_running,
// is_alive and destroy then agree with it, and pod_ip makes no Service. The stand-in keeps a
// deleted pod terminating, its name taken, for 2 s, as a cluster keeps it until its kubelet has
// stopped it: a sandbox made again for the same conversation meanwhile must be a new pod.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <thread>
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
  explicit KubeStandin(const std::string& dir, const std::vector<std::string>& extra = {}) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe");
    std::vector<std::string> args = {"python3",
                                     KUBE_STANDIN,
                                     "--token",
                                     "tok",
                                     "--tls-dir",
                                     dir + "/tls",
                                     "--kubelet-stop-seconds",
                                     "2"};
    args.insert(args.end(), extra.begin(), extra.end());
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
  http::Response get(const std::string& path) const { return call("GET", path); }
  // GET `path` as a JSON document (a null one for an answer that is not 200).
  rapidjson::Document read(const std::string& path) const {
    rapidjson::Document doc;
    const http::Response answer = get(path);
    if (answer.status == 200) doc.Parse(answer.body.c_str());
    return doc;
  }
  // The Kubernetes API as any client calls it, or the stand-in's own /_standin/ controls.
  http::Response call(const std::string& method, const std::string& path,
                      const std::string& json_body = "") const {
    http::Request request;
    request.method = method;
    request.url = url_ + path;
    request.json_body = json_body;
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
  std::shared_ptr<SandboxBackend> load(const std::string& extra) { return load_on(standin, extra); }
  std::shared_ptr<SandboxBackend> load_on(const KubeStandin& server, const std::string& extra) {
    PluginContext context;
    context.config_json =
        "{\"kubeconfig\": \"" + server.kubeconfig() + "\", \"image\": \"all-in-one\"" + extra + "}";
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
    // Issue 32 A.4: the contract it was made under, read back from the pod every way.
    EXPECT_EQ(made.mount_contract_version, sandboxd::kSandboxMountContractVersion);
    EXPECT_EQ(
        standin.get("/api/v1/namespaces/sandboxes/services/sandbox-" + mode.id + "-svc").status,
        mode.service ? 200 : 404);
    const auto found = backend->discover(mode.id);
    ASSERT_TRUE(found.has_value());
    EXPECT_EQ(found->sandbox_url, made.sandbox_url);
    EXPECT_EQ(found->user_id, std::optional<std::string>("alice"));
    EXPECT_EQ(found->mount_contract_version, sandboxd::kSandboxMountContractVersion);
    bool listed = false;
    for (const SandboxInfo& info : backend->list_running()) {
      if (info.sandbox_id == mode.id) {
        listed = info.sandbox_url == made.sandbox_url &&
                 info.mount_contract_version == sandboxd::kSandboxMountContractVersion;
      }
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

// `runtime` is the one spelling of a sandbox's runtime across backends; here it
// is the pod's RuntimeClass (runtime_class_name, Kubernetes' own word, is read too; both at once
// are refused, naming them).
TEST_F(KubernetesBackendTest, RuntimeIsThePodsRuntimeClassAndOneSpellingOnly) {
  auto backend = load(R"(, "url_mode": "pod_ip", "runtime": "gvisor")");
  backend->create(request_for("cccc000000000001"));
  const auto pod = standin.get("/api/v1/namespaces/sandboxes/pods/sandbox-cccc000000000001");
  ASSERT_EQ(pod.status, 200) << pod.body;
  EXPECT_NE(pod.body.find("\"runtimeClassName\": \"gvisor\""), std::string::npos) << pod.body;
  try {
    load(R"(, "url_mode": "pod_ip", "runtime": "gvisor", "runtime_class_name": "kata")");
    FAIL() << "two spellings of one setting were taken";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("one of them"), std::string::npos)
        << e.what();
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

  // Issue 32 B: the base directory itself would be subPath "." (the whole PVC, every user's
  // data): refused like a path outside it, and nothing is made.
  for (const std::string& root : {dir.str(), dir.str() + "/", dir.str() + "/./users/.."}) {
    request = request_for("bbbb000000000003");
    request.extra_mounts = {{root, "/mnt/user-data", false}};
    EXPECT_THROW(backend->create(request), std::invalid_argument) << root;
  }
  EXPECT_EQ(standin.get("/api/v1/namespaces/sandboxes/pods/sandbox-bbbb000000000003").status, 404);
}

std::string string_at(const rapidjson::Value& value, std::initializer_list<const char*> path) {
  const rapidjson::Value* at = &value;
  for (const char* key : path) {
    if (!at->IsObject() || !at->HasMember(key)) return "";
    at = &(*at)[key];
  }
  return at->IsString() ? at->GetString() : "";
}

std::string owner_uid_of(const rapidjson::Value& object) {
  if (!object.IsObject() || !object.HasMember("metadata")) return "";
  const auto& metadata = object["metadata"];
  if (!metadata.HasMember("ownerReferences") || !metadata["ownerReferences"].IsArray() ||
      metadata["ownerReferences"].Empty()) {
    return "";
  }
  return string_at(metadata["ownerReferences"][0], {"uid"});
}

// A destroy returns while the pod is still terminating (a cluster keeps it, its name taken,
// until the kubelet has stopped it). Made again for the same conversation, the sandbox must not
// be that dying pod: the create waits for the name to be free and makes a new pod, with a
// Service owned by the new pod (one owned by the old would be collected with it).
TEST_F(KubernetesBackendTest, MadeAgainWhileItsPodTerminatesTheSandboxIsANewPod) {
  auto backend = load(R"(, "url_mode": "cluster_dns")");
  const std::string id = "cccc000000000001";
  const std::string pod_path = "/api/v1/namespaces/sandboxes/pods/sandbox-" + id;
  const SandboxInfo first = backend->create(request_for(id));
  const rapidjson::Document made = standin.read(pod_path);
  ASSERT_TRUE(made.IsObject() && made["spec"].HasMember("terminationGracePeriodSeconds"));
  EXPECT_EQ(made["spec"]["terminationGracePeriodSeconds"].GetInt(), 5);
  backend->destroy(first);

  const rapidjson::Document dying = standin.read(pod_path);
  ASSERT_TRUE(dying.IsObject()) << "the stand-in let the pod go at once";
  EXPECT_FALSE(string_at(dying, {"metadata", "deletionTimestamp"}).empty());
  EXPECT_FALSE(backend->is_alive(first));
  EXPECT_FALSE(backend->discover(id).has_value()) << "a terminating pod was discovered";
  for (const SandboxInfo& info : backend->list_running()) {
    EXPECT_NE(info.sandbox_id, id) << "a terminating pod was listed as running";
  }

  const SandboxInfo second = backend->create(request_for(id));
  EXPECT_NE(second.container_id, first.container_id) << "the terminating pod was taken";
  const rapidjson::Document pod = standin.read(pod_path);
  EXPECT_EQ(string_at(pod, {"metadata", "uid"}), second.container_id);
  EXPECT_EQ(string_at(pod, {"metadata", "deletionTimestamp"}), "");
  EXPECT_EQ(
      owner_uid_of(standin.read("/api/v1/namespaces/sandboxes/services/sandbox-" + id + "-svc")),
      second.container_id);
  EXPECT_TRUE(logger->contains(LogLevel::info, "sandbox-" + id + " is terminating"));
  EXPECT_TRUE(backend->is_alive(second));
  backend->destroy(second);
}

// A pod of the same conversation that has finished (its activeDeadlineSeconds passed, or its
// container exited for good) is deleted and made again, not waited on until ready_timeout.
TEST_F(KubernetesBackendTest, AFinishedPodOfTheSameConversationIsMadeAgain) {
  auto backend = load(R"(, "url_mode": "pod_ip", "ready_timeout_seconds": 600)");
  const std::string id = "cccc000000000002";
  const SandboxInfo first = backend->create(request_for(id));
  ASSERT_EQ(standin.call("POST", "/_standin/pods/sandboxes/sandbox-" + id, R"({"phase": "Failed"})")
                .status,
            200);
  EXPECT_FALSE(backend->is_alive(first));
  const SandboxInfo second = backend->create(request_for(id));
  EXPECT_NE(second.container_id, first.container_id);
  EXPECT_TRUE(backend->is_alive(second));
  backend->destroy(second);
}

// A Service left behind owned by a pod that no longer exists (a gateway that died between its
// two deletes; the cluster's collector has not come by yet) is replaced, not adopted: adopted,
// it would be collected under the new sandbox.
TEST_F(KubernetesBackendTest, AServiceOwnedByAnotherPodIsReplacedByOneOwnedByTheNewPod) {
  auto backend = load(R"(, "url_mode": "cluster_dns")");
  const std::string id = "cccc000000000003";
  ASSERT_EQ(
      standin
          .call("POST", "/api/v1/namespaces/sandboxes/services",
                R"({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "sandbox-)" + id +
                    R"(-svc", "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                          "name": "sandbox-)" +
                    id + R"(", "uid": "0b5e55ed-0000-4000-8000-000000000000"}]},
                          "spec": {"ports": [{"port": 8080}]}})")
          .status,
      201);
  const SandboxInfo made = backend->create(request_for(id));
  EXPECT_EQ(
      owner_uid_of(standin.read("/api/v1/namespaces/sandboxes/services/sandbox-" + id + "-svc")),
      made.container_id);
  backend->destroy(made);
}

// The requests the stand-in served for pod `pod_name`: its reads ("GET") and watches ("WATCH").
std::map<std::string, int> requests_for(const KubeStandin& server, const std::string& pod_name) {
  rapidjson::Document log = server.read("/_standin/requests");
  std::map<std::string, int> counts;
  if (!log.IsObject() || !log.HasMember("requests")) return counts;
  for (const auto& request : log["requests"].GetArray()) {
    const std::string path = string_at(request, {"path"}), query = string_at(request, {"query"});
    if (path.size() >= pod_name.size() &&
        path.compare(path.size() - pod_name.size(), pod_name.size(), pod_name) == 0) {
      ++counts[string_at(request, {"method"})];
    } else if (query.find("watch=true") != std::string::npos &&
               query.find("metadata.name%3D" + pod_name) != std::string::npos) {
      ++counts["WATCH"];
    }
  }
  return counts;
}

// Polls `done` every 20 ms for up to 30 s (a bound on a wait, not a timing assertion).
bool eventually(const std::function<bool()>& done) {
  for (int i = 0; i < 1500; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// A pod that takes a while to become Ready is followed with one watch from the resourceVersion
// the create read, not read again and again: the create returns on the watch's event.
TEST_F(KubernetesBackendTest, ReadinessComesFromAWatchNotFromPolling) {
  TempDir pending_dir;
  const KubeStandin pending(pending_dir.str(), {"--pods-start", "pending"});
  auto backend = load_on(pending, R"(, "url_mode": "pod_ip")");
  const std::string pod_name = "sandbox-dddd000000000001";
  std::optional<SandboxInfo> made;
  std::string failure;
  std::thread create([&] {
    try {
      made = backend->create(request_for("dddd000000000001"));
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  const bool watching = eventually([&] { return requests_for(pending, pod_name)["WATCH"] == 1; });
  if (watching) {
    EXPECT_EQ(pending
                  .call("POST", "/_standin/pods/sandboxes/" + pod_name,
                        R"({"phase": "Running", "ready": true})")
                  .status,
              200);
  }
  create.join();
  ASSERT_TRUE(watching) << "the create never watched the pod";
  ASSERT_TRUE(made.has_value()) << failure;
  auto counts = requests_for(pending, pod_name);
  EXPECT_EQ(counts["WATCH"], 1);
  EXPECT_EQ(counts["GET"], 1) << "the pod was polled besides the watch";
  backend->destroy(*made);
}

// Where the Role lacks the watch verb (403), readiness is polled instead, said once in the log,
// and later creates do not ask for a watch again.
TEST_F(KubernetesBackendTest, AWatchTheRoleRefusesFallsBackToPolling) {
  TempDir pending_dir;
  const KubeStandin pending(pending_dir.str(), {"--pods-start", "pending", "--forbid-watch"});
  auto backend = load_on(pending, R"(, "url_mode": "pod_ip")");
  for (const std::string id : {"dddd000000000002", "dddd000000000003"}) {
    SCOPED_TRACE(id);
    const std::string pod_name = "sandbox-" + id;
    std::optional<SandboxInfo> made;
    std::string failure;
    std::thread create([&] {
      try {
        made = backend->create(request_for(id));
      } catch (const std::exception& e) {
        failure = e.what();
      }
    });
    const bool polled = eventually([&] { return requests_for(pending, pod_name)["GET"] >= 3; });
    if (polled) {
      pending.call("POST", "/_standin/pods/sandboxes/" + pod_name,
                   R"({"phase": "Running", "ready": true})");
    }
    create.join();
    ASSERT_TRUE(polled) << "the create did not poll the pod";
    ASSERT_TRUE(made.has_value()) << failure;
    EXPECT_EQ(requests_for(pending, pod_name)["WATCH"], id == "dddd000000000002" ? 1 : 0);
    backend->destroy(*made);
  }
  EXPECT_EQ(logger->count(LogLevel::info, "refused a watch on pods (HTTP 403"), 1u);
}

}  // namespace
}  // namespace sandboxd::testing

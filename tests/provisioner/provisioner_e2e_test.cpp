// The whole remote path with real parts only: a Provider over the remote_provisioner plugin →
// HTTP on 127.0.0.1 → the real sandboxd-provisioner binary (a child process) → local_docker →
// the test engine (podman or Docker, from scripts/test_engine.sh). No in-process HTTP stand-in.
// Every test ends by asking the engine itself that no container of its prefix is left.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sandboxd/http.hpp>
#include <sandboxd/readiness.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine_listing.hpp"
#include "free_port.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/usage_sampler.hpp"
#include "sandboxd/errors.hpp"
#include "test_support.hpp"

namespace sandboxd::core {
namespace {

// The backend's mount-contract negotiation capability (a remote provisioner backend has it).
[[maybe_unused]] sandboxd::MountContractNegotiation* negotiation(
    sandboxd::SandboxBackend& backend) {
  auto* offered = sandboxd::backend_capability<sandboxd::MountContractNegotiation>(backend);
  if (!offered) throw std::logic_error("the backend offers no MountContractNegotiation");
  return offered;
}

using sandboxd::testing::CapturingLogger;
using sandboxd::testing::containers_left_after_removal;
using sandboxd::testing::engine_containers;
using sandboxd::testing::free_port;
using sandboxd::testing::socket_path;
using sandboxd::testing::TempDir;

constexpr const char* kKey = "e2e-key-5d1c";

// sandboxd-provisioner as a child process. Its stderr goes to a file the test shows on failure.
class ServiceProcess {
 public:
  ServiceProcess(const std::string& config_file, int port, const std::string& log_file,
                 std::vector<std::string> extra_args = {}) {
    int out[2];
    if (::pipe(out) != 0) throw std::runtime_error("pipe failed");
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      const int err = ::open(log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
      ::dup2(err, STDERR_FILENO);
      ::close(out[0]);
      std::vector<std::string> args = {SANDBOXD_PROVISIONER_BINARY, "--config", config_file,
                                       "--listen", "127.0.0.1:" + std::to_string(port)};
      args.insert(args.end(), extra_args.begin(), extra_args.end());
      std::vector<char*> argv;
      for (std::string& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    // The one stdout line says it is listening; wait for it (bounded).
    std::string line;
    pollfd waiting{out[0], POLLIN, 0};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      if (::poll(&waiting, 1, 100) > 0) {
        char buffer[256];
        const ssize_t n = ::read(out[0], buffer, sizeof buffer);
        if (n <= 0) break;
        line.append(buffer, static_cast<std::size_t>(n));
      }
    }
    ::close(out[0]);
    listening_line_ = line;
  }
  ~ServiceProcess() { stop(); }

  const std::string& listening_line() const { return listening_line_; }

  // SIGTERM, then the exit status (0 is a clean stop after the requests in flight).
  int stop() {
    if (pid_ <= 0) return status_;
    ::kill(pid_, SIGTERM);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int status_ = -1;
  std::string listening_line_;
};

class ProvisionerEndToEndTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (socket_path().empty()) {
      GTEST_SKIP() << "SANDBOXD_TEST_DOCKER_SOCKET is not set; run through scripts/test.sh, "
                      "which starts the test engine";
    }
    prefix_ = "sbxe2e" + std::to_string(::getpid());
    port_ = free_port();
    std::ofstream(config_file()) << R"({"provisioner": {
        "api_key": ")" << kKey << R"(",
        "host_base_dir": ")" << dir_.str()
                                 << R"(/state",
        "backend_timeout_seconds": 60,
        "backend": {"use": "local_docker:LocalContainerBackend",
                    "socket": "unix://)"
                                 << socket_path() << R"(",
                    "image": ")" << sandboxd::testing::engine_test_image()
                                 << R"(",
                    "container_prefix": ")"
                                 << prefix_ << R"(",
                    "sandbox_host": "127.0.0.1", "stop_timeout_seconds": 2}}})";
  }
  void TearDown() override {
    provider_.reset();
    if (service_) {
      EXPECT_EQ(service_->stop(), 0) << service_log();
    }
    if (!prefix_.empty()) {
      EXPECT_TRUE(containers_left_after_removal(prefix_).empty()) << "containers left behind";
    }
  }

  std::string config_file() const { return dir_.file("provisioner.json"); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string service_log() const {
    std::ifstream in(dir_.file("service.log"));
    return std::string(std::istreambuf_iterator<char>(in), {});
  }
  void start_service(std::vector<std::string> extra_args = {}) {
    service_ = std::make_unique<ServiceProcess>(config_file(), port_, dir_.file("service.log"),
                                                std::move(extra_args));
    ASSERT_EQ(service_->listening_line(), "listening on " + url() + "\n") << service_log();
  }

  std::shared_ptr<SandboxBackend> remote(const std::string& key = kKey,
                                         std::shared_ptr<Clock> clock = nullptr) {
    PluginContext context;
    context.config_json =
        R"({"provisioner_url": ")" + url() + R"(", "provisioner_api_key": ")" + key + R"("})";
    context.config_key_path = "sandbox.backend";
    context.logger = logger_;
    context.clock = clock ? clock : std::make_shared<SystemClock>();
    return PluginLoader({SANDBOXD_TEST_PLUGIN_DIR})
        .load_backend("remote_provisioner:RemoteSandboxBackend", context, "e2e test");
  }

  void make_provider() {
    ProviderDeps deps;
    deps.backend = remote();
    PluginContext store;
    store.config_key_path = "sandbox.ownership";
    store.owner_id = "e2e-test:1";
    store.base_dir = dir_.str();
    store.logger = logger_;
    store.clock = std::make_shared<SystemClock>();
    deps.ownership =
        PluginLoader({SANDBOXD_TEST_PLUGIN_DIR})
            .load_ownership_store("ownership_memory:MemoryOwnershipStore", store, "e2e");
    deps.logger = logger_;
    deps.clock = std::make_shared<SystemClock>();
    // Gateway and provisioner share the DeerFlow state directory, as DEER_FLOW_HOST_BASE_DIR
    // is shared in a real deployment: the gateway composes mounts the service then checks.
    deps.paths = std::make_shared<const Paths>(dir_.path() / "state", dir_.str() + "/state");
    deps.options.thread_data_mounts = true;  // as DeerFlow's remote deployments set it
    deps.options.run_background_threads = false;
    provider_ = std::make_unique<Provider>(std::move(deps));
    provider_->start();
  }

  TempDir dir_;
  std::string prefix_;
  int port_ = 0;
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
  std::unique_ptr<ServiceProcess> service_;
  std::unique_ptr<Provider> provider_;
};

TEST_F(ProvisionerEndToEndTest, AcquireReleaseReclaimAndDestroyThroughTheService) {
  start_service();
  make_provider();
  // Probes: contract 2, so thread data is mounted and the conversion mount is forwarded.
  EXPECT_TRUE(provider_->provider_uses_thread_data_mounts());

  const std::string id = provider_->acquire("thread-1", "alice");
  ClientPtr client = provider_->get(id);
  ASSERT_TRUE(client);
  EXPECT_TRUE(sandboxd::wait_for_sandbox_ready(client->base_url(), 5.0)) << client->base_url();
  ASSERT_EQ(engine_containers(prefix_), std::vector<std::string>{prefix_ + "-" + id});
  EXPECT_TRUE(
      std::filesystem::is_directory(dir_.str() + "/state/users/alice/threads/thread-1/user-data"));

  provider_->release(id);
  EXPECT_EQ(engine_containers(prefix_).size(), 1u) << "release keeps the sandbox warm";
  EXPECT_EQ(provider_->acquire("thread-1", "alice"), id) << "reclaim returns the warm sandbox";
  EXPECT_EQ(engine_containers(prefix_).size(), 1u) << "reclaim must not create a container";

  const std::string other = provider_->acquire("thread-2", "bob");
  EXPECT_NE(other, id);
  EXPECT_EQ(engine_containers(prefix_).size(), 2u);

  provider_->destroy(id);
  EXPECT_EQ(engine_containers(prefix_), std::vector<std::string>{prefix_ + "-" + other});
  provider_->shutdown();
  EXPECT_TRUE(containers_left_after_removal(prefix_).empty()) << "shutdown left a container";
  std::printf("acquire/release/reclaim/destroy through sandboxd-provisioner: 2 created, 0 left\n");
}

// Serve's operator page over a provisioner shows what each sandbox uses. The page's
// sampler, over a Provider over the remote backend, reads each sandbox through
// GET /api/sandboxes/{id}/usage, which the provisioner answers from its local_docker backend's
// one-shot engine stats: real figures from the real engine, two processes away.
TEST_F(ProvisionerEndToEndTest, ThePagesSamplerReadsEachSandboxsUsageThroughTheService) {
  start_service();
  make_provider();
  const std::string id = provider_->acquire("thread-1", "alice");
  ASSERT_TRUE(provider_->get(id));
  auto clock = std::make_shared<sandboxd::testing::ManualClock>();
  UsageSampler sampler(*provider_, clock);
  EXPECT_TRUE(sampler.view().available) << "the remote backend offers SandboxUsage";
  sampler.sweep();
  const UsageView view = sampler.view();
  ASSERT_EQ(view.sandboxes.count(id), 1u);
  const SandboxUsageFigures& figures = view.sandboxes.at(id);
  EXPECT_EQ(figures.error, "");
  ASSERT_TRUE(figures.memory_bytes);
  EXPECT_GT(*figures.memory_bytes, 0u);
  ASSERT_TRUE(figures.pids);
  EXPECT_GE(*figures.pids, 1u);
  std::printf("usage through sandboxd-provisioner: %llu bytes, %llu processes\n",
              static_cast<unsigned long long>(*figures.memory_bytes),
              static_cast<unsigned long long>(*figures.pids));
  provider_->destroy(id);
  provider_->shutdown();
}

// The backend's network mode isolated. Each answer's sandbox_url is the provisioner's
// relay, with the token in request_headers; the remote backend keeps both, so the gateway's
// readiness wait and every later request go through the relay. The container has no network
// and no published port. No token 401, a wrong or another sandbox's token 403, a removed
// sandbox 404; none of them reaches a sandbox.
TEST_F(ProvisionerEndToEndTest, AnIsolatedSandboxIsAnsweredWithTheRelayAndItsToken) {
  std::ofstream(config_file()) << R"({"provisioner": {
      "api_key": ")" << kKey << R"(", "host_base_dir": ")"
                               << dir_.str() << R"(/state",
      "backend_timeout_seconds": 60,
      "backend": {"use": "local_docker:LocalContainerBackend",
                  "socket": "unix://)"
                               << socket_path() << R"(",
                  "image": ")" << sandboxd::testing::engine_test_image()
                               << R"(",
                  "container_prefix": ")"
                               << prefix_ << R"(", "stop_timeout_seconds": 2,
                  "network": {"mode": "isolated"}}}})";
  start_service();
  make_provider();
  const std::string alice = provider_->acquire("t1", "alice");  // readiness through the relay
  const std::string bob = provider_->acquire("t1", "bob");
  const auto alice_info = provider_->find(alice)->info;
  const auto bob_info = provider_->find(bob)->info;
  EXPECT_EQ(alice_info.sandbox_url.rfind("http://127.0.0.1:", 0), 0u) << alice_info.sandbox_url;
  EXPECT_NE(alice_info.sandbox_url.find("/s/" + alice), std::string::npos)
      << alice_info.sandbox_url;
  ASSERT_EQ(alice_info.request_headers.count("X-Sandboxd-Relay-Token"), 1u);
  const std::string alice_token = alice_info.request_headers.at("X-Sandboxd-Relay-Token");
  const std::string bob_token = bob_info.request_headers.at("X-Sandboxd-Relay-Token");
  EXPECT_NE(alice_token, bob_token);

  const auto status_of = [](const std::string& url, const std::string& token) {
    sandboxd::http::Request request;
    request.url = url + "/v1/sandbox";
    if (!token.empty()) request.headers = {"X-Sandboxd-Relay-Token: " + token};
    return sandboxd::http::perform(request).status;
  };
  EXPECT_EQ(status_of(alice_info.sandbox_url, alice_token), 200);
  EXPECT_EQ(status_of(bob_info.sandbox_url, bob_token), 200);
  EXPECT_EQ(status_of(alice_info.sandbox_url, ""), 401);
  EXPECT_EQ(status_of(alice_info.sandbox_url, bob_token), 403);
  EXPECT_EQ(status_of(alice_info.sandbox_url, std::string(43, 'A')), 403);
  // Nothing published, no network: the engine's own record.
  const std::string inspected =
      sandboxd::testing::engine_get("/containers/" + prefix_ + "-" + alice + "/json");
  EXPECT_NE(inspected.find("\"NetworkMode\":\"none\""), std::string::npos) << inspected;

  provider_->destroy(alice);
  EXPECT_EQ(status_of(alice_info.sandbox_url, alice_token), 404) << "a removed sandbox";
  provider_->shutdown();
  std::printf(
      "isolated through sandboxd-provisioner: relay URL and token handed on; 200 with "
      "it, 401 without, 403 with another's, 404 once removed\n");
}

// Issue 20 A.6 on the real engine: the gateway's users/{user}/threads/{thread}/user-data is
// what the sandbox sees at /mnt/user-data, both ways, and another user's sandbox for the same
// thread id sees none of it (the legacy layout shared {threads}/{thread}/user-data).
TEST_F(ProvisionerEndToEndTest, UserDataIsTheGatewaysPerUserDirectoryAndNobodyElses) {
  start_service();
  make_provider();
  const std::filesystem::path alice_data = dir_.path() / "state/users/alice/threads/t1/user-data";
  std::filesystem::create_directories(alice_data / "workspace");
  std::ofstream(alice_data / "workspace" / "from-gateway.txt") << "written by the gateway\n";

  const std::string alice = provider_->acquire("t1", "alice");
  const std::string bob = provider_->acquire("t1", "bob");
  ASSERT_NE(alice, bob);
  const std::string alice_box = prefix_ + "-" + alice, bob_box = prefix_ + "-" + bob;
  EXPECT_EQ(
      sandboxd::testing::engine_exec(alice_box, "cat /mnt/user-data/workspace/from-gateway.txt"),
      "written by the gateway\n");
  sandboxd::testing::engine_exec(alice_box,
                                 "echo written inside > /mnt/user-data/outputs/result.txt");
  std::ifstream result(alice_data / "outputs" / "result.txt");
  std::string line;
  std::getline(result, line);
  EXPECT_EQ(line, "written inside") << "a file written inside is not in the gateway's directory";
  const std::string bob_sees = sandboxd::testing::engine_exec(
      bob_box, "ls -A /mnt/user-data/workspace /mnt/user-data/outputs");
  EXPECT_EQ(bob_sees.find("from-gateway.txt"), std::string::npos) << bob_sees;
  EXPECT_EQ(bob_sees.find("result.txt"), std::string::npos) << bob_sees;
  EXPECT_NE(bob_sees.find("/mnt/user-data/workspace"), std::string::npos)
      << "bob's sandbox has no user data at all: " << bob_sees;
  provider_->shutdown();
  std::printf(
      "user data through sandboxd-provisioner: the gateway's file seen inside, the "
      "sandbox's file seen by the gateway, bob's sandbox for the same thread empty\n");
}

TEST_F(ProvisionerEndToEndTest, AWrongKeyIsAClearErrorAndCreatesNothing) {
  start_service();
  auto backend = remote("not-the-key");
  negotiation(*backend)->refresh_capabilities_if_stale();
  EXPECT_FALSE(negotiation(*backend)->cached_mount_contract_capability_known())
      << "a 401 is not an answer";
  CreateRequest request;
  request.sandbox_id = "wrongkey1";
  request.thread_id = "t";
  try {
    backend->create(request);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), "Provisioner create failed: HTTP 401 Unauthorized")
        << error.what();
  }
  EXPECT_TRUE(engine_containers(prefix_).empty());
  // The probe's refusal came first; the create's is counted, not logged again (issue 32 B).
  EXPECT_NE(service_log().find("provisioner auth rejected: GET /api/capabilities"),
            std::string::npos)
      << service_log();
  EXPECT_EQ(service_log().find("not-the-key"), std::string::npos) << "the key reached the log";
}

// A gateway that negotiated contract 2 meets a provisioner restarted as a legacy one on the
// same address: the create answers without a version, the acquisition restarts under the
// legacy id, and the sandbox made under the stale id is destroyed, not left running.
TEST_F(ProvisionerEndToEndTest, ALegacyServiceDowngradesTheContractAndLeavesNoStalePod) {
  start_service();
  make_provider();
  ASSERT_TRUE(provider_->provider_uses_thread_data_mounts());
  ASSERT_EQ(negotiation(*provider_->backend())->mount_contract_snapshot(),
            (MountContractSnapshot{2, true}));
  EXPECT_EQ(service_->stop(), 0);
  start_service({"--mount-contract-version", "0"});

  const std::string id = provider_->acquire("thread-9", "alice");
  EXPECT_EQ(negotiation(*provider_->backend())->cached_mount_contract_version(), 0);
  EXPECT_TRUE(negotiation(*provider_->backend())->cached_mount_contract_capability_known());
  EXPECT_EQ(engine_containers(prefix_), std::vector<std::string>{prefix_ + "-" + id})
      << "the sandbox of the stale contract must be gone";
  EXPECT_TRUE(logger_->contains("under mount contract 0 instead of 2")) << "no downgrade seen";
  provider_->shutdown();
}

// The service is down when the gateway first asks; the probe says "unavailable" and retries a
// second later, and picks the service up once it listens.
TEST_F(ProvisionerEndToEndTest, AServiceThatComesUpIsPickedUpByTheProbeRetry) {
  auto clock = std::make_shared<sandboxd::testing::ManualClock>(1000.0);
  auto backend = remote(kKey, clock);
  negotiation(*backend)->refresh_capabilities_if_stale();
  EXPECT_FALSE(negotiation(*backend)->cached_mount_contract_capability_known());
  EXPECT_TRUE(logger_->contains(LogLevel::warning, "Provisioner capability probe failed"));

  start_service();
  negotiation(*backend)->refresh_capabilities_if_stale();
  EXPECT_FALSE(negotiation(*backend)->cached_mount_contract_capability_known())
      << "retried before 1 s";
  clock->advance(1.0);
  negotiation(*backend)->refresh_capabilities_if_stale();
  EXPECT_TRUE(negotiation(*backend)->cached_mount_contract_capability_known());
  EXPECT_EQ(negotiation(*backend)->cached_mount_contract_version(), 2);
}

TEST_F(ProvisionerEndToEndTest, TheBinaryRefusesABadConfigNamingTheValue) {
  std::ofstream(config_file()) << R"({"provisioner": {"container_port": 9000}})";
  ServiceProcess bad(config_file(), port_, dir_.file("service.log"));
  EXPECT_EQ(bad.listening_line(), "");
  EXPECT_EQ(bad.stop(), 3);
  EXPECT_NE(
      service_log().find(config_file() + ": provisioner.container_port: 9000 is not supported"),
      std::string::npos)
      << service_log();
}

}  // namespace
}  // namespace sandboxd::core

// Tests of remote_provisioner:RemoteSandboxBackend, loaded through the real PluginLoader by its
// use string, against a real HTTP server on 127.0.0.1 (cpp-httplib) that records every
// request and answers scripted responses. Time moves through a ManualClock.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <rapidjson/document.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sandboxd/capabilities.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/sdk.hpp"
#include "test_support.hpp"

namespace {

// The backend's mount-contract negotiation capability (a remote provisioner backend has it).
[[maybe_unused]] sandboxd::MountContractNegotiation* negotiation(
    sandboxd::SandboxBackend& backend) {
  auto* offered = sandboxd::backend_capability<sandboxd::MountContractNegotiation>(backend);
  if (!offered) throw std::logic_error("the backend offers no MountContractNegotiation");
  return offered;
}

using sandboxd::backend_capability;
using sandboxd::CreateRequest;
using sandboxd::LogLevel;
using sandboxd::MountContractChangedError;
using sandboxd::MountModeKind;
using sandboxd::SandboxBackend;
using sandboxd::SandboxDiscoveryResult;
using sandboxd::SandboxInfo;
using sandboxd::SandboxUsage;
using sandboxd::testing::CapturingLogger;
using sandboxd::testing::ManualClock;

constexpr const char* kUse = "remote_provisioner:RemoteSandboxBackend";
constexpr const char* kApiKey = "secret-key-d41d8cd9";

struct Recorded {
  std::string method;
  std::string path;
  std::map<std::string, std::string> headers;  // the ones the tests look at
  std::string body;
};

struct Scripted {
  int status = 200;
  std::string body;
};

// A provisioner stand-in. Lock story: `mutex_` guards `requests_` and `script_`; handlers run
// on httplib's worker threads.
class FakeProvisioner {
 public:
  // port 0: any free port; otherwise that one (a provisioner coming back where it was).
  explicit FakeProvisioner(int port = 0) {
    auto handler = [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res);
    };
    server_.Get(".*", handler);
    server_.Post(".*", handler);
    server_.Delete(".*", handler);
    if (port == 0) {
      port_ = server_.bind_to_any_port("127.0.0.1");
    } else {
      server_.bind_to_port("127.0.0.1", port);
      port_ = port;
    }
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeProvisioner() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int port() const { return port_; }
  // Every later answer waits this long first (the server stays responsive to stop()).
  void set_delay(std::chrono::milliseconds delay) { delay_ms_.store(delay.count()); }

  // Queue a response for "METHOD /path"; each is used once, in order.
  void push(const std::string& route, int status, std::string body = "") {
    std::lock_guard lock(mutex_);
    script_[route].push_back({status, std::move(body)});
  }

  std::vector<Recorded> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void handle(const httplib::Request& req, httplib::Response& res) {
    for (long waited = 0; waited < delay_ms_.load() && server_.is_running(); waited += 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::lock_guard lock(mutex_);
    Recorded recorded{req.method, req.path, {}, req.body};
    for (const auto& [name, value] : req.headers) {
      // httplib adds these on the receiving side; they are not what the client sent.
      if (name == "REMOTE_ADDR" || name == "REMOTE_PORT" || name == "LOCAL_ADDR" ||
          name == "LOCAL_PORT") {
        continue;
      }
      recorded.headers[name] = value;
    }
    requests_.push_back(recorded);
    auto& queue = script_[req.method + " " + req.path];
    if (queue.empty()) {
      res.status = 500;
      res.set_content("no scripted response", "text/plain");
      return;
    }
    const Scripted next = queue.front();
    queue.pop_front();
    res.status = next.status;
    res.set_content(next.body, "application/json");
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<long> delay_ms_{0};
  mutable std::mutex mutex_;
  std::vector<Recorded> requests_;
  std::map<std::string, std::deque<Scripted>> script_;
};

// A 127.0.0.1 port with nothing listening (bound, then closed).
int closed_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string json_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

struct Host {
  std::shared_ptr<CapturingLogger> logger = std::make_shared<CapturingLogger>();
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>(100.0);
  std::string ambient_user = "";
  bool legacy_skills = false;
  std::vector<std::string> legacy_asked_for;
};

std::shared_ptr<SandboxBackend> load(Host& host, const std::string& config_json) {
  sandboxd::PluginContext context;
  context.config_json = config_json;
  context.config_key_path = "sandbox.backend";
  context.logger = host.logger;
  context.clock = host.clock;
  context.ambient_user_id = [&host] { return host.ambient_user; };
  context.user_should_see_legacy_skills = [&host](const std::string& user) {
    host.legacy_asked_for.push_back(user);
    return host.legacy_skills;
  };
  sandboxd::core::PluginLoader loader({SANDBOXD_TEST_PLUGIN_DIR});
  return loader.load_backend(kUse, context, "remote_provisioner test");
}

std::shared_ptr<SandboxBackend> load(Host& host, const std::string& url,
                                     const std::string& api_key) {
  std::string config = "{\"provisioner_url\":\"" + json_escape(url) + "\"";
  if (!api_key.empty()) config += ",\"provisioner_api_key\":\"" + json_escape(api_key) + "\"";
  return load(host, config + "}");
}

rapidjson::Document parse(const std::string& body) {
  rapidjson::Document doc;
  doc.Parse(body.c_str(), body.size());
  EXPECT_FALSE(doc.HasParseError()) << body;
  return doc;
}

class RemoteBackendTest : public ::testing::Test {
 protected:
  std::shared_ptr<SandboxBackend> backend(const std::string& api_key = "") {
    return load(host_, server_.url() + "/", api_key);
  }

  FakeProvisioner server_;
  Host host_;
};

// ── configuration and construction ──

TEST_F(RemoteBackendTest, MissingProvisionerUrlNamesTheKeyPath) {
  try {
    load(host_, "{}");
    FAIL() << "expected a PluginConfigError";
  } catch (const std::exception& error) {
    EXPECT_NE(std::string(error.what()).find("sandbox.backend.provisioner_url"), std::string::npos)
        << error.what();
  }
}

TEST_F(RemoteBackendTest, ConstructorMakesNoRequestAndReportsItsKind) {
  auto remote = backend(kApiKey);
  EXPECT_TRUE(server_.requests().empty());
  EXPECT_TRUE(remote->requires_create_validation());
  EXPECT_EQ(remote->mount_mode_kind(), MountModeKind::contract_negotiated);
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 0);
  EXPECT_FALSE(negotiation(*remote)->cached_mount_contract_capability_known());
}

// ── capability probing (§10.2) ──

// Python: test_remote_backend_negotiates_mount_contract_capability
TEST_F(RemoteBackendTest, NegotiatesMountContractCapability) {
  server_.push("GET /api/capabilities", 200, R"({"mount_contract_version": 2})");
  auto remote = backend("secret");                        // trailing '/' in the URL is dropped
  negotiation(*remote)->refresh_capabilities_if_stale();  // never probed: stale, so this probes
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 2);
  EXPECT_TRUE(negotiation(*remote)->cached_mount_contract_capability_known());
  EXPECT_EQ(negotiation(*remote)->mount_contract_snapshot(),
            (sandboxd::MountContractSnapshot{2, true}));
  const auto requests = server_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].method, "GET");
  EXPECT_EQ(requests[0].path, "/api/capabilities");
  // Exactly the headers the reference sends (requests.get(url, headers={"X-API-Key": key})),
  // plus what any HTTP/1.1 client must: no body, so no Content-Type.
  std::map<std::string, std::string> sent = requests[0].headers;
  sent.erase("Host");
  sent.erase("Accept");
  EXPECT_EQ(sent, (std::map<std::string, std::string>{{"X-API-Key", "secret"}}));
}

// The probe is bounded at 5 s (the reference's timeout=5): a provisioner that answers after
// 8 s leaves the capability unknown after 5 s, not after 8.
TEST_F(RemoteBackendTest, TheCapabilityProbeGivesUpAfterFiveSeconds) {
  server_.push("GET /api/capabilities", 200, R"({"mount_contract_version": 2})");
  server_.set_delay(std::chrono::milliseconds(8000));
  auto remote = backend();
  const auto start = std::chrono::steady_clock::now();
  negotiation(*remote)->refresh_capabilities_if_stale();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("capability probe against a provisioner answering after 8 s gave up after %.2f s\n",
              waited);
  EXPECT_FALSE(negotiation(*remote)->cached_mount_contract_capability_known());
  EXPECT_GE(waited, 4.9);
  EXPECT_LT(waited, 7.5);
  server_.set_delay(std::chrono::milliseconds(0));
}

// Python: test_remote_backend_treats_missing_mount_capability_as_legacy
TEST_F(RemoteBackendTest, TreatsMissingMountCapabilityAsLegacy) {
  server_.push("GET /api/capabilities", 200, R"({"lark_cli_init_image": false})");
  auto remote = backend();
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 0);
  EXPECT_TRUE(negotiation(*remote)->cached_mount_contract_capability_known());
  ASSERT_EQ(server_.requests().size(), 1u);
  EXPECT_EQ(server_.requests()[0].headers.count("X-API-Key"), 0u);  // no key, no header
}

// Python: test_remote_backend_treats_missing_capability_endpoint_as_known_legacy
TEST_F(RemoteBackendTest, TreatsMissingCapabilityEndpointAsKnownLegacy) {
  server_.push("GET /api/capabilities", 404, R"({"detail": "Not Found"})");
  auto remote = backend();
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 0);
  EXPECT_TRUE(negotiation(*remote)->cached_mount_contract_capability_known());
}

// Python: test_remote_backend_distinguishes_unavailable_capability_probe
TEST_F(RemoteBackendTest, DistinguishesUnavailableCapabilityProbe) {
  auto remote = load(host_, "http://127.0.0.1:" + std::to_string(closed_port()), "");
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 0);
  EXPECT_FALSE(negotiation(*remote)->cached_mount_contract_capability_known());
}

TEST_F(RemoteBackendTest, ErrorStatusAndBadBodiesAreUnavailable) {
  for (const auto& [status, body] :
       std::vector<std::pair<int, std::string>>{{401, R"({"detail":"bad key"})"},
                                                {200, "not json"},
                                                {200, "[2]"},
                                                {200, R"({"mount_contract_version":"2"})"}}) {
    Host host;
    auto remote = load(host, server_.url(), "");
    server_.push("GET /api/capabilities", status, body);
    negotiation(*remote)->refresh_capabilities_if_stale();
    EXPECT_FALSE(negotiation(*remote)->cached_mount_contract_capability_known())
        << status << " " << body;
    EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 0);
  }
}

TEST_F(RemoteBackendTest, TransientFailureKeepsTheLastKnownVersion) {
  server_.push("GET /api/capabilities", 200, R"({"mount_contract_version": 2})");
  server_.push("GET /api/capabilities", 503, "");
  auto remote = backend();
  negotiation(*remote)->refresh_capabilities_if_stale();
  host_.clock->advance(30.0);
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_EQ(negotiation(*remote)->mount_contract_snapshot(),
            (sandboxd::MountContractSnapshot{2, false}));
}

// Python: test_remote_backend_retries_unavailable_capability_probe
TEST_F(RemoteBackendTest, RetriesUnavailableCapabilityProbe) {
  server_.push("GET /api/capabilities", 503, "not ready");
  server_.push("GET /api/capabilities", 200, R"({"mount_contract_version": 2})");
  auto remote = backend();
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_FALSE(negotiation(*remote)->cached_mount_contract_capability_known());

  host_.clock->advance(0.5);
  negotiation(*remote)->refresh_capabilities_if_stale();  // not yet stale
  EXPECT_EQ(server_.requests().size(), 1u);

  host_.clock->advance(0.5);  // 1.0 s after the failed probe
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_TRUE(negotiation(*remote)->cached_mount_contract_capability_known());
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 2);
  EXPECT_EQ(server_.requests().size(), 2u);
}

// The same with what the reference's test injects: a connection error (nothing listening),
// then the provisioner coming up on its port.
TEST_F(RemoteBackendTest, RetriesACapabilityProbeThatCouldNotConnect) {
  const int port = closed_port();
  auto remote = load(host_, "http://127.0.0.1:" + std::to_string(port), "");
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_FALSE(negotiation(*remote)->cached_mount_contract_capability_known());
  EXPECT_TRUE(host_.logger->contains("Connection refused") ||
              host_.logger->contains("Couldn't connect"));

  FakeProvisioner provisioner(port);
  provisioner.push("GET /api/capabilities", 200, R"({"mount_contract_version": 2})");
  host_.clock->advance(0.5);
  negotiation(*remote)->refresh_capabilities_if_stale();  // not yet stale
  EXPECT_TRUE(provisioner.requests().empty());
  host_.clock->advance(0.5);
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_TRUE(negotiation(*remote)->cached_mount_contract_capability_known());
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 2);
  EXPECT_EQ(provisioner.requests().size(), 1u);
}

// Python: test_remote_backend_retries_known_legacy_capability_probe
TEST_F(RemoteBackendTest, RetriesKnownLegacyCapabilityProbe) {
  host_.clock->set(200.0);
  server_.push("GET /api/capabilities", 404);
  server_.push("GET /api/capabilities", 200, R"({"mount_contract_version": 2})");
  auto remote = backend();
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 0);

  host_.clock->advance(29.0);
  negotiation(*remote)->refresh_capabilities_if_stale();  // known results stay fresh for 30 s
  EXPECT_EQ(server_.requests().size(), 1u);

  host_.clock->advance(1.0);
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 2);
  EXPECT_EQ(server_.requests().size(), 2u);
}

// Python: test_remote_mount_mode_refreshes_stale_current_contract, through a real Provider
// over the real remote backend: a known v2 contract goes stale after 30 s, the provisioner now
// answers the capability probe with 404 (a legacy one), so the provider stops bind-mounting
// thread data.
TEST_F(RemoteBackendTest, AProviderRefreshesAStaleV2ContractToALegacyV0) {
  sandboxd::testing::TempDir tmp;
  server_.push("GET /api/capabilities", 200, R"({"mount_contract_version": 2})");
  sandboxd::core::ProviderDeps deps;
  deps.backend = backend();
  sandboxd::PluginContext store_context;
  store_context.config_key_path = "sandbox.ownership";
  store_context.owner_id = "remote-test";
  store_context.base_dir = tmp.path().string();
  store_context.clock = host_.clock;
  store_context.logger = host_.logger;
  deps.ownership =
      sandboxd::core::PluginLoader({SANDBOXD_TEST_PLUGIN_DIR})
          .load_ownership_store("ownership_memory:MemoryOwnershipStore", store_context, "test");
  deps.logger = host_.logger;
  deps.clock = host_.clock;
  deps.paths = std::make_shared<const sandboxd::core::Paths>(tmp.path(), tmp.path().string());
  deps.options.thread_data_mounts = true;
  deps.options.run_background_threads = false;
  sandboxd::core::Provider provider(std::move(deps));

  EXPECT_TRUE(provider.provider_uses_thread_data_mounts());  // probes: v2, known
  EXPECT_EQ(negotiation(*provider.backend())->cached_mount_contract_version(), 2);
  host_.clock->advance(30.0);
  server_.push("GET /api/capabilities", 404, R"({"detail":"Not Found"})");
  EXPECT_FALSE(provider.provider_uses_thread_data_mounts());
  EXPECT_EQ(negotiation(*provider.backend())->cached_mount_contract_version(), 0);
  EXPECT_TRUE(negotiation(*provider.backend())->cached_mount_contract_capability_known());
  EXPECT_EQ(server_.requests().size(), 2u);
  provider.shutdown();
}

// ── create (§10.3) ──

std::shared_ptr<SandboxBackend> negotiated_v2(FakeProvisioner& server, Host& host,
                                              const std::string& api_key = "") {
  server.push("GET /api/capabilities", 200, R"({"mount_contract_version": 2})");
  auto remote = load(host, server.url(), api_key);
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 2);
  return remote;
}

const char* kCreated42 =
    R"({"sandbox_id":"sandbox-42","sandbox_url":"http://sandbox.local","user_id":"%U",)"
    R"("thread_id":"thread-42","mount_contract_version":2})";

std::string created_for(const std::string& user) {
  std::string body = kCreated42;
  body.replace(body.find("%U"), 2, user);
  return body;
}

// Python: test_remote_backend_create_forwards_effective_user_id
TEST_F(RemoteBackendTest, CreateForwardsEffectiveUserId) {
  auto remote = negotiated_v2(server_, host_);
  host_.ambient_user = "user-7";
  host_.legacy_skills = true;
  server_.push("POST /api/sandboxes", 200, created_for("user-7"));

  CreateRequest request;
  request.thread_id = "thread-42";
  request.sandbox_id = "sandbox-42";
  const SandboxInfo info = remote->create(request);

  const auto requests = server_.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[1].method, "POST");
  EXPECT_EQ(requests[1].path, "/api/sandboxes");
  EXPECT_EQ(requests[1].headers.at("Content-Type"), "application/json");
  rapidjson::Document expected =
      parse(R"({"sandbox_id":"sandbox-42","thread_id":"thread-42","user_id":"user-7",)"
            R"("required_mount_contract_version":2,"include_legacy_skills":true,)"
            R"("provision_lark_cli_runtime":false,"provision_lark_cli_broker":false})");
  EXPECT_TRUE(parse(requests[1].body) == expected) << requests[1].body;
  EXPECT_EQ(host_.legacy_asked_for, std::vector<std::string>{"user-7"});

  EXPECT_EQ(info.sandbox_id, "sandbox-42");
  EXPECT_EQ(info.sandbox_url, "http://sandbox.local");
  EXPECT_EQ(info.user_id, "user-7");
  EXPECT_EQ(info.thread_id, "thread-42");
  EXPECT_EQ(info.mount_contract_version, 2);
  EXPECT_TRUE(host_.logger->contains(
      LogLevel::info, "Provisioner created sandbox sandbox-42: sandbox_url=http://sandbox.local"));
}

// Python: test_remote_backend_create_prefers_explicit_user_id
TEST_F(RemoteBackendTest, CreatePrefersExplicitUserId) {
  auto remote = negotiated_v2(server_, host_);
  host_.ambient_user = "default";
  host_.legacy_skills = false;
  server_.push("POST /api/sandboxes", 200, created_for("ou-user"));

  CreateRequest request;
  request.thread_id = "thread-42";
  request.sandbox_id = "sandbox-42";
  request.user_id = "ou-user";
  remote->create(request);

  const auto body = parse(server_.requests().back().body);
  EXPECT_STREQ(body["user_id"].GetString(), "ou-user");
  EXPECT_FALSE(body["include_legacy_skills"].GetBool());
  EXPECT_EQ(body["required_mount_contract_version"].GetInt(), 2);
}

TEST_F(RemoteBackendTest, CreateWithoutNegotiatedContractOmitsTheVersionAndUsesDefaultUser) {
  auto remote = backend();
  server_.push("POST /api/sandboxes", 200,
               R"({"sandbox_id":"s","sandbox_url":"http://sb","user_id":"default"})");
  CreateRequest request;
  request.sandbox_id = "s";
  request.extra_mounts = {{"/w", "/mnt/user-data/workspace", false},
                          {"/acp", "/mnt/acp-workspace", true}};
  request.provision_lark_cli_broker = true;
  const SandboxInfo info = remote->create(request);
  EXPECT_EQ(info.mount_contract_version, 0);

  rapidjson::Document expected = parse(
      R"({"sandbox_id":"s","thread_id":null,"user_id":"default","include_legacy_skills":false,)"
      R"("provision_lark_cli_runtime":false,"provision_lark_cli_broker":true,)"
      R"("extra_mounts":[{"host_path":"/acp","container_path":"/mnt/acp-workspace",)"
      R"("read_only":true}]})");
  EXPECT_TRUE(parse(server_.requests().back().body) == expected) << server_.requests().back().body;
}

TEST_F(RemoteBackendTest, CreateReportsAContractChange) {
  auto remote = negotiated_v2(server_, host_);
  server_.push("POST /api/sandboxes", 200,
               R"({"sandbox_id":"s","sandbox_url":"http://sb","mount_contract_version":3})");
  CreateRequest request;
  request.sandbox_id = "s";
  try {
    remote->create(request);
    FAIL() << "expected MountContractChangedError";
  } catch (const MountContractChangedError& error) {
    EXPECT_EQ(error.previous_version(), 2);
    EXPECT_EQ(error.current_version(), 3);
  }
  EXPECT_EQ(negotiation(*remote)->mount_contract_snapshot(),
            (sandboxd::MountContractSnapshot{3, true}));

  // A downgrade (the version missing from the answer counts as 0) restarts too.
  server_.push("POST /api/sandboxes", 200, R"({"sandbox_id":"s","sandbox_url":"http://sb"})");
  try {
    remote->create(request);
    FAIL() << "expected MountContractChangedError";
  } catch (const MountContractChangedError& error) {
    EXPECT_EQ(error.previous_version(), 3);
    EXPECT_EQ(error.current_version(), 0);
  }
  EXPECT_EQ(negotiation(*remote)->cached_mount_contract_version(), 0);
}

// A provisioner that refuses the requested contract answers 409 with the one it serves
// (design §10.3's proposed wire behaviour, what sandboxd-provisioner does): nothing was created,
// and the acquisition restarts under that version. A 409 without a version is a plain failure.
TEST_F(RemoteBackendTest, CreateRefusedFor409WithAVersionIsAContractChange) {
  auto remote = negotiated_v2(server_, host_);
  server_.push("POST /api/sandboxes", 409,
               R"({"detail":"This provisioner serves mount contract 0, not 2",)"
               R"("mount_contract_version":0})");
  CreateRequest request;
  request.sandbox_id = "s";
  try {
    remote->create(request);
    FAIL() << "expected MountContractChangedError";
  } catch (const MountContractChangedError& error) {
    EXPECT_EQ(error.previous_version(), 2);
    EXPECT_EQ(error.current_version(), 0);
  }
  EXPECT_EQ(negotiation(*remote)->mount_contract_snapshot(),
            (sandboxd::MountContractSnapshot{0, true}));

  server_.push("POST /api/sandboxes", 409, R"({"detail":"exists for a different user or thread"})");
  try {
    remote->create(request);
    FAIL() << "expected an error";
  } catch (const MountContractChangedError&) {
    FAIL() << "a 409 without a version is not a contract change";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("HTTP 409"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("different user or thread"), std::string::npos)
        << error.what();
  }
}

TEST_F(RemoteBackendTest, CreateFailureIsLoggedAndRaised) {
  auto remote = backend(kApiKey);
  server_.push("POST /api/sandboxes", 500, R"({"detail":"boom"})");
  CreateRequest request;
  request.sandbox_id = "sandbox-9";
  try {
    remote->create(request);
    FAIL() << "expected an error";
  } catch (const MountContractChangedError&) {
    FAIL() << "not a contract change";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()).rfind("Provisioner create failed: HTTP 500", 0), 0u)
        << error.what();
  }
  EXPECT_TRUE(host_.logger->contains(LogLevel::error, "Provisioner create failed for sandbox-9: "));
  EXPECT_EQ(server_.requests().back().headers.at("X-API-Key"), kApiKey);
}

TEST_F(RemoteBackendTest, CreateRejectsAnUnsafeConversionMountBeforeAnyRequest) {
  auto remote = backend();
  CreateRequest request;
  request.sandbox_id = "s";
  request.extra_mounts = {
      {"/t/user-data/uploads", "/mnt/user-data/uploads", false},
      {"/t/user-data/.upload-conversions", "/mnt/user-data/.upload-conversions", false}};
  EXPECT_THROW(remote->create(request), std::invalid_argument);
  EXPECT_TRUE(server_.requests().empty());
}

// ── discover (§10.4) ──

// Python: test_remote_discovery_carries_verified_identity
TEST_F(RemoteBackendTest, DiscoveryCarriesVerifiedIdentity) {
  auto remote = backend();
  server_.push("GET /api/sandboxes/sandbox-1", 200,
               R"({"sandbox_url":"http://sandbox.local","user_id":"alice",)"
               R"("thread_id":"thread-1","mount_contract_version":2})");
  const auto info = remote->discover("sandbox-1");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->sandbox_id, "sandbox-1");
  EXPECT_EQ(info->sandbox_url, "http://sandbox.local");
  EXPECT_EQ(info->user_id, "alice");
  EXPECT_EQ(info->thread_id, "thread-1");
  EXPECT_EQ(info->mount_contract_version, 2);
}

// Python: test_remote_discovery_ignores_legacy_unverified_response
TEST_F(RemoteBackendTest, DiscoveryIgnoresLegacyUnverifiedResponse) {
  auto remote = backend();
  server_.push("GET /api/sandboxes/sandbox-old", 200, R"({"sandbox_url":"http://legacy.local"})");
  EXPECT_FALSE(remote->discover("sandbox-old").has_value());
}

TEST_F(RemoteBackendTest, DiscoverMissingOrFailingIsNothing) {
  auto remote = backend();
  server_.push("GET /api/sandboxes/a", 404);
  EXPECT_FALSE(remote->discover("a").has_value());
  server_.push("GET /api/sandboxes/b", 500);
  EXPECT_FALSE(remote->discover("b").has_value());
  auto unreachable = load(host_, "http://127.0.0.1:" + std::to_string(closed_port()), "");
  EXPECT_FALSE(unreachable->discover("c").has_value());
}

TEST_F(RemoteBackendTest, DiscoverForReconciliationMapsTheInstanceRoute) {
  auto remote = backend();
  server_.push("GET /api/sandboxes/s/instance", 200,
               R"({"backend_namespace":"ns","incarnation_id":"uid-1","sandbox_url":"http://sb",)"
               R"("user_id":"alice","thread_id":"t","mount_contract_version":2})");
  auto found = remote->discover_for_reconciliation("s");
  EXPECT_EQ(found.status, SandboxDiscoveryResult::Status::found);
  EXPECT_EQ(found.backend_namespace, "ns");
  EXPECT_EQ(found.incarnation_id, "uid-1");
  ASSERT_TRUE(found.info.has_value());
  EXPECT_EQ(found.info->user_id, "alice");
  EXPECT_EQ(found.info->mount_contract_version, 2);

  server_.push("GET /api/sandboxes/s/instance", 200,
               R"({"backend_namespace":"ns","incarnation_id":"uid-2","sandbox_url":null})");
  auto no_service = remote->discover_for_reconciliation("s");
  EXPECT_EQ(no_service.status, SandboxDiscoveryResult::Status::found);
  EXPECT_FALSE(no_service.info.has_value());
  EXPECT_EQ(no_service.incarnation_id, "uid-2");

  server_.push("GET /api/sandboxes/s/instance", 200,
               R"({"backend_namespace":"ns","incarnation_id":null})");
  auto absent = remote->discover_for_reconciliation("s");
  EXPECT_EQ(absent.status, SandboxDiscoveryResult::Status::absent);
  EXPECT_EQ(absent.backend_namespace, "ns");

  server_.push("GET /api/sandboxes/s/instance", 404);
  EXPECT_EQ(remote->discover_for_reconciliation("s").status,
            SandboxDiscoveryResult::Status::unknown);
  server_.push("GET /api/sandboxes/s/instance", 200, "garbage");
  EXPECT_EQ(remote->discover_for_reconciliation("s").status,
            SandboxDiscoveryResult::Status::unknown);
}

// ── is_alive, destroy, list_running (§10.5) ──

TEST_F(RemoteBackendTest, IsAliveReadsTheStatus) {
  auto remote = backend();
  SandboxInfo info;
  info.sandbox_id = "s";
  server_.push("GET /api/sandboxes/s", 200, R"({"status":"Running"})");
  EXPECT_TRUE(remote->is_alive(info));
  server_.push("GET /api/sandboxes/s", 200, R"({"status":"Pending"})");
  EXPECT_FALSE(remote->is_alive(info));
  server_.push("GET /api/sandboxes/s", 404);
  EXPECT_FALSE(remote->is_alive(info));
  server_.push("GET /api/sandboxes/s", 500, "oops");
  try {
    remote->is_alive(info);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what()), "Provisioner health check failed for s: HTTP 500 oops");
  }
  auto unreachable = load(host_, "http://127.0.0.1:" + std::to_string(closed_port()), "");
  EXPECT_THROW(unreachable->is_alive(info), std::runtime_error);
}

TEST_F(RemoteBackendTest, DestroyNeverThrows) {
  auto remote = backend(kApiKey);
  SandboxInfo info;
  info.sandbox_id = "s";
  server_.push("DELETE /api/sandboxes/s", 200, R"({"ok":true})");
  remote->destroy(info);
  server_.push("DELETE /api/sandboxes/s", 500, "nope");
  remote->destroy(info);
  EXPECT_TRUE(host_.logger->contains(LogLevel::warning, "Provisioner destroy returned 500: nope"));
  auto unreachable = load(host_, "http://127.0.0.1:" + std::to_string(closed_port()), kApiKey);
  EXPECT_NO_THROW(unreachable->destroy(info));
  const auto requests = server_.requests();
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0].method, "DELETE");
  EXPECT_EQ(requests[0].headers.at("X-API-Key"), kApiKey);
}

TEST_F(RemoteBackendTest, ListRunningSkipsMalformedEntries) {
  auto remote = backend();
  server_.push("GET /api/sandboxes", 200,
               R"({"sandboxes":[{"sandbox_id":"a","sandbox_url":"http://a"},)"
               R"({"sandbox_id":"","sandbox_url":"http://x"},{"sandbox_url":"http://y"},)"
               R"(42,{"sandbox_id":"b","sandbox_url":"http://b","user_id":"u","thread_id":"t",)"
               R"("mount_contract_version":2}]})");
  const auto running = remote->list_running();
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0].sandbox_id, "a");
  EXPECT_EQ(running[0].sandbox_url, "http://a");
  EXPECT_EQ(running[1].sandbox_id, "b");
  EXPECT_EQ(running[1].mount_contract_version, 2);
  EXPECT_TRUE(
      host_.logger->contains(LogLevel::info, "Provisioner list_running: 2 sandbox(es) found"));
  EXPECT_TRUE(host_.logger->contains(LogLevel::warning, "skipping malformed entry"));

  server_.push("GET /api/sandboxes", 200, R"({"sandboxes":{}})");
  EXPECT_TRUE(remote->list_running().empty());
  auto unreachable = load(host_, "http://127.0.0.1:" + std::to_string(closed_port()), "");
  EXPECT_TRUE(unreachable->list_running().empty());
}

// ── secrets ──

TEST_F(RemoteBackendTest, ApiKeyNeverAppearsInALogLine) {
  auto remote = negotiated_v2(server_, host_, kApiKey);
  SandboxInfo info;
  info.sandbox_id = "s";
  CreateRequest request;
  request.sandbox_id = "s";
  server_.push("POST /api/sandboxes", 500, "fail");
  EXPECT_ANY_THROW(remote->create(request));
  server_.push("DELETE /api/sandboxes/s", 403, "forbidden");
  remote->destroy(info);
  remote->list_running();  // unscripted: 500
  host_.clock->advance(31.0);
  negotiation(*remote)
      ->refresh_capabilities_if_stale();  // unscripted: 500, logged as a failed probe
  auto unreachable = load(host_, "http://127.0.0.1:" + std::to_string(closed_port()), kApiKey);
  negotiation(*unreachable)->refresh_capabilities_if_stale();
  unreachable->destroy(info);
  unreachable->discover("s");

  EXPECT_FALSE(host_.logger->lines().empty());
  for (const auto& line : host_.logger->lines()) {
    EXPECT_EQ(line.message.find(kApiKey), std::string::npos) << line.message;
  }
  for (const auto& request_seen : server_.requests()) {
    EXPECT_EQ(request_seen.headers.at("X-API-Key"), kApiKey);
  }
}

// ── bad answers and bad settings (issue 13 A.4, A.7) ──

const std::string kRejectedBy = " (rejected by plugin 'remote_provisioner:RemoteSandboxBackend')";

std::string load_error(Host& host, const std::string& config_json) {
  try {
    load(host, config_json);
  } catch (const std::exception& error) {
    return error.what();
  }
  return "";
}

TEST_F(RemoteBackendTest, CreateRefusesASandboxUrlThatIsNotHttp) {
  auto remote = backend();
  CreateRequest request;
  request.sandbox_id = "s";
  for (const std::string url : {"file:///dev/zero", "gopher://127.0.0.1/", "//host/x"}) {
    server_.push("POST /api/sandboxes", 200, R"({"sandbox_id":"s","sandbox_url":")" + url + "\"}");
    try {
      remote->create(request);
      FAIL() << url << " was accepted";
    } catch (const std::runtime_error& error) {
      EXPECT_EQ(std::string(error.what()),
                "Provisioner create failed: response has a sandbox_url that is not http:// or "
                "https://: '" +
                    url + "'");
    }
  }
}

TEST_F(RemoteBackendTest, DiscoveryAndListingIgnoreASandboxUrlThatIsNotHttp) {
  auto remote = backend();
  server_.push("GET /api/sandboxes/s", 200,
               R"({"sandbox_url":"file:///dev/zero","user_id":"alice","thread_id":"t"})");
  EXPECT_FALSE(remote->discover("s").has_value());
  server_.push("GET /api/sandboxes", 200,
               R"({"sandboxes":[{"sandbox_id":"a","sandbox_url":"file:///etc/passwd"},)"
               R"({"sandbox_id":"b","sandbox_url":"http://127.0.0.1:1"}],"count":2})");
  const auto listed = remote->list_running();
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].sandbox_id, "b");
}

TEST_F(RemoteBackendTest, DeepAndEndlessBodiesAreClearErrorsNotCrashes) {
  auto remote = backend();
  CreateRequest request;
  request.sandbox_id = "s";
  server_.push("POST /api/sandboxes", 200, std::string(1000000, '['));
  try {
    remote->create(request);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& error) {
    EXPECT_EQ(std::string(error.what())
                  .rfind("Provisioner create failed: response is not a JSON "
                         "object: HTTP 200 [[[[",
                         0),
              0u)
        << std::string(error.what()).substr(0, 200);
    EXPECT_LT(std::string(error.what()).size(), 700u);  // the body is shortened in the message
  }
  server_.push("GET /api/sandboxes", 200, "{\"sandboxes\":" + std::string(1000000, '[') + "}");
  EXPECT_TRUE(remote->list_running().empty());
  server_.push("GET /api/sandboxes/s", 200, std::string(40u << 20, ' '));
  EXPECT_FALSE(remote->discover("s").has_value());
  EXPECT_TRUE(host_.logger->contains(LogLevel::debug, "the answer's body exceeded 33554432 bytes"));
}

TEST_F(RemoteBackendTest, AProvisionerUrlThatIsNotHttpIsRefusedAtLoad) {
  const std::string error = load_error(host_, R"({"provisioner_url":"file:///var/run/x"})");
  EXPECT_EQ(error,
            "sandbox.backend.provisioner_url: must be an http:// or https:// URL, got "
            "'file:///var/run/x'" +
                kRejectedBy);
}

TEST_F(RemoteBackendTest, CredentialsInTheProvisionerUrlNeverReachAMessage) {
  const std::string url = "http://gateway:hunter2@127.0.0.1:" + std::to_string(closed_port());
  auto remote = load(host_, url, "");
  CreateRequest request;
  request.sandbox_id = "s";
  std::string error;
  try {
    remote->create(request);
  } catch (const std::exception& e) {
    error = e.what();
  }
  EXPECT_NE(error.find("http://<redacted>@127.0.0.1:"), std::string::npos) << error;
  negotiation(*remote)->refresh_capabilities_if_stale();
  remote->discover("s");
  remote->list_running();
  SandboxInfo info;
  info.sandbox_id = "s";
  remote->destroy(info);
  EXPECT_EQ(error.find("hunter2"), std::string::npos) << error;
  ASSERT_FALSE(host_.logger->lines().empty());
  for (const auto& line : host_.logger->lines()) {
    EXPECT_EQ(line.message.find("hunter2"), std::string::npos) << line.message;
  }
  EXPECT_EQ(load_error(host_, R"({"provisioner_url":"ftp://u:hunter2@h"})").find("hunter2"),
            std::string::npos);
}

TEST_F(RemoteBackendTest, AnApiKeyWithALineBreakIsRefusedWithoutShowingIt) {
  const std::string config = "{\"provisioner_url\":\"" + server_.url() +
                             "\",\"provisioner_api_key\":\"k3y\\r\\nX-Injected: 1\"}";
  const std::string error = load_error(host_, config);
  EXPECT_EQ(error,
            "sandbox.backend.provisioner_api_key: contains a control character (CR, LF, tab or "
            "similar); the value is not shown" +
                kRejectedBy);
  EXPECT_TRUE(server_.requests().empty());
}

TEST_F(RemoteBackendTest, AMistypedApiKeyIsDescribedByItsTypeOnly) {
  const std::string error = load_error(
      host_, "{\"provisioner_url\":\"" + server_.url() + "\",\"provisioner_api_key\":987654321}");
  EXPECT_EQ(error,
            "sandbox.backend.provisioner_api_key: expected a string, got a number (value "
            "redacted)" +
                kRejectedBy);
}

// ── a deliberately broken server (raw TCP on 127.0.0.1, not an HTTP library) ──

namespace broken {

// Answers every connection with `reply` bytes, then closes it (or, with hold_open, keeps it
// open without another byte until the test ends). Lock story: only the accept thread touches
// the sockets; `stop_` is atomic.
class RawServer {
 public:
  RawServer(std::string reply, bool hold_open) : reply_(std::move(reply)), hold_open_(hold_open) {
    listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(listener_, 8);
    socklen_t length = sizeof address;
    ::getsockname(listener_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~RawServer() {
    stop_ = true;
    ::shutdown(listener_, SHUT_RDWR);
    thread_.join();
    ::close(listener_);
    for (int fd : held_) ::close(fd);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

 private:
  void serve() {
    while (!stop_) {
      const int fd = ::accept(listener_, nullptr, nullptr);
      if (fd < 0) return;
      char request[4096];
      (void)::recv(fd, request, sizeof request, 0);  // one read: the request line and headers
      (void)::send(fd, reply_.data(), reply_.size(), MSG_NOSIGNAL);
      if (hold_open_) {
        held_.push_back(fd);
      } else {
        ::close(fd);
      }
    }
  }

  std::string reply_;
  bool hold_open_;
  int listener_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<int> held_;
  std::thread thread_;
};

std::string create_error(SandboxBackend& remote) {
  CreateRequest request;
  request.sandbox_id = "s";
  try {
    remote.create(request);
  } catch (const MountContractChangedError&) {
    return "<contract change>";
  } catch (const std::exception& error) {
    return error.what();
  }
  return "<no error>";
}

}  // namespace broken

TEST_F(RemoteBackendTest, AServerThatSpeaksGarbageIsAClearFailure) {
  broken::RawServer server("SSH-2.0-OpenSSH_9.2p1\r\n", false);
  auto remote = load(host_, server.url(), kApiKey);
  negotiation(*remote)->refresh_capabilities_if_stale();
  EXPECT_FALSE(negotiation(*remote)->cached_mount_contract_capability_known());
  const std::string error = broken::create_error(*remote);
  std::printf("garbage answer to create: %s\n", error.c_str());
  EXPECT_EQ(error.rfind("Provisioner create failed: ", 0), 0u) << error;
  EXPECT_EQ(remote->discover("s"), std::nullopt);
  EXPECT_TRUE(remote->list_running().empty());
  EXPECT_THROW(remote->is_alive(SandboxInfo{"s", "http://x"}), std::runtime_error);
}

TEST_F(RemoteBackendTest, ATruncatedAnswerIsAClearFailureNotAPartialSandbox) {
  broken::RawServer server(
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 300\r\n\r\n"
      R"({"sandbox_id":"s","sandbox_url":"http://127.0.0.1:1","mount_contract_version":)",
      false);
  auto remote = load(host_, server.url(), kApiKey);
  const std::string error = broken::create_error(*remote);
  std::printf("truncated answer to create: %s\n", error.c_str());
  EXPECT_EQ(error.rfind("Provisioner create failed: ", 0), 0u) << error;
  EXPECT_EQ(remote->discover("s"), std::nullopt);
}

// Headers arrive, the body never finishes: the 5 s bound of the probe still holds.
TEST_F(RemoteBackendTest, ABodyThatStallsAfterTheHeadersStillTimesOut) {
  broken::RawServer server("HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{\"mount_", true);
  auto remote = load(host_, server.url(), kApiKey);
  const auto start = std::chrono::steady_clock::now();
  negotiation(*remote)->refresh_capabilities_if_stale();
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("probe against a stalled body gave up after %.2f s\n", waited);
  EXPECT_FALSE(negotiation(*remote)->cached_mount_contract_capability_known());
  EXPECT_GE(waited, 4.9);
  EXPECT_LT(waited, 7.5);
}

// ── what a sandbox uses (issue 36: serve's operator page over a provisioner) ──

TEST_F(RemoteBackendTest, UsageIsAskedOfTheProvisionerWithTheKey) {
  auto remote = backend(kApiKey);
  auto* meter = backend_capability<SandboxUsage>(*remote);
  ASSERT_NE(meter, nullptr) << "the remote backend offers SandboxUsage";
  server_.push(
      "GET /api/sandboxes/sb-1/usage", 200,
      R"({"cpu_seconds": 2.5, "memory_bytes": 4096, "memory_limit_bytes": 8192, "pids": 4})");
  const SandboxUsage::Reading reading = meter->usage(SandboxInfo{"sb-1", "http://x"});
  EXPECT_EQ(reading.cpu_seconds, 2.5);
  EXPECT_EQ(reading.memory_bytes, 4096u);
  EXPECT_EQ(reading.pids, 4u);
  EXPECT_FALSE(reading.online_cpus);
  const auto requests = server_.requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].headers.at("X-API-Key"), kApiKey);
}

TEST_F(RemoteBackendTest, AProvisionerWithoutUsageIsAskedAgainOnlyAfterAMinute) {
  auto remote = backend(kApiKey);
  auto* meter = backend_capability<SandboxUsage>(*remote);
  server_.push("GET /api/sandboxes/sb-1/usage", 501, R"({"detail": "no usage"})");
  EXPECT_THROW(meter->usage(SandboxInfo{"sb-1", "http://x"}), std::runtime_error);
  // The page's sampler asks every sandbox every few seconds: nothing goes out for a minute.
  host_.clock->advance(59);
  EXPECT_THROW(meter->usage(SandboxInfo{"sb-2", "http://x"}), std::runtime_error);
  EXPECT_EQ(server_.requests().size(), 1u);
  host_.clock->advance(2);
  server_.push("GET /api/sandboxes/sb-2/usage", 200, R"({"pids": 1})");
  EXPECT_EQ(meter->usage(SandboxInfo{"sb-2", "http://x"}).pids, 1u);
  EXPECT_EQ(server_.requests().size(), 2u);
}

// DeerFlow's own provisioner (and a sandboxd-provisioner from before the route) has no usage
// route: FastAPI's 404 {"detail": "Not Found"} for a path nothing serves. Asking every sandbox
// every few seconds would only repeat that answer.
TEST_F(RemoteBackendTest, AProvisionerWithoutTheUsageRouteIsAskedAgainOnlyAfterAMinute) {
  auto remote = backend(kApiKey);
  auto* meter = backend_capability<SandboxUsage>(*remote);
  server_.push("GET /api/sandboxes/sb-1/usage", 404, R"({"detail": "Not Found"})");
  EXPECT_THROW(meter->usage(SandboxInfo{"sb-1", "http://x"}), std::runtime_error);
  host_.clock->advance(59);
  EXPECT_THROW(meter->usage(SandboxInfo{"sb-2", "http://x"}), std::runtime_error);
  EXPECT_EQ(server_.requests().size(), 1u) << "nothing asked within the minute";
  host_.clock->advance(2);
  server_.push("GET /api/sandboxes/sb-2/usage", 200, R"({"pids": 2})");
  EXPECT_EQ(meter->usage(SandboxInfo{"sb-2", "http://x"}).pids, 2u);
}

TEST_F(RemoteBackendTest, AUsageFailureNamesTheSandboxAndTheStatus) {
  auto remote = backend(kApiKey);
  auto* meter = backend_capability<SandboxUsage>(*remote);
  server_.push("GET /api/sandboxes/sb-1/usage", 404, R"({"detail": "Sandbox 'sb-1' not found"})");
  try {
    meter->usage(SandboxInfo{"sb-1", "http://x"});
    FAIL() << "no throw";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "Provisioner usage of sb-1 answered HTTP 404");
  }
  server_.push("GET /api/sandboxes/sb-1/usage", 200, R"({"pids": "many"})");
  EXPECT_THROW(meter->usage(SandboxInfo{"sb-1", "http://x"}), std::runtime_error);
}

// The gateway's disk_limit bounds a remote sandbox's writable layer too: the provisioner's usage
// route carries the engine's SizeRw, which the remote backend offers as WritableLayerUsage.
TEST_F(RemoteBackendTest, TheWritableLayerIsReadFromTheProvisionersUsageRoute) {
  auto remote = backend(kApiKey);
  auto* layers = backend_capability<sandboxd::WritableLayerUsage>(*remote);
  ASSERT_NE(layers, nullptr) << "the remote backend offers WritableLayerUsage";
  server_.push("GET /api/sandboxes/sb-1/usage", 200,
               R"({"pids": 3, "writable_layer_bytes": 52428800})");
  EXPECT_EQ(layers->writable_layer_bytes(SandboxInfo{"sb-1", "http://x"}), 52428800u);
  // An engine that does not size layers: nothing to bound by, not an error.
  server_.push("GET /api/sandboxes/sb-1/usage", 200, R"({"pids": 3})");
  EXPECT_EQ(layers->writable_layer_bytes(SandboxInfo{"sb-1", "http://x"}), std::nullopt);
  // A sandbox the provisioner does not run: the host's pass skips it and looks again later.
  server_.push("GET /api/sandboxes/sb-2/usage", 404, R"({"detail": "Sandbox 'sb-2' not found"})");
  EXPECT_THROW(layers->writable_layer_bytes(SandboxInfo{"sb-2", "http://x"}), std::runtime_error);
  server_.push("GET /api/sandboxes/sb-1/usage", 200, R"({"writable_layer_bytes": -1})");
  EXPECT_THROW(layers->writable_layer_bytes(SandboxInfo{"sb-1", "http://x"}), std::runtime_error);
  // A provisioner without the route: unknown, and not asked again within the minute.
  server_.push("GET /api/sandboxes/sb-1/usage", 404, R"({"detail": "Not Found"})");
  EXPECT_EQ(layers->writable_layer_bytes(SandboxInfo{"sb-1", "http://x"}), std::nullopt);
  const std::size_t asked = server_.requests().size();
  host_.clock->advance(30);
  EXPECT_EQ(layers->writable_layer_bytes(SandboxInfo{"sb-1", "http://x"}), std::nullopt);
  EXPECT_EQ(server_.requests().size(), asked);
}

}  // namespace

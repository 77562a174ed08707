// sandboxd-provisioner's routes (design §10.8) through its real HTTP binding on 127.0.0.1, asked
// by a real HTTP client, over an in-process backend that records what reaches it (the engine
// path is provisioner_e2e_test's). Each case prints nothing on success; each asserts the exact
// status and message a gateway sees.
#include "provisioner_service.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <rapidjson/document.h>

#include <condition_variable>
#include <filesystem>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "http_binding.hpp"
#include "sandboxd/errors.hpp"
#include "test_support.hpp"

namespace sandboxd::provisioner {
namespace {

namespace fs = std::filesystem;
using sandboxd::testing::CapturingLogger;
using sandboxd::testing::TempDir;

constexpr const char* kKey = "key-0f8a1c";

// Sandboxes in a map. Lock story: `mutex_` guards every member below it; `release_create_`
// lets a test hold create() until it says so.
class RecordingBackend final : public SandboxBackend {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    std::unique_lock lock(mutex_);
    creates.push_back(request);
    if (hold_create) released_.wait(lock, [this] { return !hold_create; });
    if (create_error) throw std::runtime_error(*create_error);
    if (create_over_quota) {
      throw sandboxd::BackendCapacityError("capacity (quota): the cluster refused pod sandbox-" +
                                           request.sandbox_id + ": exceeded quota: pods=0");
    }
    SandboxInfo info;
    info.sandbox_id = request.sandbox_id;
    info.sandbox_url = "http://127.0.0.1:4" + std::to_string(10000 + sandboxes.size());
    info.container_name = "c-" + request.sandbox_id;
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    info.mount_contract_version = kSandboxMountContractVersion;
    sandboxes[request.sandbox_id] = info;
    return info;
  }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    destroyed.push_back(info);
    if (destroy_error) throw std::runtime_error(*destroy_error);
    sandboxes.erase(info.sandbox_id);
  }
  bool is_alive(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    return sandboxes.count(info.sandbox_id) > 0;
  }
  std::optional<SandboxInfo> discover(const std::string& id) override {
    std::lock_guard lock(mutex_);
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return std::nullopt;
    return it->second;
  }
  std::vector<SandboxInfo> list_running() override {
    std::lock_guard lock(mutex_);
    if (list_error) throw std::runtime_error(*list_error);
    std::vector<SandboxInfo> out;
    for (const auto& [id, info] : sandboxes) out.push_back(info);
    return out;
  }
  SandboxDiscoveryResult discover_for_reconciliation(const std::string& id) override {
    std::lock_guard lock(mutex_);
    if (lookups_unknown) return SandboxDiscoveryResult::unknown();
    auto it = sandboxes.find(id);
    if (it == sandboxes.end()) return SandboxDiscoveryResult::absent("test-ns");
    return SandboxDiscoveryResult::found(it->second, "test-ns", "incarnation-" + id);
  }

  // For the test thread: every change of a member goes through the lock the handlers take.
  template <class Change>
  void locked(Change change) {
    std::lock_guard lock(mutex_);
    change(*this);
  }

  void release_create() {
    std::lock_guard lock(mutex_);
    hold_create = false;
    released_.notify_all();
  }

  std::mutex mutex_;
  std::condition_variable released_;
  std::vector<CreateRequest> creates;
  std::vector<SandboxInfo> destroyed;
  std::map<std::string, SandboxInfo> sandboxes;
  std::optional<std::string> create_error, destroy_error, list_error;
  bool create_over_quota = false;
  bool hold_create = false;
  bool lookups_unknown = false;
};

// A RecordingBackend that can also tell what a sandbox uses (SandboxUsage), by composition: the
// provisioner sees one backend offering the capability.
class MeteredBackend final : public SandboxBackend, public SandboxUsage, public WritableLayerUsage {
 public:
  explicit MeteredBackend(std::shared_ptr<RecordingBackend> inner) : inner_(std::move(inner)) {}
  SandboxInfo create(const CreateRequest& request) override { return inner_->create(request); }
  void destroy(const SandboxInfo& info) override { inner_->destroy(info); }
  bool is_alive(const SandboxInfo& info) override { return inner_->is_alive(info); }
  std::optional<SandboxInfo> discover(const std::string& id) override {
    return inner_->discover(id);
  }
  std::vector<SandboxInfo> list_running() override { return inner_->list_running(); }
  Reading usage(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    asked.push_back(info.sandbox_id);
    if (usage_error) throw std::runtime_error(*usage_error);
    return reading;
  }
  std::optional<std::uint64_t> writable_layer_bytes(const SandboxInfo&) override {
    std::lock_guard lock(mutex_);
    if (layer_error) throw std::runtime_error(*layer_error);
    return layer_bytes;
  }

  std::mutex mutex_;  // guards what follows (handlers run on the server's workers)
  Reading reading;
  std::optional<std::uint64_t> layer_bytes;  // nullopt: the engine would not say
  std::optional<std::string> layer_error;
  std::optional<std::string> usage_error;
  std::vector<std::string> asked;

 private:
  std::shared_ptr<RecordingBackend> inner_;
};

rapidjson::Document parse(const std::string& body) {
  rapidjson::Document doc;
  doc.Parse(body.c_str(), body.size());
  return doc;
}

std::string detail_of(const httplib::Result& result) {
  if (!result) return "<no response>";
  rapidjson::Document doc = parse(result->body);
  if (!doc.IsObject() || !doc.HasMember("detail") || !doc["detail"].IsString()) return result->body;
  return doc["detail"].GetString();
}

// The 422 body's location ("body.extra_mounts.0.read_only") and type.
std::string violation_of(const httplib::Result& result) {
  if (!result) return "<no response>";
  rapidjson::Document doc = parse(result->body);
  if (!doc.IsObject() || !doc["detail"].IsArray() || doc["detail"].Empty()) return result->body;
  const auto& first = doc["detail"][0];
  std::string loc;
  for (const auto& part : first["loc"].GetArray()) {
    if (!loc.empty()) loc += ".";
    loc += part.IsString() ? part.GetString() : std::to_string(part.GetInt());
  }
  return loc + " " + first["type"].GetString();
}

class ProvisionerServiceTest : public ::testing::Test {
 protected:
  void start(int contract_version = kSandboxMountContractVersion, std::string key = kKey,
             double backend_timeout = 10.0, std::size_t max_body = 1024 * 1024) {
    start_with(
        [&](ServiceSettings& settings) {
          settings.api_key = std::move(key);
          settings.mount_contract_version = contract_version;
          settings.backend_timeout_seconds = backend_timeout;
        },
        max_body);
  }
  template <class Adjust>
  void start_with(Adjust adjust, std::size_t max_body = 1024 * 1024) {
    ServiceSettings settings;
    settings.api_key = kKey;
    settings.roots.host_base_dir = base();
    settings.roots.threads_host_path = base() + "/threads";
    adjust(settings);
    service_ = std::make_unique<ProvisionerService>(
        settings, served_ ? served_ : std::shared_ptr<SandboxBackend>(backend_), logger_);
    service_->prepare_state_roots();
    server_ = std::make_unique<ProvisionerHttpServer>(*service_, logger_, max_body, 4);
    port_ = server_->bind("127.0.0.1", 0);
    thread_ = std::thread([this] { server_->run(); });
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
    client_->set_read_timeout(30, 0);
    // The accept loop may not be up yet; /health answers once it is.
    for (int i = 0; i < 200 && !client_->Get("/health"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void TearDown() override {
    if (server_) {
      backend_->release_create();
      server_->stop();
      thread_.join();
    }
  }

  std::string base() const { return dir_.str() + "/state"; }
  httplib::Headers key() const { return {{"X-API-Key", kKey}}; }
  httplib::Result post(const std::string& body) {
    return client_->Post("/api/sandboxes", key(), body, "application/json");
  }
  httplib::Result get(const std::string& path) { return client_->Get(path.c_str(), key()); }
  httplib::Result create_alice(const std::string& extra_mounts = "[]") {
    return post(R"({"sandbox_id":"sb-1","thread_id":"thread-1","user_id":"alice",)"
                R"("required_mount_contract_version":2,"extra_mounts":)" +
                extra_mounts + "}");
  }
  std::size_t creates() {
    std::lock_guard lock(backend_->mutex_);
    return backend_->creates.size();
  }

  TempDir dir_;
  std::shared_ptr<RecordingBackend> backend_ = std::make_shared<RecordingBackend>();
  std::shared_ptr<SandboxBackend> served_;  // what the service is given, when not backend_
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
  std::unique_ptr<ProvisionerService> service_;
  std::unique_ptr<ProvisionerHttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(ProvisionerServiceTest, HealthIsOpenAndEveryApiRouteNeedsTheKey) {
  start();
  auto health = client_->Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, R"({"status":"ok"})");

  for (const httplib::Headers& headers :
       {httplib::Headers{}, httplib::Headers{{"X-API-Key", "wrong-key-77"}},
        httplib::Headers{{"X-API-Key", std::string(kKey) + "x"}}}) {
    for (const char* path : {"/api/capabilities", "/api/sandboxes", "/api/sandboxes/sb-1",
                             "/api/sandboxes/sb-1/instance", "/api/unknown"}) {
      auto refused = client_->Get(path, headers);
      ASSERT_TRUE(refused);
      EXPECT_EQ(refused->status, 401) << path;
      EXPECT_EQ(refused->body, "Unauthorized") << path;
    }
    auto post_refused =
        client_->Post("/api/sandboxes", headers, R"({"sandbox_id":"x"})", "application/json");
    ASSERT_TRUE(post_refused);
    EXPECT_EQ(post_refused->status, 401);
    auto delete_refused = client_->Delete("/api/sandboxes/sb-1", headers);
    ASSERT_TRUE(delete_refused);
    EXPECT_EQ(delete_refused->status, 401);
  }
  EXPECT_EQ(creates(), 0u);
  // Issue 32 B: one line per refusal was a log flood on demand. The first is logged, the
  // rest are summed into the next line a minute later, and every one is counted.
  EXPECT_EQ(logger_->count(LogLevel::warning, "provisioner auth rejected"), 1u);
  EXPECT_TRUE(
      logger_->contains(LogLevel::warning, "provisioner auth rejected: GET /api/capabilities"));
  EXPECT_FALSE(logger_->contains("wrong-key-77"));
  EXPECT_FALSE(logger_->contains(kKey));

  auto allowed = get("/api/capabilities");
  ASSERT_TRUE(allowed);
  auto metrics = get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metrics->status, 200);
  EXPECT_NE(metrics->body.find("sandboxd_provisioner_unauthorized_total 21\n"), std::string::npos)
      << metrics->body;
  EXPECT_EQ(client_->Get("/metrics")->status, 401) << "the metrics need the key too";
  EXPECT_EQ(allowed->status, 200);
}

TEST_F(ProvisionerServiceTest, AnEmptyConfiguredKeyRefusesEveryApiRequest) {
  start(kSandboxMountContractVersion, "");
  for (const httplib::Headers& headers :
       {httplib::Headers{}, httplib::Headers{{"X-API-Key", ""}}}) {
    auto refused = client_->Get("/api/capabilities", headers);
    ASSERT_TRUE(refused);
    EXPECT_EQ(refused->status, 401);
  }
  EXPECT_EQ(client_->Get("/health")->status, 200);
}

TEST_F(ProvisionerServiceTest, CapabilitiesNameTheMountContract) {
  start();
  auto result = get("/api/capabilities");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->body, R"({"lark_cli_init_image":false,"lark_cli_broker_image":false,)"
                          R"("mount_contract_version":2})");
}

TEST_F(ProvisionerServiceTest, LegacyModeAnswersAsAnOldProvisioner) {
  start(0);
  auto capabilities = get("/api/capabilities");
  ASSERT_TRUE(capabilities);
  EXPECT_EQ(capabilities->status, 404);
  // An old provisioner knew nothing of contracts: the request's version is ignored and the
  // answer carries neither the version nor the identity.
  auto created = create_alice();
  ASSERT_TRUE(created);
  EXPECT_EQ(created->status, 200) << created->body;
  rapidjson::Document doc = parse(created->body);
  EXPECT_EQ(std::string(doc["sandbox_id"].GetString()), "sb-1");
  EXPECT_EQ(std::string(doc["status"].GetString()), "Running");
  EXPECT_FALSE(doc.HasMember("mount_contract_version")) << created->body;
  EXPECT_FALSE(doc.HasMember("user_id")) << created->body;
}

TEST_F(ProvisionerServiceTest, CreateComposesOwnedMountsAndIsIdempotent) {
  start();
  fs::create_directories(base() + "/acp");
  auto first = create_alice(R"([{"host_path":")" + base() +
                            R"(/acp","container_path":"/mnt/acp-workspace","read_only":true}])");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  rapidjson::Document doc = parse(first->body);
  EXPECT_EQ(std::string(doc["user_id"].GetString()), "alice");
  EXPECT_EQ(std::string(doc["thread_id"].GetString()), "thread-1");
  EXPECT_EQ(doc["mount_contract_version"].GetInt(), 2);
  EXPECT_EQ(std::string(doc["status"].GetString()), "Running");

  auto again = create_alice(R"([{"host_path":")" + base() +
                            R"(/acp","container_path":"/mnt/acp-workspace","read_only":true}])");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
  EXPECT_EQ(again->body, first->body);
  ASSERT_EQ(creates(), 1u);

  const CreateRequest& request = backend_->creates[0];
  EXPECT_EQ(request.user_id, "alice");
  EXPECT_EQ(request.thread_id, "thread-1");
  const std::vector<Mount> expected = {
      {base() + "/skills_view/public", "/mnt/skills/public", true},
      {base() + "/users/alice/skills_view/custom", "/mnt/skills/custom", true},
      {base() + "/users/alice/skills_view/legacy", "/mnt/skills/legacy", true},
      {base() + "/users/alice/threads/thread-1/user-data", "/mnt/user-data", false},
      {base() + "/acp", "/mnt/acp-workspace", true},
  };
  EXPECT_EQ(request.extra_mounts, expected);
  for (const Mount& mount : expected) EXPECT_TRUE(fs::is_directory(mount.host_path));
}

TEST_F(ProvisionerServiceTest, ANullThreadIdDefaultsToTheSandboxId) {
  start();
  auto created = post(R"({"sandbox_id":"sb-7","thread_id":null})");
  ASSERT_TRUE(created);
  ASSERT_EQ(created->status, 200) << created->body;
  rapidjson::Document doc = parse(created->body);
  EXPECT_EQ(std::string(doc["thread_id"].GetString()), "sb-7");
  EXPECT_EQ(std::string(doc["user_id"].GetString()), "default");
  EXPECT_TRUE(fs::is_directory(base() + "/users/default/threads/sb-7/user-data"));
}

// Issue 20 A.6: alice's and bob's thread t1 used to share {threads_host_path}/t1/user-data
// (workspace, uploads, outputs), and it was not where the gateway keeps users/{user}/threads.
TEST_F(ProvisionerServiceTest, UsersWithTheSameThreadIdNeverShareUserData) {
  start();
  auto alice = post(R"({"sandbox_id":"sb-a","thread_id":"t1","user_id":"alice"})");
  auto bob = post(R"({"sandbox_id":"sb-b","thread_id":"t1","user_id":"bob"})");
  ASSERT_EQ(alice->status, 200) << alice->body;
  ASSERT_EQ(bob->status, 200) << bob->body;
  ASSERT_EQ(creates(), 2u);
  auto user_data_of = [](const CreateRequest& request) {
    for (const Mount& mount : request.extra_mounts) {
      if (mount.container_path == "/mnt/user-data") return mount.host_path;
    }
    return std::string("<none>");
  };
  EXPECT_EQ(user_data_of(backend_->creates[0]), base() + "/users/alice/threads/t1/user-data");
  EXPECT_EQ(user_data_of(backend_->creates[1]), base() + "/users/bob/threads/t1/user-data");
}

// The shared layout stays for a deployment that asks for it by name.
TEST_F(ProvisionerServiceTest, TheLegacyLayoutIsUsedOnlyWhenAskedFor) {
  start_with([](ServiceSettings& s) { s.roots.user_data_layout = UserDataLayout::legacy; });
  auto created = post(R"({"sandbox_id":"sb-a","thread_id":"t1","user_id":"alice"})");
  ASSERT_EQ(created->status, 200) << created->body;
  EXPECT_EQ(backend_->creates[0].extra_mounts[3],
            (Mount{base() + "/threads/t1/user-data", "/mnt/user-data", false}));
}

// A sandbox writes its user data (the provisioner mounts user-data whole), so it can leave a
// link there for the next sandbox of its conversation: alice's .upload-conversions pointing at
// bob's user data resolves inside the state root, and used to be handed to the engine, which
// follows it and mounts bob's files into alice's sandbox. The service never follows a link in
// a mount source.
TEST_F(ProvisionerServiceTest, ALinkInAMountSourceIsRefusedEvenWhenItPointsInsideTheState) {
  start();
  const std::string alice = base() + "/users/alice/threads/thread-1/user-data";
  fs::create_directories(alice);
  fs::create_directories(base() + "/users/bob/threads/thread-1/user-data");
  fs::create_directory_symlink("../../../../bob/threads/thread-1/user-data",
                               alice + "/.upload-conversions");
  auto result = create_alice(R"([{"host_path":")" + alice +
                             R"(/.upload-conversions","container_path":)"
                             R"("/mnt/user-data/.upload-conversions","read_only":true}])");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400) << result->body;
  EXPECT_NE(detail_of(result).find("symbolic link"), std::string::npos) << detail_of(result);
  EXPECT_EQ(creates(), 0u);

  // The same for a writable one the service makes, and for its own user-data mount.
  fs::create_directories(base() + "/users/alice/threads/thread-2");
  fs::create_directory_symlink("../../../bob/threads/thread-1/user-data",
                               base() + "/users/alice/threads/thread-2/user-data");
  auto own = post(R"({"sandbox_id":"sb-2","thread_id":"thread-2","user_id":"alice"})");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 400) << own->body;
  EXPECT_NE(detail_of(own).find("symbolic link"), std::string::npos) << detail_of(own);
  EXPECT_EQ(creates(), 0u);
}

// design §10.8's validation table, every row through HTTP, plus the service's own rows for
// symlinks and missing read-only sources. None reaches the backend.
TEST_F(ProvisionerServiceTest, EveryExtraMountRefusalIs400WithItsMessage) {
  start();
  const std::string b = base();
  fs::create_directories(b + "/users/alice/threads/thread-1/user-data/.upload-conversions");
  fs::create_directories(dir_.str() + "/outside");
  fs::create_directory_symlink(dir_.str() + "/outside", b + "/escape");
  auto mount = [](const std::string& host, const std::string& container, bool read_only) {
    return R"({"host_path":")" + host + R"(","container_path":")" + container +
           R"(","read_only":)" + (read_only ? "true" : "false") + "}";
  };
  std::string eleven = "[";
  for (int i = 0; i < 11; ++i) eleven += (i ? "," : "") + mount(b + "/m", "/mnt/acp-workspace", 0);
  eleven += "]";
  const std::string conversions = b + "/users/alice/threads/thread-1/user-data/.upload-conversions";
  const std::vector<std::pair<std::string, std::string>> rows = {
      {eleven, "Too many extra mounts; max is 10"},
      {"[" + mount("relative/dir", "/mnt/acp-workspace", true) + "]",
       "Extra mount host path must be absolute: relative/dir"},
      {"[" + mount("/etc", "/mnt/acp-workspace", true) + "]",
       "Extra mount host path is outside DeerFlow state: /etc"},
      {"[" + mount(b + "/../outside", "/mnt/acp-workspace", true) + "]",
       "Extra mount host path is outside DeerFlow state: " + b + "/../outside"},
      {"[" + mount(b + "/acp", "mnt/acp-workspace", true) + "]",
       "Extra mount path must be absolute: mnt/acp-workspace"},
      {"[" + mount(b + "/acp", "/mnt/user-data", false) + "]",
       "Unsupported extra mount path: /mnt/user-data"},
      {"[" + mount(b + "/a", "/mnt/acp-workspace", false) + "," +
           mount(b + "/b", "/mnt/acp-workspace/", false) + "]",
       "Duplicate extra mount path: /mnt/acp-workspace/"},
      {"[" + mount(conversions, "/mnt/user-data/.upload-conversions", false) + "]",
       "Upload conversion mount must be read-only: " + conversions},
      {"[" +
           mount(b + "/users/bob/threads/thread-1/user-data/.upload-conversions",
                 "/mnt/user-data/.upload-conversions", true) +
           "]",
       "Upload conversion mount must be " + conversions + ", got " + b +
           "/users/bob/threads/thread-1/user-data/.upload-conversions"},
      {"[" + mount(b + "/escape/x", "/mnt/acp-workspace", false) + "]",
       "Extra mount host path is outside DeerFlow state: " + b + "/escape/x (resolves to " +
           dir_.str() + "/outside/x)"},
      {"[" + mount(b + "/not-there", "/mnt/skills/custom", true) + "]",
       "Extra mount host path does not exist: " + b + "/not-there"},
      // Issue 32 B: the state root itself is no sandbox mount (every user's data under it).
      {"[" + mount(b, "/mnt/acp-workspace", false) + "]",
       "Extra mount host path is outside DeerFlow state: " + b +
           " (it is the state root itself; a sandbox mount must be a directory below it)"},
      {"[" + mount(b + "/.", "/mnt/skills/custom", true) + "]",
       "Extra mount host path is outside DeerFlow state: " + b +
           " (it is the state root itself; a sandbox mount must be a directory below it)"},
  };
  for (const auto& [mounts, message] : rows) {
    auto result = create_alice(mounts);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 400) << message;
    EXPECT_EQ(detail_of(result), message);
  }
  EXPECT_EQ(creates(), 0u);
  EXPECT_FALSE(fs::exists(dir_.str() + "/outside/x")) << "created through the symlink";
}

TEST_F(ProvisionerServiceTest, ValidationRunsBeforeTheFastPathForAnExistingSandbox) {
  start();
  ASSERT_EQ(create_alice()->status, 200);
  auto result = create_alice(R"([{"host_path":"/etc","container_path":"/mnt/acp-workspace"}])");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400);
  EXPECT_EQ(detail_of(result), "Extra mount host path is outside DeerFlow state: /etc");
}

TEST_F(ProvisionerServiceTest, AComposedMountThroughASymlinkOutsideIsRefused) {
  start();
  fs::create_directories(dir_.str() + "/elsewhere");
  fs::create_directories(base() + "/users");
  fs::create_directory_symlink(dir_.str() + "/elsewhere", base() + "/users/mallory");
  auto result = post(R"({"sandbox_id":"sb-2","thread_id":"t","user_id":"mallory"})");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 400);
  EXPECT_EQ(detail_of(result).rfind("Sandbox mount source is outside DeerFlow state: " + base() +
                                        "/users/mallory/skills_view/custom (resolves to " +
                                        dir_.str() + "/elsewhere/skills_view/custom)",
                                    0),
            0u)
      << detail_of(result);
  EXPECT_EQ(creates(), 0u);
  EXPECT_TRUE(fs::is_empty(dir_.str() + "/elsewhere"));
}

TEST_F(ProvisionerServiceTest, SchemaViolationsAre422WithTheField) {
  start();
  const std::string deep = std::string(100, '[') + std::string(100, ']');
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"not json", "body value_error.jsondecode"},
      {deep, "body value_error.jsondecode"},
      {"[1,2]", "body type_error.dict"},
      {R"({"thread_id":"t"})", "body.sandbox_id value_error.missing"},
      {R"({"sandbox_id":12})", "body.sandbox_id type_error.str"},
      {R"({"sandbox_id":"../../etc"})", "body.sandbox_id value_error.str.regex"},
      {R"({"sandbox_id":""})", "body.sandbox_id value_error.str.regex"},
      {R"({"sandbox_id":")" + std::string(65, 'a') + R"("})",
       "body.sandbox_id value_error.str.regex"},
      {R"({"sandbox_id":"s","thread_id":"a/b"})", "body.thread_id value_error.str.regex"},
      {R"({"sandbox_id":"s","thread_id":"t\u0000x"})", "body.thread_id value_error.str.regex"},
      {R"({"sandbox_id":"s","thread_id":"tëst"})", "body.thread_id value_error.str.regex"},
      {R"({"sandbox_id":"s","user_id":"a b"})", "body.user_id value_error.str.regex"},
      {R"({"sandbox_id":"s","user_id":".."})", "body.user_id value_error.str.regex"},
      {R"({"sandbox_id":"s","extra_mounts":{}})", "body.extra_mounts type_error.list"},
      {R"({"sandbox_id":"s","extra_mounts":[{"container_path":"/mnt/acp-workspace"}]})",
       "body.extra_mounts.0.host_path value_error.missing"},
      {R"({"sandbox_id":"s","extra_mounts":[{"host_path":"/x","container_path":"/y",)"
       R"("read_only":"yes"}]})",
       "body.extra_mounts.0.read_only type_error.bool"},
      {R"({"sandbox_id":"s","provision_lark_cli_broker":1})",
       "body.provision_lark_cli_broker type_error.bool"},
      {R"({"sandbox_id":"s","required_mount_contract_version":"2"})",
       "body.required_mount_contract_version type_error.integer"},
  };
  for (const auto& [body, violation] : rows) {
    auto result = post(body);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 422) << body;
    EXPECT_EQ(violation_of(result), violation) << body;
  }
  EXPECT_EQ(creates(), 0u);
  // Unknown keys are ignored, as FastAPI does.
  auto extra_keys = post(R"({"sandbox_id":"s","surprise":[1]})");
  ASSERT_TRUE(extra_keys);
  EXPECT_EQ(extra_keys->status, 200);
}

TEST_F(ProvisionerServiceTest, AnExistingSandboxOfAnotherConversationIs409) {
  start();
  ASSERT_EQ(create_alice()->status, 200);
  for (const char* body : {R"({"sandbox_id":"sb-1","thread_id":"thread-1","user_id":"bob"})",
                           R"({"sandbox_id":"sb-1","thread_id":"thread-2","user_id":"alice"})"}) {
    auto result = post(body);
    ASSERT_TRUE(result);
    EXPECT_EQ(result->status, 409);
    EXPECT_EQ(detail_of(result), "Sandbox 'sb-1' exists for a different user or thread");
  }
  EXPECT_EQ(creates(), 1u);
}

TEST_F(ProvisionerServiceTest, AContractItDoesNotServeIs409WithTheOneItDoes) {
  start();
  auto result = post(R"({"sandbox_id":"sb-3","required_mount_contract_version":3})");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 409);
  rapidjson::Document doc = parse(result->body);
  EXPECT_EQ(doc["mount_contract_version"].GetInt(), 2);
  EXPECT_EQ(std::string(doc["detail"].GetString()),
            "This provisioner serves mount contract 2, not 3");
  EXPECT_EQ(creates(), 0u);
}

TEST_F(ProvisionerServiceTest, GetListInstanceAndDelete) {
  start();
  auto missing = get("/api/sandboxes/sb-1");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->body, R"({"detail":"Sandbox 'sb-1' not found"})");
  auto absent = get("/api/sandboxes/sb-1/instance");
  EXPECT_EQ(absent->body,
            R"({"backend_namespace":"test-ns","incarnation_id":null,"sandbox_url":null,)"
            R"("user_id":null,"thread_id":null,"mount_contract_version":null})");

  auto created = create_alice();
  ASSERT_EQ(created->status, 200);
  auto found = get("/api/sandboxes/sb-1");
  EXPECT_EQ(found->status, 200);
  EXPECT_EQ(found->body, created->body);
  rapidjson::Document list = parse(get("/api/sandboxes")->body);
  EXPECT_EQ(list["count"].GetInt(), 1);
  EXPECT_EQ(std::string(list["sandboxes"][0]["sandbox_id"].GetString()), "sb-1");
  rapidjson::Document instance = parse(get("/api/sandboxes/sb-1/instance")->body);
  EXPECT_EQ(std::string(instance["incarnation_id"].GetString()), "incarnation-sb-1");
  EXPECT_EQ(std::string(instance["user_id"].GetString()), "alice");

  auto deleted = client_->Delete("/api/sandboxes/sb-1", key());
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200);
  EXPECT_EQ(deleted->body, R"({"ok":true,"sandbox_id":"sb-1"})");
  ASSERT_EQ(backend_->destroyed.size(), 1u);
  EXPECT_EQ(backend_->destroyed[0].container_name, "c-sb-1");
  // Deleting what is gone is done, as the reference ignores 404s.
  EXPECT_EQ(client_->Delete("/api/sandboxes/sb-1", key())->status, 200);
  EXPECT_EQ(backend_->destroyed.size(), 1u);
  EXPECT_EQ(parse(get("/api/sandboxes")->body)["count"].GetInt(), 0);
  // An id that cannot name a sandbox is simply not found, never a path.
  EXPECT_EQ(get("/api/sandboxes/..%2F..%2Fetc")->status, 404);
}

TEST_F(ProvisionerServiceTest, UsageIsTheBackendsReadingOfARunningSandbox) {
  auto metered = std::make_shared<MeteredBackend>(backend_);
  metered->reading.cpu_seconds = 1.25;
  metered->reading.memory_bytes = 1 << 20;
  metered->reading.pids = 7;
  // No JSON form: left out like a figure the engine did not give.
  metered->reading.host_cpu_seconds = std::numeric_limits<double>::quiet_NaN();
  served_ = metered;
  start();
  auto missing = get("/api/sandboxes/sb-1/usage");
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(missing->body, R"({"detail":"Sandbox 'sb-1' not found"})");
  {
    std::lock_guard lock(metered->mutex_);
    EXPECT_TRUE(metered->asked.empty()) << "a sandbox the backend does not run is never metered";
  }
  ASSERT_EQ(create_alice()->status, 200);
  auto read = get("/api/sandboxes/sb-1/usage");
  ASSERT_EQ(read->status, 200);
  EXPECT_EQ(read->body, R"({"cpu_seconds":1.25,"memory_bytes":1048576,"pids":7})");
  EXPECT_EQ(client_->Get("/api/sandboxes/sb-1/usage")->status, 401) << "behind the key";
  {
    std::lock_guard lock(metered->mutex_);  // the handlers read it on their threads
    metered->usage_error = "engine: no such container";
  }
  auto failed = get("/api/sandboxes/sb-1/usage");
  EXPECT_GE(failed->status, 500);
  EXPECT_EQ(failed->status, 502) << "a reading the backend failed to take is a backend failure";
  EXPECT_NE(detail_of(failed).find("Failed to read the usage of sandbox 'sb-1': "),
            std::string::npos)
      << detail_of(failed);
}

TEST_F(ProvisionerServiceTest, UsageCarriesTheWritableLayerWhereTheBackendMeasuresIt) {
  auto metered = std::make_shared<MeteredBackend>(backend_);
  metered->reading.pids = 3;
  metered->layer_bytes = 30u << 20;
  served_ = metered;
  start();
  ASSERT_EQ(create_alice()->status, 200);
  auto read = get("/api/sandboxes/sb-1/usage");
  ASSERT_EQ(read->status, 200);
  EXPECT_EQ(read->body, R"({"pids":3,"writable_layer_bytes":31457280})");
  {
    std::lock_guard lock(metered->mutex_);
    metered->layer_error = "engine: size walk failed";
  }
  // The layer is one figure among others: one the engine would not give is left out, and the
  // rest of the reading still answers.
  read = get("/api/sandboxes/sb-1/usage");
  ASSERT_EQ(read->status, 200);
  EXPECT_EQ(read->body, R"({"pids":3})");
}

TEST_F(ProvisionerServiceTest, UsageIs501WhenTheBackendCannotTell) {
  start();
  ASSERT_EQ(create_alice()->status, 200);
  auto answer = get("/api/sandboxes/sb-1/usage");
  EXPECT_EQ(answer->status, 501);
  EXPECT_EQ(detail_of(answer), "This provisioner's backend reports no usage");
}

TEST_F(ProvisionerServiceTest, BackendFailuresAreTheirNamedMessages) {
  start();
  backend_->locked([](RecordingBackend& b) { b.create_error = "engine down"; });
  auto created = create_alice();
  ASSERT_TRUE(created);
  // The core's one table of error kinds: a backend failure is 502.
  EXPECT_EQ(created->status, 502);
  EXPECT_EQ(detail_of(created), "Sandbox creation failed: engine down");
  backend_->locked([](RecordingBackend& b) { b.create_error.reset(); });
  ASSERT_EQ(create_alice()->status, 200);

  backend_->locked([](RecordingBackend& b) { b.destroy_error = "stop timed out"; });
  auto deleted = client_->Delete("/api/sandboxes/sb-1", key());
  EXPECT_EQ(deleted->status, 502);
  EXPECT_EQ(detail_of(deleted), "Partial cleanup: sandbox: stop timed out");

  backend_->locked([](RecordingBackend& b) { b.list_error = "listing refused"; });
  auto listed = get("/api/sandboxes");
  EXPECT_EQ(listed->status, 502);
  EXPECT_EQ(detail_of(listed), "Failed to list sandboxes: listing refused");

  backend_->locked([](RecordingBackend& b) { b.lookups_unknown = true; });
  auto instance = get("/api/sandboxes/sb-1/instance");
  EXPECT_EQ(instance->status, 503);
  EXPECT_EQ(detail_of(instance), "Could not tell whether sandbox 'sb-1' exists");
}

// Issue 32 A.5: a full namespace (a cluster quota) is a capacity refusal, as serve answers it:
// 429 with Retry-After, DeerFlow's {"detail": ...} shape kept.
TEST_F(ProvisionerServiceTest, AQuotaRefusalIs429WithRetryAfter) {
  start();
  backend_->locked([](RecordingBackend& b) { b.create_over_quota = true; });
  auto created = create_alice();
  ASSERT_TRUE(created);
  EXPECT_EQ(created->status, 429) << created->body;
  EXPECT_EQ(created->get_header_value("Retry-After"), "1");
  EXPECT_EQ(detail_of(created),
            "Sandbox creation failed: capacity (quota): the cluster refused pod sandbox-sb-1: "
            "exceeded quota: pods=0");
}

// Issue 20 A.7: a backend that keeps the SDK's default discover_for_reconciliation (which can
// never tell) made every DELETE a 500 "could not look it up", and the sandbox kept running.
TEST_F(ProvisionerServiceTest, DeleteWorksWithABackendThatCannotLookUpExactInstances) {
  start();
  ASSERT_EQ(create_alice()->status, 200);
  backend_->locked([](RecordingBackend& b) { b.lookups_unknown = true; });
  auto deleted = client_->Delete("/api/sandboxes/sb-1", key());
  ASSERT_TRUE(deleted);
  EXPECT_EQ(deleted->status, 200) << deleted->body;
  ASSERT_EQ(backend_->destroyed.size(), 1u);
  EXPECT_EQ(backend_->destroyed[0].container_name, "c-sb-1") << "destroyed what discover found";
  EXPECT_EQ(parse(get("/api/sandboxes")->body)["count"].GetInt(), 0);
  // One it cannot find is destroyed by id: the backend decides, "already gone" is done.
  EXPECT_EQ(client_->Delete("/api/sandboxes/sb-9", key())->status, 200);
  ASSERT_EQ(backend_->destroyed.size(), 2u);
  EXPECT_EQ(backend_->destroyed[1].sandbox_id, "sb-9");
}

TEST_F(ProvisionerServiceTest, ABackendThatHangsIs504AfterTheBoundAndItsCallFinishesLater) {
  start(kSandboxMountContractVersion, kKey, /*backend_timeout=*/1.0);
  backend_->locked([](RecordingBackend& b) { b.hold_create = true; });
  auto result = create_alice();
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 504);
  EXPECT_EQ(detail_of(result),
            "Creating sandbox 'sb-1' did not finish within 1 s; it goes on in the background");
  EXPECT_EQ(get("/health")->status, 200) << "the server must keep answering";
  backend_->release_create();
  service_->drain();
  // The late create registered its sandbox; the gateway's retry finds it.
  auto retry = create_alice();
  EXPECT_EQ(retry->status, 200);
  EXPECT_EQ(creates(), 1u);
}

TEST_F(ProvisionerServiceTest, AnOversizedBodyIs413BeforeAnyHandler) {
  start(kSandboxMountContractVersion, kKey, 10.0, /*max_body=*/4096);
  auto result = post(R"({"sandbox_id":"s","pad":")" + std::string(10000, 'x') + R"("})");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 413);
  EXPECT_EQ(creates(), 0u);
}

TEST_F(ProvisionerServiceTest, UnknownRoutesAre404NotFound) {
  start();
  auto result = get("/api/nothing-here");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 404);
  EXPECT_EQ(result->body, R"({"detail":"Not Found"})");
}

// As FastAPI answers DeerFlow's provisioner: a known path with a method it does not take is
// 405 with Allow, not a 404 that reads as "no such sandbox"; counted under the path's pattern.
TEST_F(ProvisionerServiceTest, AKnownPathWithAnotherMethodIs405WithAllow) {
  start();
  auto result = client_->Put("/api/sandboxes/sb-1", key(), "{}", "application/json");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 405);
  EXPECT_EQ(result->body, R"({"detail":"Method Not Allowed"})");
  EXPECT_EQ(result->get_header_value("Allow"), "GET, DELETE");
  result = client_->Delete("/api/sandboxes", key());
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 405);
  EXPECT_EQ(result->get_header_value("Allow"), "POST, GET");
  auto metrics = get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* line :
       {R"(sandboxd_provisioner_requests_total{route="/api/sandboxes/{id}",status="405"} 1)",
        R"(sandboxd_provisioner_requests_total{route="/api/sandboxes",status="405"} 1)"}) {
    EXPECT_NE(metrics->body.find(line), std::string::npos) << metrics->body;
  }
}

}  // namespace
}  // namespace sandboxd::provisioner

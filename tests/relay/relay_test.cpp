// The relay (core/include/sandboxd/core/relay.hpp) over a real provider whose
// backend's sandboxes are real HTTP servers on 127.0.0.1 (cpp-httplib), each "namespaced": the
// relay reaches it through the socket the backend makes (here an ordinary socket, standing in
// for one made in a network namespace, which the engine tests exercise). Clients are real HTTP
// clients and raw sockets. What is checked: the token gate (missing 401, wrong 403, another
// sandbox's 403, not tracked 404, nothing reaching the sandbox), the token never forwarded,
// keep-alive with each request going to the sandbox it names, bodies streamed both ways
// (chunked upload, a 64 MiB answer), a WebSocket-style upgrade piped both ways, a restart with
// the same secret keeping tokens valid, and the head deadline.
#include "sandboxd/core/relay.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/sandbox_service.hpp"
#include "test_support.hpp"

namespace sandboxd::testing {
namespace {

using core::Relay;
using core::RelayOptions;
using core::RelayTokens;
using namespace std::chrono_literals;

// One sandbox: an HTTP server on 127.0.0.1, or (ids starting "ws") a raw server that answers
// any request 101 and then echoes every byte.
class FakeSandbox {
 public:
  explicit FakeSandbox(const std::string& id) : id_(id) {
    if (id.rfind("ws", 0) == 0) {
      start_echo();
      return;
    }
    server_.Get("/v1/sandbox", [this](const httplib::Request& req, httplib::Response& res) {
      note(req);
      res.set_content("{\"sandbox\":\"" + id_ + "\"}", "application/json");
    });
    server_.Get("/whoami", [this](const httplib::Request& req, httplib::Response& res) {
      note(req);
      res.set_content(
          id_ + " " + req.path + (req.has_param("q") ? "?q=" + req.get_param_value("q") : ""),
          "text/plain");
    });
    server_.Post("/echo-size", [this](const httplib::Request& req, httplib::Response& res) {
      note(req);
      res.set_content(std::to_string(req.body.size()), "text/plain");
    });
    server_.Get("/big", [this](const httplib::Request& req, httplib::Response& res) {
      note(req);
      const std::size_t total = std::stoul(req.get_param_value("mib")) << 20;
      res.set_chunked_content_provider(
          "application/octet-stream",
          [total, sent = std::size_t{0}](size_t, httplib::DataSink& sink) mutable {
            static const std::string block(64 * 1024, 'z');
            if (sent >= total) {
              sink.done();
              return true;
            }
            sent += block.size();
            return sink.write(block.data(), block.size());
          });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(1ms);
  }
  ~FakeSandbox() {
    if (echo_fd_ >= 0) {
      ::shutdown(echo_fd_, SHUT_RDWR);
      ::close(echo_fd_);
    } else {
      server_.stop();
    }
    thread_.join();
  }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }
  int tokens_seen() const { return tokens_seen_.load(); }

 private:
  void note(const httplib::Request& req) {
    ++requests_;
    if (req.has_header("X-Sandboxd-Relay-Token")) ++tokens_seen_;
  }

  void start_echo() {
    echo_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(echo_fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(echo_fd_, 4);
    socklen_t length = sizeof address;
    ::getsockname(echo_fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int client = ::accept(echo_fd_, nullptr, nullptr);
        if (client < 0) return;
        ++requests_;
        std::string head;
        char byte;
        while (head.find("\r\n\r\n") == std::string::npos && ::read(client, &byte, 1) == 1) {
          head += byte;
        }
        if (head.find("X-Sandboxd-Relay-Token") != std::string::npos) ++tokens_seen_;
        const std::string answer =
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n";
        (void)!::write(client, answer.data(), answer.size());
        char buffer[4096];
        ssize_t got;
        while ((got = ::read(client, buffer, sizeof buffer)) > 0) {
          (void)!::write(client, buffer, static_cast<std::size_t>(got));
        }
        ::close(client);
      }
    });
  }

  std::string id_;
  httplib::Server server_;
  int port_ = 0;
  int echo_fd_ = -1;
  std::thread thread_;
  std::atomic<int> requests_{0}, tokens_seen_{0};
};

// Sandboxes as FakeSandbox servers, every one "namespaced".
class FakeNamespacedBackend final : public SandboxBackend,
                                    public NamespacedSandboxes,
                                    public SandboxNetworkPolicy {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    std::lock_guard lock(mutex_);
    auto& sandbox = sandboxes_[request.sandbox_id];
    if (!sandbox) sandbox = std::make_unique<FakeSandbox>(request.sandbox_id);
    SandboxInfo info;
    info.sandbox_id = request.sandbox_id;
    info.sandbox_url = "http://127.0.0.1:" + std::to_string(sandbox->port());
    // As an engine's: a new random id for every container made.
    char instance[16];
    std::snprintf(instance, sizeof instance, "%012x", ++containers_made_);
    info.container_id = std::string(instance) + request.sandbox_id;
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    info.mount_contract_version = kSandboxMountContractVersion;
    info.network_policy = "isolated";
    return info;
  }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    sandboxes_.erase(info.sandbox_id);
  }
  bool is_alive(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    return sandboxes_.count(info.sandbox_id) != 0;
  }
  std::optional<SandboxInfo> discover(const std::string&) override { return std::nullopt; }
  std::vector<SandboxInfo> list_running() override { return {}; }
  SandboxDiscoveryResult discover_for_reconciliation(const std::string&) override {
    return SandboxDiscoveryResult::unknown();
  }
  bool requires_create_validation() const override { return false; }
  MountModeKind mount_mode_kind() const override { return MountModeKind::local_bind_mounts; }
  bool namespaced(const SandboxInfo& info) const override {
    return info.network_policy == "isolated";
  }
  int open_socket(const SandboxInfo&) override {
    ++sockets_made;
    return ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  std::string configured_network_policy() const override { return "isolated"; }
  std::string network_preflight() override { return ""; }

  FakeSandbox& sandbox(const std::string& id) {
    std::lock_guard lock(mutex_);
    return *sandboxes_.at(id);
  }
  std::atomic<int> sockets_made{0};

 private:
  std::mutex mutex_;
  std::map<std::string, std::unique_ptr<FakeSandbox>> sandboxes_;
  unsigned containers_made_ = 0x5eed00;
};

class RelayTest : public ::testing::Test {
 protected:
  void SetUp() override {
    core::ProviderDeps deps;
    deps.backend = backend_;
    PluginContext context;
    context.config_json = "{}";
    context.config_key_path = "sandbox.ownership";
    context.owner_id = "relay-test";
    context.base_dir = dir_.str();
    context.clock = std::make_shared<SystemClock>();
    context.logger = logger_;
    deps.ownership =
        core::PluginLoader({SANDBOXD_TEST_PLUGIN_DIR})
            .load_ownership_store("ownership_memory:MemoryOwnershipStore", context, "test");
    deps.logger = logger_;
    deps.clock = std::make_shared<SystemClock>();
    deps.paths = std::make_shared<const core::Paths>(dir_.path(), dir_.str());
    deps.options.run_background_threads = false;
    deps.options.reconcile_on_start = false;
    provider_ = std::make_unique<core::Provider>(std::move(deps));
    service_ = std::make_unique<core::SandboxService>(*provider_, dir_.str(), "the test");
  }
  void TearDown() override {
    relay_.reset();
    service_.reset();
    provider_.reset();
  }

  void start_relay(RelayOptions options = {}) {
    relay_ = std::make_unique<Relay>(*provider_, RelayTokens::from_state_dir(dir_.path()), options,
                                     logger_);
    relay_->start();
    service_->set_relay(relay_.get());
  }

  core::Acquired acquire(const std::string& user, const std::string& thread) {
    core::AcquireRequest request;
    request.user_id = user;
    request.thread_id = thread;
    return service_->acquire(request);
  }

  // A client for the relay, with `headers` on every request.
  std::unique_ptr<httplib::Client> client() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", relay_->port());
    c->set_read_timeout(30, 0);
    c->set_keep_alive(true);
    return c;
  }
  static std::string path_of(const std::string& url) {
    return url.substr(url.find('/', std::string("http://").size()));
  }

  TempDir dir_;
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
  std::shared_ptr<FakeNamespacedBackend> backend_ = std::make_shared<FakeNamespacedBackend>();
  std::unique_ptr<core::Provider> provider_;
  std::unique_ptr<core::SandboxService> service_;
  std::unique_ptr<Relay> relay_;
};

TEST_F(RelayTest, WithoutARelayANamespacedSandboxIsRefusedBeforeAnythingIsMade) {
  try {
    acquire("alice", "t-1");
    FAIL() << "a sandbox nobody can reach was handed out";
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::config);
    EXPECT_NE(std::string(e.what()).find("needs a long-running host"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(backend_->sockets_made.load(), 0);
}

TEST_F(RelayTest, TheAcquireAnswerCarriesTheRelayUrlAndTokenAndOnlyThatTokenOpensIt) {
  start_relay();
  const core::Acquired alice = acquire("alice", "t-1");
  const core::Acquired bob = acquire("bob", "t-1");
  ASSERT_EQ(alice.sandbox_url, relay_->base_url() + "/s/" + alice.sandbox_id);
  ASSERT_EQ(alice.request_headers.size(), 1u);
  const std::string token = alice.request_headers.at(core::kRelayTokenHeader);
  EXPECT_EQ(token.size(), 43u);
  EXPECT_NE(token, bob.request_headers.at(core::kRelayTokenHeader));
  FakeSandbox& sandbox = backend_->sandbox(alice.sandbox_id);
  const int before = sandbox.requests();

  auto c = client();
  const std::string path = path_of(alice.sandbox_url);
  auto missing = c->Get(path + "/v1/sandbox");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(missing->body, "");
  auto wrong = c->Get(path + "/v1/sandbox", {{core::kRelayTokenHeader, std::string(43, 'A')}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 403);
  // Bob's token on alice's sandbox: refused, never forwarded to either.
  auto other = c->Get(path + "/v1/sandbox",
                      {{core::kRelayTokenHeader, bob.request_headers.at(core::kRelayTokenHeader)}});
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 403);
  EXPECT_EQ(sandbox.requests(), before) << "a refused request reached the sandbox";
  // A valid token of a sandbox nobody tracks here: 404.
  const RelayTokens tokens = RelayTokens::from_state_dir(dir_.path());
  auto unknown = c->Get("/s/notracked1/v1/sandbox",
                        {{core::kRelayTokenHeader, tokens.token_for("notracked1", "")}});
  ASSERT_TRUE(unknown);
  EXPECT_EQ(unknown->status, 404);

  auto ok = c->Get(path + "/v1/sandbox", {{core::kRelayTokenHeader, token}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, "{\"sandbox\":\"" + alice.sandbox_id + "\"}");
  EXPECT_EQ(sandbox.tokens_seen(), 0) << "the token was forwarded to the sandbox";
  const core::RelayStats stats = relay_->stats();
  EXPECT_EQ(stats.missing_token, 1u);
  EXPECT_EQ(stats.wrong_token, 2u);
  EXPECT_EQ(stats.unknown_sandbox, 1u);
  EXPECT_GE(stats.forwarded, 1u);
}

TEST_F(RelayTest, AKeptAliveConnectionSendsEachRequestToTheSandboxItNames) {
  start_relay();
  const core::Acquired alice = acquire("alice", "t-1");
  const core::Acquired bob = acquire("bob", "t-1");
  auto c = client();
  for (int round = 0; round < 3; ++round) {
    for (const core::Acquired* who : {&alice, &bob}) {
      auto answer =
          c->Get(path_of(who->sandbox_url) + "/whoami?q=" + std::to_string(round),
                 {{core::kRelayTokenHeader, who->request_headers.at(core::kRelayTokenHeader)}});
      ASSERT_TRUE(answer) << httplib::to_string(answer.error());
      EXPECT_EQ(answer->status, 200);
      EXPECT_EQ(answer->body, who->sandbox_id + " /whoami?q=" + std::to_string(round));
    }
  }
  EXPECT_LE(relay_->stats().open_connections, 1u) << "the client's connection was not kept";
}

TEST_F(RelayTest, BodiesAreStreamedBothWays) {
  start_relay();
  const core::Acquired alice = acquire("alice", "t-1");
  const httplib::Headers auth{
      {core::kRelayTokenHeader, alice.request_headers.at(core::kRelayTokenHeader)}};
  auto c = client();
  // A chunked upload of 3 MiB.
  const std::size_t upload = 3u << 20;
  std::size_t offered = 0;
  auto sent = c->Post(
      path_of(alice.sandbox_url) + "/echo-size", auth,
      [&](size_t, httplib::DataSink& sink) {
        static const std::string block(64 * 1024, 'u');
        if (offered >= upload) {
          sink.done();
          return true;
        }
        offered += block.size();
        return sink.write(block.data(), block.size());
      },
      "application/octet-stream");
  ASSERT_TRUE(sent) << httplib::to_string(sent.error());
  EXPECT_EQ(sent->status, 200);
  EXPECT_EQ(sent->body, std::to_string(upload));
  // A 64 MiB answer, counted as it arrives.
  std::size_t received = 0;
  auto big =
      c->Get(path_of(alice.sandbox_url) + "/big?mib=64", auth, [&](const char*, size_t length) {
        received += length;
        return true;
      });
  ASSERT_TRUE(big) << httplib::to_string(big.error());
  EXPECT_EQ(big->status, 200);
  EXPECT_EQ(received, 64u << 20);
}

// A raw client: connect, send `request`, read what comes within `wait`.
std::string exchange(int port, const std::string& request, std::chrono::milliseconds wait,
                     int* fd_out = nullptr) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  timeval timeout{static_cast<long>(wait.count() / 1000),
                  static_cast<long>(wait.count() % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  (void)!::write(fd, request.data(), request.size());
  std::string answer;
  char buffer[4096];
  ssize_t got;
  while ((got = ::read(fd, buffer, sizeof buffer)) > 0) {
    answer.append(buffer, static_cast<std::size_t>(got));
    if (fd_out != nullptr && answer.find("\r\n\r\n") != std::string::npos) break;
  }
  if (fd_out != nullptr) {
    *fd_out = fd;
  } else {
    ::close(fd);
  }
  return answer;
}

TEST_F(RelayTest, AnUpgradeAnswered101BecomesATwoWayPipe) {
  start_relay();
  // The backend's echo sandbox (ids starting "ws"), tracked as an inherited sandbox is.
  CreateRequest create;
  create.sandbox_id = "wsecho1";
  core::RegistrySnapshot snapshot;
  core::TrackedSandbox tracked;
  tracked.info = backend_->create(create);
  snapshot.sandboxes.push_back(tracked);
  provider_->import_registry(snapshot);
  const std::string token = RelayTokens::from_state_dir(dir_.path())
                                .token_for("wsecho1", core::incarnation_of(tracked.info));
  int fd = -1;
  const std::string head =
      exchange(relay_->port(),
               "GET /s/wsecho1/ws HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
               "Upgrade: websocket\r\n" +
                   std::string(core::kRelayTokenHeader) + ": " + token + "\r\n\r\n",
               5000ms, &fd);
  ASSERT_EQ(head.rfind("HTTP/1.1 101", 0), 0u) << head;
  for (const std::string& message : {std::string("hello"), std::string(100000, 'm')}) {
    ASSERT_EQ(::write(fd, message.data(), message.size()), static_cast<ssize_t>(message.size()));
    std::string echoed;
    char buffer[65536];
    while (echoed.size() < message.size()) {
      const ssize_t got = ::read(fd, buffer, sizeof buffer);
      ASSERT_GT(got, 0) << "the pipe closed after " << echoed.size() << " bytes";
      echoed.append(buffer, static_cast<std::size_t>(got));
    }
    EXPECT_EQ(echoed, message);
  }
  ::close(fd);
  EXPECT_EQ(backend_->sandbox("wsecho1").tokens_seen(), 0);
  EXPECT_EQ(relay_->stats().upgraded, 1u);
}

TEST_F(RelayTest, ARestartedRelayWithTheSameStateDirectoryKeepsEveryTokenValid) {
  start_relay();
  const core::Acquired alice = acquire("alice", "t-1");
  const int port = relay_->port();
  relay_.reset();
  RelayOptions same_port;
  same_port.port = port;
  relay_ = std::make_unique<Relay>(*provider_, RelayTokens::from_state_dir(dir_.path()), same_port,
                                   logger_);
  relay_->start();
  auto c = client();
  auto answer =
      c->Get(path_of(alice.sandbox_url) + "/v1/sandbox",
             {{core::kRelayTokenHeader, alice.request_headers.at(core::kRelayTokenHeader)}});
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200) << "the token handed out before the restart stopped working";
  // The secret is the state directory's, 0600, and another secret is another set of tokens.
  struct stat st {};
  ASSERT_EQ(::stat((dir_.path() / "relay-secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_NE(RelayTokens(std::string(32, 'x'))
                .token_for(alice.sandbox_id,
                           core::incarnation_of(provider_->find(alice.sandbox_id)->info)),
            alice.request_headers.at(core::kRelayTokenHeader));
}

// A token opens one instance of a sandbox: once destroyed, the token it was handed out with
// opens nothing, not even the next sandbox of the same conversation (the same id), which gets
// a token of its own. Before, a token was an HMAC of the id alone and opened every later
// sandbox of its conversation, forever.
TEST_F(RelayTest, ADestroyedSandboxsTokenOpensNeitherItNorItsSuccessor) {
  start_relay();
  const core::Acquired first = acquire("alice", "t-1");
  const std::string old_token = first.request_headers.at(core::kRelayTokenHeader);
  auto c = client();
  const std::string path = path_of(first.sandbox_url) + "/v1/sandbox";
  auto before = c->Get(path, {{core::kRelayTokenHeader, old_token}});
  ASSERT_TRUE(before);
  ASSERT_EQ(before->status, 200);

  service_->destroy(first.sandbox_id);
  auto gone = c->Get(path, {{core::kRelayTokenHeader, old_token}});
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->status, 404) << "a destroyed sandbox is not tracked";

  const core::Acquired second = acquire("alice", "t-1");
  ASSERT_EQ(second.sandbox_id, first.sandbox_id) << "one conversation, one id";
  const std::string new_token = second.request_headers.at(core::kRelayTokenHeader);
  EXPECT_NE(new_token, old_token) << "the successor was handed the old token";
  const int reached = backend_->sandbox(second.sandbox_id).requests();
  auto stale = c->Get(path, {{core::kRelayTokenHeader, old_token}});
  ASSERT_TRUE(stale);
  EXPECT_EQ(stale->status, 403) << "the destroyed sandbox's token opened its successor";
  EXPECT_EQ(backend_->sandbox(second.sandbox_id).requests(), reached);
  auto fresh = c->Get(path, {{core::kRelayTokenHeader, new_token}});
  ASSERT_TRUE(fresh);
  EXPECT_EQ(fresh->status, 200);
}

TEST_F(RelayTest, AHeadThatNeverEndsIsClosedAtItsDeadline) {
  RelayOptions options;
  options.head_timeout = 300ms;
  start_relay(options);
  const auto started = std::chrono::steady_clock::now();
  const std::string answer =
      exchange(relay_->port(), "GET /s/abc/v1/sandbox HTTP/1.1\r\nX-A: ", 5000ms);
  const auto took = std::chrono::steady_clock::now() - started;
  EXPECT_EQ(answer, "");
  EXPECT_LT(took, 4000ms) << "the trickling head held its connection";
}

// The relay asks where a sandbox is off its I/O thread: sandboxd-provisioner's lookup inspects
// the container (an engine call), and one that waits must not stop every other sandbox's
// traffic behind it.
TEST_F(RelayTest, ALookupThatWaitsHoldsNoOtherSandboxsRequest) {
  FakeSandbox fast("fast");
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> slow_asked;  // the slow lookup has begun (set once)
  std::future<void> slow_lookup_began = slow_asked.get_future();
  const RelayTokens tokens(std::string(32, 'k'));
  Relay relay(
      [&](const std::string& id) -> std::optional<core::SandboxEndpoint> {
        if (id == "slow") {
          slow_asked.set_value();
          released.wait();  // an engine that takes its time
        }
        core::SandboxEndpoint endpoint;
        endpoint.host = "127.0.0.1";
        endpoint.port = fast.port();
        return endpoint;
      },
      tokens, RelayOptions{}, logger_);
  relay.start();
  httplib::Client slow_client("127.0.0.1", relay.port());
  slow_client.set_read_timeout(30, 0);
  auto slow = std::async(std::launch::async, [&] {
    return slow_client.Get("/s/slow/v1/sandbox",
                           {{core::kRelayTokenHeader, tokens.token_for("slow", "")}});
  });
  // The fast request goes only once the slow lookup holds whatever it holds.
  ASSERT_EQ(slow_lookup_began.wait_for(10s), std::future_status::ready)
      << "the slow request's lookup never began";

  httplib::Client fast_client("127.0.0.1", relay.port());
  fast_client.set_read_timeout(5, 0);
  const auto answer =
      fast_client.Get("/s/fast/v1/sandbox", {{core::kRelayTokenHeader, tokens.token_for("fast", "")}});
  const bool answered_while_waiting =
      answer && answer->status == 200 && slow.wait_for(0ms) == std::future_status::timeout;
  release.set_value();
  EXPECT_TRUE(answered_while_waiting) << "a waiting lookup held another sandbox's request";
  const auto late = slow.get();
  ASSERT_TRUE(late);
  EXPECT_EQ(late->status, 200);
  relay.stop();
}


// A sandbox that answers every connection's first request with `answer`, written as is (a
// hostile sandbox may answer anything: interim answers, several at once), then closes.
class RawSandbox {
 public:
  explicit RawSandbox(std::string answer) : answer_(std::move(answer)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(fd_, 8);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] {
      while (true) {
        const int client = ::accept(fd_, nullptr, nullptr);
        if (client < 0) return;
        ++requests_;
        std::string head;
        char byte;
        while (head.find("\r\n\r\n") == std::string::npos && ::read(client, &byte, 1) == 1) {
          head += byte;
        }
        {
          std::lock_guard lock(mutex_);
          heads_.push_back(head);
        }
        (void)!::write(client, answer_.data(), answer_.size());
        ::shutdown(client, SHUT_WR);
        while (::read(client, &byte, 1) == 1) {
        }
        ::close(client);
      }
    });
  }
  ~RawSandbox() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  std::vector<std::string> heads() {
    std::lock_guard lock(mutex_);
    return heads_;
  }

 private:
  std::string answer_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> requests_{0};
  std::mutex mutex_;
  std::vector<std::string> heads_;
};

// A relay over `sandboxes` (id → port on 127.0.0.1), tokens under a fixed secret.
struct RawRelay {
  explicit RawRelay(std::map<std::string, int> sandboxes, std::shared_ptr<Logger> logger)
      : tokens(std::string(32, 'k')),
        relay(
            [sandboxes](const std::string& id) -> std::optional<core::SandboxEndpoint> {
              const auto it = sandboxes.find(id);
              if (it == sandboxes.end()) return std::nullopt;
              core::SandboxEndpoint endpoint;
              endpoint.host = "127.0.0.1";
              endpoint.port = it->second;
              return endpoint;
            },
            tokens, RelayOptions{}, std::move(logger)) {
    relay.start();
  }
  std::string request(const std::string& id, const std::string& path,
                      const std::string& extra = "") const {
    return "GET /s/" + id + path + " HTTP/1.1\r\nHost: relay\r\n" + core::kRelayTokenHeader +
           ": " + tokens.token_for(id, "") + "\r\n" + extra + "\r\n";
  }
  RelayTokens tokens;
  Relay relay;
};

// Reads from `fd` until `done` says the text so far is whole, or 5 s pass without a byte.
std::string read_until(int fd, const std::function<bool(const std::string&)>& done) {
  timeval timeout{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string text;
  char buffer[4096];
  while (!done(text)) {
    const ssize_t got = ::read(fd, buffer, sizeof buffer);
    if (got <= 0) break;
    text.append(buffer, static_cast<std::size_t>(got));
  }
  return text;
}

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// A sandbox may answer "103 Early Hints" (or any 1xx) before its answer: the interim answer is
// passed on and the final one still delivered to the request it answers. Before, the relay took
// the 103 for the answer, dropped the rest and read the client's next request: with two
// pipelined on one connection, the client read sandbox B's answer as A's.
TEST_F(RelayTest, AnInterimAnswerIsPassedOnAndTheFinalOneAnswersItsOwnRequest) {
  RawSandbox hinting(
      "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n"
      "HTTP/1.1 100 Continue\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfrom-A");
  RawSandbox plain("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfrom-B");
  RawRelay relay({{"sandboxa", hinting.port()}, {"sandboxb", plain.port()}}, logger_);
  const int fd = connect_to(relay.relay.port());
  ASSERT_GE(fd, 0);
  const std::string pipelined =
      relay.request("sandboxa", "/one") + relay.request("sandboxb", "/two");
  ASSERT_EQ(::write(fd, pipelined.data(), pipelined.size()),
            static_cast<ssize_t>(pipelined.size()));
  const std::string answers = read_until(fd, [](const std::string& text) {
    return text.find("from-A") != std::string::npos && text.find("from-B") != std::string::npos;
  });
  ::close(fd);
  const std::size_t hints = answers.find("HTTP/1.1 103 Early Hints\r\n");
  const std::size_t first_final = answers.find("HTTP/1.1 200");
  const std::size_t body_a = answers.find("from-A");
  const std::size_t body_b = answers.find("from-B");
  ASSERT_NE(body_a, std::string::npos) << "A's answer never came:\n" << answers;
  ASSERT_NE(body_b, std::string::npos) << answers;
  EXPECT_LT(hints, first_final) << "the interim answer was not passed on first:\n" << answers;
  EXPECT_NE(answers.find("Link: </a.css>; rel=preload"), std::string::npos) << answers;
  EXPECT_LT(body_a, body_b) << "B's answer reached the client as A's:\n" << answers;
  // Exactly one final answer before A's body: A's own.
  EXPECT_EQ(answers.find("HTTP/1.1 200", first_final + 1), answers.find("HTTP/1.1 200", body_a))
      << answers;
}

// A 101 to a request that asked for no upgrade is no answer the client can take: 502, and the
// connection is not used for anything else.
TEST_F(RelayTest, ASwitchNobodyAskedForIsRefused) {
  RawSandbox switching("HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nraw bytes");
  RawRelay relay({{"sandboxa", switching.port()}}, logger_);
  const int fd = connect_to(relay.relay.port());
  ASSERT_GE(fd, 0);
  const std::string request = relay.request("sandboxa", "/one");
  ASSERT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  const std::string answer = read_until(fd, [](const std::string& text) {
    return text.find("\r\n\r\n") != std::string::npos;
  });
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.1 502", 0), 0u) << answer;
  EXPECT_EQ(answer.find("raw bytes"), std::string::npos) << answer;
}

// An HTTP/1.0 client gets no interim answer (it could not tell it from the final one).
TEST_F(RelayTest, AnHttp10ClientGetsOnlyTheFinalAnswer) {
  RawSandbox hinting(
      "HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\n\r\n"
      "HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nfrom-A");
  RawRelay relay({{"sandboxa", hinting.port()}}, logger_);
  const int fd = connect_to(relay.relay.port());
  ASSERT_GE(fd, 0);
  const std::string request = "GET /s/sandboxa/one HTTP/1.0\r\n" +
                              std::string(core::kRelayTokenHeader) + ": " +
                              relay.tokens.token_for("sandboxa", "") + "\r\n\r\n";
  ASSERT_EQ(::write(fd, request.data(), request.size()), static_cast<ssize_t>(request.size()));
  const std::string answer = read_until(
      fd, [](const std::string& text) { return text.find("from-A") != std::string::npos; });
  ::close(fd);
  EXPECT_EQ(answer.rfind("HTTP/1.0 200", 0) == 0 || answer.rfind("HTTP/1.1 200", 0) == 0, true)
      << answer;
  EXPECT_EQ(answer.find("103"), std::string::npos) << answer;
}

// A client that waits for "100 Continue" before its body gets it from the relay once the
// sandbox is dialled, instead of waiting out its own timer.
TEST_F(RelayTest, AClientThatExpectsContinueIsToldToGoOn) {
  start_relay();
  const core::Acquired alice = acquire("alice", "t-1");
  const int fd = connect_to(relay_->port());
  ASSERT_GE(fd, 0);
  const std::string head = "POST " + path_of(alice.sandbox_url) +
                           "/echo-size HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                           "Expect: 100-continue\r\n" +
                           core::kRelayTokenHeader + ": " +
                           alice.request_headers.at(core::kRelayTokenHeader) + "\r\n\r\n";
  ASSERT_EQ(::write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
  const auto asked = std::chrono::steady_clock::now();
  const std::string go_on = read_until(fd, [](const std::string& text) {
    return text.find("\r\n\r\n") != std::string::npos;
  });
  EXPECT_EQ(go_on.rfind("HTTP/1.1 100 Continue\r\n", 0), 0u) << go_on;
  EXPECT_LT(std::chrono::steady_clock::now() - asked, 4s);
  ASSERT_EQ(::write(fd, "hello", 5), 5);
  const std::string answer = read_until(fd, [](const std::string& text) {
    return text.find("\r\n\r\n5") != std::string::npos;
  });
  ::close(fd);
  EXPECT_NE(answer.find("HTTP/1.1 200"), std::string::npos) << answer;
}

}  // namespace
}  // namespace sandboxd::testing

// ownership_redis against real redis-server processes: expiry on the server's clock, the wire
// encoding DeerFlow writes (read and written through redis-cli), faults (a server stopped and
// started again, a black-holed connection, a flushed script cache) and secrets kept out of
// errors. Each test runs its own redis-server child on a free 127.0.0.1 port, so it can stop it.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <thread>

#include "ownership_test_support.hpp"
#include "redis_server.hpp"

extern char** environ;

namespace sandboxd::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Clock = std::chrono::steady_clock;

class RedisStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (run("command -v redis-server").empty()) GTEST_SKIP() << "redis-server is not installed";
    server_ = std::make_unique<RedisServer>(dir_.path().string());
  }

  std::shared_ptr<OwnershipStore> open(const std::string& owner, const std::string& extra = "") {
    return load_store(
        kRedisStoreUse,
        make_store_context(
            owner,
            R"({"url": ")" + server_->url() + R"(")" + (extra.empty() ? "" : ", " + extra) + "}",
            dir_.path().string(), std::make_shared<SystemClock>(), logger_));
  }

  TempDir dir_;
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
  std::unique_ptr<RedisServer> server_;
};

TEST_F(RedisStoreTest, LeasesAreWrittenInDeerFlowsEncoding) {
  auto store = open("gw-a");
  ASSERT_TRUE(store->take("sb-1"));
  EXPECT_EQ(server_->cli("GET deerflow:sandbox:owner:sb-1"), "own:gw-a");
  const int pttl = std::stoi(server_->cli("PTTL deerflow:sandbox:owner:sb-1"));
  EXPECT_GT(pttl, 119000);
  EXPECT_LE(pttl, 120000) << "TTL in milliseconds: max(1, int(120 s × 1000))";
  ASSERT_TRUE(store->claim("sb-1", /*for_destroy=*/true));
  EXPECT_EQ(server_->cli("GET deerflow:sandbox:owner:sb-1"), "del:gw-a");
  store->release("sb-1");
  EXPECT_EQ(server_->cli("EXISTS deerflow:sandbox:owner:sb-1"), "0");

  auto prefixed = open("gw-a", R"("key_prefix": "tenant:x:")");
  ASSERT_TRUE(prefixed->take("sb-2"));
  EXPECT_EQ(server_->cli("GET tenant:x:sb-2"), "own:gw-a") << "one ':' between prefix and id";
}

TEST_F(RedisStoreTest, LeasesWrittenByAnotherClientInDeerFlowsFormatAreHonoured) {
  auto store = open("gw-a");
  EXPECT_EQ(server_->cli("SET deerflow:sandbox:owner:sb-peer own:python-gw PX 60000"), "OK");
  EXPECT_EQ(store->owner("sb-peer"), "python-gw");
  EXPECT_FALSE(store->claim("sb-peer")) << "a live peer lease refuses adoption";
  EXPECT_FALSE(store->claim("sb-peer", /*for_destroy=*/true));
  EXPECT_EQ(store->renew("sb-peer"), RenewOutcome::lost);
  store->release("sb-peer");
  EXPECT_EQ(server_->cli("GET deerflow:sandbox:owner:sb-peer"), "own:python-gw");
  EXPECT_TRUE(store->take("sb-peer")) << "the acquire path takes a peer's own lease over";
  EXPECT_EQ(server_->cli("GET deerflow:sandbox:owner:sb-peer"), "own:gw-a");

  EXPECT_EQ(server_->cli("SET deerflow:sandbox:owner:sb-dying del:python-gw PX 60000"), "OK");
  EXPECT_FALSE(store->take("sb-dying")) << "a del: lease refuses take";
  const auto lease = store->inspect("sb-dying");
  ASSERT_TRUE(lease);
  EXPECT_TRUE(lease->destroying);
  EXPECT_EQ(lease->owner_id, "python-gw");
}

TEST_F(RedisStoreTest, LeasesExpireOnTheServersClock) {
  auto store = open("gw-a", R"("renewal_interval_seconds": 0.1, "ttl_multiplier": 4)");
  ASSERT_TRUE(store->claim("sb-1", /*for_destroy=*/true));
  auto peer = open("gw-b", R"("renewal_interval_seconds": 0.1, "ttl_multiplier": 4)");
  EXPECT_FALSE(peer->take("sb-1"));
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // TTL 0.4 s
  EXPECT_EQ(peer->owner("sb-1"), std::nullopt);
  EXPECT_EQ(store->renew("sb-1"), RenewOutcome::lapsed) << "absent, not lost";
  EXPECT_TRUE(peer->take("sb-1"));
}

TEST_F(RedisStoreTest, ConstructionNeverTouchesTheNetworkAndAnUnreachableServerFailsClosed) {
  server_->stop();
  // A constructor that connected would throw here ("cannot connect"): it must not.
  std::shared_ptr<OwnershipStore> store;
  ASSERT_NO_THROW(store =
                      open("gw-a", R"("connect_timeout_seconds": 1, "socket_timeout_seconds": 1)"));
  try {
    store->take("sb-1");
    ADD_FAILURE() << "take succeeded without a server";
  } catch (const OwnershipBackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("failed to publish sandbox ownership for sb-1"));
    EXPECT_THAT(e.what(), HasSubstr("127.0.0.1:" + std::to_string(server_->port())));
  }
  EXPECT_THROW(store->owner("sb-1"), OwnershipBackendError);
  EXPECT_THROW(store->renew("sb-1"), OwnershipBackendError);
}

TEST_F(RedisStoreTest, AStoppedServerFailsEveryCallAndAStartedOneServesAgainWithoutANewStore) {
  auto store = open("gw-a", R"("connect_timeout_seconds": 1, "socket_timeout_seconds": 1)");
  ASSERT_TRUE(store->take("sb-1"));
  server_->stop();
  for (int i = 0; i < 3; ++i) {
    EXPECT_THROW(store->take("sb-2"), OwnershipBackendError);
    EXPECT_THROW(store->claim("sb-2"), OwnershipBackendError);
    EXPECT_THROW(store->inspect("sb-2"), OwnershipBackendError);
  }
  server_->start();  // empty: no persistence, and no scripts loaded
  EXPECT_TRUE(store->take("sb-2")) << "the next call reconnects and loads the scripts again";
  EXPECT_EQ(server_->cli("GET deerflow:sandbox:owner:sb-2"), "own:gw-a");
  EXPECT_EQ(store->renew("sb-1"), RenewOutcome::lapsed) << "the restarted server lost sb-1";
}

TEST_F(RedisStoreTest, AFlushedScriptCacheIsReloaded) {
  auto store = open("gw-a");
  ASSERT_TRUE(store->take("sb-1"));
  EXPECT_EQ(server_->cli("SCRIPT FLUSH"), "OK");
  EXPECT_EQ(store->renew("sb-1"), RenewOutcome::renewed) << "NOSCRIPT → SCRIPT LOAD → EVALSHA";
}

// Accepts connections and never answers: every call must end within the socket timeout.
class BlackHole {
 public:
  BlackHole() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    socklen_t size = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size);
    port_ = ntohs(address.sin_port);
    ::listen(fd_, 16);  // the kernel completes handshakes; nobody ever reads
  }
  ~BlackHole() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST_F(RedisStoreTest, ABlackHoledConnectionIsBoundedByTheSocketTimeout) {
  BlackHole hole;
  auto store = load_store(
      kRedisStoreUse,
      make_store_context("gw-a",
                         R"({"url": "redis://127.0.0.1:)" + std::to_string(hole.port()) +
                             R"(/0", "socket_timeout_seconds": 0.5})",
                         dir_.path().string(), std::make_shared<SystemClock>(), logger_));
  const auto start = Clock::now();
  try {
    store->claim("sb-1", /*for_destroy=*/true);
    ADD_FAILURE() << "a server that never answers granted a claim";
  } catch (const OwnershipBackendError& e) {
    EXPECT_THAT(e.what(), HasSubstr("failed to claim sandbox ownership for sb-1"));
  }
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  std::printf("[ figures ] black-holed claim failed after %.2fs (socket timeout 0.5s)\n", waited);
  EXPECT_LT(waited, 5.0) << "the call was not bounded by the socket timeout";
}

TEST_F(RedisStoreTest, ThePasswordNeverAppearsInALogLineOrAnError) {
  // This server has no password: AUTH fails, and the message must not repeat it.
  const std::string secret = "s3cret-pw-9f2";
  auto store = load_store(
      kRedisStoreUse,
      make_store_context("gw-a",
                         R"({"url": "redis://app:)" + secret +
                             "@127.0.0.1:" + std::to_string(server_->port()) + R"(/0"})",
                         dir_.path().string(), std::make_shared<SystemClock>(), logger_));
  try {
    store->take("sb-1");
    ADD_FAILURE() << "AUTH against a server without a password succeeded";
  } catch (const OwnershipBackendError& e) {
    EXPECT_THAT(e.what(), Not(HasSubstr(secret)));
    EXPECT_THAT(e.what(), HasSubstr("redis://<redacted>@127.0.0.1:"));
  }
  for (const auto& line : logger_->lines()) EXPECT_THAT(line.message, Not(HasSubstr(secret)));
  const std::string bad = load_error(
      kRedisStoreUse,
      make_store_context("gw-a", R"({"url": "rediss://u:)" + secret + R"(@h:1"})",
                         dir_.path().string(), std::make_shared<SystemClock>(), logger_));
  EXPECT_THAT(bad, HasSubstr("sandbox.ownership.url"));
  EXPECT_THAT(bad, HasSubstr("no TLS"));
  EXPECT_THAT(bad, Not(HasSubstr(secret)));
}

TEST_F(RedisStoreTest, TheUrlFallsBackThroughDeerFlowsEnvironmentVariables) {
  ScopedEnv a("DEER_FLOW_SANDBOX_OWNERSHIP_REDIS_URL", std::nullopt);
  ScopedEnv b("DEER_FLOW_STREAM_BRIDGE_REDIS_URL", server_->url());
  ScopedEnv c("REDIS_URL", "redis://127.0.0.1:1/0");
  auto store =
      load_store(kRedisStoreUse, make_store_context("gw-a", "{}", dir_.path().string(),
                                                    std::make_shared<SystemClock>(), logger_));
  EXPECT_TRUE(store->take("sb-env"));
  EXPECT_TRUE(logger_->contains(LogLevel::info,
                                "(from environment variable DEER_FLOW_STREAM_BRIDGE_REDIS_URL"));
}

}  // namespace
}  // namespace sandboxd::testing

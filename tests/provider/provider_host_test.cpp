// Host-level pieces around the provider: the process-wide registry (design §5.18) and shutdown
// on SIGTERM/SIGINT/SIGHUP with chaining to the previous disposition (design §5.2 step 4).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <sstream>
#include <thread>

#include "provider_fixtures.hpp"
#include "sandboxd/core/provider_registry.hpp"

namespace sandboxd::testing {
namespace {

class ProviderRegistryTest : public ProviderFixture {
 protected:
  std::shared_ptr<Provider> make_shared_provider() {
    std::lock_guard lock(build_mutex);
    ++builds;
    return std::make_shared<Provider>(
        deps_over(backend, load_memory_store(clock, logger, tmp.path().string()), logger, clock));
  }
  bool is_shut_down(const std::shared_ptr<Provider>& provider) {
    core::ProviderTestPeer peer(*provider);
    std::lock_guard lock(peer.mutex());
    return peer.registry().shut_down();
  }
  std::mutex build_mutex;  // guards builds
  int builds = 0;
};

TEST_F(ProviderRegistryTest, ColdStartRaceInstallsOneAndShutsTheLosersDown) {
  std::vector<std::shared_ptr<Provider>> built;
  std::mutex built_mutex;
  std::atomic<int> arrived{0};
  core::ProviderRegistry registry([&]() -> std::shared_ptr<Provider> {
    auto provider = make_shared_provider();
    {
      std::lock_guard lock(built_mutex);
      built.push_back(provider);
    }
    ++arrived;
    while (arrived.load() < 4) std::this_thread::yield();  // every racer builds one
    return provider;
  });
  std::vector<std::shared_ptr<Provider>> got(4);
  std::vector<std::thread> racers;
  for (int i = 0; i < 4; ++i) racers.emplace_back([&, i] { got[i] = registry.get(); });
  for (auto& racer : racers) racer.join();
  for (const auto& provider : got) EXPECT_EQ(provider, got[0]);
  EXPECT_FALSE(is_shut_down(got[0]));
  int shut = 0;
  for (const auto& provider : built) shut += is_shut_down(provider) ? 1 : 0;
  EXPECT_EQ(shut, 3) << "each losing racer shuts its own instance down";
  EXPECT_EQ(registry.get(), got[0]) << "the fast path returns the installed instance";
}

TEST_F(ProviderRegistryTest, ShutdownDetachesAndStopsResetDetachesAndSetReplaces) {
  core::ProviderRegistry registry([&] { return make_shared_provider(); });
  auto first = registry.get();
  registry.shutdown();
  EXPECT_TRUE(is_shut_down(first));
  auto second = registry.get();
  EXPECT_NE(second, first) << "get returned a torn-down instance";
  EXPECT_FALSE(is_shut_down(second));

  registry.reset();
  auto third = registry.get();
  EXPECT_NE(third, second);
  EXPECT_FALSE(is_shut_down(second)) << "reset shuts down only when the last user lets go";

  registry.set(second);
  EXPECT_EQ(registry.get(), second);
  EXPECT_FALSE(is_shut_down(third)) << "set must not shut the replaced instance down";
  third->shutdown();
  second->shutdown();
}

TEST_F(ProviderRegistryTest, GetNeverSeesANullInstanceWhileOthersResetAndSet) {
  core::ProviderRegistry registry([&] { return make_shared_provider(); });
  std::atomic<bool> stop{false};
  std::atomic<int> nulls{0};
  std::thread reader([&] {
    while (!stop) {
      if (!registry.get()) ++nulls;
    }
  });
  for (int i = 0; i < 50; ++i) {
    registry.reset();
    registry.set(make_shared_provider());
  }
  stop = true;
  reader.join();
  EXPECT_EQ(nulls.load(), 0);
  registry.shutdown();
}

// Runs the helper, waits until it is ready, sends SIGTERM, returns (wait status, marker text).
std::pair<int, std::string> signal_helper(const std::string& mode) {
  char pattern[] = "/tmp/sandboxd-signal-XXXXXX";
  const int marker_fd = mkstemp(pattern);
  ::close(marker_fd);
  int ready[2];
  EXPECT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::dup2(ready[1], STDOUT_FILENO);
    ::execl(SIGNAL_SHUTDOWN_HELPER, SIGNAL_SHUTDOWN_HELPER, pattern, mode.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(ready[1]);
  char buffer[6] = {0};
  EXPECT_EQ(::read(ready[0], buffer, 5), 5);  // "ready": the handlers are installed
  ::close(ready[0]);
  ::kill(child, SIGTERM);
  int status = 0;
  ::waitpid(child, &status, 0);
  std::ifstream in(pattern);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(pattern);
  return {status, text.str()};
}

TEST(SignalShutdownTest, ShutsDownThenEndsTheProcessAsTheDefaultWould) {
  const auto [status, marker] = signal_helper("default");
  EXPECT_EQ(marker, "shutdown 15\n");
  ASSERT_TRUE(WIFSIGNALED(status)) << "status " << status;
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

TEST(SignalShutdownTest, ShutsDownThenChainsToThePreviousHandler) {
  const auto [status, marker] = signal_helper("chain");
  EXPECT_EQ(marker, "shutdown 15\nprevious 15\n");
  ASSERT_TRUE(WIFEXITED(status)) << "status " << status;
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

}  // namespace
}  // namespace sandboxd::testing

// The operator page's resource figures (usage_sampler.hpp): sampled from the backend's
// SandboxUsage by a sweep of the tracked sandboxes, CPU as a share of one CPU between two
// readings, a failure kept per sandbox, forgotten sandboxes dropped, at most max_per_sweep read,
// and the thread sweeping only while someone looks. A view never calls the backend.
#include "sandboxd/core/usage_sampler.hpp"

#include <gmock/gmock.h>

#include <future>

#include "provider_fixtures.hpp"
#include "sandboxd/core/service_json.hpp"

namespace sandboxd::testing {
namespace {

using namespace std::chrono_literals;

// A backend whose sandboxes report scripted figures; every usage call is counted.
class MeteredBackend final : public SandboxBackend, public SandboxUsage {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);
  }
  void destroy(const SandboxInfo&) override {}
  bool is_alive(const SandboxInfo&) override { return true; }
  std::optional<SandboxInfo> discover(const std::string&) override { return std::nullopt; }

  Reading usage(const SandboxInfo& info) override {
    ++calls;
    std::lock_guard lock(mutex);
    if (failing.count(info.sandbox_id)) throw std::runtime_error("no such container");
    return readings[info.sandbox_id];
  }

  std::mutex mutex;
  std::map<std::string, Reading> readings;
  std::set<std::string> failing;
  std::atomic<int> calls{0};
};

SandboxUsage::Reading reading(double cpu, double host, std::uint64_t memory) {
  SandboxUsage::Reading r;
  r.cpu_seconds = cpu;
  r.host_cpu_seconds = host;
  r.online_cpus = 2;
  r.memory_bytes = memory;
  r.memory_limit_bytes = 256u << 20;
  r.pids = 3;
  return r;
}

class UsageSamplerTest : public ProviderFixture {
 protected:
  void build_metered() { provider = make_provider(metered, &store); }
  std::shared_ptr<MeteredBackend> metered = std::make_shared<MeteredBackend>();
};

TEST_F(UsageSamplerTest, FiguresComeFromTwoReadingsAndFailuresAreKeptPerSandbox) {
  build_metered();
  const std::string busy = provider->acquire("t-1", "alice");
  const std::string gone = provider->acquire("t-2", "bob");
  metered->readings[busy] = reading(10.0, 1000.0, 50u << 20);
  metered->failing.insert(gone);
  core::UsageSampler sampler(*provider, clock, {.interval_seconds = 5, .max_per_sweep = 10});

  core::UsageView view = sampler.view();
  EXPECT_TRUE(view.available);
  EXPECT_EQ(view.swept_at, 0.0) << "nothing swept yet";
  EXPECT_TRUE(view.sandboxes.empty());
  EXPECT_EQ(metered->calls, 0) << "a view asked the engine";

  sampler.sweep();
  view = sampler.view();
  ASSERT_EQ(view.sandboxes.count(busy), 1u);
  EXPECT_EQ(view.sandboxes[busy].memory_bytes, 50u << 20);
  EXPECT_EQ(view.sandboxes[busy].memory_limit_bytes, 256u << 20);
  EXPECT_EQ(view.sandboxes[busy].pids, 3u);
  EXPECT_EQ(view.sandboxes[busy].cpu_percent, std::nullopt) << "one reading gives no rate";
  EXPECT_EQ(view.sandboxes[gone].error, "no such container");
  EXPECT_EQ(view.swept_at, clock->wall_now());

  // 0.5 s of CPU while the host's two CPUs counted 2 s: a quarter of the host, half of one CPU.
  clock->advance(5);
  metered->readings[busy] = reading(10.5, 1002.0, 60u << 20);
  sampler.sweep();
  view = sampler.view();
  ASSERT_TRUE(view.sandboxes[busy].cpu_percent.has_value());
  EXPECT_DOUBLE_EQ(*view.sandboxes[busy].cpu_percent, 50.0);
  EXPECT_EQ(view.sandboxes[busy].memory_bytes, 60u << 20);

  // Destroyed: gone from the figures at the next sweep.
  provider->destroy(busy);
  sampler.sweep();
  EXPECT_EQ(sampler.view().sandboxes.count(busy), 0u);
  const std::string json = core::to_json(sampler.view());
  EXPECT_THAT(json, ::testing::ContainsRegex("\"error\": ?\"no such container\""));
}

TEST_F(UsageSamplerTest, ASweepReadsAtMostItsBoundAndSaysHowManyItLeft) {
  build_metered();
  for (int i = 0; i < 5; ++i) provider->acquire("t-" + std::to_string(i), "alice");
  core::UsageSampler sampler(*provider, clock, {.max_per_sweep = 3});
  sampler.sweep();
  EXPECT_EQ(metered->calls, 3);
  const core::UsageView view = sampler.view();
  EXPECT_EQ(view.sandboxes.size(), 3u);
  EXPECT_EQ(view.not_sampled, 2u);
}

TEST_F(UsageSamplerTest, TheThreadSweepsOnlyWhileSomeoneLooks) {
  build_metered();
  provider->acquire("t-1", "alice");
  core::UsageSampler sampler(*provider, clock, {.interval_seconds = 0.01, .demand_seconds = 60});
  sampler.start();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(metered->calls, 0) << "sampled with nobody looking";
  sampler.view();  // someone looks: it sweeps, again and again
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (metered->calls < 3 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_GE(metered->calls, 3);
  clock->advance(61);  // nobody looked for a minute: it stops after the sweep in flight
  std::this_thread::sleep_for(100ms);
  const int settled = metered->calls;
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(metered->calls, settled) << "kept sampling with nobody looking";
}

TEST_F(UsageSamplerTest, ABackendThatCannotTellIsSaidAndNeverAsked) {
  build();  // the fixture's FakeBackend offers no SandboxUsage
  provider->acquire("t-1", "alice");
  core::UsageSampler sampler(*provider, clock);
  sampler.start();
  sampler.sweep();
  const core::UsageView view = sampler.view();
  EXPECT_FALSE(view.available);
  EXPECT_TRUE(view.sandboxes.empty());
  EXPECT_THAT(core::to_json(view), ::testing::ContainsRegex("\"available\": ?false"));
}

// sandboxd-provisioner has no Provider: its sampler reads what a listing of the backend names.
// The bound holds for it too, and a listing that fails (the engine away) keeps the figures.
TEST_F(UsageSamplerTest, ASamplerOverAListingReadsWhatItNamesAndKeepsFiguresWhenItFails) {
  std::atomic<bool> listing_fails{false};
  std::atomic<int> listings{0};
  core::UsageSampler sampler(
      metered.get(),
      [&](std::size_t limit) {
        ++listings;
        if (listing_fails) throw std::runtime_error("engine unreachable");
        Provider::TrackedInfos tracked;
        for (const char* id : {"a", "b", "c"}) {
          if (tracked.infos.size() < limit) {
            tracked.infos.push_back(make_info_ptr(id, std::string("http://") + id));
          } else {
            ++tracked.left_out;
          }
        }
        return tracked;
      },
      clock, {.interval_seconds = 5, .max_per_sweep = 2});
  metered->readings["a"] = reading(1.0, 100.0, 7u << 20);

  sampler.sweep();
  core::UsageView view = sampler.view();
  EXPECT_TRUE(view.available);
  EXPECT_EQ(view.sandboxes.size(), 2u);
  EXPECT_EQ(view.not_sampled, 1u);
  EXPECT_EQ(view.sandboxes["a"].memory_bytes, 7u << 20);
  EXPECT_EQ(metered->calls, 2);

  listing_fails = true;
  clock->advance(5);
  sampler.sweep();
  view = sampler.view();
  EXPECT_EQ(listings, 2);
  EXPECT_EQ(view.sandboxes["a"].memory_bytes, 7u << 20) << "a failed listing lost the figures";
  EXPECT_EQ(metered->calls, 2);
}

}  // namespace
}  // namespace sandboxd::testing

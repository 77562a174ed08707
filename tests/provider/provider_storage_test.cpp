// The host's free-space floor (docs/storage.md; issue 45 item 3): below `min_free_disk` under
// the state directory (or the engine's storage), a new sandbox is refused as a capacity refusal
// naming the floor and what is free, recorded as an event; when space returns it is let in.
// A real small filesystem (tmpfs) under the state directory, filled by the test; root only.
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>

#include "provider_fixtures.hpp"
#include "scratch_filesystem.hpp"

namespace sandboxd::testing {
namespace {

using core::ThreadStorage;

class ProviderStorageTest : public ProviderFixture {
 protected:
  // A provider over `backend` whose conversations are bounded at 20 MiB (the bound's number is
  // what the layer pass compares with; tmp's filesystem need not enforce it).
  ProviderDeps bounded_deps(std::shared_ptr<SandboxBackend> backend) {
    auto store = load_memory_store(clock, logger, tmp.path().string());
    ProviderDeps deps = deps_over(std::move(backend), store, logger, clock);
    core::Paths paths(tmp.path(), tmp.path().string());
    paths.set_storage(ThreadStorage::for_base_dir(tmp.path(), 20u << 20, "the test"));
    deps.paths = std::make_shared<const core::Paths>(std::move(paths));
    return deps;
  }
};

TEST_F(ProviderStorageTest, BelowTheFreeSpaceFloorANewSandboxIsRefusedUntilSpaceReturns) {
  if (const auto why = ScratchFilesystem::unavailable(ScratchFilesystem::Kind::tmpfs);
      !why.empty()) {
    GTEST_SKIP() << why;
  }
  ScratchFilesystem disk(ScratchFilesystem::Kind::tmpfs, "16M");
  ASSERT_TRUE(disk.mounted());
  auto events = std::make_shared<core::LifecycleEventLog>(clock);
  options.min_free_disk_bytes = 8u << 20;
  auto store = load_memory_store(clock, logger, tmp.path().string());
  ProviderDeps deps = deps_over(backend, store, logger, clock);
  deps.paths = std::make_shared<const core::Paths>(disk.path(), disk.path().string());
  deps.events = events;
  provider = ProviderUnderTest(std::move(deps));

  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, core::AcquirePath::created)
      << "plenty free: let in";
  {
    const int fd = ::open((disk.path() / "filler").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    const std::string block(1 << 20, 'f');
    for (int i = 0; i < 12; ++i) (void)!::write(fd, block.data(), block.size());
    ::close(fd);
  }
  try {
    provider->acquire("t-2", "bob");
    FAIL() << "a sandbox was made below the floor";
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::capacity);  // 429, exit 7
    const std::string message = e.what();
    EXPECT_NE(message.find("min_free_disk 8 MiB"), std::string::npos) << message;
    EXPECT_NE(message.find(disk.path().string()), std::string::npos) << message;
    EXPECT_NE(message.find("is free"), std::string::npos) << message;
  }
  EXPECT_EQ(provider->event_counts().rejections_min_free_disk, 1u);
  const auto recorded = events->after(0, 100);
  ASSERT_FALSE(recorded.events.empty());
  EXPECT_EQ(recorded.events.back().kind, core::LifecycleEventKind::refused);
  EXPECT_EQ(recorded.events.back().reason, "min_free_disk");
  // Running sandboxes go on: a reuse is no new sandbox.
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, core::AcquirePath::reused);

  std::filesystem::remove(disk.path() / "filler");
  EXPECT_EQ(provider->acquire_traced("t-2", "bob").path, core::AcquirePath::created)
      << "space returned: let in";
}

// The writable layer's bound, where the engine cannot hold it: each pass asks the backend for a
// bounded batch of layers, stops one past disk_limit (the very container looked at) and records
// why; the others, and a backend that cannot tell, are left alone. With `hang_looks`, every
// look waits until release_looks(): an engine that does not answer.
class LayeredBackend final : public SandboxBackend, public WritableLayerUsage {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    SandboxInfo info = make_info(request.sandbox_id, "http://" + request.sandbox_id);
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    return info;
  }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    destroyed.push_back(info.sandbox_id);
  }
  bool is_alive(const SandboxInfo&) override { return true; }
  std::optional<SandboxInfo> discover(const std::string&) override { return std::nullopt; }
  std::optional<std::uint64_t> writable_layer_bytes(const SandboxInfo& info) override {
    std::unique_lock lock(mutex_);
    asked.push_back(info.sandbox_id);
    looked_.notify_all();
    looked_.wait(lock, [&] { return !hang_looks; });
    const auto it = layers.find(info.sandbox_id);
    if (it == layers.end()) return std::nullopt;
    return it->second;
  }
  bool wait_for_a_look() {
    std::unique_lock lock(mutex_);
    return looked_.wait_for(lock, std::chrono::seconds(10), [&] { return !asked.empty(); });
  }
  void release_looks() {
    std::lock_guard lock(mutex_);
    hang_looks = false;
    looked_.notify_all();
  }
  std::vector<std::string> destroyed_now() {
    std::lock_guard lock(mutex_);
    return destroyed;
  }
  // Lock story: `mutex_` guards every field below; the provider's threads and the test share
  // them.
  std::mutex mutex_;
  std::condition_variable looked_;
  bool hang_looks = false;  // set before the provider starts
  std::map<std::string, std::uint64_t> layers;
  std::vector<std::string> asked, destroyed;
};

TEST_F(ProviderStorageTest, ALayerPastTheBoundIsStoppedWithItsReason) {
  auto layered = std::make_shared<LayeredBackend>();
  auto events = std::make_shared<core::LifecycleEventLog>(clock);
  ProviderDeps deps = bounded_deps(layered);
  deps.events = events;
  provider = ProviderUnderTest(std::move(deps));
  const std::string big = provider->acquire("t-1", "alice");
  const std::string small = provider->acquire("t-1", "bob");
  const std::string unknown = provider->acquire("t-1", "carol");
  layered->layers[big] = 30u << 20;
  layered->layers[small] = 1u << 20;
  provider->stop_layers_past_bound();
  EXPECT_EQ(layered->destroyed, std::vector<std::string>{big});
  EXPECT_FALSE(provider->find(big).has_value());
  EXPECT_TRUE(provider->find(small).has_value());
  EXPECT_TRUE(provider->find(unknown).has_value());
  const auto page = events->after(0, 100);
  ASSERT_FALSE(page.events.empty());
  EXPECT_EQ(page.events.back().kind, core::LifecycleEventKind::over_disk_limit);
  EXPECT_EQ(page.events.back().sandbox_id, big);
  EXPECT_EQ(page.events.back().reason, "its writable layer holds 30 MiB, past disk_limit 20 MiB");
  EXPECT_EQ(provider->event_counts().disk_limit_stops, 1u);
}

// Each look at a layer is the engine walking it (milliseconds, far longer for a layer of many
// files or a busy engine; 256 looks a pass), so the layer pass runs beside the idle checker, not
// in it: a look that hangs must not hold back the reaper, the pause pass or the archive pass.
TEST_F(ProviderStorageTest, AHangingLayerLookDoesNotHoldBackTheReaper) {
  auto hanging = std::make_shared<LayeredBackend>();
  hanging->hang_looks = true;
  options.idle_timeout = 60;
  options.run_background_threads = true;
  options.idle_check_interval_seconds = 0.02;
  provider = ProviderUnderTest(bounded_deps(hanging));
  const std::string idle = provider->acquire("t-1", "bob");
  provider->start();
  ASSERT_TRUE(hanging->wait_for_a_look()) << "no layer pass ran";
  provider->release(idle);
  clock->advance(61);
  // Bounded wait on real threads; the deadline is a failure bound, not a speed goal.
  for (int i = 0; i < 500 && hanging->destroyed_now().empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(hanging->destroyed_now(), std::vector<std::string>{idle})
      << "the idle sandbox was not reaped while a layer look hung";
  hanging->release_looks();
  provider->shutdown();
}

}  // namespace
}  // namespace sandboxd::testing

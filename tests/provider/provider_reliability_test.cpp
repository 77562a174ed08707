// Issue 13, part A: defects found by review, each pinned by a test that failed before its fix.
// (A.1 and A.3 live beside the tests of what they guard: provider_async_seed_test.cpp and
// provider_one_shot_test.cpp.)
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::AsyncAcquisition;
using core::deterministic_sandbox_id;
using core::Provider;
using core::ProviderDeps;
using namespace std::chrono_literals;

class ProviderReliabilityTest : public ProviderFixture {};

// A one-shot gate: tests park a fake step on it and open it when they are ready.
class Gate {
 public:
  void open() { opened_.set_value(); }
  void wait() const { future_.wait(); }

 private:
  std::promise<void> opened_;
  std::shared_future<void> future_ = opened_.get_future().share();
};

// A replaced step lasts for the guard's scope: after it the real step runs again, so a test
// cannot leave a replacement behind for the provider's later work.
TEST_F(ProviderReliabilityTest, AStepReplacedForAScopeIsTheRealStepAgainAfterIt) {
  build();
  {
    const auto restore_acquire_internal = provider.inject(
        &ProviderSeams::acquire_internal, [](auto&&...) { return std::string("scripted"); });
    EXPECT_EQ(provider->acquire("thread-1", "alice"), "scripted");
    {
      const auto inner = provider.inject(&ProviderSeams::acquire_internal,
                                         [](auto&&...) { return std::string("inner"); });
      EXPECT_EQ(provider->acquire("thread-1", "alice"), "inner");
    }
    EXPECT_EQ(provider->acquire("thread-1", "alice"), "scripted") << "the outer one is back";
  }
  EXPECT_EQ(provider->acquire("thread-1", "alice"), deterministic_sandbox_id("thread-1", "alice"));
  EXPECT_EQ(backend->creates().size(), 1u);
}

// A.5: waiters parked on one stuck conversation, cancelled or not, must not keep another
// conversation from being served. Before the fix each waiter held a lock-wait pool thread inside
// lock(); with 8 of them on a 4-thread pool, thread-b's wait never even started.
TEST_F(ProviderReliabilityTest, WaitersOnAStuckConversationDoNotBlockAnotherConversation) {
  build();
  const auto restore_acquire_internal = provider.inject(
      &ProviderSeams::acquire_internal, [](const std::optional<std::string>& thread, auto&&...) {
        return "sandbox-" + thread.value_or("");
      });
  const auto stuck = provider.peer().thread_lock({"default", "thread-stuck"});
  stuck->lock();

  std::vector<AsyncAcquisition> waiters;
  for (int i = 0; i < 8; ++i) waiters.push_back(provider->acquire_async("thread-stuck", "default"));
  for (int i = 0; i < 4; ++i) waiters[i].cancel();  // half give up, half keep waiting

  AsyncAcquisition other = provider->acquire_async("thread-b", "default");
  ASSERT_TRUE(other.wait_for(2000ms))
      << "8 waiters on a stuck conversation (4 cancelled) kept thread-b from being served";
  EXPECT_EQ(other.get(), "sandbox-thread-b");

  stuck->unlock();
  for (int i = 4; i < 8; ++i) EXPECT_EQ(waiters[i].get(), "sandbox-thread-stuck");
  ASSERT_TRUE(blocking_executor->wait_idle(1000ms));
  EXPECT_FALSE(stuck->is_held()) << "a cancelled waiter leaked the conversation's lock";
}

// A.5, the lock itself: waiters queue in order and a release hands the lock to the next one
// without a thread parked per waiter; a declined grant (a cancelled waiter) passes it on.
TEST(ThreadLockTest, AsyncWaitersAreGrantedInOrderAndDeclinesPassTheLockOn) {
  core::ThreadLock lock;
  std::vector<int> granted;
  lock.lock();
  lock.lock_async([&] {
    granted.push_back(1);
    return true;
  });
  lock.lock_async([&] {
    granted.push_back(2);
    return false;
  });  // declines: cancelled
  lock.lock_async([&] {
    granted.push_back(3);
    return true;
  });
  EXPECT_TRUE(granted.empty());
  lock.unlock();
  EXPECT_EQ(granted, (std::vector<int>{1}));
  EXPECT_TRUE(lock.is_held());
  lock.unlock();  // 2 declines, 3 takes it
  EXPECT_EQ(granted, (std::vector<int>{1, 2, 3}));
  EXPECT_TRUE(lock.is_held());
  lock.unlock();
  EXPECT_FALSE(lock.is_held());
  EXPECT_TRUE(lock.try_lock());
  lock.unlock();
}

TEST(ThreadLockTest, SyncAndAsyncWaitersShareOneQueue) {
  core::ThreadLock lock;
  lock.lock();
  std::atomic<bool> sync_got{false};
  std::thread sync_waiter([&] {
    lock.lock();
    sync_got = true;
  });
  while (lock.waiters() < 1) std::this_thread::yield();
  bool async_got = false;
  lock.lock_async([&] {
    async_got = true;
    return true;
  });
  lock.unlock();  // the sync waiter queued first
  sync_waiter.join();
  EXPECT_TRUE(sync_got.load());
  EXPECT_FALSE(async_got);
  lock.unlock();
  EXPECT_TRUE(async_got);
  lock.unlock();
  EXPECT_FALSE(lock.is_held());
}

TEST(ThreadLockTest, ATimedOutSyncWaiterLeavesTheQueue) {
  core::ThreadLock lock;
  lock.lock();
  EXPECT_FALSE(lock.try_lock_until(std::chrono::steady_clock::now() + 20ms));
  EXPECT_EQ(lock.waiters(), 0u);
  lock.unlock();
  EXPECT_FALSE(lock.is_held()) << "the release was handed to a waiter that had left";
}

// A.2: a second shutdown() (a SIGTERM watcher beside normal teardown) must not return while the
// first is still stopping sandboxes: its caller may destroy the provider next.
TEST_F(ProviderReliabilityTest, ASecondShutdownWaitsForTheFirst) {
  build();
  provider->acquire("t-1", "alice");
  Gate destroy_entered, destroy_go;
  backend->destroy_fn = [&](const SandboxInfo&) {
    destroy_entered.open();
    destroy_go.wait();
  };
  auto first = std::async(std::launch::async, [&] { provider->shutdown(); });
  destroy_entered.wait();
  auto second = std::async(std::launch::async, [&] { provider->shutdown(); });
  EXPECT_EQ(second.wait_for(300ms), std::future_status::timeout)
      << "the second shutdown returned while the first was still stopping a sandbox";
  destroy_go.open();
  first.get();
  second.get();
  EXPECT_EQ(backend->destroys().size(), 1u);
  backend->clear_scripts();
}

// Shutdown stops sandboxes side by side (bounded), not one after another. Each fake
// stop waits, at most 2 s, until four run at once; in sequence none ever sees a second.
TEST_F(ProviderReliabilityTest, ShutdownStopsSandboxesSideBySide) {
  build();
  for (int i = 0; i < 8; ++i) provider->acquire("t-" + std::to_string(i), "alice");
  std::mutex mutex;
  std::condition_variable changed;
  int running = 0, most = 0;
  backend->destroy_fn = [&](const SandboxInfo&) {
    std::unique_lock lock(mutex);
    most = std::max(most, ++running);
    changed.notify_all();
    changed.wait_for(lock, 2s, [&] { return running >= 4 || most >= 4; });
    --running;
  };
  provider->shutdown();
  EXPECT_EQ(backend->destroys().size(), 8u);
  EXPECT_GE(most, 4) << "stops ran one at a time";
  EXPECT_LE(most, static_cast<int>(sandboxd::core::kShutdownParallelism));
  backend->clear_scripts();
}

// A.2: shutdown() waits for asynchronous acquisitions already running, and fails the ones still
// waiting for their conversation's lock, so no task touches the provider after it returns.
TEST_F(ProviderReliabilityTest, ShutdownDrainsAsyncWorkAndFailsQueuedWaiters) {
  build();
  Gate running, resume;
  std::atomic<int> ran_after_shutdown{0};
  std::atomic<bool> shut_down{false};
  const auto restore_acquire_internal = provider.inject(
      &ProviderSeams::acquire_internal, [&](const std::optional<std::string>& thread, auto&&...) {
        if (shut_down) ++ran_after_shutdown;
        if (thread == std::optional<std::string>("t-running")) {
          running.open();
          resume.wait();
        }
        return "sandbox-" + thread.value_or("");
      });
  AsyncAcquisition in_flight = provider->acquire_async("t-running", "alice");
  running.wait();
  const auto stuck = provider.peer().thread_lock({"alice", "t-stuck"});
  stuck->lock();
  AsyncAcquisition queued = provider->acquire_async("t-stuck", "alice");

  auto stopping = std::async(std::launch::async, [&] {
    provider->shutdown();
    shut_down = true;
  });
  EXPECT_EQ(stopping.wait_for(300ms), std::future_status::timeout)
      << "shutdown returned while an async acquisition was still running on the provider";
  EXPECT_THROW(queued.get(), std::runtime_error) << "a queued waiter was left hanging";
  resume.open();
  stopping.get();
  EXPECT_TRUE(in_flight.wait_for(0ms)) << "shutdown returned before the running work finished";

  stuck->unlock();  // the queued waiter's grant arrives after shutdown: it must decline
  ASSERT_TRUE(blocking_executor->wait_idle(1000ms));
  ASSERT_TRUE(lock_wait_executor->wait_idle(1000ms));
  EXPECT_EQ(ran_after_shutdown.load(), 0);
  EXPECT_FALSE(stuck->is_held());
  EXPECT_THROW(provider->acquire_async("t-late", "alice").get(), std::runtime_error)
      << "an acquisition started after shutdown";
}

// A.2, the destructor: a Provider with its own pools, destroyed while an async acquisition is
// inside the backend. Before the fix the pools were members declared before the registry and
// outlived it; under AddressSanitizer the running task then used freed memory.
TEST_F(ProviderReliabilityTest, DestroyingTheProviderWaitsForItsOwnPools) {
  Gate creating, resume;
  backend->create_fn = [&](const CreateRequest& request) {
    creating.open();
    resume.wait();
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);
  };
  ProviderDeps deps =
      deps_over(backend, load_memory_store(clock, logger, tmp.path().string()), logger, clock);
  deps.blocking_executor.reset();  // the provider makes its own pools
  deps.lock_wait_executor.reset();
  auto own = std::make_unique<Provider>(std::move(deps));
  AsyncAcquisition acquisition = own->acquire_async("t-1", "alice");
  creating.wait();
  auto destroying = std::async(std::launch::async, [&] { own.reset(); });
  std::this_thread::sleep_for(50ms);
  resume.open();
  destroying.get();
  // The creation finished after shutdown began: refused and destroyed, never handed out.
  EXPECT_THROW(acquisition.get(), std::runtime_error);
  std::size_t stops = 0;
  for (const auto& info : backend->destroys()) stops += info.sandbox_id != "";
  EXPECT_EQ(stops, 1u) << "the sandbox created during destruction leaked";
  backend->clear_scripts();
}

// A.6: a create that reports a changed mount contract has already made an instance under the
// old contract's id; the acquisition restarts under a new id, so before the fix the first one
// ran on untracked. Now it is destroyed under a teardown lease, unless a peer holds its lease.
class ContractChangeCleanupTest : public ProviderReliabilityTest {
 protected:
  // The remote backend's behaviour: it negotiated contract 2, the provisioner now runs 0; the
  // create under the v2 id succeeds at the provisioner and then reports the change.
  void provisioner_downgraded_to_v0(bool reported_by_the_backend) {
    backend->requires_validation = true;
    backend->mode = MountModeKind::contract_negotiated;
    backend->cached_version = 2;
    backend->cached_known = true;
    stale_id = deterministic_sandbox_id("thread-1", "alice", 2);
    backend->create_fn = [this, reported_by_the_backend](const CreateRequest& request) {
      SandboxInfo info = make_info(request.sandbox_id, "http://" + request.sandbox_id);
      info.user_id = request.user_id;
      info.thread_id = request.thread_id;
      info.mount_contract_version = 0;
      if (request.sandbox_id == stale_id && reported_by_the_backend) {
        backend->cached_version = 0;
        throw MountContractChangedError(2, 0);
      }
      if (request.sandbox_id == stale_id) backend->cached_version = 0;
      return info;
    };
  }
  std::vector<std::string> destroyed_ids() {
    std::vector<std::string> ids;
    for (const auto& info : backend->destroys()) ids.push_back(info.sandbox_id);
    return ids;
  }
  std::string stale_id;
};

TEST_F(ContractChangeCleanupTest, ABackendReportedChangeDestroysTheInstanceMadeUnderTheOldId) {
  build();
  provisioner_downgraded_to_v0(true);
  const std::string id = provider->acquire("thread-1", "alice");
  EXPECT_EQ(id, deterministic_sandbox_id("thread-1", "alice", 0));
  EXPECT_EQ(destroyed_ids(), std::vector<std::string>{stale_id});
  EXPECT_TRUE(logger->contains(LogLevel::info, "Destroying sandbox " + stale_id +
                                                   " created under mount contract 0 instead of 2"));
  EXPECT_EQ(provider->counts().active, 1u);
}

TEST_F(ContractChangeCleanupTest, AChangeSeenByTheProviderDestroysTheInstanceToo) {
  build();
  provisioner_downgraded_to_v0(false);
  const std::string id = provider->acquire("thread-1", "alice");
  EXPECT_EQ(id, deterministic_sandbox_id("thread-1", "alice", 0));
  EXPECT_EQ(destroyed_ids(), std::vector<std::string>{stale_id});
}

TEST_F(ContractChangeCleanupTest, AnInstanceWhoseLeaseAPeerHoldsIsLeftToThePeer) {
  build();
  provisioner_downgraded_to_v0(true);
  claims->script_claim([this](const std::string& id, bool for_destroy) {
    return !(for_destroy && id == stale_id) && claims->real_claim(id, for_destroy);
  });
  provider->acquire("thread-1", "alice");
  EXPECT_TRUE(destroyed_ids().empty());
  EXPECT_TRUE(logger->contains(LogLevel::warning, "Not destroying sandbox " + stale_id +
                                                      " created under mount contract 0 instead "
                                                      "of 2: owned by another instance"));
}

// A.7: the lock story says nothing blocking runs under the registry mutex, and a log line may
// block (a pipe to a slow reader). This logger asks another thread whether the registry mutex
// is free at every line; in a single-threaded scenario only the logging thread can hold it.
class RegistryMutexProbingLogger final : public Logger {
 public:
  explicit RegistryMutexProbingLogger(std::shared_ptr<CapturingLogger> inner)
      : inner_(std::move(inner)) {}
  void watch(const ProviderUnderTest* provider) { provider_.store(provider); }
  void log(LogLevel level, std::string_view message) override {
    if (const ProviderUnderTest* provider = provider_.load()) {
      // Another thread of the provider (an eviction runs beside the create) may hold the
      // mutex for a moment while this line is written; the logging thread, blocked here,
      // would hold it for the whole call. So "held" means: not free once within a second.
      const bool held = std::async(std::launch::async, [provider] {
                          const auto give_up =
                              std::chrono::steady_clock::now() + std::chrono::seconds(1);
                          while (std::chrono::steady_clock::now() < give_up) {
                            if (provider->mutex().try_lock()) {
                              provider->mutex().unlock();
                              return false;
                            }
                            std::this_thread::sleep_for(std::chrono::microseconds(200));
                          }
                          return true;
                        }).get();
      if (held) {
        std::lock_guard lock(mutex_);
        under_mutex_.emplace_back(message);
      }
    }
    inner_->log(level, message);
  }
  std::vector<std::string> under_mutex() const {
    std::lock_guard lock(mutex_);
    return under_mutex_;
  }

 private:
  std::shared_ptr<CapturingLogger> inner_;
  std::atomic<const ProviderUnderTest*> provider_{nullptr};
  mutable std::mutex mutex_;
  std::vector<std::string> under_mutex_;
};

TEST_F(ProviderReliabilityTest, NoLogLineIsWrittenUnderTheRegistryMutex) {
  auto probe = std::make_shared<RegistryMutexProbingLogger>(logger);
  options.replicas = 2;
  provider = ProviderUnderTest(
      deps_over(backend, load_memory_store(clock, logger, tmp.path().string()), probe, clock));
  probe->watch(&provider);

  // Every path that logs: create, release, reclaim, reuse, eviction, an unhealthy drop, idle
  // reaping of active and warm sandboxes, adoption of an orphan, destroy, a reuse refused
  // during a teardown, a forget refused twice (a publish in flight, a newer epoch), shutdown.
  const std::string a = provider->acquire("t-a", "alice");
  provider->release(a);
  EXPECT_EQ(provider->acquire("t-a", "alice"), a);  // reclaimed
  EXPECT_EQ(provider->acquire("t-a", "alice"), a);  // reused
  const std::string b = provider->acquire("t-b", "alice");
  provider->release(a);
  provider->release(b);
  clock->advance(1);
  provider->acquire("t-c", "alice");  // evicts the oldest warm one
  backend->is_alive_fn = [](const SandboxInfo&) { return false; };
  provider->acquire("t-c", "alice");  // the tracked one is unhealthy: dropped, created anew
  backend->is_alive_fn = nullptr;
  const std::string d = provider->acquire("t-d", "alice");
  provider->release(d);
  clock->advance(10000);
  provider->cleanup_idle_sandboxes(600);
  backend->list_running_fn = [] {
    return std::vector<SandboxInfo>{make_info("orphan", "http://o")};
  };
  provider->reconcile_orphans();
  clock->advance(1000);
  provider->reconcile_orphans();
  const std::string e = provider->acquire("t-e", "alice");
  provider->destroy(e);
  // A reuse that meets the sandbox in this instance's teardown (reserved, not yet untracked).
  const std::string g = provider->acquire("t-g", "alice");
  {
    std::lock_guard lock(provider.mutex());
    provider.registry().reserve_teardown(g);
  }
  EXPECT_EQ(provider.peer().base_reuse_in_process_sandbox("t-g", "alice", std::nullopt, false,
                                                          std::nullopt),
            std::nullopt);
  {
    std::lock_guard lock(provider.mutex());
    provider.registry().finish_teardown(g);
    provider.registry().begin_publish(g);  // an acquire is publishing its lease
  }
  provider.peer().forget(g, std::nullopt);  // refused: the publish is in flight
  {
    std::lock_guard lock(provider.mutex());
    provider.registry().end_publish(g, /*taken=*/false);
  }
  provider.peer().forget(g, 999'999);  // refused: re-acquired after that lease check
  // Gone before shutdown: with two sandboxes left its 16-wide stops would run side by side, and
  // this probe only tells "held" from "free", not by whom.
  provider->destroy(g);
  provider->acquire("t-f", "alice");
  provider->shutdown();
  backend->list_running_fn = nullptr;

  const auto lines = logger->lines();
  std::printf("log lines written: %zu, under the registry mutex: %zu\n", lines.size(),
              probe->under_mutex().size());
  EXPECT_GT(lines.size(), 15u);
  for (const auto& line : probe->under_mutex()) ADD_FAILURE() << "under the mutex: " << line;
}

// A.7: idle and warm timers used the wall clock, so a forward step of the system time (NTP
// after a suspend, an operator's date) reaped every sandbox at the next idle pass. They run on
// the monotonic clock now; only what leaves the process (export_registry, find) is wall time.
class SteppingClock final : public Clock {
 public:
  double wall_now() const override { return wall_.load(); }
  double monotonic_now() const override { return monotonic_.load(); }
  void advance(double seconds) {
    wall_.store(wall_.load() + seconds);
    monotonic_.store(monotonic_.load() + seconds);
  }
  void step_wall(double seconds) { wall_.store(wall_.load() + seconds); }

 private:
  std::atomic<double> wall_{1'700'000'000.0};
  std::atomic<double> monotonic_{5'000.0};
};

TEST_F(ProviderReliabilityTest, AWallClockStepReapsNothingAndTheRegistryStillSpeaksWallTime) {
  auto stepping = std::make_shared<SteppingClock>();
  provider = ProviderUnderTest(deps_over(
      backend, load_memory_store(stepping, logger, tmp.path().string()), logger, stepping));

  const std::string active = provider->acquire("t-active", "alice");
  const std::string warm = provider->acquire("t-warm", "alice");
  provider->release(warm);
  stepping->advance(10);
  const double wall_at_use = stepping->wall_now() - 10;

  stepping->step_wall(86400);  // a day forward, in no time
  provider->cleanup_idle_sandboxes(600);
  std::printf("after a +86400 s wall step: %zu active, %zu warm\n", provider->counts().active,
              provider->counts().warm);
  EXPECT_EQ(provider->counts().active, 1u) << "a wall-clock step reaped the active sandbox";
  EXPECT_EQ(provider->counts().warm, 1u) << "a wall-clock step expired the warm sandbox";

  // What leaves the process is wall time on today's wall clock: 10 s ago, step included.
  const auto tracked = provider->find(active);
  ASSERT_TRUE(tracked.has_value());
  EXPECT_DOUBLE_EQ(tracked->since, wall_at_use + 86400);

  // Real idleness still reaps, on the monotonic clock.
  stepping->advance(601);
  provider->cleanup_idle_sandboxes(600);
  EXPECT_EQ(provider->counts().active, 0u);
  EXPECT_EQ(provider->counts().warm, 0u);
}

// Optional verbs are capability interfaces. A backend that claims negotiated mounts
// without offering the negotiation capability is refused at construction, by name, instead of
// failing at the first acquire.
class NegotiatingWithoutTheCapability final : public SandboxBackend {
 public:
  SandboxInfo create(const CreateRequest& request) override {
    return make_info(request.sandbox_id, "http://x");
  }
  void destroy(const SandboxInfo&) override {}
  bool is_alive(const SandboxInfo&) override { return true; }
  std::optional<SandboxInfo> discover(const std::string&) override { return std::nullopt; }
  MountModeKind mount_mode_kind() const override { return MountModeKind::contract_negotiated; }
};

TEST_F(ProviderReliabilityTest, ANegotiatedMountModeWithoutItsCapabilityIsRefused) {
  ProviderDeps deps =
      deps_over(std::make_shared<NegotiatingWithoutTheCapability>(),
                load_memory_store(clock, logger, tmp.path().string()), logger, clock);
  try {
    Provider refused(std::move(deps));
    FAIL() << "constructed";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("offers no MountContractNegotiation capability"),
              std::string::npos)
        << e.what();
  }
  // The fixture's backend offers it, and the provider finds it (FakeBackend derives from it).
  EXPECT_NE(backend_capability<MountContractNegotiation>(*backend), nullptr);
}

}  // namespace
}  // namespace sandboxd::testing

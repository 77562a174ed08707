// Async seed tests (see tests/SEED_TESTS.md). Python has an event loop and `_*_async` twins of
// each step that offload blocking calls with asyncio.to_thread; our design runs the whole
// acquisition of Provider::acquire_async on executors and never on the caller's thread. So each
// port drives acquire_async and pins, instead of "this call was offloaded", that the blocking
// step ran on an executor thread (never the test thread), that a blocked step never blocks
// the caller, and that per-thread lock waits use their own executor and never leak the lock.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::AsyncAcquisition;
using core::AsyncAcquisitionCancelled;
using core::deterministic_sandbox_id;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

class ProviderAsyncSeedTest : public ProviderFixture {
 protected:
  // Polls for up to `within` until `lock` can be taken, then gives it back.
  static bool lock_becomes_free(core::ThreadLock& lock, std::chrono::milliseconds within) {
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (std::chrono::steady_clock::now() < deadline) {
      if (lock.try_lock()) {
        lock.unlock();
        return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }

  // _install_remote_revalidation_backend (see provider_seed_test.cpp).
  void install_remote_revalidation_backend() {
    backend->requires_validation = true;
    backend->create_fn = [](const CreateRequest& request) {
      SandboxInfo info = make_info(request.sandbox_id, "http://sandbox-host");
      info.user_id = request.user_id;
      info.thread_id = request.thread_id;
      info.mount_contract_version = 2;
      return info;
    };
    provider.planner().script_skills_projection([](const std::string&) {});
    provider.planner().script_extra_mounts([](auto&&...) {
      return std::vector<Mount>{{"/host/current", "/mnt/current", true}};
    });
    hooks.lark_runtime = true;
  }

  const std::thread::id test_thread = std::this_thread::get_id();
};

// Python: test_remote_contract_backend_revalidates_existing_pod_via_create_async
TEST_F(ProviderAsyncSeedTest, RemoteContractBackendRevalidatesExistingPodViaCreateAsync) {
  backend->requires_validation = true;
  build();
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("sandbox-v2"); });
  const auto restore_recheck_cached_sandbox =
      provider.inject(&ProviderSeams::recheck_cached_sandbox,
                      [](auto&&...) { return std::optional<std::string>(); });
  std::mutex mutex;
  std::vector<std::tuple<std::optional<std::string>, std::string, std::string, std::thread::id>>
      create_calls;
  const auto restore_create_sandbox =
      provider.inject(&ProviderSeams::create_sandbox,
                      [&](const std::optional<std::string>& thread, const std::string& id,
                          const std::string& user, const ProviderUnderTest::Snapshot&) {
                        std::lock_guard lock(mutex);
                        create_calls.emplace_back(thread, id, user, std::this_thread::get_id());
                        return id;
                      });

  EXPECT_EQ(provider->acquire_async("thread-1", "alice").get(), "sandbox-v2");

  EXPECT_TRUE(backend->discovers().empty());
  std::lock_guard lock(mutex);
  ASSERT_EQ(create_calls.size(), 1u);
  EXPECT_EQ(std::get<0>(create_calls[0]), std::optional<std::string>("thread-1"));
  EXPECT_EQ(std::get<1>(create_calls[0]), "sandbox-v2");
  EXPECT_EQ(std::get<2>(create_calls[0]), "alice");
  EXPECT_NE(std::get<3>(create_calls[0]), test_thread);
  EXPECT_TRUE(blocking_executor->ran_on(std::get<3>(create_calls[0])));
  // The lock file was opened and closed off the caller's thread too.
  ASSERT_EQ(hooks.lock_file_opens().size(), 1u);
  EXPECT_NE(hooks.lock_file_opens()[0], test_thread);
}

// Python: test_remote_active_cache_revalidates_current_contract_before_reuse_async
TEST_F(ProviderAsyncSeedTest, RemoteActiveCacheRevalidatesCurrentContractBeforeReuseAsync) {
  build();
  add_active("sandbox-active-async");
  map_thread("alice", "thread-1", "sandbox-active-async");
  install_remote_revalidation_backend();

  EXPECT_EQ(provider->acquire_async("thread-1", "alice").get(), "sandbox-active-async");

  const auto creates = backend->creates();
  ASSERT_EQ(creates.size(), 1u);
  EXPECT_EQ(creates[0].extra_mounts, (std::vector<Mount>{{"/host/current", "/mnt/current", true}}));
  EXPECT_NE(backend->create_threads()[0], test_thread);
  ASSERT_EQ(backend->is_alive_threads().size(), 1u);
  EXPECT_NE(backend->is_alive_threads()[0], test_thread);
}

// Python: test_remote_warm_pool_revalidates_current_contract_before_reclaim_async
TEST_F(ProviderAsyncSeedTest, RemoteWarmPoolRevalidatesCurrentContractBeforeReclaimAsync) {
  build();
  add_warm(make_info_ptr("sandbox-warm-async", "http://sandbox-host"), 123.0);
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("sandbox-warm-async"); });
  install_remote_revalidation_backend();

  EXPECT_EQ(provider->acquire_async("thread-1", "alice").get(), "sandbox-warm-async");

  const auto creates = backend->creates();
  ASSERT_EQ(creates.size(), 1u);
  EXPECT_EQ(creates[0].sandbox_id, "sandbox-warm-async");
  EXPECT_NE(backend->create_threads()[0], test_thread);
  EXPECT_TRUE(is_active("sandbox-warm-async"));
}

// Python: test_acquire_internal_async_does_not_block_on_capability_snapshot
TEST_F(ProviderAsyncSeedTest, AcquireInternalAsyncDoesNotBlockOnCapabilitySnapshot) {
  backend->mode = MountModeKind::contract_negotiated;
  backend->cached_version = 2;
  backend->cached_known = true;
  build();
  provider.planner().script_skills_projection([](const std::string&) {});
  const auto restore_reuse_in_process_sandbox =
      provider.inject(&ProviderSeams::reuse_in_process_sandbox,
                      [](auto&&...) { return std::optional<std::string>("cached-v2"); });
  ProbeLockHolder probe(*backend);

  // The probe lock is held until after these checks, so returning proves no wait on it.
  std::optional<AsyncAcquisition> acquisition;
  EXPECT_TRUE(returns_without_waiting([&] {
    acquisition.emplace(provider->acquire_async("thread-1", "default"));
  })) << "acquire_async blocked its caller on the capability snapshot";
  ASSERT_TRUE(acquisition.has_value());
  // The snapshot really is taken, off the caller: nothing completes while the probe holds it.
  EXPECT_FALSE(acquisition->wait_for(50ms));
  probe.release();
  EXPECT_EQ(acquisition->get(), "cached-v2");
  EXPECT_EQ(backend->snapshot_calls(), 1);
}

// Python: test_acquire_async_restarts_with_a_new_id_when_mount_contract_changes
TEST_F(ProviderAsyncSeedTest, AcquireAsyncRestartsWithANewIdWhenMountContractChanges) {
  backend->mode = MountModeKind::contract_negotiated;
  build();
  std::mutex mutex;
  std::vector<MountContractSnapshot> snapshots = {{2, true}, {3, true}};
  std::size_t next = 0;
  const auto restore_acquisition_contract_snapshot = provider.inject(
      &ProviderSeams::acquisition_contract_snapshot, [&]() -> ProviderUnderTest::Snapshot {
        std::lock_guard lock(mutex);
        return snapshots.at(next++);
      });
  std::vector<std::string> attempted;
  std::vector<std::thread::id> threads;
  const auto restore_acquire_internal = provider.inject(
      &ProviderSeams::acquire_internal,
      [&](const std::optional<std::string>& thread, const std::string& user,
          ProviderUnderTest::Snapshot snapshot) {
        const std::string id = provider.peer().sandbox_id_for_thread(thread, user, snapshot);
        {
          std::lock_guard lock(mutex);
          attempted.push_back(id);
          threads.push_back(std::this_thread::get_id());
        }
        if (snapshot->version == 2) throw MountContractChangedError(2, 3);
        return id;
      });

  const std::string result = provider->acquire_async("thread-1", "default").get();

  std::lock_guard lock(mutex);
  EXPECT_EQ(attempted,
            (std::vector<std::string>{deterministic_sandbox_id("thread-1", "default", 2),
                                      deterministic_sandbox_id("thread-1", "default", 3)}));
  EXPECT_EQ(result, attempted.back());
  for (const auto& id : threads) EXPECT_NE(id, test_thread);
}

// Python: test_acquire_async_uses_async_readiness_polling
TEST_F(ProviderAsyncSeedTest, AcquireAsyncUsesAsyncReadinessPolling) {
  build();
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("sandbox-async"); });
  backend->create_fn = [](const CreateRequest&) {
    return make_info("sandbox-async", "http://sandbox");
  };

  EXPECT_EQ(provider->acquire_async("thread-async", "user-async").get(), "sandbox-async");

  const auto ready = hooks.ready_calls();
  ASSERT_EQ(ready.size(), 1u);
  EXPECT_EQ(ready[0].url, "http://sandbox");
  EXPECT_EQ(ready[0].timeout, 60.0);
  EXPECT_NE(ready[0].thread, test_thread);  // the readiness wait never runs on the caller
  EXPECT_TRUE(blocking_executor->ran_on(ready[0].thread));
  EXPECT_TRUE(backend->destroys().empty());
  EXPECT_EQ(mapped("user-async", "thread-async"), std::optional<std::string>("sandbox-async"));
}

// Python: test_discover_or_create_with_lock_async_offloads_lock_file_open_and_close
TEST_F(ProviderAsyncSeedTest, DiscoverOrCreateWithLockAsyncOffloadsLockFileOpenAndClose) {
  build();
  {
    std::lock_guard lock(provider.mutex());
    provider.registry().conversations().assign({"default", "thread-async-lock"},
                                               "sandbox-async-lock");
    // The seed sets only the client dict: an active entry with a client and no info.
    provider.registry().install_active(
        "sandbox-async-lock",
        std::make_shared<RecordingClient>("sandbox-async-lock", "http://sandbox"), nullptr,
        std::nullopt, 0.0);
  }
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("sandbox-async-lock"); });
  // The seed calls the discover-or-create step directly; through acquire_async the pre-lock
  // reuse would answer first, so it declines and the post-lock re-check finds the entry.
  std::atomic<int> post_lock_checks{0};
  const auto restore_reuse_in_process_sandbox =
      provider.inject(&ProviderSeams::reuse_in_process_sandbox,
                      [&](const std::optional<std::string>& thread, const std::string& user,
                          const std::optional<std::string>& expected, bool post_lock,
                          const ProviderUnderTest::Snapshot& snap) {
                        if (!post_lock) return std::optional<std::string>();
                        ++post_lock_checks;
                        return provider.peer().base_reuse_in_process_sandbox(thread, user, expected,
                                                                             post_lock, snap);
                      });

  EXPECT_EQ(provider->acquire_async("thread-async-lock", "default").get(), "sandbox-async-lock");

  EXPECT_EQ(post_lock_checks.load(), 1);
  const auto opens = hooks.lock_file_opens();
  const auto closes = hooks.lock_file_closes();
  ASSERT_EQ(opens.size(), 1u);
  ASSERT_EQ(closes.size(), 1u);
  EXPECT_NE(opens[0], test_thread);
  EXPECT_NE(closes[0], test_thread);
  EXPECT_TRUE(blocking_executor->ran_on(closes[0]));
  EXPECT_EQ(hooks.unlock_count(), 1);
  EXPECT_TRUE(backend->discovers().empty());
}

// Python: test_acquire_thread_lock_async_uses_dedicated_executor
TEST_F(ProviderAsyncSeedTest, AcquireThreadLockAsyncUsesDedicatedExecutor) {
  build();
  const auto lock = provider.peer().thread_lock({"default", "thread-lock"});
  std::atomic<bool> held_during{false};
  std::thread::id ran_on;
  const auto restore_acquire_internal =
      provider.inject(&ProviderSeams::acquire_internal, [&](auto&&...) {
        held_during = lock->is_held();
        ran_on = std::this_thread::get_id();
        return std::string("sandbox-locked");
      });

  EXPECT_EQ(provider->acquire_async("thread-lock", "default").get(), "sandbox-locked");

  EXPECT_EQ(lock_wait_executor->submitted(), 1u);  // the wait had its own executor...
  EXPECT_EQ(blocking_executor->submitted(), 1u);   // ...and the work the blocking one
  EXPECT_TRUE(held_during.load());                 // the acquisition ran holding the lock
  EXPECT_TRUE(blocking_executor->ran_on(ran_on));
  EXPECT_FALSE(lock_wait_executor->ran_on(ran_on));
  EXPECT_NE(ran_on, test_thread);
  EXPECT_TRUE(lock_becomes_free(*lock, 1000ms));
}

// §12 item 2, the reason for the dedicated executor: waiters parked on a held per-thread lock
// never occupy the blocking pool, so other conversations keep being served.
TEST_F(ProviderAsyncSeedTest, LockWaitersNeverStarveTheBlockingPool) {
  blocking_executor = std::make_shared<RecordingExecutor>(1);
  build();
  const auto restore_acquire_internal = provider.inject(
      &ProviderSeams::acquire_internal, [](const std::optional<std::string>& thread, auto&&...) {
        return "sandbox-" + thread.value_or("");
      });
  const auto lock_a = provider.peer().thread_lock({"default", "thread-a"});
  lock_a->lock();

  std::vector<AsyncAcquisition> waiters;
  for (int i = 0; i < 3; ++i) waiters.push_back(provider->acquire_async("thread-a", "default"));
  AsyncAcquisition other = provider->acquire_async("thread-b", "default");

  ASSERT_TRUE(other.wait_for(2000ms)) << "a parked lock waiter starved the blocking pool";
  EXPECT_EQ(other.get(), "sandbox-thread-b");
  for (auto& waiter : waiters) EXPECT_FALSE(waiter.wait_for(0ms));
  lock_a->unlock();
  for (auto& waiter : waiters) EXPECT_EQ(waiter.get(), "sandbox-thread-a");
  EXPECT_TRUE(lock_becomes_free(*lock_a, 1000ms));
}

// Python: test_acquire_async_cancellation_does_not_leak_thread_lock
TEST_F(ProviderAsyncSeedTest, AcquireAsyncCancellationDoesNotLeakThreadLock) {
  build();
  std::atomic<int> internal_calls{0};
  const auto restore_acquire_internal =
      provider.inject(&ProviderSeams::acquire_internal, [&](auto&&...) {
        ++internal_calls;
        return std::string("never");
      });
  const auto lock = provider.peer().thread_lock({"default", "thread-cancel-lock"});
  lock->lock();

  AsyncAcquisition task = provider->acquire_async("thread-cancel-lock", "default");
  std::this_thread::sleep_for(50ms);
  task.cancel();
  EXPECT_THROW(task.get(), AsyncAcquisitionCancelled);

  lock->unlock();
  // Let the cancelled waiter take the lock and deal with it before looking: polling right away
  // could win the lock ourselves and hide a leak.
  ASSERT_TRUE(lock_wait_executor->wait_idle(1000ms));
  ASSERT_TRUE(blocking_executor->wait_idle(1000ms));
  EXPECT_TRUE(lock_becomes_free(*lock, 1000ms))
      << "provider thread lock was leaked after cancelling acquire_async";
  EXPECT_EQ(internal_calls.load(), 0);  // a cancelled waiter never acquires
}

// Python: test_acquire_async_cancelled_waiter_does_not_block_successor
TEST_F(ProviderAsyncSeedTest, AcquireAsyncCancelledWaiterDoesNotBlockSuccessor) {
  build();
  std::atomic<int> internal_calls{0};
  const auto restore_acquire_internal = provider.inject(
      &ProviderSeams::acquire_internal,
      [&](const std::optional<std::string>& thread, const std::string& user,
          ProviderUnderTest::Snapshot snapshot) {
        EXPECT_EQ(thread, std::optional<std::string>("thread-successor-lock"));
        EXPECT_EQ(user, "default");
        EXPECT_FALSE(snapshot.has_value());  // a non-negotiating backend: no snapshot
        ++internal_calls;
        return std::string("sandbox-successor");
      });
  const auto lock = provider.peer().thread_lock({"default", "thread-successor-lock"});
  lock->lock();

  AsyncAcquisition cancelled = provider->acquire_async("thread-successor-lock", "default");
  std::this_thread::sleep_for(50ms);
  cancelled.cancel();
  EXPECT_THROW(cancelled.get(), AsyncAcquisitionCancelled);

  AsyncAcquisition live = provider->acquire_async("thread-successor-lock", "default");
  lock->unlock();

  ASSERT_TRUE(live.wait_for(1000ms));
  EXPECT_EQ(live.get(), "sandbox-successor");
  EXPECT_TRUE(lock_becomes_free(*lock, 1000ms))
      << "provider thread lock was not released after successor acquire_async";
  EXPECT_EQ(internal_calls.load(), 1);
}

// §12 item 3, the other half: cancelling while the acquisition already runs returns at once;
// the acquisition finishes on its executor and gives the lock back.
TEST_F(ProviderAsyncSeedTest, CancelWhileAcquisitionRunsNeverBlocksAndFreesTheLock) {
  build();
  std::promise<void> entered;
  std::promise<void> proceed;
  std::shared_future<void> go = proceed.get_future().share();
  const auto restore_acquire_internal =
      provider.inject(&ProviderSeams::acquire_internal, [&](auto&&...) {
        entered.set_value();
        go.wait();
        return std::string("late");
      });
  const auto lock = provider.peer().thread_lock({"default", "thread-running"});

  AsyncAcquisition task = provider->acquire_async("thread-running", "default");
  ASSERT_EQ(entered.get_future().wait_for(2s), std::future_status::ready);
  EXPECT_TRUE(lock->is_held());
  // The acquisition stays parked until after these checks: returning proves no wait for it.
  EXPECT_TRUE(returns_without_waiting([&] {
    task.cancel();
    EXPECT_THROW(task.get(), AsyncAcquisitionCancelled);
  })) << "cancel() or get() waited for the running acquisition";

  proceed.set_value();
  EXPECT_TRUE(lock_becomes_free(*lock, 1000ms));
}

// Python: test_acquire_internal_async_offloads_cached_reuse_health_check
TEST_F(ProviderAsyncSeedTest, AcquireInternalAsyncOffloadsCachedReuseHealthCheck) {
  build();
  add_active("sandbox-cached-async");
  map_thread("default", "thread-cached-async", "sandbox-cached-async");
  std::mutex mutex;
  std::vector<std::tuple<std::string, std::string, std::thread::id>> steps;
  provider.planner().script_skills_projection([&](const std::string& user) {
    std::lock_guard lock(mutex);
    steps.emplace_back("projection", user, std::this_thread::get_id());
  });
  const auto restore_reuse_in_process_sandbox = provider.inject(
      &ProviderSeams::reuse_in_process_sandbox,
      [&](const std::optional<std::string>& thread, const std::string& user,
          const std::optional<std::string>& expected, bool post_lock,
          const ProviderUnderTest::Snapshot& snap) {
        {
          std::lock_guard lock(mutex);
          steps.emplace_back("reuse", thread.value_or(""), std::this_thread::get_id());
        }
        return provider.peer().base_reuse_in_process_sandbox(thread, user, expected, post_lock,
                                                             snap);
      });

  EXPECT_EQ(provider->acquire_async("thread-cached-async", "default").get(),
            "sandbox-cached-async");

  std::lock_guard lock(mutex);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(std::get<0>(steps[0]), "projection");
  EXPECT_EQ(std::get<1>(steps[0]), "default");
  EXPECT_EQ(std::get<0>(steps[1]), "reuse");
  EXPECT_EQ(std::get<1>(steps[1]), "thread-cached-async");
  for (const auto& step : steps) EXPECT_NE(std::get<2>(step), test_thread);
  const auto health = backend->is_alive_threads();
  ASSERT_EQ(health.size(), 1u);
  EXPECT_NE(health[0], test_thread);
}

// Python: test_create_sandbox_async_claims_ownership_before_readiness_timeout_destroy
TEST_F(ProviderAsyncSeedTest, CreateSandboxAsyncClaimsOwnershipBeforeReadinessTimeoutDestroy) {
  build();
  const SandboxInfo unready_info = make_info("unready-async", "http://unready-async");
  backend->create_fn = [unready_info](const CreateRequest&) { return unready_info; };
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("unready-async"); });
  hooks.ready_fn = [](const std::string&, double) { return false; };
  std::mutex mutex;
  std::vector<std::optional<LeaseRecord>> destroy_snapshots;
  backend->destroy_fn = [&](const SandboxInfo& info) {
    std::lock_guard lock(mutex);
    destroy_snapshots.push_back(store->inspect(info.sandbox_id));
  };

  try {
    provider->acquire_async("thread-4248-async", "user-4248-async").get();
    FAIL() << "expected the readiness error";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("failed to become ready"));
  }

  EXPECT_EQ(backend->destroys(), std::vector<SandboxInfo>{unready_info});
  EXPECT_NE(backend->destroy_threads()[0], test_thread);
  ASSERT_EQ(hooks.ready_calls().size(), 1u);
  EXPECT_NE(hooks.ready_calls()[0].thread, test_thread);
  std::lock_guard lock(mutex);
  ASSERT_EQ(destroy_snapshots.size(), 1u) << "destroy must run inside the held teardown lease";
  ASSERT_TRUE(destroy_snapshots[0]);
  EXPECT_EQ(destroy_snapshots[0]->owner_id, kTestOwnerId);
  EXPECT_TRUE(destroy_snapshots[0]->destroying) << "destroy must run under a `del:` lease";
}

// Issue requirement: an acquire that meets this process's own teardown of its sandbox waits for
// the stop to finish, then creates anew; it neither fails with SandboxBeingDestroyedError nor
// discovers or creates while the old container is still being stopped.
TEST_F(ProviderAsyncSeedTest, AcquireWaitsOutThisProcesssTeardownThenCreatesAnew) {
  build();
  const std::string id = deterministic_sandbox_id("thread-t", "default");
  add_warm(make_info_ptr(id, "http://old"), 1.0, ThreadKey{"default", "thread-t"});
  std::mutex mutex;
  std::vector<std::string> events;
  const auto record = [&](const std::string& event) {
    std::lock_guard lock(mutex);
    events.push_back(event);
  };
  std::promise<void> stopping;
  std::promise<void> let_stop;
  std::shared_future<void> go = let_stop.get_future().share();
  std::atomic<bool> parked{false};
  backend->destroy_fn = [&](const SandboxInfo& info) {
    // The first stop is parked in flight: reserved, `del` claimed and held, entry untracked.
    if (!parked.exchange(true)) {
      stopping.set_value();
      go.wait();
    }
    record("destroy " + info.sandbox_url);
  };
  backend->discover_fn = [&](const std::string&) {
    record("discover");
    return std::optional<SandboxInfo>();
  };
  backend->create_fn = [&](const CreateRequest& request) {
    record("create");
    return make_info(request.sandbox_id, "http://new");
  };
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  std::thread destroyer([&] { provider->destroy(id); });
  struct Join {
    std::promise<void>& release;
    std::thread& thread;
    bool released = false;
    ~Join() {
      if (!released) release.set_value();
      thread.join();
    }
  } join{let_stop, destroyer};
  ASSERT_EQ(stopping.get_future().wait_for(2s), std::future_status::ready);

  AsyncAcquisition acquisition = provider->acquire_async("thread-t", "default");
  EXPECT_FALSE(acquisition.wait_for(150ms));  // waiting out the teardown
  {
    std::lock_guard lock(mutex);
    EXPECT_TRUE(events.empty()) << "the backend was consulted while the old sandbox was stopping";
  }
  join.released = true;
  let_stop.set_value();

  EXPECT_EQ(acquisition.get(), id);
  std::lock_guard lock(mutex);
  EXPECT_EQ(events, (std::vector<std::string>{"destroy http://old", "discover", "create"}));
  EXPECT_EQ(client_of(id)->base_url(), "http://new");
}

// Issue requirement, registration path: a teardown of the same id by this process that starts
// while the acquire is already creating makes the publish meet its `del` marker. The new
// container is rolled back (design §5.9), the acquire waits the teardown out and creates anew
// instead of failing with SandboxBeingDestroyedError.
TEST_F(ProviderAsyncSeedTest, AcquireRetriesAfterItsRegistrationMeetsThisProcesssTeardown) {
  build();
  const std::string id = deterministic_sandbox_id("thread-r", "default");
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  std::promise<void> in_create;
  std::promise<void> destroyer_parked;
  std::shared_future<void> parked = destroyer_parked.get_future().share();
  std::promise<void> let_destroyer_go;
  std::shared_future<void> go = let_destroyer_go.get_future().share();
  std::atomic<int> create_calls{0};
  backend->create_fn = [&](const CreateRequest& request) {
    if (++create_calls == 1) {
      in_create.set_value();
      parked.wait();  // the teardown reserves the id and writes `del` meanwhile
    }
    return make_info(request.sandbox_id, "http://created-" + std::to_string(create_calls.load()));
  };
  claims->script_claim([&](const std::string& sandbox_id, bool for_destroy) {
    const bool claimed = claims->real_claim(sandbox_id, for_destroy);
    if (for_destroy) {
      destroyer_parked.set_value();
      go.wait();
    }
    return claimed;
  });

  AsyncAcquisition acquisition = provider->acquire_async("thread-r", "default");
  ASSERT_EQ(in_create.get_future().wait_for(2s), std::future_status::ready);
  std::thread destroyer([&] { provider->destroy(id); });
  struct Join {
    std::promise<void>& release;
    std::thread& thread;
    bool released = false;
    ~Join() {
      if (!released) release.set_value();
      thread.join();
    }
  } join{let_destroyer_go, destroyer};
  ASSERT_EQ(parked.wait_for(2s), std::future_status::ready);
  EXPECT_FALSE(acquisition.wait_for(150ms));  // rolled back, now waiting out the teardown
  join.released = true;
  let_destroyer_go.set_value();

  EXPECT_EQ(acquisition.get(), id);
  EXPECT_EQ(create_calls.load(), 2);
  ASSERT_EQ(backend->destroys().size(), 1u);  // only the rolled-back first container
  EXPECT_EQ(backend->destroys()[0].sandbox_url, "http://created-1");
  EXPECT_EQ(client_of(id)->base_url(), "http://created-2");
  EXPECT_TRUE(logger->contains(LogLevel::error, "Could not register new sandbox " + id));
  EXPECT_TRUE(logger->contains(LogLevel::info,
                               "Teardown of sandbox " + id + " finished; retrying acquisition"));
}

// Errors surface through get(), never on the caller: acquire_async itself does not throw.
TEST_F(ProviderAsyncSeedTest, InvalidThreadIdIsReportedThroughGet) {
  build();
  AsyncAcquisition task = provider->acquire_async("../escape", "default");
  try {
    task.get();
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& error) {
    EXPECT_THAT(error.what(), HasSubstr("Invalid thread_id"));
  }
}

// Issue 13 A.1: the ambient user is read from the caller's per-request context, which only the
// calling thread has. acquire_async must resolve it there, once, and hand the value to the
// worker; resolving it again on a pool thread would give another identity's sandbox.
thread_local std::optional<std::string> t_request_user;

TEST_F(ProviderAsyncSeedTest, AcquireAsyncResolvesTheAmbientUserOnceOnTheCallersThread) {
  hooks.ambient_user_fn = [] { return t_request_user; };
  build();
  t_request_user = "alice";
  const std::string id = provider->acquire_async("t-ctx").get();
  t_request_user.reset();
  ASSERT_EQ(backend->creates().size(), 1u);
  EXPECT_EQ(backend->creates()[0].user_id, "alice")
      << "the worker thread resolved the user again and got the pool thread's (none)";
  EXPECT_EQ(id, core::deterministic_sandbox_id("t-ctx", "alice"));
}

}  // namespace
}  // namespace sandboxd::testing

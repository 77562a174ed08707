// Seed tests (see tests/SEED_TESTS.md) for release, destroy, shutdown, get, health checks, the
// idle reaper, replica eviction, tenant isolation, readiness-failure teardown, orphan
// reconciliation and the crash-recovery reconnect helpers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::deterministic_sandbox_id;
using core::sha256_hex;
using ::testing::HasSubstr;
using Status = SandboxDiscoveryResult::Status;

class ProviderLifecycleSeedTest : public ProviderFixture {};

// ── release / destroy / shutdown / get (design §5.12–§5.15) ──────────────────

// Python: test_release_closes_cached_sandbox_client
TEST_F(ProviderLifecycleSeedTest, ReleaseClosesCachedSandboxClient) {
  build();
  auto client = add_active("sandbox-rel");

  provider->release("sandbox-rel");

  EXPECT_EQ(client->close_count(), 1);
  EXPECT_TRUE(is_warm("sandbox-rel"));
  EXPECT_FALSE(is_active("sandbox-rel"));
  EXPECT_EQ(backend->total_calls(), 0u);  // the container keeps running
}

// Python: test_destroy_closes_cached_sandbox_client
TEST_F(ProviderLifecycleSeedTest, DestroyClosesCachedSandboxClient) {
  build();
  auto client = add_active("sandbox-destroy");

  provider->destroy("sandbox-destroy");

  EXPECT_EQ(client->close_count(), 1);
  ASSERT_EQ(backend->destroys().size(), 1u);
  EXPECT_EQ(backend->destroys()[0].sandbox_id, "sandbox-destroy");
  EXPECT_FALSE(is_active("sandbox-destroy"));
  EXPECT_EQ(info_of("sandbox-destroy"), nullptr);
  EXPECT_EQ(store->inspect("sandbox-destroy"), std::nullopt);  // no `del` marker left behind
}

// Python: test_shutdown_closes_all_active_sandbox_clients
TEST_F(ProviderLifecycleSeedTest, ShutdownClosesAllActiveSandboxClients) {
  build();
  auto client = add_active("sandbox-shut");

  provider->shutdown();

  EXPECT_EQ(client->close_count(), 1);
  EXPECT_EQ(backend->destroys().size(), 1u);
  std::lock_guard lock(provider.mutex());
  EXPECT_EQ(provider.registry().active_count(), 0u);
}

// Python: test_release_swallows_close_errors
TEST_F(ProviderLifecycleSeedTest, ReleaseSwallowsCloseErrors) {
  build();
  auto client = add_active("sandbox-rel-err");
  client->throw_on_close = true;

  provider->release("sandbox-rel-err");

  EXPECT_TRUE(
      logger->contains(LogLevel::warning, "Error closing sandbox sandbox-rel-err during release"));
  EXPECT_TRUE(is_warm("sandbox-rel-err"));
}

// Python: test_get_uses_in_memory_registry_only
TEST_F(ProviderLifecycleSeedTest, GetUsesInMemoryRegistryOnly) {
  build();
  auto client = add_active("sandbox-dead");
  backend->is_alive_fn = [](const SandboxInfo&) -> bool {
    throw std::logic_error("get must not call backend health checks");
  };
  clock->set(5000.0);

  EXPECT_EQ(provider->get("sandbox-dead"), client);
  EXPECT_EQ(provider->get("unknown"), nullptr);
  EXPECT_EQ(backend->total_calls(), 0u);
  std::lock_guard lock(provider.mutex());
  EXPECT_EQ(entry_of("sandbox-dead").since, 5000.0);
}

// Python: test_destroy_swallows_close_errors_and_still_destroys_backend
TEST_F(ProviderLifecycleSeedTest, DestroySwallowsCloseErrorsAndStillDestroysBackend) {
  build();
  auto client = add_active("sandbox-dest-err");
  client->throw_on_close = true;

  provider->destroy("sandbox-dest-err");

  EXPECT_TRUE(
      logger->contains(LogLevel::warning, "Error closing sandbox sandbox-dest-err during destroy"));
  EXPECT_EQ(backend->destroys().size(), 1u);
}

// ── health checks (design §5.5, §5.6, §5.16) ──────────────────────────────────

// Python: test_acquire_drops_dead_cached_sandbox
TEST_F(ProviderLifecycleSeedTest, AcquireDropsDeadCachedSandbox) {
  build();
  auto client = add_active("sandbox-dead");
  map_thread("default", "thread-dead", "sandbox-dead");
  backend->is_alive_fn = [](const SandboxInfo&) { return false; };
  backend->create_fn = [](const CreateRequest&) {
    SandboxInfo info = make_info("sandbox-dead", "http://fresh-sandbox");
    info.container_name = "deer-flow-sandbox-sandbox-dead";
    return info;
  };
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("sandbox-dead"); });
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });

  EXPECT_EQ(provider->acquire("thread-dead", "default"), "sandbox-dead");

  EXPECT_EQ(client->close_count(), 1);
  ASSERT_EQ(backend->destroys().size(), 1u);
  EXPECT_EQ(backend->destroys()[0].sandbox_url, "http://sandbox-host");
  EXPECT_EQ(backend->creates().size(), 1u);
  EXPECT_EQ(mapped("default", "thread-dead"), std::optional<std::string>("sandbox-dead"));
  ASSERT_TRUE(client_of("sandbox-dead"));
  EXPECT_EQ(client_of("sandbox-dead")->base_url(), "http://fresh-sandbox");
}

// Python: test_acquire_keeps_cached_sandbox_when_health_check_errors
TEST_F(ProviderLifecycleSeedTest, AcquireKeepsCachedSandboxWhenHealthCheckErrors) {
  build();
  auto client = add_active("sandbox-transient");
  map_thread("default", "thread-transient", "sandbox-transient");
  backend->is_alive_fn = [](const SandboxInfo&) -> bool {
    throw std::runtime_error("docker daemon busy");
  };

  EXPECT_EQ(provider->acquire("thread-transient", "default"), "sandbox-transient");

  EXPECT_EQ(client->close_count(), 0);
  EXPECT_TRUE(backend->destroys().empty());
  EXPECT_EQ(client_of("sandbox-transient"), client);
  EXPECT_TRUE(
      logger->contains(LogLevel::warning, "Failed to check sandbox sandbox-transient health"));
}

// Python: test_drop_unhealthy_sandbox_skips_recreated_entry
TEST_F(ProviderLifecycleSeedTest, DropUnhealthySandboxSkipsRecreatedEntry) {
  build();
  const InfoPtr old_info = make_info_ptr("sandbox-toctou", "http://old-sandbox");
  const InfoPtr new_info = make_info_ptr("sandbox-toctou", "http://new-sandbox");
  auto new_client = std::make_shared<RecordingClient>("sandbox-toctou", "http://new-sandbox");
  {
    std::lock_guard lock(provider.mutex());
    provider.registry().install_active("sandbox-toctou", new_client, new_info, std::nullopt, 1.0);
    provider.registry().conversations().assign({"default", "thread-toctou"}, "sandbox-toctou");
  }

  provider.peer().drop_unhealthy_sandbox("sandbox-toctou", "stale health check", old_info);

  EXPECT_EQ(new_client->close_count(), 0);
  EXPECT_TRUE(backend->destroys().empty());
  EXPECT_EQ(info_of("sandbox-toctou"), new_info);
  EXPECT_EQ(client_of("sandbox-toctou"), new_client);
  std::lock_guard lock(provider.mutex());
  EXPECT_EQ(provider.registry().conversations(),
            (std::map<ThreadKey, std::string>{{{"default", "thread-toctou"}, "sandbox-toctou"}}));
  EXPECT_EQ(provider.registry().teardown_count(), 0u);
}

// Python: test_acquire_skips_dead_warm_pool_sandbox
TEST_F(ProviderLifecycleSeedTest, AcquireSkipsDeadWarmPoolSandbox) {
  build();
  SandboxInfo stale = make_info("sandbox-warm-dead", "http://stale-sandbox");
  stale.container_name = "deer-flow-sandbox-sandbox-warm-dead";
  add_warm(std::make_shared<const SandboxInfo>(stale), 0.0);
  backend->is_alive_fn = [](const SandboxInfo&) { return false; };
  backend->create_fn = [](const CreateRequest&) {
    SandboxInfo info = make_info("sandbox-warm-dead", "http://fresh-sandbox");
    info.container_name = "deer-flow-sandbox-sandbox-warm-dead";
    return info;
  };
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("sandbox-warm-dead"); });
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });

  EXPECT_EQ(provider->acquire("thread-warm-dead", "default"), "sandbox-warm-dead");

  ASSERT_EQ(backend->destroys().size(), 1u);
  EXPECT_EQ(backend->destroys()[0], stale);
  EXPECT_EQ(backend->creates().size(), 1u);
  {
    std::lock_guard lock(provider.mutex());
    EXPECT_EQ(provider.registry().warm_count(), 0u);
  }
  EXPECT_EQ(mapped("default", "thread-warm-dead"), std::optional<std::string>("sandbox-warm-dead"));
  ASSERT_TRUE(client_of("sandbox-warm-dead"));
  EXPECT_EQ(client_of("sandbox-warm-dead")->base_url(), "http://fresh-sandbox");
}

// ── idle reaper and eviction (design §6) ──────────────────────────────────────

// Python: test_cleanup_idle_sandboxes_keeps_active_cleanup_and_delegates_warm_expiry
TEST_F(ProviderLifecycleSeedTest, CleanupIdleSandboxesKeepsActiveCleanupAndDelegatesWarmExpiry) {
  build();
  add_active("active-old", "http://active-old");
  map_thread("default", "thread-old", "active-old");
  add_warm(make_info_ptr("warm-old", "http://warm-old"), 0.0);

  std::vector<std::string> calls;
  std::vector<std::string> destroyed;
  std::vector<ProviderUnderTest::Predicate> predicates;
  std::vector<std::optional<double>> warm_timeouts;
  const auto restore_destroy_tracked =
      provider.inject(&ProviderSeams::destroy_tracked,
                      [&](const std::string& id, const ProviderUnderTest::Predicate& pred) {
                        calls.push_back("active");
                        destroyed.push_back(id);
                        predicates.push_back(pred);
                      });
  const auto restore_reap_expired_warm =
      provider.inject(&ProviderSeams::reap_expired_warm, [&](std::optional<double> timeout) {
        calls.push_back("warm");
        warm_timeouts.push_back(timeout);
      });

  provider->cleanup_idle_sandboxes(1.0);

  EXPECT_EQ(destroyed, std::vector<std::string>{"active-old"});
  ASSERT_EQ(predicates.size(), 1u);
  {
    // The gate is a live predicate, evaluated under the registry mutex...
    std::lock_guard lock(provider.mutex());
    EXPECT_TRUE(predicates[0](provider.registry()));
    // ...that turns false once the sandbox is used again.
    entry_of("active-old").since = clock->wall_now();
    EXPECT_FALSE(predicates[0](provider.registry()));
  }
  EXPECT_EQ(warm_timeouts, std::vector<std::optional<double>>{1.0});
  EXPECT_EQ(calls, (std::vector<std::string>{"active", "warm"}));
}

// Python: test_create_sandbox_evicts_oldest_warm_replica_via_shared_lifecycle
TEST_F(ProviderLifecycleSeedTest, CreateSandboxEvictsOldestWarmReplicaViaSharedLifecycle) {
  options.replicas = 2;
  build();
  const InfoPtr oldest = make_info_ptr("warm-oldest", "http://warm-oldest");
  const InfoPtr newest = make_info_ptr("warm-newest", "http://warm-newest");
  const SandboxInfo created = make_info("created", "http://created");
  add_warm(newest, 20.0);
  add_warm(oldest, 10.0);
  backend->create_fn = [created](const CreateRequest&) { return created; };
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });

  EXPECT_EQ(provider.peer().create_sandbox(std::nullopt, "created", "default", std::nullopt),
            "created");

  EXPECT_EQ(backend->destroys(), std::vector<SandboxInfo>{*oldest});
  std::lock_guard lock(provider.mutex());
  ASSERT_EQ(provider.registry().warm_count(), 1u);
  ASSERT_TRUE(provider.registry().is_released("warm-newest"));
  EXPECT_EQ(entry_of("warm-newest").info, newest);
  EXPECT_EQ(entry_of("warm-newest").since, 20.0);
  ASSERT_TRUE(provider.registry().is_active("created"));
  EXPECT_EQ(*entry_of("created").info, created);
}

// The eviction's stop runs beside the create instead of before it, and the creating
// call still returns only once the oldest warm sandbox has been destroyed, exactly once. Each
// fake step waits (at most 2 s) for the other to have begun; in sequence they never overlap.
TEST_F(ProviderLifecycleSeedTest, TheEvictionsStopOverlapsTheCreate) {
  options.replicas = 1;
  build();
  const InfoPtr oldest = make_info_ptr("warm-oldest", "http://warm-oldest");
  add_warm(oldest, 10.0);
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  std::mutex mutex;
  std::condition_variable changed;
  struct Step {
    bool entered = false, left = false;
  } create_step, stop_step;
  bool overlapped = false;
  // Overlap: one step sees the other begun and not yet finished.
  auto step = [&](Step& mine, const Step& other) {
    std::unique_lock lock(mutex);
    mine.entered = true;
    changed.notify_all();
    changed.wait_for(lock, std::chrono::seconds(2), [&] { return other.entered; });
    if (other.entered && !other.left) overlapped = true;
    mine.left = true;
  };
  backend->destroy_fn = [&](const SandboxInfo&) { step(stop_step, create_step); };
  backend->create_fn = [&](const CreateRequest& request) {
    step(create_step, stop_step);
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);
  };

  EXPECT_EQ(provider.peer().create_sandbox(std::nullopt, "created", "default", std::nullopt),
            "created");

  EXPECT_TRUE(overlapped) << "the stop ran before the create";
  EXPECT_EQ(backend->destroys(), std::vector<SandboxInfo>{*oldest});
  EXPECT_FALSE(is_warm("warm-oldest"));
  EXPECT_TRUE(is_active("created"));
  backend->clear_scripts();
}

// §5.10: with every slot active nothing is evicted and creation goes beyond the soft limit.
TEST_F(ProviderLifecycleSeedTest, CreateBeyondTheSoftLimitNeverEvictsActiveSandboxes) {
  options.replicas = 1;
  build();
  auto active = add_active("active-1");
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });

  EXPECT_EQ(provider.peer().create_sandbox(std::nullopt, "extra", "default", std::nullopt),
            "extra");

  EXPECT_TRUE(backend->destroys().empty());
  EXPECT_EQ(active->close_count(), 0);
  EXPECT_TRUE(logger->contains(
      LogLevel::warning,
      "All 1 replica slots are in active use; creating sandbox extra beyond the soft limit"));
}

// Found by the stress test: after a burst beyond the soft limit, one eviction per create left
// warm sandboxes running above the cap. Creation evicts oldest-first until within it.
TEST_F(ProviderLifecycleSeedTest, CreateEvictsWarmEntriesUntilWithinTheCap) {
  options.replicas = 2;
  build();
  add_active("active-1");
  add_active("active-2");
  const InfoPtr older = make_info_ptr("warm-older", "http://warm-older");
  const InfoPtr newer = make_info_ptr("warm-newer", "http://warm-newer");
  add_warm(newer, 20.0);
  add_warm(older, 10.0);
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });

  EXPECT_EQ(provider.peer().create_sandbox(std::nullopt, "created", "default", std::nullopt),
            "created");

  EXPECT_EQ(backend->destroys(), (std::vector<SandboxInfo>{*older, *newer}));
  EXPECT_FALSE(is_warm("warm-older"));
  EXPECT_FALSE(is_warm("warm-newer"));
  EXPECT_TRUE(is_active("active-1"));
  EXPECT_TRUE(is_active("active-2"));
  EXPECT_TRUE(logger->contains(
      LogLevel::warning,
      "All 2 replica slots are in active use; creating sandbox created beyond the soft limit"));
}

// Found by the stress test: concurrent creations each saw the same free slot. A creation holds
// its slot from the replica check until it is registered, so the second one evicts.
TEST_F(ProviderLifecycleSeedTest, ConcurrentCreationsCountEachOthersReplicaSlot) {
  options.replicas = 2;
  build();
  const InfoPtr warm = make_info_ptr("warm-1", "http://warm-1");
  add_warm(warm, 10.0);
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  std::promise<void> first_in_create;
  std::promise<void> let_first_finish;
  std::shared_future<void> go = let_first_finish.get_future().share();
  backend->create_fn = [&](const CreateRequest& request) {
    if (request.sandbox_id == "first") {
      first_in_create.set_value();
      go.wait();
    }
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);
  };
  // in use while "first" is being created: warm-1 + first = 2, so nothing is evicted yet.
  std::thread first(
      [&] { provider.peer().create_sandbox(std::nullopt, "first", "default", std::nullopt); });
  ASSERT_EQ(first_in_create.get_future().wait_for(std::chrono::seconds(5)),
            std::future_status::ready);
  EXPECT_TRUE(backend->destroys().empty());

  // The second creation counts "first" and makes room by evicting warm-1.
  provider.peer().create_sandbox(std::nullopt, "second", "default", std::nullopt);
  EXPECT_EQ(backend->destroys(), std::vector<SandboxInfo>{*warm});

  let_first_finish.set_value();
  first.join();
  EXPECT_TRUE(is_active("first"));
  EXPECT_TRUE(is_active("second"));
  std::lock_guard lock(provider.mutex());
  EXPECT_FALSE(provider.registry().any_creation());
}

// Found by the stress test: an eviction snapshot went stale (the sandbox was reclaimed, stopped
// and re-created under the same id, then parked again); "still in the warm pool" held, so the
// old, already stopped info was destroyed a second time and the live one stayed parked.
TEST_F(ProviderLifecycleSeedTest, EvictionRefusesAWarmEntryReplacedSinceItsSnapshot) {
  options.replicas = 1;
  build();
  const InfoPtr stale = make_info_ptr("warm-x", "http://warm-x/1");
  const InfoPtr replacement = make_info_ptr("warm-x", "http://warm-x/2");
  add_warm(stale, 10.0);
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  bool replaced = false;
  const auto restore_destroy_warm_entry = provider.inject(
      &ProviderSeams::destroy_warm_entry,
      [&](const std::string& id, const ProviderUnderTest::WarmEntry& entry,
          const std::string& reason, const ProviderUnderTest::Predicate& still_reapable) {
        if (!replaced) {  // between the snapshot and the reservation
          replaced = true;
          std::lock_guard lock(provider.mutex());
          provider.registry().erase_released_if(id, entry.info);
          provider.registry().add_released(id, replacement, 30.0, std::nullopt);
        }
        return provider.peer().base_destroy_warm_entry(id, entry, reason, still_reapable);
      });

  provider.peer().create_sandbox(std::nullopt, "created", "default", std::nullopt);

  EXPECT_TRUE(backend->destroys().empty());  // the stale info is never stopped
  EXPECT_TRUE(logger->contains(LogLevel::info,
                               "Refusing to destroy warm-pool sandbox warm-x for "
                               "replica_enforcement: reclaimed by this instance"));
  std::lock_guard lock(provider.mutex());
  ASSERT_TRUE(provider.registry().is_released("warm-x"));
  EXPECT_EQ(entry_of("warm-x").info, replacement);
}

// Same guard for idle expiry: an entry reclaimed and parked again since the snapshot is fresh.
TEST_F(ProviderLifecycleSeedTest, IdleExpiryRefusesAWarmEntryParkedAgainSinceItsSnapshot) {
  build();
  const InfoPtr info = make_info_ptr("warm-y", "http://warm-y");
  add_warm(info, 0.0);
  const auto restore_destroy_warm_entry = provider.inject(
      &ProviderSeams::destroy_warm_entry,
      [&](const std::string& id, const ProviderUnderTest::WarmEntry& entry,
          const std::string& reason, const ProviderUnderTest::Predicate& still_reapable) {
        {
          std::lock_guard lock(provider.mutex());
          provider.registry().erase_released_if(id, info);
          provider.registry().add_released(id, info, clock->wall_now(),
                                           std::nullopt);  // released just now
        }
        return provider.peer().base_destroy_warm_entry(id, entry, reason, still_reapable);
      });

  provider->reap_expired_warm(60.0);

  EXPECT_TRUE(backend->destroys().empty());
  EXPECT_TRUE(is_warm("warm-y"));
}

// ── tenant isolation (design §4.3) ────────────────────────────────────────────

// Python: test_aio_forced_collision_never_overwrites_active_tenant
TEST_F(ProviderLifecycleSeedTest, AioForcedCollisionNeverOverwritesActiveTenant) {
  options.idle_timeout = 0;
  build();
  std::vector<std::tuple<std::optional<std::string>, std::string, std::optional<std::string>>>
      create_calls;
  backend->create_fn = [&](const CreateRequest& request) {
    create_calls.emplace_back(request.thread_id, request.sandbox_id, request.user_id);
    SandboxInfo info = make_info(
        request.sandbox_id, "http://sandbox-" + std::to_string(create_calls.size()) + ".local");
    info.container_name = "deer-flow-sandbox-" + request.sandbox_id;
    return info;
  };
  claims->script_claim([](const std::string&, bool) { return true; });
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("deadbeefdeadbeef"); });

  const std::string sandbox_id = provider->acquire("thread-a", "user-a");
  const InfoPtr info_a = info_of(sandbox_id);
  ASSERT_TRUE(info_a);
  provider->release(sandbox_id);
  ASSERT_TRUE(is_warm(sandbox_id));

  EXPECT_THROW(provider->acquire("thread-b", "user-b"), SandboxIdentityCollisionError);

  {
    std::lock_guard lock(provider.mutex());
    EXPECT_EQ(entry_of(sandbox_id).info, info_a);
  }
  EXPECT_TRUE(backend->destroys().empty());
  EXPECT_EQ(create_calls.size(), 1u);
  EXPECT_EQ(provider->acquire("thread-a", "user-a"), sandbox_id);
  EXPECT_EQ(info_of(sandbox_id), info_a);
}

// The collision message carries both identities in Python repr (design §1.7).
TEST_F(ProviderLifecycleSeedTest, CollisionMessageNamesBothIdentities) {
  build();
  add_warm(make_info_ptr("deadbeefdeadbeef", "http://a"), 1.0, ThreadKey{"user-a", "thread-a"});
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("deadbeefdeadbeef"); });
  try {
    provider->acquire("thread-b", "user-b");
    FAIL() << "expected a collision";
  } catch (const SandboxIdentityCollisionError& error) {
    EXPECT_STREQ(error.what(),
                 "sandbox ID collision for deadbeefdeadbeef: tracked identity is ('user-a', "
                 "'thread-a'), requested identity is ('user-b', 'thread-b')");
  }
}

// ── readiness-failure teardown (design §5.11) ─────────────────────────────────

class UnreadyTeardownTest : public ProviderLifecycleSeedTest {
 protected:
  // _make_unready_destroy_provider: create answers `unready_info`, mounts are empty.
  void build_unready(const std::string& id, const std::string& url) {
    unready_info = make_info(id, url);
    build();
    const SandboxInfo info = unready_info;
    backend->create_fn = [info](const CreateRequest&) { return info; };
    provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  }
  SandboxInfo unready_info;
};

// Python: test_create_sandbox_claims_ownership_before_readiness_timeout_destroy
TEST_F(UnreadyTeardownTest, CreateSandboxClaimsOwnershipBeforeReadinessTimeoutDestroy) {
  build_unready("unready", "http://unready");
  hooks.ready_fn = [](const std::string&, double) { return false; };
  // The heartbeat releases the teardown lease on exit: look at the lease while destroy runs.
  std::vector<std::optional<LeaseRecord>> destroy_snapshots;
  backend->destroy_fn = [&](const SandboxInfo& info) {
    destroy_snapshots.push_back(store->inspect(info.sandbox_id));
  };

  try {
    provider.peer().create_sandbox("thread-4248", "unready", "user-4248", std::nullopt);
    FAIL() << "expected the readiness error";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("failed to become ready"));
  }

  EXPECT_EQ(backend->destroys(), std::vector<SandboxInfo>{unready_info});
  ASSERT_EQ(destroy_snapshots.size(), 1u) << "destroy must run inside the held teardown lease";
  ASSERT_TRUE(destroy_snapshots[0]) << "teardown lease must be held while destroy runs";
  EXPECT_EQ(destroy_snapshots[0]->owner_id, provider->owner_id());
  EXPECT_EQ(destroy_snapshots[0]->owner_id, kTestOwnerId);
  EXPECT_TRUE(destroy_snapshots[0]->destroying) << "destroy must run under a `del:` lease";
  EXPECT_EQ(store->inspect("unready"), std::nullopt);  // released afterwards
  ASSERT_EQ(hooks.ready_calls().size(), 1u);
  EXPECT_EQ(hooks.ready_calls()[0].url, "http://unready");
  EXPECT_EQ(hooks.ready_calls()[0].timeout, 60.0);
}

// Python: test_create_sandbox_skips_destroy_when_unready_sandbox_owned_by_peer
TEST_F(UnreadyTeardownTest, CreateSandboxSkipsDestroyWhenUnreadySandboxOwnedByPeer) {
  // A real peer holds the lease in a shared SQLite file, so the refusal comes from the store's
  // own claim, not from a replaced provider helper.
  unready_info = make_info("peer-owned", "http://peer-owned");
  const auto sqlite = [&](const std::string& owner) {
    return load_sqlite_store((tmp.path() / "leases.db").string(), owner, clock, logger);
  };
  auto peer = sqlite("peer-worker");
  ASSERT_TRUE(peer->take("peer-owned"));
  store = sqlite(kTestOwnerId);
  provider = make_provider_over(backend, store);
  const SandboxInfo info = unready_info;
  backend->create_fn = [info](const CreateRequest&) { return info; };
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  hooks.ready_fn = [](const std::string&, double) { return false; };

  try {
    provider.peer().create_sandbox("thread-peer", "peer-owned", "user-peer", std::nullopt);
    FAIL() << "expected the readiness error";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("failed to become ready"));
  }

  EXPECT_TRUE(backend->destroys().empty());
  EXPECT_EQ(peer->owner("peer-owned"), std::optional<std::string>("peer-worker"))
      << "the peer's lease was disturbed";
  EXPECT_TRUE(logger->contains(LogLevel::warning,
                               "Not destroying unready sandbox peer-owned: owned by another "
                               "instance or ownership unavailable"));
  std::lock_guard lock(provider.mutex());
  EXPECT_EQ(provider.registry().teardown_count(), 0u);
}

// ── orphan reconciliation (design §8) ─────────────────────────────────────────

// Python: test_reconcile_does_not_adopt_a_container_whose_unready_teardown_is_reserved
TEST_F(UnreadyTeardownTest, ReconcileDoesNotAdoptAContainerWhoseUnreadyTeardownIsReserved) {
  build_unready("unready-race", "http://unready-race");
  const SandboxInfo info = unready_info;
  backend->list_running_fn = [info] { return std::vector<SandboxInfo>{info}; };
  // Park the destroy after it reserved the local teardown, before its `del:` claim lands.
  std::promise<void> at_claim;
  std::promise<void> let_claim;
  std::shared_future<void> let = let_claim.get_future().share();
  claims->script_claim([&](const std::string& id, bool for_destroy) {
    if (for_destroy) {
      at_claim.set_value();
      EXPECT_EQ(let.wait_for(std::chrono::seconds(5)), std::future_status::ready);
    }
    return claims->real_claim(id, for_destroy);
  });
  std::thread reaper([&] { provider.peer().destroy_unready_sandbox("unready-race", info); });
  {
    // Whatever fails below, let the reaper go and join it.
    struct Join {
      std::promise<void>& release;
      std::thread& thread;
      ~Join() {
        release.set_value();
        thread.join();
      }
    } join{let_claim, reaper};
    ASSERT_EQ(at_claim.get_future().wait_for(std::chrono::seconds(5)), std::future_status::ready)
        << "the unready destroy never reached its claim";
    provider->reconcile_orphans();
    EXPECT_FALSE(is_warm("unready-race"))
        << "reconcile adopted a container this instance is tearing down";
  }

  EXPECT_EQ(backend->destroys(), std::vector<SandboxInfo>{info});
  std::lock_guard lock(provider.mutex());
  EXPECT_EQ(provider.registry().teardown_count(), 0u)
      << "a teardown reservation outlived the stop it guarded";
}

// Python: test_reconcile_adopts_unready_container_when_no_teardown_is_in_flight
TEST_F(UnreadyTeardownTest, ReconcileAdoptsUnreadyContainerWhenNoTeardownIsInFlight) {
  build_unready("adoptable", "http://adoptable");
  const SandboxInfo info = unready_info;
  backend->list_running_fn = [info] { return std::vector<SandboxInfo>{info}; };

  provider->reconcile_orphans();

  EXPECT_TRUE(is_warm("adoptable")) << "reconcile must still adopt a genuinely unowned container";
  std::lock_guard lock(provider.mutex());
  EXPECT_EQ(entry_of("adoptable").identity, std::nullopt);
}

// Python: test_reconcile_may_adopt_pre_upgrade_id_only_for_orphan_cleanup
TEST_F(ProviderLifecycleSeedTest, ReconcileMayAdoptPreUpgradeIdOnlyForOrphanCleanup) {
  build();
  const std::string old_id = sha256_hex("alice:thread-1").substr(0, 16);
  const SandboxInfo old_info = make_info(old_id, "http://old-sandbox");
  backend->list_running_fn = [old_info] { return std::vector<SandboxInfo>{old_info}; };

  provider->reconcile_orphans();

  const std::string current_id = deterministic_sandbox_id("thread-1", "alice");
  EXPECT_TRUE(is_warm(old_id));
  EXPECT_NE(current_id, old_id);
  EXPECT_FALSE(is_warm(current_id));
  EXPECT_TRUE(logger->contains(LogLevel::info, "Startup reconciliation complete: 1 adopted"));
}

// ── crash-recovery reconnect (design §5.19) ───────────────────────────────────

class ReconciliationSeedTest : public ProviderLifecycleSeedTest {
 protected:
  static SandboxInfo identified_info(const std::string& id, const std::string& url,
                                     const std::string& thread, const std::string& user) {
    SandboxInfo info = make_info(id, url);
    info.thread_id = thread;
    info.user_id = user;
    return info;
  }
  core::ReconciliationIdentity identity(const std::string& ns, const std::string& incarnation) {
    return {Provider::reconciliation_provider_key(), ns, incarnation};
  }
};

// Python: test_reconciliation_reconnects_exact_discovered_sandbox_without_acquiring
TEST_F(ReconciliationSeedTest, ReconciliationReconnectsExactDiscoveredSandboxWithoutAcquiring) {
  build();
  const SandboxInfo info = identified_info("old-id", "http://sandbox-old", "thread-1", "alice");
  backend->discover_for_reconciliation_fn = [info](const std::string&) {
    return SandboxDiscoveryResult::found(info, "namespace-1", "pod-1");
  };
  // An active entry with the same raw id must not be borrowed.
  auto cached = add_active("old-id", "http://cached");
  clock->advance(50);  // so that a get() or acquire would move last_activity off 0.0

  const core::ReconnectResult result = provider->reconnect_sandbox_for_reconciliation(
      "old-id", "thread-1", "alice", identity("namespace-1", "pod-1"));

  // Nothing acquired or touched: the cached entry's activity is what add_active set (a get()
  // would have stamped it with the current time), and the registry holds what it held.
  {
    std::lock_guard lock(provider.mutex());
    EXPECT_EQ(entry_of("old-id").since, 0.0) << "get() was called";
    EXPECT_TRUE(provider.registry().conversations().empty());
    EXPECT_EQ(provider.registry().active_count(), 1u);
  }

  EXPECT_EQ(result.status, Status::found);
  EXPECT_TRUE(result.close_after);
  ASSERT_TRUE(result.sandbox);
  EXPECT_NE(result.sandbox, cached);
  EXPECT_EQ(result.sandbox->base_url(), "http://sandbox-old");
  EXPECT_EQ(hooks.made_clients(),
            (std::vector<std::pair<std::string, std::string>>{{"old-id", "http://sandbox-old"}}));
  EXPECT_EQ(cached->close_count(), 0);
  EXPECT_EQ(backend->creates().size() + backend->discovers().size(), 0u);
}

// Python: test_reconciliation_rejects_discovered_sandbox_from_another_identity
TEST_F(ReconciliationSeedTest, ReconciliationRejectsDiscoveredSandboxFromAnotherIdentity) {
  build();
  const SandboxInfo info =
      identified_info("old-id", "http://sandbox-old", "another-thread", "alice");
  backend->discover_for_reconciliation_fn = [info](const std::string&) {
    return SandboxDiscoveryResult::found(info, "namespace-1", "pod-1");
  };

  const auto result = provider->reconnect_sandbox_for_reconciliation(
      "old-id", "thread-1", "alice", identity("namespace-1", "pod-1"));

  EXPECT_EQ(result.status, Status::unknown);
  EXPECT_EQ(result.sandbox, nullptr);
  EXPECT_FALSE(result.close_after);
}

// Python: test_reconciliation_identity_separates_provider_type_from_backend_namespace
TEST_F(ReconciliationSeedTest, ReconciliationIdentitySeparatesProviderTypeFromBackendNamespace) {
  build();
  const SandboxInfo info = make_info("same-id", "http://sandbox");
  backend->discover_for_reconciliation_fn = [info](const std::string&) {
    return SandboxDiscoveryResult::found(info, "cluster-a", "pod-a");
  };
  auto second_backend = std::make_shared<FakeBackend>();
  second_backend->discover_for_reconciliation_fn = [info](const std::string&) {
    return SandboxDiscoveryResult::found(info, "cluster-b", "pod-b");
  };
  extra_providers.push_back(make_provider(second_backend, nullptr));
  ProviderUnderTest& second = extra_providers.back();

  const auto first_identity = provider->prepare_sandbox_reconciliation_identity("same-id");
  const auto second_identity = second->prepare_sandbox_reconciliation_identity("same-id");

  EXPECT_EQ(provider->reconciliation_provider_key(), second->reconciliation_provider_key());
  ASSERT_TRUE(first_identity);
  ASSERT_TRUE(second_identity);
  EXPECT_EQ(first_identity->provider_key, second_identity->provider_key);
  EXPECT_EQ(first_identity->backend_namespace, std::optional<std::string>("cluster-a"));
  EXPECT_EQ(second_identity->backend_namespace, std::optional<std::string>("cluster-b"));
  EXPECT_EQ(first_identity->incarnation_id, "pod-a");
}

// Python: test_reconciliation_never_uses_active_replacement_with_same_raw_id
TEST_F(ReconciliationSeedTest, ReconciliationNeverUsesActiveReplacementWithSameRawId) {
  build();
  const SandboxInfo info = identified_info("same-id", "http://replacement", "thread-1", "alice");
  backend->discover_for_reconciliation_fn = [info](const std::string&) {
    return SandboxDiscoveryResult::found(info, "namespace-1", "pod-new");
  };
  auto replacement = add_active("same-id", "http://replacement");

  const auto result = provider->reconnect_sandbox_for_reconciliation(
      "same-id", "thread-1", "alice", identity("namespace-1", "pod-old"));

  EXPECT_EQ(result.status, Status::absent);
  EXPECT_EQ(result.sandbox, nullptr);
  EXPECT_FALSE(result.close_after);
  EXPECT_EQ(replacement->close_count(), 0);
  EXPECT_TRUE(hooks.made_clients().empty());
  EXPECT_TRUE(is_active("same-id"));
}

// Python: test_reconciliation_keeps_journal_when_backend_namespace_changes
TEST_F(ReconciliationSeedTest, ReconciliationKeepsJournalWhenBackendNamespaceChanges) {
  build();
  backend->discover_for_reconciliation_fn = [](const std::string&) {
    return SandboxDiscoveryResult::absent("cluster-new");
  };

  const auto result = provider->reconnect_sandbox_for_reconciliation(
      "same-id", "thread-1", "alice", identity("cluster-old", "pod-old"));

  EXPECT_EQ(result.status, Status::unknown);
  EXPECT_EQ(result.sandbox, nullptr);
}

// Python: test_reconciliation_keeps_journal_when_exact_pod_has_no_service
TEST_F(ReconciliationSeedTest, ReconciliationKeepsJournalWhenExactPodHasNoService) {
  build();
  backend->discover_for_reconciliation_fn = [](const std::string&) {
    return SandboxDiscoveryResult::found(std::nullopt, "namespace-1", "pod-1");
  };

  const auto result = provider->reconnect_sandbox_for_reconciliation(
      "same-id", "thread-1", "alice", identity("namespace-1", "pod-1"));

  EXPECT_EQ(result.status, Status::unknown);
  EXPECT_EQ(result.sandbox, nullptr);
}

// Python: test_prepare_reconciliation_identity_fails_closed_without_exact_instance
TEST_F(ReconciliationSeedTest, PrepareReconciliationIdentityFailsClosedWithoutExactInstance) {
  build();
  backend->discover_for_reconciliation_fn = [](const std::string&) {
    return SandboxDiscoveryResult::unknown();
  };

  EXPECT_EQ(provider->prepare_sandbox_reconciliation_identity("same-id"), std::nullopt);
}

// §5.19 (same rule, other inputs): an absent result in the same namespace is `absent`; a
// throwing backend or a found result without an incarnation cannot prove anything.
TEST_F(ReconciliationSeedTest, ReconnectAndPrepareFailClosedOnErrorsAndMissingIncarnation) {
  build();
  backend->discover_for_reconciliation_fn = [](const std::string&) {
    return SandboxDiscoveryResult::absent("namespace-1");
  };
  EXPECT_EQ(provider
                ->reconnect_sandbox_for_reconciliation("same-id", "thread-1", "alice",
                                                       identity("namespace-1", "pod-1"))
                .status,
            Status::absent);

  backend->discover_for_reconciliation_fn = [](const std::string&) -> SandboxDiscoveryResult {
    throw std::runtime_error("cluster unreachable");
  };
  EXPECT_EQ(provider->prepare_sandbox_reconciliation_identity("same-id"), std::nullopt);
  EXPECT_EQ(provider
                ->reconnect_sandbox_for_reconciliation("same-id", "thread-1", "alice",
                                                       identity("namespace-1", "pod-1"))
                .status,
            Status::unknown);

  backend->discover_for_reconciliation_fn = [](const std::string&) {
    SandboxDiscoveryResult result;
    result.status = Status::found;
    result.info = make_info("same-id", "http://x");
    result.backend_namespace = "namespace-1";
    return result;  // no incarnation id
  };
  EXPECT_EQ(provider->prepare_sandbox_reconciliation_identity("same-id"), std::nullopt);
}

}  // namespace
}  // namespace sandboxd::testing

// Seed tests (see tests/SEED_TESTS.md) for the provider's mount mode, sandbox ids, acquisition
// restarts, create-validation and create flags. The Python seed builds these providers with
// RemoteSandboxBackend; there is no remote_provisioner plugin yet, so a FakeBackend plays a
// contract-negotiating backend (mount_mode_kind contract_negotiated, cached version/known,
// counted refreshes and snapshots).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::deterministic_sandbox_id;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> container_paths(const std::vector<Mount>& mounts) {
  std::vector<std::string> out;
  for (const auto& mount : mounts) out.push_back(mount.container_path);
  return out;
}

std::optional<Mount> find_mount(const std::vector<Mount>& mounts, const std::string& container) {
  for (const auto& mount : mounts) {
    if (mount.container_path == container) return mount;
  }
  return std::nullopt;
}

class ProviderSeedTest : public ProviderFixture {
 protected:
  // The seed's RemoteSandboxBackend with `_mount_contract_version` / `_known` written directly.
  void negotiating_backend(int version, bool known) {
    backend->mode = MountModeKind::contract_negotiated;
    backend->cached_version = version;
    backend->cached_known = known;
  }

  // _install_remote_revalidation_backend: a create-validating backend whose create reports the
  // requested identity under contract 2, current mounts, lark runtime on, broker off.
  void install_remote_revalidation_backend(const std::string& url = "http://sandbox-host") {
    backend->requires_validation = true;
    backend->create_fn = [url](const CreateRequest& request) {
      SandboxInfo info = make_info(request.sandbox_id, url);
      info.user_id = request.user_id;
      info.thread_id = request.thread_id;
      info.mount_contract_version = 2;
      return info;
    };
    provider.planner().script_skills_projection([](const std::string&) {});
    provider.planner().script_extra_mounts(
        [](const std::optional<std::string>&, const std::string&) {
          return std::vector<Mount>{{"/host/current", "/mnt/current", true}};
        });
    hooks.lark_runtime = true;
    hooks.lark_broker = false;
  }
};

// ── thread-data mount mode (design §3.6) ──────────────────────────────────────

struct OverrideCase {
  bool backend_is_local;
  std::optional<bool> override_value;
  bool expected;
};

void PrintTo(const OverrideCase& c, std::ostream* os) {
  *os << (c.backend_is_local ? "local" : "other") << " backend, override "
      << (c.override_value ? (*c.override_value ? "true" : "false") : "null");
}

class ThreadDataMountsOverrideTest : public ProviderSeedTest,
                                     public ::testing::WithParamInterface<OverrideCase> {};

// Python: test_thread_data_mounts_override_precedes_backend_detection (×4)
TEST_P(ThreadDataMountsOverrideTest, ThreadDataMountsOverridePrecedesBackendDetection) {
  const OverrideCase& param = GetParam();
  backend->mode = param.backend_is_local ? MountModeKind::local_bind_mounts : MountModeKind::other;
  options.thread_data_mounts = param.override_value;
  build();

  EXPECT_EQ(provider->uses_thread_data_mounts(), param.expected);
  EXPECT_EQ(backend->total_calls(), 0u);
}

INSTANTIATE_TEST_SUITE_P(SeedCases, ThreadDataMountsOverrideTest,
                         ::testing::Values(OverrideCase{true, std::nullopt, true},
                                           OverrideCase{false, std::nullopt, false},
                                           OverrideCase{true, false, false},
                                           OverrideCase{false, true, true}));

// Python: test_thread_data_mounts_defaults_to_mounted_for_uninitialized_mount_helper
TEST_F(ProviderSeedTest, ThreadDataMountsDefaultsToMountedForUninitializedMountHelper) {
  use_backend = false;  // neither a thread_data_mounts override nor a backend
  build();

  EXPECT_TRUE(provider->uses_thread_data_mounts());
}

// Python: test_remote_mount_override_downgrades_without_current_provisioner_contract
TEST_F(ProviderSeedTest, RemoteMountOverrideDowngradesWithoutCurrentProvisionerContract) {
  negotiating_backend(0, true);
  options.thread_data_mounts = true;
  build();

  EXPECT_FALSE(provider->uses_thread_data_mounts());
  EXPECT_EQ(backend->refresh_calls(), 0);
  EXPECT_EQ(backend->snapshot_calls(), 0);
}

// Python: test_remote_mount_override_uses_current_provisioner_contract
TEST_F(ProviderSeedTest, RemoteMountOverrideUsesCurrentProvisionerContract) {
  negotiating_backend(kSandboxMountContractVersion, false);  // known is not consulted
  options.thread_data_mounts = true;
  build();

  // "Without probing": the answer comes from the cached version and never waits for the
  // probe lock, even while a probe holds it.
  ProbeLockHolder probe(*backend);
  EXPECT_TRUE(returns_without_waiting([&] {
    EXPECT_TRUE(provider->uses_thread_data_mounts());
    EXPECT_TRUE(provider->sandbox_uses_thread_data_mounts("untracked"));
  })) << "the mount-mode answer waited for the probe lock";
  probe.release();
  EXPECT_EQ(backend->refresh_calls(), 0);
  EXPECT_EQ(backend->snapshot_calls(), 0);
}

// Python: test_remote_mount_mode_refreshes_stale_current_contract
TEST_F(ProviderSeedTest, RemoteMountModeRefreshesStaleCurrentContract) {
  negotiating_backend(kSandboxMountContractVersion, true);
  options.thread_data_mounts = true;
  build();
  // The stale probe answers 404: a legacy provisioner, known version 0.
  backend->refresh_fn = [this] {
    backend->cached_version = 0;
    backend->cached_known = true;
  };

  EXPECT_FALSE(provider->provider_uses_thread_data_mounts());
  EXPECT_EQ(backend->refresh_calls(), 1);
}

// Python:
// test_remote_mount_override_falls_back_to_explicit_sync_when_capability_probe_is_unavailable
TEST_F(ProviderSeedTest,
       RemoteMountOverrideFallsBackToExplicitSyncWhenCapabilityProbeIsUnavailable) {
  negotiating_backend(0, false);  // a fresh remote backend: never probed successfully
  options.thread_data_mounts = true;
  build();

  EXPECT_FALSE(provider->uses_thread_data_mounts());
  EXPECT_EQ(backend->refresh_calls(), 0);
}

struct InstanceContractCase {
  int global_version;
  int sandbox_version;
  bool expected;
};

void PrintTo(const InstanceContractCase& c, std::ostream* os) {
  *os << "global v" << c.global_version << ", sandbox v" << c.sandbox_version;
}

class SandboxMountModeTest : public ProviderSeedTest,
                             public ::testing::WithParamInterface<InstanceContractCase> {};

// Python: test_sandbox_mount_mode_uses_instance_contract_not_global_capability (×2)
TEST_P(SandboxMountModeTest, SandboxMountModeUsesInstanceContractNotGlobalCapability) {
  const InstanceContractCase& param = GetParam();
  negotiating_backend(param.global_version, true);
  options.thread_data_mounts = true;
  build();
  {
    SandboxInfo info = make_info("sandbox-1", "http://sandbox.local");
    info.mount_contract_version = param.sandbox_version;
    std::lock_guard lock(provider.mutex());
    // The seed sets only the info dict: an active entry with an info and no client.
    provider.registry().install_active(
        "sandbox-1", nullptr, std::make_shared<const SandboxInfo>(info), std::nullopt, 0.0);
  }

  EXPECT_EQ(provider->sandbox_uses_thread_data_mounts("sandbox-1"), param.expected);
  EXPECT_EQ(backend->refresh_calls(), 0);
}

INSTANTIATE_TEST_SUITE_P(SeedCases, SandboxMountModeTest,
                         ::testing::Values(InstanceContractCase{2, 0, false},
                                           InstanceContractCase{0, 2, true}));

// A warm sandbox answers from its own contract too (design §3.6: active infos, then warm pool).
TEST_F(ProviderSeedTest, SandboxMountModeReadsWarmSandboxContract) {
  negotiating_backend(2, true);
  options.thread_data_mounts = true;
  build();
  SandboxInfo legacy = make_info("warm-1", "http://warm");
  legacy.mount_contract_version = 0;
  add_warm(std::make_shared<const SandboxInfo>(legacy), 1.0);

  EXPECT_FALSE(provider->sandbox_uses_thread_data_mounts("warm-1"));
  EXPECT_TRUE(provider->sandbox_uses_thread_data_mounts("untracked"));
}

// Python: test_nonmounted_remote_provider_omits_read_only_conversion_mount (the provider's
// part: an explicit-sync provider composes without the read-only conversions mount; the
// composition itself is MountsTest.NonmountedRemoteProviderOmitsReadOnlyConversionMount).
TEST_F(ProviderSeedTest, NonmountedRemoteProviderOmitsReadOnlyConversionMount) {
  options.thread_data_mounts = false;
  build();

  const auto paths = container_paths(provider.peer().get_extra_mounts("thread-1", "alice"));
  EXPECT_THAT(paths, Contains("/mnt/user-data/uploads"));
  EXPECT_THAT(paths, Not(Contains("/mnt/user-data/.upload-conversions")));
}

// Python: test_get_extra_mounts_provisioner_payload_has_unique_container_paths (the provider's
// part: a local-backend provider composes every mount once, conversions read-only; the payload
// part is ProvisionerPayloadTest.PayloadHasUniqueContainerPaths, the provisioner's validation
// tests/provisioner/extra_mount_validation_test.cpp).
TEST_F(ProviderSeedTest, GetExtraMountsProvisionerPayloadHasUniqueContainerPaths) {
  std::filesystem::create_directories(tmp.path() / "integrations" / "lark-cli" / "sandbox-cli");
  backend->mode = MountModeKind::local_bind_mounts;
  build();

  const auto mounts = provider.peer().get_extra_mounts("thread-1", "alice");
  const auto paths = container_paths(mounts);
  EXPECT_EQ(std::set<std::string>(paths.begin(), paths.end()).size(), paths.size());
  for (const char* expected :
       {"/mnt/skills/custom", "/mnt/skills/integrations", "/mnt/integrations/lark-cli/config",
        "/mnt/integrations/lark-cli/data", "/mnt/integrations/lark-cli/runtime"}) {
    EXPECT_THAT(paths, Contains(expected));
  }
  const auto conversions = find_mount(mounts, "/mnt/user-data/.upload-conversions");
  ASSERT_TRUE(conversions);
  EXPECT_TRUE(conversions->read_only);
}

// ── sandbox ids (design §4.2) ─────────────────────────────────────────────────

// Python: test_remote_sandbox_id_changes_with_negotiated_mount_contract
TEST_F(ProviderSeedTest, RemoteSandboxIdChangesWithNegotiatedMountContract) {
  negotiating_backend(0, true);
  build();
  const std::string legacy_id = provider.peer().sandbox_id_for_thread("thread-1", "default", {});

  backend->cached_version = 2;
  const std::string current_id = provider.peer().sandbox_id_for_thread("thread-1", "default", {});

  EXPECT_NE(legacy_id, current_id);
  EXPECT_EQ(legacy_id, deterministic_sandbox_id("thread-1", "default", 0));
  EXPECT_EQ(current_id, deterministic_sandbox_id("thread-1", "default", 2));
  // Cached version only: computing an id never probes.
  EXPECT_EQ(backend->refresh_calls(), 0);
  EXPECT_EQ(backend->snapshot_calls(), 0);
}

// §4.2: a snapshot, when given, decides the version; no thread → a random 8-char id.
TEST_F(ProviderSeedTest, SnapshotVersionWinsAndAnonymousIdsAreRandom) {
  negotiating_backend(0, true);
  build();
  EXPECT_EQ(provider.peer().sandbox_id_for_thread("thread-1", "u", MountContractSnapshot{3, true}),
            deterministic_sandbox_id("thread-1", "u", 3));
  const std::string anonymous = provider.peer().sandbox_id_for_thread(std::nullopt, "u", {});
  EXPECT_EQ(anonymous.size(), 8u);
  EXPECT_NE(anonymous, provider.peer().sandbox_id_for_thread(std::nullopt, "u", {}));
}

// ── reuse and contract upgrades (design §5.5) ─────────────────────────────────

// Python: test_cached_legacy_sandbox_is_not_reused_after_contract_upgrade
TEST_F(ProviderSeedTest, CachedLegacySandboxIsNotReusedAfterContractUpgrade) {
  build();
  auto legacy_client = add_active("legacy-id");
  map_thread("default", "thread-1", "legacy-id");

  EXPECT_EQ(provider.peer().reuse_in_process_sandbox(
                "thread-1", "default", std::string("current-id"), false, std::nullopt),
            std::nullopt);
  EXPECT_EQ(mapped("default", "thread-1"), std::nullopt);
  // The old entry itself is left for the idle reaper; nothing is closed or stopped.
  EXPECT_TRUE(is_active("legacy-id"));
  EXPECT_EQ(legacy_client->close_count(), 0);
  EXPECT_EQ(backend->total_calls(), 0u);
}

// ── acquisition restarts (design §5.3) ────────────────────────────────────────

// Python: test_acquire_restarts_with_a_new_id_when_mount_contract_changes
TEST_F(ProviderSeedTest, AcquireRestartsWithANewIdWhenMountContractChanges) {
  negotiating_backend(2, true);
  build();
  std::vector<MountContractSnapshot> snapshots = {{2, true}, {0, true}};
  std::size_t next = 0;
  const auto restore_acquisition_contract_snapshot =
      provider.inject(&ProviderSeams::acquisition_contract_snapshot,
                      [&]() -> ProviderUnderTest::Snapshot { return snapshots.at(next++); });
  std::vector<std::string> attempted;
  const auto restore_acquire_internal = provider.inject(
      &ProviderSeams::acquire_internal,
      [&](const std::optional<std::string>& thread, const std::string& user,
          ProviderUnderTest::Snapshot snapshot) {
        const std::string id = provider.peer().sandbox_id_for_thread(thread, user, snapshot);
        attempted.push_back(id);
        if (snapshot->version == 2) throw MountContractChangedError(2, 0);
        return id;
      });

  const std::string result = provider->acquire("thread-1", "default");

  EXPECT_EQ(attempted,
            (std::vector<std::string>{deterministic_sandbox_id("thread-1", "default", 2),
                                      deterministic_sandbox_id("thread-1", "default", 0)}));
  EXPECT_EQ(result, attempted.back());
  EXPECT_EQ(next, 2u);  // exactly one snapshot per attempt
}

// §14.1 item 3: at most three attempts, then the last contract error propagates.
TEST_F(ProviderSeedTest, AcquireGivesUpAfterThreeContractChanges) {
  negotiating_backend(2, true);
  build();
  int attempts = 0;
  const auto restore_acquire_internal =
      provider.inject(&ProviderSeams::acquire_internal,
                      [&](const std::optional<std::string>&, const std::string&,
                          ProviderUnderTest::Snapshot) -> std::string {
                        ++attempts;
                        throw MountContractChangedError(2, 3);
                      });

  EXPECT_THROW(provider->acquire("thread-1", "default"), MountContractChangedError);
  EXPECT_EQ(attempts, core::kMaxContractAttempts);
  EXPECT_EQ(backend->snapshot_calls(), core::kMaxContractAttempts);
  EXPECT_EQ(backend->refresh_calls(), core::kMaxContractAttempts);
}

// ── discover-or-create under the file lock (design §5.8) ──────────────────────

// Python: test_discover_or_create_only_unlocks_when_lock_succeeds
TEST_F(ProviderSeedTest, DiscoverOrCreateOnlyUnlocksWhenLockSucceeds) {
  build();  // the seed's provider has no backend: here nothing may consult ours
  hooks.file_lock_fn = [](int) { throw std::runtime_error("lock failed"); };
  const auto restore_create_sandbox = provider.inject(
      &ProviderSeams::create_sandbox, [](auto&&...) { return std::string("sandbox-id"); });

  try {
    provider.peer().discover_or_create_with_lock("thread-5", "sandbox-5", "default", std::nullopt);
    FAIL() << "the lock failure must propagate";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), HasSubstr("lock failed"));
  }
  EXPECT_EQ(hooks.unlock_count(), 0);
  EXPECT_EQ(hooks.lock_file_closes().size(), 1u);  // the file is still closed
  EXPECT_EQ(backend->total_calls(), 0u) << "the backend was consulted before the lock";
}

// Python: test_remote_contract_backend_revalidates_existing_pod_via_create
TEST_F(ProviderSeedTest, RemoteContractBackendRevalidatesExistingPodViaCreate) {
  backend->requires_validation = true;
  build();
  const auto restore_recheck_cached_sandbox =
      provider.inject(&ProviderSeams::recheck_cached_sandbox,
                      [](auto&&...) { return std::optional<std::string>(); });
  std::vector<std::tuple<std::optional<std::string>, std::string, std::string>> create_calls;
  const auto restore_create_sandbox =
      provider.inject(&ProviderSeams::create_sandbox,
                      [&](const std::optional<std::string>& thread, const std::string& id,
                          const std::string& user, const ProviderUnderTest::Snapshot&) {
                        create_calls.emplace_back(thread, id, user);
                        return id;
                      });

  EXPECT_EQ(
      provider.peer().discover_or_create_with_lock("thread-1", "sandbox-v2", "alice", std::nullopt),
      "sandbox-v2");
  EXPECT_TRUE(backend->discovers().empty());
  EXPECT_EQ(create_calls,
            (std::vector<std::tuple<std::optional<std::string>, std::string, std::string>>{
                {std::string("thread-1"), "sandbox-v2", "alice"}}));
}

// ── revalidation through create (design §5.7) ─────────────────────────────────

// Python: test_remote_active_cache_revalidates_current_contract_before_reuse
TEST_F(ProviderSeedTest, RemoteActiveCacheRevalidatesCurrentContractBeforeReuse) {
  build();
  add_active("sandbox-active");
  map_thread("alice", "thread-1", "sandbox-active");
  install_remote_revalidation_backend();

  EXPECT_EQ(provider.peer().acquire_internal("thread-1", "alice", std::nullopt), "sandbox-active");

  const auto creates = backend->creates();
  ASSERT_EQ(creates.size(), 1u);
  EXPECT_EQ(creates[0].thread_id, std::optional<std::string>("thread-1"));
  EXPECT_EQ(creates[0].sandbox_id, "sandbox-active");
  EXPECT_EQ(creates[0].extra_mounts, (std::vector<Mount>{{"/host/current", "/mnt/current", true}}));
  EXPECT_EQ(creates[0].user_id, std::optional<std::string>("alice"));
  EXPECT_TRUE(creates[0].provision_lark_cli_runtime);
  EXPECT_FALSE(creates[0].provision_lark_cli_broker);
}

// Python: test_remote_warm_pool_revalidates_current_contract_before_reclaim
TEST_F(ProviderSeedTest, RemoteWarmPoolRevalidatesCurrentContractBeforeReclaim) {
  build();
  add_warm(make_info_ptr("sandbox-warm", "http://sandbox-host"), 123.0);
  provider.planner().script_sandbox_id([](auto&&...) { return std::string("sandbox-warm"); });
  install_remote_revalidation_backend();

  EXPECT_EQ(provider.peer().acquire_internal("thread-1", "alice", std::nullopt), "sandbox-warm");

  const auto creates = backend->creates();
  ASSERT_EQ(creates.size(), 1u);
  EXPECT_EQ(creates[0].sandbox_id, "sandbox-warm");
  EXPECT_EQ(creates[0].user_id, std::optional<std::string>("alice"));
  // The validated info is what becomes active.
  const InfoPtr info = info_of("sandbox-warm");
  ASSERT_TRUE(info);
  EXPECT_EQ(info->mount_contract_version, 2);
  EXPECT_FALSE(is_warm("sandbox-warm"));
}

// Python: test_remote_active_cache_replaces_client_when_validated_url_changes
TEST_F(ProviderSeedTest, RemoteActiveCacheReplacesClientWhenValidatedUrlChanges) {
  build();
  auto old_client = add_active("sandbox-active-url");
  map_thread("alice", "thread-1", "sandbox-active-url");
  install_remote_revalidation_backend("http://new-sandbox-host");
  provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
  hooks.lark_runtime = false;
  auto new_client =
      std::make_shared<RecordingClient>("sandbox-active-url", "http://new-sandbox-host");
  hooks.make_client_fn = [&](const std::string&, const std::string&) -> ClientPtr {
    return new_client;
  };

  EXPECT_EQ(provider.peer().acquire_internal("thread-1", "alice", std::nullopt),
            "sandbox-active-url");
  EXPECT_EQ(provider->get("sandbox-active-url"), new_client);
  EXPECT_EQ(old_client->close_count(), 1);
  EXPECT_EQ(new_client->close_count(), 0);
}

// §5.7: a snapshot in force and a validated instance on another contract → the contract error,
// before anything is registered.
TEST_F(ProviderSeedTest, RevalidationOnAnotherContractRaisesContractChanged) {
  build();
  add_warm(make_info_ptr("sandbox-warm", "http://sandbox-host"), 123.0);
  install_remote_revalidation_backend();  // reports contract 2
  try {
    provider.peer().reclaim_warm_pool_sandbox("thread-1", "sandbox-warm", "alice", false,
                                              MountContractSnapshot{3, true});
    FAIL() << "expected MountContractChangedError";
  } catch (const MountContractChangedError& error) {
    EXPECT_EQ(error.previous_version(), 3);
    EXPECT_EQ(error.current_version(), 2);
  }
  EXPECT_TRUE(is_warm("sandbox-warm"));
  EXPECT_FALSE(is_active("sandbox-warm"));
}

// §4.3 / §14.1 item 5: a validated identity that differs is a collision; nothing is touched.
TEST_F(ProviderSeedTest, RevalidationReportingAnotherIdentityIsACollision) {
  build();
  auto client = add_active("sandbox-active");
  map_thread("alice", "thread-1", "sandbox-active");
  install_remote_revalidation_backend();
  backend->create_fn = [](const CreateRequest& request) {
    SandboxInfo info = make_info(request.sandbox_id, "http://sandbox-host");
    info.user_id = "mallory";
    info.thread_id = request.thread_id;
    info.mount_contract_version = 2;
    return info;
  };

  EXPECT_THROW(provider.peer().acquire_internal("thread-1", "alice", std::nullopt),
               SandboxIdentityCollisionError);
  EXPECT_TRUE(is_active("sandbox-active"));
  EXPECT_EQ(client->close_count(), 0);
  EXPECT_TRUE(backend->destroys().empty());
}

// ── create flags (design §3.7, §5.10) ─────────────────────────────────────────

class CreateFlagsTest : public ProviderSeedTest {
 protected:
  CreateRequest create_with_lark(bool runtime, bool broker, const std::string& thread,
                                 const std::string& id) {
    hooks.lark_runtime = runtime;
    hooks.lark_broker = broker;
    build();
    provider.planner().script_extra_mounts([](auto&&...) { return std::vector<Mount>{}; });
    const auto restore_register_created_sandbox =
        provider.inject(&ProviderSeams::register_created_sandbox, [id](auto&&...) { return id; });
    EXPECT_EQ(provider.peer().create_sandbox(thread, id, "alice", std::nullopt), id);
    const auto creates = backend->creates();
    EXPECT_EQ(creates.size(), 1u);
    return creates.empty() ? CreateRequest{} : creates[0];
  }
};

// Python: test_create_sandbox_requests_runtime_when_lark_installed
TEST_F(CreateFlagsTest, CreateSandboxRequestsRuntimeWhenLarkInstalled) {
  const CreateRequest request = create_with_lark(true, false, "thread-lark", "sandbox-lark");
  EXPECT_TRUE(request.provision_lark_cli_runtime);
  EXPECT_FALSE(request.provision_lark_cli_broker);
  EXPECT_EQ(request.user_id, std::optional<std::string>("alice"));
}

// Python: test_create_sandbox_requests_broker_when_active
TEST_F(CreateFlagsTest, CreateSandboxRequestsBrokerWhenActive) {
  const CreateRequest request = create_with_lark(true, true, "thread-broker", "sandbox-broker");
  EXPECT_TRUE(request.provision_lark_cli_runtime);
  EXPECT_TRUE(request.provision_lark_cli_broker);
}

// Python: test_create_sandbox_skips_runtime_when_lark_absent
TEST_F(CreateFlagsTest, CreateSandboxSkipsRuntimeWhenLarkAbsent) {
  const CreateRequest request = create_with_lark(false, false, "thread-nolark", "sandbox-nolark");
  EXPECT_FALSE(request.provision_lark_cli_runtime);
  EXPECT_FALSE(request.provision_lark_cli_broker);
}

}  // namespace
}  // namespace sandboxd::testing

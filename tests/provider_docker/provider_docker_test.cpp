// The whole provider over the real local_docker plugin and the podman engine started by
// scripts/test_engine.sh: acquire, release to warm, reclaim, idle reap, replica eviction, and
// a shutdown that leaves no container of ours behind (checked by listing the engine itself).
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sandboxd/readiness.hpp>
#include <string>
#include <thread>
#include <vector>

#include "engine_listing.hpp"
#include "engine_socket_proxy.hpp"
#include "sandboxd/core/lifecycle_events.hpp"
#include "scratch_filesystem.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/provider.hpp"
#include "test_support.hpp"

namespace sandboxd::core {
namespace {

using sandboxd::testing::containers_left_after_removal;
using sandboxd::testing::engine_containers;
using sandboxd::testing::socket_path;

const std::string kTestImage = sandboxd::testing::engine_test_image();

class ProviderOverDockerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (socket_path().empty()) {
      GTEST_SKIP() << "SANDBOXD_TEST_DOCKER_SOCKET is not set; run through scripts/test.sh, "
                      "which starts the podman test engine";
    }
    char pattern[] = "/tmp/sandboxd-provider-docker-XXXXXX";
    base_dir_ = mkdtemp(pattern);
    prefix_ = "sbxprov" + std::to_string(getpid());
    logger_ = std::make_shared<testing::CapturingLogger>();
    clock_ = std::make_shared<testing::ManualClock>(
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  }

  void TearDown() override {
    provider_.reset();
    if (!prefix_.empty() && !socket_path().empty()) {
      EXPECT_TRUE(containers_left_after_removal(prefix_).empty()) << "containers left behind";
    }
    if (!base_dir_.empty()) std::filesystem::remove_all(base_dir_);
  }

  PluginContext context(const std::string& key_path, const std::string& options) {
    PluginContext c;
    c.config_json = options;
    c.config_key_path = key_path;
    c.owner_id = "provider-docker-test:1";
    c.base_dir = base_dir_;
    c.logger = logger_;
    c.clock = clock_;
    return c;
  }

  void make_provider(int replicas, int idle_timeout, std::string socket = socket_path(),
                     double pause_after_seconds = 0,
                     std::shared_ptr<const ThreadStorage> storage = nullptr,
                     std::shared_ptr<LifecycleEventLog> events = nullptr) {
    const PluginLoader loader({SANDBOXD_TEST_PLUGIN_DIR});
    ProviderDeps deps;
    deps.backend = loader.load_backend(
        "local_docker:LocalContainerBackend",
        context("sandbox.backend",
                R"({"socket": "unix://)" + socket + R"(", "image": ")" + kTestImage +
                    R"(", "container_prefix": ")" + prefix_ +
                    R"(", "sandbox_host": "127.0.0.1", "stop_timeout_seconds": 2})"),
        "test");
    deps.ownership = loader.load_ownership_store(
        "ownership_sqlite:SqliteOwnershipStore",
        context("sandbox.ownership", R"({"path": ")" + base_dir_ + R"(/leases.db"})"), "test");
    deps.logger = logger_;
    deps.clock = clock_;
    Paths paths(base_dir_, base_dir_);
    if (storage) paths.set_storage(storage);
    deps.paths = std::make_shared<const Paths>(std::move(paths));
    deps.events = events;
    deps.options.replicas = replicas;
    deps.options.idle_timeout = idle_timeout;
    deps.options.pause_after_seconds = pause_after_seconds;
    deps.options.run_background_threads = false;
    provider_ = std::make_unique<Provider>(std::move(deps));
    provider_->start();
  }

  std::string base_dir_;
  std::string prefix_;
  std::shared_ptr<testing::CapturingLogger> logger_;
  std::shared_ptr<testing::ManualClock> clock_;
  std::unique_ptr<Provider> provider_;
};

TEST_F(ProviderOverDockerTest, AcquireReleaseReclaimReapAndShutdownLeaveNothingBehind) {
  make_provider(/*replicas=*/3, /*idle_timeout=*/600);

  const std::string id = provider_->acquire("thread-1", "alice");
  auto client = provider_->get(id);
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(probe_sandbox_ready_once(client->base_url(), 5.0)) << client->base_url();
  ASSERT_EQ(engine_containers(prefix_).size(), 1u);
  // The thread's user-data directories are bind-mounted where the sandbox expects them.
  EXPECT_TRUE(std::filesystem::is_directory(base_dir_ +
                                            "/users/alice/threads/thread-1/user-data/workspace"));

  provider_->release(id);
  EXPECT_EQ(provider_->get(id), nullptr);
  EXPECT_EQ(provider_->counts().warm, 1u);
  EXPECT_EQ(engine_containers(prefix_).size(), 1u) << "release must keep the container running";

  EXPECT_EQ(provider_->acquire("thread-1", "alice"), id) << "warm sandbox not reclaimed";
  EXPECT_EQ(engine_containers(prefix_).size(), 1u) << "reclaim must not create a container";
  EXPECT_TRUE(logger_->contains("Reclaimed warm-pool sandbox " + id));

  // Idle reaping: the active sandbox has been idle longer than the timeout.
  clock_->advance(700);
  provider_->cleanup_idle_sandboxes(600);
  EXPECT_EQ(provider_->counts().active, 0u);
  EXPECT_TRUE(engine_containers(prefix_).empty()) << "idle sandbox is still running";

  // A fresh acquisition after the reap creates anew; shutdown stops it.
  const std::string again = provider_->acquire("thread-1", "alice");
  EXPECT_EQ(again, id);
  EXPECT_EQ(engine_containers(prefix_).size(), 1u);
  provider_->shutdown();
  EXPECT_TRUE(containers_left_after_removal(prefix_).empty()) << "shutdown left a container";
}

// Issue 23 on a real engine: a released sandbox is paused after pause_after_seconds (the
// engine says "paused" and it answers nothing), acquired again it is thawed and answers at
// once (path resumed), and one left paused by an earlier process is thawed when discovered.
TEST_F(ProviderOverDockerTest, AReleasedSandboxIsPausedThenResumedAlsoAfterARestart) {
  make_provider(/*replicas=*/3, /*idle_timeout=*/600, socket_path(), /*pause_after_seconds=*/30);
  const std::string id = provider_->acquire("thread-1", "alice");
  const std::string url = provider_->get(id)->base_url();
  ASSERT_TRUE(probe_sandbox_ready_once(url, 5.0)) << url;
  const std::string name = provider_->find(id)->info.container_name.value_or("");
  ASSERT_FALSE(name.empty());
  provider_->release(id);
  clock_->advance(31);
  ASSERT_EQ(provider_->pause_idle_warm(), 1);
  EXPECT_EQ(sandboxd::testing::engine_container_status(name), "paused");
  EXPECT_FALSE(probe_sandbox_ready_once(url, 1.0)) << "a paused sandbox answered";
  EXPECT_EQ(provider_->counts().paused, 1u);

  const AcquireResult resumed = provider_->acquire_traced("thread-1", "alice");
  EXPECT_EQ(resumed.path, AcquirePath::resumed);
  EXPECT_EQ(resumed.sandbox_id, id);
  EXPECT_EQ(sandboxd::testing::engine_container_status(name), "running");
  EXPECT_TRUE(probe_sandbox_ready_once(url, 5.0)) << "no answer after resume";
  EXPECT_EQ(engine_containers(prefix_).size(), 1u) << "resume must not create a container";

  // Paused again, then the process goes away without stopping it (a restart).
  provider_->release(id);
  clock_->advance(31);
  ASSERT_EQ(provider_->pause_idle_warm(), 1);
  provider_->detach();
  provider_.reset();
  ASSERT_EQ(sandboxd::testing::engine_container_status(name), "paused");
  make_provider(/*replicas=*/3, /*idle_timeout=*/600, socket_path(), /*pause_after_seconds=*/30);
  const AcquireResult found = provider_->acquire_traced("thread-1", "alice");
  EXPECT_EQ(found.sandbox_id, id);
  EXPECT_EQ(found.path, AcquirePath::discovered);
  EXPECT_EQ(sandboxd::testing::engine_container_status(name), "running");
  EXPECT_TRUE(probe_sandbox_ready_once(url, 5.0)) << "a sandbox found paused was handed out frozen";
  provider_->shutdown();
}

TEST_F(ProviderOverDockerTest, AnUnreachableEngineNeverCostsATrackedSandbox) {
  // The backend reaches the engine through a symlink the test can take away and put back.
  const std::string link = base_dir_ + "/engine.sock";
  std::filesystem::create_symlink(socket_path(), link);
  make_provider(/*replicas=*/3, /*idle_timeout=*/600, link);
  const std::string id = provider_->acquire("thread-1", "alice");
  const auto client = provider_->get(id);

  std::filesystem::remove(link);  // the engine "goes away"
  // The health check cannot reach the engine: that is "could not tell", not "dead".
  EXPECT_EQ(provider_->acquire("thread-1", "alice"), id);
  EXPECT_EQ(provider_->get(id), client) << "the tracked sandbox was replaced";
  EXPECT_TRUE(logger_->contains(LogLevel::warning, "Failed to check sandbox " + id + " health"));
  // A create without an engine fails with a sentence naming the socket.
  try {
    provider_->acquire("thread-2", "alice");
    ADD_FAILURE() << "acquire without an engine succeeded";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(link), std::string::npos) << e.what();
  }

  std::filesystem::create_symlink(socket_path(), link);  // the engine is back
  EXPECT_EQ(engine_containers(prefix_).size(), 1u) << "the sandbox was destroyed";
  EXPECT_TRUE(probe_sandbox_ready_once(client->base_url(), 5.0));
  // Normal service again, without a restart: the failed conversation gets its sandbox.
  const std::string second = provider_->acquire("thread-2", "alice");
  EXPECT_NE(second, id);
  EXPECT_EQ(engine_containers(prefix_).size(), 2u);
  provider_->shutdown();
}

TEST_F(ProviderOverDockerTest, AnEngineThatVanishesInsideACreateLeavesNothingBehindOnceBack) {
  // The plugin reaches the engine through a proxy that makes it vanish right after the engine
  // has answered /containers/create: the container exists, the plugin's /start cannot get
  // through, nor can its clean-up.
  testing::EngineSocketProxy proxy(base_dir_ + "/engine.sock", socket_path());
  make_provider(/*replicas=*/3, /*idle_timeout=*/600, proxy.path());
  const std::string kept = provider_->acquire("thread-0", "alice");
  const auto kept_client = provider_->get(kept);

  proxy.vanish_after_next_create();
  try {
    provider_->acquire("thread-1", "alice");
    ADD_FAILURE() << "an acquire whose engine vanished mid-create succeeded";
  } catch (const std::exception& e) {
    std::printf("while gone: %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find(proxy.path()), std::string::npos) << e.what();
  }
  ASSERT_EQ(proxy.creates_seen(), 1) << "the engine did not vanish inside the create";
  const std::vector<std::string> while_gone = engine_containers(prefix_, true);
  std::printf("containers while the engine is gone: %zu (1 kept, 1 half-made)\n",
              while_gone.size());
  EXPECT_EQ(while_gone.size(), 2u) << "the create did not reach the engine";
  EXPECT_EQ(provider_->get(kept), kept_client) << "the tracked sandbox was dropped";

  proxy.restore();
  // Normal service once the engine is back, and the half-made container does not linger: the
  // next call that reaches the engine removes it.
  const std::string other = provider_->acquire("thread-2", "alice");
  EXPECT_EQ(provider_->get(kept), kept_client);
  EXPECT_TRUE(probe_sandbox_ready_once(kept_client->base_url(), 5.0));
  std::vector<std::string> after = engine_containers(prefix_, true);
  std::sort(after.begin(), after.end());
  std::vector<std::string> expected = {prefix_ + "-" + kept, prefix_ + "-" + other};
  std::sort(expected.begin(), expected.end());
  std::printf("containers once back and another conversation served: %zu\n", after.size());
  EXPECT_EQ(after, expected) << "the half-made container of thread-1 was left behind";
  if (after != expected) {  // what the plugin said about it
    for (const auto& line : logger_->lines()) {
      if (line.message.find("failed start") != std::string::npos ||
          line.message.find("ontainer") != std::string::npos) {
        std::printf("  log: %s\n", line.message.c_str());
      }
    }
  }
  // The conversation that failed gets its sandbox now.
  const std::string retried = provider_->acquire("thread-1", "alice");
  EXPECT_TRUE(probe_sandbox_ready_once(provider_->get(retried)->base_url(), 5.0));
  EXPECT_TRUE(logger_->contains(LogLevel::warning, "could not be removed after a failed start"));
  EXPECT_TRUE(logger_->contains("left by a failed start removed"));
  provider_->shutdown();
}

TEST_F(ProviderOverDockerTest, ReplicaLimitEvictsTheOldestWarmSandbox) {
  make_provider(/*replicas=*/1, /*idle_timeout=*/0);
  const std::string first = provider_->acquire("thread-1", "alice");
  provider_->release(first);
  clock_->advance(1);
  const std::string second = provider_->acquire("thread-2", "alice");
  EXPECT_NE(first, second);
  EXPECT_TRUE(logger_->contains("Evicted warm-pool sandbox " + first));
  const auto names = engine_containers(prefix_);
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(names[0], prefix_ + "-" + second);
  provider_->shutdown();
}

TEST_F(ProviderOverDockerTest, ASecondProviderAdoptsAnOrphanAfterARestart) {
  make_provider(/*replicas=*/3, /*idle_timeout=*/600);
  const std::string id = provider_->acquire("thread-9", "bob");
  // Simulate a crash: forget the provider without shutdown, so the container keeps running.
  // (Detaching is the closest in-process analogue; the lease stays in the SQLite file.)
  // A crashed process runs no destructor: the old provider is kept, untouched, until the end,
  // then detached (which stops nothing) and freed, so the sanitizer run sees no leak.
  std::unique_ptr<Provider> crashed = std::move(provider_);

  // A restarted instance with a new owner id: the lease is still live, so adoption waits
  // out the recovery grace, then adopts the container into its warm pool and reclaims it.
  const PluginLoader loader({SANDBOXD_TEST_PLUGIN_DIR});
  ProviderDeps deps;
  auto backend_context =
      context("sandbox.backend", R"({"socket": "unix://)" + socket_path() + R"(", "image": ")" +
                                     kTestImage + R"(", "container_prefix": ")" + prefix_ +
                                     R"(", "sandbox_host": "127.0.0.1"})");
  deps.backend = loader.load_backend("local_docker:LocalContainerBackend", backend_context, "t");
  auto store_context =
      context("sandbox.ownership", R"({"path": ")" + base_dir_ + R"(/leases.db"})");
  store_context.owner_id = "provider-docker-test:2";
  deps.ownership =
      loader.load_ownership_store("ownership_sqlite:SqliteOwnershipStore", store_context, "t");
  deps.logger = logger_;
  deps.clock = clock_;
  deps.paths = std::make_shared<const Paths>(base_dir_, base_dir_);
  deps.options.run_background_threads = false;
  provider_ = std::make_unique<Provider>(std::move(deps));
  provider_->reconcile_orphans();
  EXPECT_EQ(provider_->counts().warm, 0u) << "adopted a container whose lease is live";
  clock_->advance(200);            // past the 120 s TTL: the crashed owner's lease has expired
  provider_->reconcile_orphans();  // first sighting as unowned starts the grace period
  clock_->advance(200);
  provider_->reconcile_orphans();
  EXPECT_EQ(provider_->counts().warm, 1u) << "orphan was not adopted";
  EXPECT_EQ(provider_->acquire("thread-9", "bob"), id);
  provider_->shutdown();
  crashed->detach();
}


// Inside one conversation's sandbox, dd of 1 GiB into /mnt/user-data/workspace (a
// host bind mount) and into /tmp (the container's writable layer) both completed, and the
// host's free space fell by 2 GiB. Now, with the state directory on btrfs (a loop-mounted one
// here), the workspace write stops at the conversation's bound with "Disk quota exceeded"
// while a second conversation's sandbox keeps writing and serving; the write to /tmp is found by
// the writable-layer pass and the sandbox stopped, saying why; and the bound follows the
// conversation to its next sandbox.
TEST_F(ProviderOverDockerTest, ASandboxWritingPastItsBoundStopsThereAndItsNeighbourGoesOn) {
  if (const auto why = testing::ScratchFilesystem::unavailable(
          testing::ScratchFilesystem::Kind::btrfs);
      !why.empty()) {
    GTEST_SKIP() << why;
  }
  testing::ScratchFilesystem btrfs(testing::ScratchFilesystem::Kind::btrfs, "1G");
  ASSERT_TRUE(btrfs.mounted());
  std::filesystem::remove_all(base_dir_);
  base_dir_ = (btrfs.path() / "state").string();
  std::filesystem::create_directories(base_dir_);
  std::filesystem::permissions(base_dir_, std::filesystem::perms::owner_all);
  const auto storage = ThreadStorage::for_base_dir(base_dir_, 20u << 20, "the test");
  ASSERT_TRUE(storage->bounded()) << storage->description();
  auto events = std::make_shared<LifecycleEventLog>(clock_);
  make_provider(/*replicas=*/3, /*idle_timeout=*/600, socket_path(), 0, storage, events);

  const std::string alice = provider_->acquire("t-1", "alice");
  const std::string bob = provider_->acquire("t-1", "bob");
  const std::string alice_box = prefix_ + "-" + alice, bob_box = prefix_ + "-" + bob;
  const std::string alice_wrote = testing::engine_exec(
      alice_box, "dd if=/dev/zero of=/mnt/user-data/workspace/big bs=1M count=60 2>&1; "
                 "echo exit=$?");
  EXPECT_NE(alice_wrote.find("Disk quota exceeded"), std::string::npos) << alice_wrote;
  EXPECT_EQ(alice_wrote.find("exit=0"), std::string::npos) << alice_wrote;
  const std::string bob_wrote = testing::engine_exec(
      bob_box, "dd if=/dev/zero of=/mnt/user-data/outputs/data bs=1M count=10 2>&1; echo exit=$?");
  EXPECT_NE(bob_wrote.find("exit=0"), std::string::npos) << "bob felt alice's bound: " << bob_wrote;
  EXPECT_TRUE(wait_for_sandbox_ready(provider_->find(bob)->info.sandbox_url, 10));
  ::sync();
  const auto used = provider_->conversation_storage("alice", "t-1");
  ASSERT_TRUE(used.has_value());
  EXPECT_EQ(used->limit, 20u << 20);
  EXPECT_GE(used->bytes, 15u << 20);

  // The writable layer: 30 MiB into /tmp, past the 20 MiB bound; bob's layer stays small.
  testing::engine_exec(alice_box, "dd if=/dev/zero of=/tmp/layer bs=1M count=30 2>/dev/null");
  provider_->stop_layers_past_bound();
  EXPECT_FALSE(provider_->find(alice).has_value()) << "alice's sandbox kept its 30 MiB layer";
  EXPECT_TRUE(provider_->find(bob).has_value());
  const auto page = events->after(0, 100);
  const auto stopped = std::find_if(page.events.begin(), page.events.end(), [&](const auto& e) {
    return e.kind == LifecycleEventKind::over_disk_limit && e.sandbox_id == alice;
  });
  ASSERT_NE(stopped, page.events.end());
  EXPECT_NE(stopped->reason.find("writable layer"), std::string::npos) << stopped->reason;
  EXPECT_EQ(stopped->user_id, "alice");

  // Alice's next sandbox: her files are there, and so is her bound.
  const std::string again = provider_->acquire("t-1", "alice");
  const std::string listed = testing::engine_exec(prefix_ + "-" + again,
                                                  "ls /mnt/user-data/workspace; "
                                                  "dd if=/dev/zero of=/mnt/user-data/workspace/more "
                                                  "bs=1M count=30 2>&1");
  EXPECT_NE(listed.find("big"), std::string::npos) << listed;
  EXPECT_NE(listed.find("Disk quota exceeded"), std::string::npos) << listed;
  provider_->shutdown();
  provider_.reset();
  std::filesystem::remove_all(base_dir_);
  base_dir_.clear();
}

// A conversation's sandbox saved to disk and restored: a file in the container's
// layer and one in the workspace, snapshot, destroy, restore into the same conversation: both
// files back, the processes started afresh (a process running at the snapshot is not), the path
// restored. The image the snapshot made goes with it.
TEST_F(ProviderOverDockerTest, ASnapshotRestoredBringsBackItsLayerAndWorkspace) {
  make_provider(/*replicas=*/3, /*idle_timeout=*/600);
  const std::string id = provider_->acquire("t-1", "alice");
  const std::string box = prefix_ + "-" + id;
  testing::engine_exec(box,
                       "echo layer > /etc/from-the-layer; "
                       "echo workspace > /mnt/user-data/workspace/from-the-workspace; "
                       "(sleep 10000 &) ; echo started");
  const std::string before = testing::engine_exec(box, "ps");
  ASSERT_NE(before.find("sleep 10000"), std::string::npos) << before;
  const SnapshotRecord made = provider_->snapshot(id, std::string("saved"));
  EXPECT_GT(made.directory_bytes, 0u);
  EXPECT_EQ(made.user_id, "alice");
  // Still running and answering after the snapshot (thawed).
  EXPECT_TRUE(wait_for_sandbox_ready(provider_->find(id)->info.sandbox_url, 10));

  provider_->destroy(id);
  const AcquireResult restored =
      provider_->restore(std::string("t-1"), std::string("alice"), Provider::RestoreFrom{"saved"});
  EXPECT_EQ(restored.path, AcquirePath::restored);
  const std::string again = prefix_ + "-" + restored.sandbox_id;
  EXPECT_EQ(testing::engine_exec(again, "cat /etc/from-the-layer"), "layer\n");
  EXPECT_EQ(testing::engine_exec(again, "cat /mnt/user-data/workspace/from-the-workspace"),
            "workspace\n");
  const std::string after = testing::engine_exec(again, "ps");
  EXPECT_EQ(after.find("sleep 10000"), std::string::npos) << "memory state is not kept: " << after;
  EXPECT_TRUE(wait_for_sandbox_ready(provider_->find(restored.sandbox_id)->info.sandbox_url, 10));

  // Deleted while the restored sandbox runs from its image: the image stays until it can go.
  provider_->delete_snapshot("alice", "saved");
  EXPECT_EQ(testing::engine_get("/images/" + made.image + "/json").find("\"Id\""), 1u)
      << "the image was removed from under a running sandbox";
  provider_->destroy(restored.sandbox_id);
  // The idle pass removes what is left once the engine has removed the container (AutoRemove
  // finishes after the stop answers).
  for (int pass = 0; pass < 20; ++pass) {
    provider_->delete_expired_snapshots();
    if (testing::engine_get("/images/" + made.image + "/json").find("\"Id\"") ==
        std::string::npos) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(testing::engine_get("/images/" + made.image + "/json").find("\"Id\""),
            std::string::npos)
      << "the snapshot's image outlived it";
}

// The address of container `name` on the engine's network, from its inspect answer.
std::string address_of(const std::string& name) {
  rapidjson::Document doc;
  doc.Parse(testing::engine_get("/containers/" + name + "/json").c_str());
  if (!doc.IsObject() || !doc.HasMember("NetworkSettings")) return "";
  const auto& settings = doc["NetworkSettings"];
  if (settings.HasMember("Networks") && settings["Networks"].IsObject()) {
    for (const auto& network : settings["Networks"].GetObject()) {
      if (network.value.IsObject() && network.value.HasMember("IPAddress") &&
          network.value["IPAddress"].IsString() && network.value["IPAddress"].GetStringLength()) {
        return network.value["IPAddress"].GetString();
      }
    }
  }
  return "";
}

// A fork of a conversation's sandbox into three new conversations, on the engine:
// each fork has the source's file in its layer and in its workspace, a write in one fork is in
// no other, and no fork reaches another over the engine's network (a bounded probe from inside
// one fork to another's address, which answers the same probe on its own address).
TEST_F(ProviderOverDockerTest, AForkMakesIsolatedConversationsEachWithItsOwnCopy) {
  make_provider(/*replicas=*/6, /*idle_timeout=*/600);
  const std::string id = provider_->acquire("t-1", "alice");
  testing::engine_exec(prefix_ + "-" + id,
                       "echo prepared > /etc/prepared; "
                       "echo prepared > /mnt/user-data/workspace/prepared");
  const Provider::Forked forked = provider_->fork(id, {"try-a", "try-b", "try-c"}, std::nullopt);
  ASSERT_EQ(forked.sandboxes.size(), 3u);
  std::vector<std::string> boxes;
  for (const AcquireResult& made : forked.sandboxes) {
    EXPECT_EQ(made.path, AcquirePath::restored);
    const std::string box = prefix_ + "-" + made.sandbox_id;
    boxes.push_back(box);
    EXPECT_EQ(testing::engine_exec(box, "cat /etc/prepared"), "prepared\n");
    EXPECT_EQ(testing::engine_exec(box, "cat /mnt/user-data/workspace/prepared"), "prepared\n");
    EXPECT_TRUE(wait_for_sandbox_ready(made.info->sandbox_url, 10));
  }
  testing::engine_exec(boxes[0], "echo mine > /mnt/user-data/workspace/only-in-a");
  EXPECT_EQ(testing::engine_exec(boxes[1], "ls /mnt/user-data/workspace"), "prepared\n");
  EXPECT_EQ(testing::engine_exec(prefix_ + "-" + id, "ls /mnt/user-data/workspace"), "prepared\n");
  // The network: a probe that answers on the fork's own address gets nothing from another's.
  const std::string probe =
      "for i in 1 2 3; do r=$(printf 'GET /v1/sandbox HTTP/1.0\\r\\n\\r\\n' | timeout 3 nc -w 2 "
      "ADDRESS 8080 2>/dev/null | head -1); [ -n \"$r\" ] && { echo reached; exit 0; }; "
      "sleep 0.3; done; echo nothing";
  const auto probe_to = [&](const std::string& from, const std::string& to) {
    std::string script = probe;
    script.replace(script.find("ADDRESS"), 7, address_of(to));
    return testing::engine_exec(from, script);
  };
  ASSERT_FALSE(address_of(boxes[1]).empty());
  EXPECT_EQ(probe_to(boxes[1], boxes[1]), "reached\n") << "the probe itself does not work";
  EXPECT_EQ(probe_to(boxes[0], boxes[1]), "nothing\n") << "one fork reached another";
  EXPECT_EQ(probe_to(boxes[2], prefix_ + "-" + id), "nothing\n") << "a fork reached its source";
  EXPECT_TRUE(provider_->snapshots(std::string("alice")).empty()) << "the fork's snapshot stayed";
  const std::string fork_image = prefix_ + "-snapshot:fork-";
  EXPECT_NE(testing::engine_get("/images/json").find(fork_image), std::string::npos)
      << "the image went from under the forked sandboxes";
  for (const AcquireResult& made : forked.sandboxes) provider_->destroy(made.sandbox_id);
  // Once they are gone (AutoRemove finishes after the stop answers), the idle pass removes it.
  for (int pass = 0; pass < 20; ++pass) {
    provider_->delete_expired_snapshots();
    if (testing::engine_get("/images/json").find(fork_image) == std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  EXPECT_EQ(testing::engine_get("/images/json").find(fork_image), std::string::npos)
      << "the fork's image outlived the sandboxes made from it";
}

}  // namespace
}  // namespace sandboxd::core

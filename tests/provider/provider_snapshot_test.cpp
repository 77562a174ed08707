// Snapshots of a conversation's sandbox and sandboxes made from them (docs/snapshots.md; issue
// 46), over a backend whose images are names in memory and the real host directories of the
// fixture's state directory: a snapshot copies the conversation's directories while the sandbox
// is paused, a restore replaces them and makes the sandbox from the image (path restored), the
// ceilings refuse the N+1th, another user's snapshot needs the operator's word, a failure
// halfway leaves the sandbox and the conversation as they were, and a link the sandbox planted
// is copied as a link, never followed. A fork makes new conversations from one state, each with
// its own copy, and keeps none of them when one cannot be made.
#include <fstream>
#include <map>
#include <mutex>
#include <set>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::AcquirePath;
using core::Provider;

class SnapshotBackend final : public SandboxBackend,
                              public SandboxSnapshots,
                              public SandboxPausing {
 public:
  SandboxInfo create(const CreateRequest& request) override { return made(request, "base"); }
  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    calls.push_back("destroy " + info.sandbox_id);
    live_.erase(info.sandbox_id);
  }
  bool is_alive(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    return live_.count(info.sandbox_id) > 0;
  }
  std::optional<SandboxInfo> discover(const std::string&) override { return std::nullopt; }
  Image commit_snapshot(const SandboxInfo& info, const std::string& name) override {
    std::lock_guard lock(mutex_);
    calls.push_back(std::string("commit ") +
                    (paused_.count(info.sandbox_id) ? "paused" : "RUNNING"));
    if (fail_commit) throw std::runtime_error("the engine refused the commit");
    Image image;
    image.image = "img-" + name;
    image.bytes = 1000;
    images.insert(image.image);
    return image;
  }
  void remove_snapshot_image(const std::string& image) override {
    std::lock_guard lock(mutex_);
    calls.push_back("remove " + image);
    if (refuse_images_in_use) {
      for (const auto& [id, made_from] : live_) {
        // As an engine does: an image a container runs from is not removed.
        if (made_from == image) throw std::runtime_error("image is in use by " + id);
      }
    }
    images.erase(image);
  }
  SandboxInfo create_from_snapshot(const CreateRequest& request,
                                   const std::string& image) override {
    return made(request, image);
  }
  void pause(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    paused_.insert(info.sandbox_id);
  }
  void unpause(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    paused_.erase(info.sandbox_id);
  }
  bool paused(const std::string& id) {
    std::lock_guard lock(mutex_);
    return paused_.count(id) > 0;
  }
  std::string image_of(const std::string& id) {
    std::lock_guard lock(mutex_);
    return live_.at(id);
  }
  std::size_t live_count() {
    std::lock_guard lock(mutex_);
    return live_.size();
  }

  std::mutex mutex_;
  std::vector<std::string> calls;
  std::set<std::string> images;
  bool fail_commit = false;
  bool refuse_images_in_use = false;
  std::string fail_create_of_thread;  // a create for this thread fails

 private:
  SandboxInfo made(const CreateRequest& request, const std::string& image) {
    std::lock_guard lock(mutex_);
    if (!fail_create_of_thread.empty() && request.thread_id == fail_create_of_thread) {
      throw std::runtime_error("the engine refused the create");
    }
    calls.push_back("create " + request.sandbox_id + " from " + image);
    live_[request.sandbox_id] = image;
    SandboxInfo info = make_info(request.sandbox_id, "http://" + request.sandbox_id);
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    return info;
  }
  std::map<std::string, std::string> live_;  // id → the image it was made from
  std::set<std::string> paused_;
};

class ProviderSnapshotTest : public ProviderFixture {
 protected:
  std::shared_ptr<SnapshotBackend> snapshots = std::make_shared<SnapshotBackend>();
  std::filesystem::path workspace(const std::string& user, const std::string& thread) {
    return tmp.path() / "users" / user / "threads" / thread / "user-data" / "workspace";
  }
  static void write(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  static std::string read(const std::filesystem::path& path) {
    std::ifstream in(path);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
};

TEST_F(ProviderSnapshotTest, ASnapshotRestoredBringsItsDirectoriesAndImageBack) {
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  write(workspace("alice", "t-1") / "kept.txt", "before");
  const core::SnapshotRecord made = provider->snapshot(id, std::string("first"));
  EXPECT_EQ(made.user_id, "alice");
  EXPECT_EQ(made.thread_id, "t-1");
  EXPECT_EQ(made.image, "img-first");
  EXPECT_EQ(made.directory_bytes, 6u);
  EXPECT_EQ(snapshots->calls.back(), "commit paused") << "not frozen while it was taken";
  EXPECT_FALSE(snapshots->paused(id)) << "left frozen";

  // Afterwards the conversation moves on, then is destroyed.
  write(workspace("alice", "t-1") / "kept.txt", "after");
  write(workspace("alice", "t-1") / "later.txt", "not in the snapshot");
  provider->destroy(id);
  const auto restored =
      provider->restore(std::string("t-1"), std::string("alice"), Provider::RestoreFrom{"first"});
  EXPECT_EQ(restored.path, AcquirePath::restored);
  EXPECT_EQ(restored.sandbox_id, id) << "one conversation, one id";
  EXPECT_EQ(snapshots->image_of(id), "img-first");
  EXPECT_EQ(read(workspace("alice", "t-1") / "kept.txt"), "before");
  EXPECT_FALSE(std::filesystem::exists(workspace("alice", "t-1") / "later.txt"));
  // The standard directories keep the modes a sandbox needs to write them.
  struct stat st {};
  ASSERT_EQ(::stat(workspace("alice", "t-1").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0777u);

  // A restore into a conversation that has a sandbox replaces it.
  provider->restore(std::string("t-1"), std::string("alice"), Provider::RestoreFrom{"first"});
  EXPECT_EQ(std::count(snapshots->calls.begin(), snapshots->calls.end(), "destroy " + id), 2);

  // Listed, then deleted with its image.
  ASSERT_EQ(provider->snapshots(std::string("alice")).size(), 1u);
  EXPECT_TRUE(provider->snapshots(std::string("bob")).empty());
  provider->delete_snapshot("alice", "first");
  EXPECT_TRUE(provider->snapshots(std::nullopt).empty());
  EXPECT_TRUE(snapshots->images.empty()) << "the image outlived its snapshot";
}

TEST_F(ProviderSnapshotTest, AnotherUsersSnapshotNeedsTheOperatorsWord) {
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  provider->snapshot(id, std::string("hers"));
  Provider::RestoreFrom from{"hers", std::string("alice")};
  try {
    provider->restore(std::string("t-9"), std::string("bob"), from);
    FAIL() << "bob got alice's snapshot unasked";
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("allow_other_user"), std::string::npos) << e.what();
  }
  from.allow_other_user = true;
  EXPECT_EQ(provider->restore(std::string("t-9"), std::string("bob"), from).path,
            AcquirePath::restored);
  // A snapshot by bob's name alone is bob's: there is none.
  EXPECT_THROW(
      provider->restore(std::string("t-8"), std::string("bob"), Provider::RestoreFrom{"hers"}),
      core::ServiceError);
}

TEST_F(ProviderSnapshotTest, TheCeilingsRefuseTheNextSnapshotAs429) {
  options.snapshot_limits.max_per_user = 2;
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  provider->snapshot(id, std::string("one"));
  provider->snapshot(id, std::string("two"));
  try {
    provider->snapshot(id, std::string("three"));
    FAIL() << "a third snapshot past max_snapshots_per_user 2";
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::capacity);
    EXPECT_NE(std::string(e.what()).find("max_snapshots_per_user"), std::string::npos);
  }
  EXPECT_THROW(provider->snapshot(id, std::string("two")), core::ServiceError) << "a taken name";
  // Bytes: a snapshot that would take alice past her bytes is refused and leaves nothing.
  provider->delete_snapshot("alice", "one");
  provider->delete_snapshot("alice", "two");
  options.snapshot_limits.max_per_user = 10;
  // The layer (1,000 bytes here) fits under 1,200; the 500 bytes of workspace do not.
  options.snapshot_limits.max_bytes_per_user = 1200;
  provider = make_provider(snapshots, &store);
  const std::string again = provider->acquire("t-1", "alice");
  write(workspace("alice", "t-1") / "big", std::string(500, 'b'));
  try {
    provider->snapshot(again, std::string("big"));
    FAIL() << "1,500 bytes past a 1,200-byte ceiling";
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::capacity);
    EXPECT_NE(std::string(e.what()).find("max_snapshot_bytes_per_user"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("stopped at"), std::string::npos)
        << "refused by the copy's bound: " << e.what();
  }
  EXPECT_TRUE(provider->snapshots(std::string("alice")).empty());
  EXPECT_TRUE(snapshots->images.empty()) << "the half-made snapshot's image was left";
  // The layer alone past the ceiling: refused before any copy, the image removed.
  options.snapshot_limits.max_bytes_per_user = 900;
  provider = make_provider(snapshots, &store);
  try {
    provider->snapshot(provider->acquire("t-1", "alice"), std::string("layer"));
    FAIL() << "a 1,000-byte layer past a 900-byte ceiling";
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::capacity);
    EXPECT_NE(std::string(e.what()).find("its layer alone"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(snapshots->images.empty());
  // "0": no byte ceiling.
  options.snapshot_limits.max_bytes_per_user = 0;
  provider = make_provider(snapshots, &store);
  EXPECT_EQ(provider->snapshot(provider->acquire("t-1", "alice"), std::string("free")).bytes(),
            1500u);
}

TEST_F(ProviderSnapshotTest, AFailedSnapshotLeavesTheSandboxAndConversationAsTheyWere) {
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  write(workspace("alice", "t-1") / "work", "mine");
  snapshots->fail_commit = true;
  EXPECT_THROW(provider->snapshot(id, std::string("doomed")), std::exception);
  EXPECT_FALSE(snapshots->paused(id)) << "left frozen after a failure";
  EXPECT_TRUE(provider->snapshots(std::nullopt).empty());
  EXPECT_EQ(read(workspace("alice", "t-1") / "work"), "mine");
  EXPECT_EQ(provider->acquire_traced("t-1", "alice").path, AcquirePath::reused);
  // Nothing half made under the state directory.
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(tmp.path() / "snapshots")) {
    EXPECT_EQ(entry.path().string().find("staging"), std::string::npos) << entry.path();
  }
}

TEST_F(ProviderSnapshotTest, ALinkTheSandboxPlantedIsCopiedAsALinkNeverFollowed) {
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  TempDir outside;
  write(outside.path() / "host-secret", "the host's");
  std::filesystem::create_symlink(outside.path() / "host-secret",
                                  workspace("alice", "t-1") / "planted");
  const core::SnapshotRecord made = provider->snapshot(id, std::string("linked"));
  EXPECT_EQ(made.directory_bytes, 0u) << "the link's target was read";
  const auto copy = tmp.path() / "snapshots" / "alice" / "linked" / "data" / "user-data" /
                    "workspace" / "planted";
  EXPECT_TRUE(std::filesystem::is_symlink(copy));
  // Restored, the link is a link again; the host file is untouched.
  provider->restore(std::string("t-1"), std::string("alice"), Provider::RestoreFrom{"linked"});
  EXPECT_TRUE(std::filesystem::is_symlink(workspace("alice", "t-1") / "planted"));
  EXPECT_EQ(read(outside.path() / "host-secret"), "the host's");
}

TEST_F(ProviderSnapshotTest, AForkMakesNewConversationsEachWithItsOwnCopy) {
  snapshots->refuse_images_in_use = true;
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  write(workspace("alice", "t-1") / "state.txt", "prepared");
  const Provider::Forked forked = provider->fork(id, {"try-a", "try-b", "try-c"}, std::nullopt);
  ASSERT_EQ(forked.sandboxes.size(), 3u);
  std::set<std::string> ids;
  for (std::size_t i = 0; i < 3; ++i) {
    const core::AcquireResult& made = forked.sandboxes[i];
    EXPECT_EQ(made.path, AcquirePath::restored);
    ASSERT_TRUE(made.conversation);
    EXPECT_EQ(made.conversation->user_id, "alice");
    EXPECT_EQ(made.conversation->thread_id, std::string("try-") + char('a' + i)) << "in order";
    ids.insert(made.sandbox_id);
    EXPECT_NE(made.sandbox_id, id);
    EXPECT_EQ(snapshots->image_of(made.sandbox_id).rfind("img-fork-", 0), 0u);
  }
  EXPECT_EQ(ids.size(), 3u) << "one sandbox per new conversation";
  // Each has its own copy: one's write is not another's, nor the source's.
  write(workspace("alice", "try-a") / "state.txt", "changed in a");
  EXPECT_EQ(read(workspace("alice", "try-b") / "state.txt"), "prepared");
  EXPECT_EQ(read(workspace("alice", "t-1") / "state.txt"), "prepared");
  EXPECT_FALSE(snapshots->paused(id)) << "the source was left frozen";
  // The fork's snapshot is gone; its image stays while sandboxes run from it.
  EXPECT_TRUE(provider->snapshots(std::string("alice")).empty());
  EXPECT_EQ(snapshots->images.size(), 1u);
  for (const auto& made : forked.sandboxes) provider->destroy(made.sandbox_id);
  provider->delete_expired_snapshots();  // the idle checker's pass
  EXPECT_TRUE(snapshots->images.empty()) << "the image outlived the sandboxes made from it";

  // Named for the caller; an existing conversation, a duplicate or a bad count is refused.
  const Provider::Forked counted = provider->fork(id, {}, 2);
  ASSERT_EQ(counted.sandboxes.size(), 2u);
  EXPECT_EQ(counted.sandboxes[0].conversation->thread_id.rfind("fork-", 0), 0u);
  const auto refused = [&](const std::vector<std::string>& threads,
                           std::optional<std::size_t> count) -> core::ErrorKind {
    try {
      provider->fork(id, threads, count);
    } catch (const core::ServiceError& e) {
      return e.kind();
    }
    return core::ErrorKind::internal;
  };
  EXPECT_EQ(refused({"try-a"}, std::nullopt), core::ErrorKind::conflict);
  EXPECT_EQ(refused({"t-1"}, std::nullopt), core::ErrorKind::conflict);
  EXPECT_EQ(refused({"n-1", "n-1"}, std::nullopt), core::ErrorKind::invalid_argument);
  EXPECT_EQ(refused({}, 0), core::ErrorKind::invalid_argument);
  EXPECT_EQ(refused({}, Provider::kMaxForkCount + 1), core::ErrorKind::invalid_argument);
  EXPECT_EQ(refused({"n-1"}, 2), core::ErrorKind::invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(workspace("alice", "n-1"))) << "a refusal made something";
}

TEST_F(ProviderSnapshotTest, AForkThatFailsHalfwayKeepsNoneOfItsConversations) {
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  write(workspace("alice", "t-1") / "state.txt", "prepared");
  snapshots->fail_create_of_thread = "try-b";
  EXPECT_THROW(provider->fork(id, {"try-a", "try-b", "try-c"}, std::nullopt), std::exception);
  EXPECT_EQ(snapshots->live_count(), 1u) << "a sandbox of the failed fork was kept";
  for (const char* thread : {"try-a", "try-b", "try-c"}) {
    EXPECT_FALSE(std::filesystem::exists(tmp.path() / "users" / "alice" / "threads" / thread))
        << thread << "'s directory was left";
  }
  EXPECT_TRUE(provider->snapshots(std::string("alice")).empty()) << "the fork's snapshot stayed";
  EXPECT_EQ(read(workspace("alice", "t-1") / "state.txt"), "prepared");
  // The same fork goes through once the engine does.
  snapshots->fail_create_of_thread.clear();
  EXPECT_EQ(provider->fork(id, {"try-a", "try-b", "try-c"}, std::nullopt).sandboxes.size(), 3u);
}

TEST_F(ProviderSnapshotTest, AForkOverALinkWhereANewConversationWouldGoIsRefusedBeforeAnyWork) {
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  // A link where the new conversation's directory would be is neither "new" nor followed: the
  // fork refuses it before it freezes the source or takes a snapshot.
  const std::filesystem::path elsewhere = tmp.path() / "elsewhere";
  std::filesystem::create_directories(elsewhere);
  std::filesystem::create_directory_symlink(elsewhere,
                                            tmp.path() / "users" / "alice" / "threads" / "try-a");
  snapshots->calls.clear();
  try {
    provider->fork(id, {"try-a"}, std::nullopt);
    ADD_FAILURE() << "a fork went ahead over a link";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("try-a"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(snapshots->calls.empty()) << "work began before the refusal: " << snapshots->calls[0];
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere)) << "the link was followed";
  EXPECT_EQ(snapshots->live_count(), 1u);
}

// The archived tier: a released conversation sandbox idle past archive_after_seconds is
// snapshotted and its container removed; the conversation's next acquire makes it again from
// the archive (path restored, its files back), and the archive goes.
TEST_F(ProviderSnapshotTest, AnIdleReleasedSandboxIsArchivedAndItsNextAcquireRestoresIt) {
  options.archive_after_seconds = 600;
  clock->set(1000);
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  const std::string active_one = provider->acquire("t-2", "alice");  // never archived: active
  write(workspace("alice", "t-1") / "kept.txt", "work of the conversation");
  provider->release(id);
  clock->set(1599);
  EXPECT_EQ(provider->archive_idle_released(), 0) << "released 599 s ago, the wait is 600 s";
  EXPECT_EQ(snapshots->live_count(), 2u);
  clock->set(1600);
  EXPECT_EQ(provider->archive_idle_released(), 1);
  EXPECT_EQ(snapshots->live_count(), 1u) << "the archived sandbox's container stayed";
  EXPECT_FALSE(provider->find(id).has_value());
  EXPECT_TRUE(provider->find(active_one).has_value());
  const auto archives = provider->snapshots(std::string("alice"));
  ASSERT_EQ(archives.size(), 1u);
  EXPECT_EQ(archives[0].name, "archive-" + id);
  EXPECT_EQ(archives[0].thread_id, "t-1");
  EXPECT_EQ(provider->archive_idle_released(), 0) << "archived twice";

  // Meanwhile something changes the directory: the archive's copy is what comes back.
  write(workspace("alice", "t-1") / "kept.txt", "changed while archived");
  const auto again = provider->acquire_traced(std::string("t-1"), std::string("alice"));
  EXPECT_EQ(again.path, AcquirePath::restored);
  EXPECT_EQ(again.sandbox_id, id) << "one conversation, one id";
  EXPECT_EQ(snapshots->image_of(id), "img-archive-" + id);
  EXPECT_EQ(read(workspace("alice", "t-1") / "kept.txt"), "work of the conversation");
  EXPECT_TRUE(provider->snapshots(std::string("alice")).empty()) << "the archive outlived its use";
  // The next acquire reuses it as any sandbox.
  EXPECT_EQ(provider->acquire_traced(std::string("t-1"), std::string("alice")).path,
            AcquirePath::reused);
}

TEST_F(ProviderSnapshotTest, AFailedArchiveLeavesTheSandboxParkedAsItWas) {
  options.archive_after_seconds = 60;
  clock->set(1000);
  provider = make_provider(snapshots, &store);
  const std::string id = provider->acquire("t-1", "alice");
  provider->release(id);
  snapshots->fail_commit = true;
  clock->set(2000);
  EXPECT_EQ(provider->archive_idle_released(), 0);
  EXPECT_EQ(snapshots->live_count(), 1u);
  ASSERT_TRUE(provider->find(id).has_value());
  EXPECT_TRUE(provider->find(id)->released());
  EXPECT_TRUE(provider->snapshots(std::string("alice")).empty());
  EXPECT_FALSE(snapshots->paused(id)) << "left frozen";
  EXPECT_EQ(provider->acquire_traced(std::string("t-1"), std::string("alice")).path,
            AcquirePath::reclaimed);
}

TEST_F(ProviderSnapshotTest, ABackendWithoutSnapshotsSaysSoNamingIt) {
  provider = make_provider(backend, &store);  // the fixture's plain FakeBackend
  const std::string id = provider->acquire("t-1", "alice");
  try {
    provider->snapshot(id);
    FAIL();
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("cannot take snapshots"), std::string::npos);
  }
}

}  // namespace
}  // namespace sandboxd::testing

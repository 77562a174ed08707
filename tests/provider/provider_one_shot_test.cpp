// What a host that runs each command in a fresh process needs from the Provider: the path an
// acquisition took, the registry exported and imported as data, detach (nothing destroyed), and
// the counts of a reconciliation pass.
#include <gmock/gmock.h>

#include "provider_fixtures.hpp"
#include "sandboxd/core/sandbox_service.hpp"
#include "sandboxd/core/service_json.hpp"

namespace sandboxd::testing {
namespace {

using core::AcquirePath;
using core::RegistrySnapshot;
using core::SandboxState;

class ProviderOneShotTest : public ProviderFixture {};

TEST_F(ProviderOneShotTest, AcquireTracedSaysHowEachSandboxWasObtained) {
  build();
  const auto created = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(created.path, AcquirePath::created);
  const auto reused = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(reused.path, AcquirePath::reused);
  EXPECT_EQ(reused.sandbox_id, created.sandbox_id);
  provider->release(created.sandbox_id);
  const auto reclaimed = provider->acquire_traced("t-1", "alice");
  EXPECT_EQ(reclaimed.path, AcquirePath::reclaimed);
  EXPECT_EQ(reclaimed.sandbox_id, created.sandbox_id);

  // Another conversation whose container already runs (an earlier process made it).
  const std::string other = core::deterministic_sandbox_id("t-2", "alice");
  backend->discover_fn = [&](const std::string& id) -> std::optional<SandboxInfo> {
    if (id == other) return make_info(id, "http://running-" + id);
    return std::nullopt;
  };
  const auto discovered = provider->acquire_traced("t-2", "alice");
  EXPECT_EQ(discovered.path, AcquirePath::discovered);
  EXPECT_EQ(discovered.sandbox_id, other);
  EXPECT_EQ(provider->acquire_traced(std::nullopt, "alice").path, AcquirePath::created);
  EXPECT_EQ(std::string(core::to_string(AcquirePath::discovered)), "discovered");
}

// The operator page's counts include what is being created and torn down now.
TEST_F(ProviderOneShotTest, CountsShowCreationsAndTeardownsInFlight) {
  build();
  std::promise<void> create_entered, let_create, destroy_entered, let_destroy;
  std::shared_future<void> create_gate = let_create.get_future().share();
  std::shared_future<void> destroy_gate = let_destroy.get_future().share();
  backend->create_fn = [&](const CreateRequest& request) {
    create_entered.set_value();
    create_gate.wait();
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);
  };
  backend->destroy_fn = [&](const SandboxInfo&) {
    destroy_entered.set_value();
    destroy_gate.wait();
  };
  auto acquired = std::async(std::launch::async, [&] { return provider->acquire("t-1", "alice"); });
  create_entered.get_future().wait();
  EXPECT_EQ(provider->counts().creating, 1u);
  EXPECT_EQ(provider->counts().active, 0u);
  let_create.set_value();
  const std::string id = acquired.get();
  EXPECT_EQ(provider->counts().creating, 0u);
  EXPECT_EQ(provider->counts().active, 1u);

  auto destroyed = std::async(std::launch::async, [&] { provider->destroy(id); });
  destroy_entered.get_future().wait();
  EXPECT_EQ(provider->counts().reserved_for_teardown, 1u);
  core::Health health;
  health.tearing_down = provider->counts().reserved_for_teardown;
  EXPECT_THAT(core::to_json(health), ::testing::ContainsRegex("\"tearing_down\": ?1"));
  let_destroy.set_value();
  destroyed.get();
  EXPECT_EQ(provider->counts().reserved_for_teardown, 0u);
  backend->clear_scripts();
}

// The result carries what a door shows, so none reads the provider again.
TEST_F(ProviderOneShotTest, AnAcquireResultCarriesItsInfoAndConversation) {
  build();
  const auto created = provider->acquire_traced("t-1", "alice");
  ASSERT_NE(created.info, nullptr);
  EXPECT_EQ(created.info->sandbox_id, created.sandbox_id);
  EXPECT_EQ(created.info->sandbox_url, provider->find(created.sandbox_id)->info.sandbox_url);
  EXPECT_EQ(created.conversation, (core::ThreadKey{"alice", "t-1"}));
  provider->release(created.sandbox_id);
  const auto reclaimed = provider->acquire_traced("t-1", "alice");
  ASSERT_NE(reclaimed.info, nullptr);
  EXPECT_EQ(reclaimed.conversation, (core::ThreadKey{"alice", "t-1"}));

  const auto anonymous = provider->acquire_traced(std::nullopt, "alice");
  ASSERT_NE(anonymous.info, nullptr);
  EXPECT_EQ(anonymous.info->sandbox_id, anonymous.sandbox_id);
  EXPECT_EQ(anonymous.conversation, std::nullopt);
}

// Each tracked sandbox says how its last acquisition here obtained it (the operator
// page's column), through the export a one-shot command or a restarted serve reads back.
TEST_F(ProviderOneShotTest, EachSandboxKeepsThePathOfItsLastAcquisition) {
  build();
  const std::string id = provider->acquire("t-1", "alice");
  const auto last_acquire = [&](auto& p) {
    for (const auto& t : p.export_registry().sandboxes) {
      if (t.info.sandbox_id == id) return t.last_acquire;
    }
    return std::optional<AcquirePath>();
  };
  EXPECT_EQ(last_acquire(*provider), AcquirePath::created);
  provider->acquire("t-1", "alice");
  EXPECT_EQ(last_acquire(*provider), AcquirePath::reused);
  provider->release(id);
  EXPECT_EQ(last_acquire(*provider), AcquirePath::reused) << "a release is no acquisition";
  provider->acquire("t-1", "alice");
  EXPECT_EQ(last_acquire(*provider), AcquirePath::reclaimed);

  auto next = make_provider(backend, nullptr);
  next->import_registry(provider->export_registry());
  EXPECT_EQ(last_acquire(*next), AcquirePath::reclaimed);
  next->acquire("t-1", "alice");
  EXPECT_EQ(last_acquire(*next), AcquirePath::reused);
  EXPECT_EQ(core::acquire_path_from("claimed"), AcquirePath::claimed);
  EXPECT_EQ(core::acquire_path_from("teleported"), std::nullopt);
  next->detach();
}

TEST_F(ProviderOneShotTest, TheRegistryRoundTripsThroughDataIntoAFreshProvider) {
  build();
  clock->set(2000.0);
  const std::string active = provider->acquire("t-1", "alice");
  const std::string warm = provider->acquire("t-2", "bob");
  clock->set(2100.0);
  provider->release(warm);
  const RegistrySnapshot exported = provider->export_registry();
  ASSERT_EQ(exported.sandboxes.size(), 2u);
  for (const auto& t : exported.sandboxes) {
    if (t.info.sandbox_id == active) {
      EXPECT_EQ(t.state, SandboxState::active);
      EXPECT_EQ(t.since, 2000.0);
      EXPECT_EQ(t.conversation, (ThreadKey{"alice", "t-1"}));
    } else {
      EXPECT_EQ(t.info.sandbox_id, warm);
      EXPECT_EQ(t.state, SandboxState::warm);
      EXPECT_EQ(t.since, 2100.0);
      EXPECT_EQ(t.conversation, (ThreadKey{"bob", "t-2"}));
    }
  }
  ASSERT_TRUE(provider->find(warm));
  EXPECT_EQ(provider->find(warm)->state, SandboxState::warm);
  EXPECT_FALSE(provider->find("no-such-id"));

  // A second provider (the next command's process) picks up exactly that state.
  auto next = make_provider(backend, nullptr);
  next->import_registry(exported);
  EXPECT_EQ(next->export_registry(), exported);
  EXPECT_EQ(next->counts().active, 1u);
  EXPECT_EQ(next->counts().warm, 1u);
  ASSERT_TRUE(next->get(active));
  EXPECT_EQ(next->get(active)->base_url(), "http://" + active);
  EXPECT_EQ(next->acquire_traced("t-1", "alice").path, AcquirePath::reused);
  EXPECT_EQ(next->acquire_traced("t-2", "bob").path, AcquirePath::reclaimed);
  EXPECT_EQ(backend->creates().size(), 2u) << "nothing was created again";

  // Importing again leaves what is tracked alone.
  next->import_registry(exported);
  EXPECT_EQ(next->find(warm)->state, SandboxState::active) << "the reclaimed sandbox stays active";
  next->detach();
}

TEST_F(ProviderOneShotTest, DetachStopsNothingAndLaterShutdownIsANoOp) {
  build();
  const std::string id = provider->acquire("t-1", "alice");
  provider->acquire("t-2", "alice");
  provider->release(id);
  provider->detach();
  provider->detach();
  provider->shutdown();
  EXPECT_TRUE(backend->destroys().empty());
  provider.reset();
  EXPECT_TRUE(backend->destroys().empty()) << "the destructor destroyed a detached sandbox";
}

TEST_F(ProviderOneShotTest, ReconcileReportsWhatItAdoptedAndWhatItFound) {
  build();
  backend->list_running_fn = [] {
    return std::vector<SandboxInfo>{make_info("orphan-a", "http://a"),
                                    make_info("orphan-b", "http://b")};
  };
  const auto first = provider->reconcile_orphans();
  EXPECT_TRUE(first.listed);
  EXPECT_EQ(first.found, 2);
  EXPECT_EQ(first.adopted, 2);
  const auto again = provider->reconcile_orphans();
  EXPECT_EQ(again.found, 2);
  EXPECT_EQ(again.adopted, 0) << "already warm: not adopted twice";

  backend->list_running_fn = []() -> std::vector<SandboxInfo> {
    throw std::runtime_error("engine down");
  };
  EXPECT_FALSE(provider->reconcile_orphans().listed);
}

TEST_F(ProviderOneShotTest, EventCountersCountWhatTheProviderDidOnItsOwn) {
  options.replicas = 1;
  options.idle_timeout = 60;
  build();
  clock->set(1000.0);
  const std::string first = provider->acquire("t-1", "alice");
  provider->release(first);           // renews the lease once
  provider->acquire("t-2", "alice");  // evicts the warm one to stay within replicas=1
  auto events = provider->event_counts();
  EXPECT_EQ(events.evictions, 1u);
  EXPECT_EQ(events.lease_renewals, 1u);

  backend->list_running_fn = [] {
    return std::vector<SandboxInfo>{make_info("orphan", "http://o")};
  };
  provider->reconcile_orphans();
  EXPECT_EQ(provider->event_counts().adoptions, 1u);

  provider->renew_owned_leases();  // the active sandbox and the adopted orphan
  EXPECT_EQ(provider->event_counts().lease_renewals, 3u);

  clock->set(2000.0);  // everything is idle now
  provider->cleanup_idle_sandboxes(60);
  events = provider->event_counts();
  EXPECT_EQ(events.idle_reaps, 2u) << "the idle active sandbox and the expired warm orphan";
  EXPECT_EQ(events.lease_losses, 0u);
  EXPECT_EQ(provider->counts().active + provider->counts().warm, 0u);
}

// Issue 13 A.3: shutdown snapshots what is tracked, then spends real time stopping it. An
// acquire whose create() finishes in that window, or a reconciliation pass running then, must
// not install anything afterwards, where nothing would ever stop it: the install is refused and
// the new container destroyed rather than leaked.
TEST_F(ProviderOneShotTest, NothingIsInstalledWhileShutdownIsStoppingTheRest) {
  build();
  const std::string first = provider->acquire("t-1", "alice");
  const std::string late = core::deterministic_sandbox_id("t-late", "alice");

  std::promise<void> create_entered, destroy_entered;
  std::promise<void> create_resume, destroy_resume;
  auto create_go = create_resume.get_future().share();
  auto destroy_go = destroy_resume.get_future().share();
  backend->create_fn = [&](const CreateRequest& request) {
    create_entered.set_value();
    create_go.wait();
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);
  };
  backend->destroy_fn = [&](const SandboxInfo& info) {
    if (info.sandbox_id != first) return;
    destroy_entered.set_value();
    destroy_go.wait();
  };
  backend->list_running_fn = [] {
    return std::vector<SandboxInfo>{make_info("orphan", "http://o")};
  };

  auto acquisition =
      std::async(std::launch::async, [&] { return provider->acquire("t-late", "alice"); });
  create_entered.get_future().wait();
  auto stopping = std::async(std::launch::async, [&] { provider->shutdown(); });
  destroy_entered.get_future().wait();  // shutdown is inside the stop of `first`
  create_resume.set_value();            // the late creation finishes now
  EXPECT_THROW(acquisition.get(), std::runtime_error) << "handed out after shutdown began";
  EXPECT_EQ(provider->reconcile_orphans().adopted, 0) << "adopted after shutdown began";
  destroy_resume.set_value();
  stopping.get();

  EXPECT_FALSE(provider->find(late)) << "registered during shutdown: nothing would stop it";
  EXPECT_FALSE(provider->find("orphan"));
  std::size_t late_stops = 0;
  for (const auto& info : backend->destroys()) late_stops += info.sandbox_id == late;
  EXPECT_EQ(late_stops, 1u) << "the late creation leaked";
  backend->clear_scripts();
}

}  // namespace
}  // namespace sandboxd::testing

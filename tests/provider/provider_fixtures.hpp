// Fixtures for the provider tests: a scriptable in-process backend, a recording sandbox client,
// recording executors, the Provider under test with its test peer (whose seams replace steps, as
// the Python seed does with monkeypatch), and a gtest fixture that wires them to the real memory
// ownership store, a manual clock and a real temporary base directory.
//
// Lock story: every fake guards its call records with its own mutex; the std::function members
// that script behaviour are set by the test before the provider runs and only read afterwards.
// FakeBackend::probe_mutex plays the remote backend's capability-probe lock: refresh and
// snapshot take it, so a test that holds it from a helper thread makes both block.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "lifecycle/provider_test_peer.hpp"
#include "sandboxd/core/executor.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/sandbox_id.hpp"
#include "sandboxd/sdk.hpp"
#include "scripted_creation_planner.hpp"
#include "scripted_ownership_store.hpp"
#include "test_support.hpp"

namespace sandboxd::testing {

using core::ClientPtr;
using core::InfoPtr;
using core::Provider;
using core::ProviderDeps;
using core::ProviderHooks;
using core::ProviderOptions;
using core::ThreadKey;

inline constexpr const char* kTestOwnerId = "test-worker";

inline SandboxInfo make_info(const std::string& id, const std::string& url) {
  SandboxInfo info;
  info.sandbox_id = id;
  info.sandbox_url = url;
  return info;
}

inline InfoPtr make_info_ptr(const std::string& id, const std::string& url) {
  return std::make_shared<const SandboxInfo>(make_info(id, url));
}

// The seed's MagicMock sandbox: records close() calls and can be told to throw.
class RecordingClient final : public core::SandboxClient {
 public:
  RecordingClient(std::string id, std::string url) : id_(std::move(id)), url_(std::move(url)) {}
  const std::string& id() const override { return id_; }
  const std::string& base_url() const override { return url_; }
  void close() override {
    closes_.fetch_add(1);
    if (throw_on_close.load()) throw std::runtime_error("boom");
  }
  int close_count() const { return closes_.load(); }

  std::atomic<bool> throw_on_close{false};

 private:
  const std::string id_;
  const std::string url_;
  std::atomic<int> closes_{0};
};

// A thread pool that records what was submitted to it and on which threads its tasks ran.
class RecordingExecutor final : public core::Executor {
 public:
  explicit RecordingExecutor(std::size_t workers) : pool_(workers) {}

  void submit(std::function<void()> task) override {
    {
      std::lock_guard lock(mutex_);
      ++submitted_;
      ++pending_;
    }
    pool_.submit([this, task = std::move(task)] {
      {
        std::lock_guard lock(mutex_);
        worker_threads_.insert(std::this_thread::get_id());
      }
      try {
        task();
      } catch (...) {
        // The provider's tasks report their own errors; nothing may escape a worker.
      }
      {
        std::lock_guard lock(mutex_);
        --pending_;
      }
      idle_.notify_all();
    });
  }

  // true once every submitted task has finished (within the timeout).
  bool wait_idle(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return idle_.wait_for(lock, timeout, [&] { return pending_ == 0; });
  }
  std::size_t submitted() const {
    std::lock_guard lock(mutex_);
    return submitted_;
  }
  bool ran_on(std::thread::id id) const {
    std::lock_guard lock(mutex_);
    return worker_threads_.count(id) > 0;
  }

 private:
  mutable std::mutex mutex_;  // guards the three counters/sets below
  std::condition_variable idle_;
  std::size_t submitted_ = 0;
  std::size_t pending_ = 0;
  std::set<std::thread::id> worker_threads_;
  core::ThreadPoolExecutor pool_;  // last: destroyed (joined) before the members above
};

// An in-process SandboxBackend whose every call is scripted by a std::function and recorded.
class FakeBackend final : public SandboxBackend, public MountContractNegotiation {
 public:
  // ── behaviour (defaults: create answers http://{id}, alive, nothing discovered) ──
  std::function<SandboxInfo(const CreateRequest&)> create_fn;
  std::function<void(const SandboxInfo&)> destroy_fn;
  std::function<bool(const SandboxInfo&)> is_alive_fn;
  std::function<std::optional<SandboxInfo>(const std::string&)> discover_fn;
  std::function<std::vector<SandboxInfo>()> list_running_fn;
  std::function<SandboxDiscoveryResult(const std::string&)> discover_for_reconciliation_fn;
  // Runs under probe_mutex when the provider refreshes capabilities (a probe).
  std::function<void()> refresh_fn;

  std::atomic<bool> requires_validation{false};
  std::atomic<MountModeKind> mode{MountModeKind::other};
  // The cached, never-blocking contract state of a negotiating backend.
  std::atomic<int> cached_version{kSandboxMountContractVersion};
  std::atomic<bool> cached_known{true};
  // The capability-probe lock: refresh and snapshot hold it.
  std::mutex probe_mutex;

  // ── SandboxBackend ──
  SandboxInfo create(const CreateRequest& request) override {
    {
      std::lock_guard lock(mutex_);
      creates_.push_back(request);
      create_threads_.push_back(std::this_thread::get_id());
    }
    if (create_fn) return create_fn(request);
    return make_info(request.sandbox_id, "http://" + request.sandbox_id);
  }
  void destroy(const SandboxInfo& info) override {
    {
      std::lock_guard lock(mutex_);
      destroys_.push_back(info);
      destroy_threads_.push_back(std::this_thread::get_id());
    }
    if (destroy_fn) destroy_fn(info);
  }
  bool is_alive(const SandboxInfo& info) override {
    {
      std::lock_guard lock(mutex_);
      is_alive_calls_.push_back(info.sandbox_id);
      is_alive_threads_.push_back(std::this_thread::get_id());
    }
    return is_alive_fn ? is_alive_fn(info) : true;
  }
  std::optional<SandboxInfo> discover(const std::string& sandbox_id) override {
    {
      std::lock_guard lock(mutex_);
      discovers_.push_back(sandbox_id);
    }
    return discover_fn ? discover_fn(sandbox_id) : std::nullopt;
  }
  std::vector<SandboxInfo> list_running() override {
    {
      std::lock_guard lock(mutex_);
      ++list_running_calls_;
    }
    return list_running_fn ? list_running_fn() : std::vector<SandboxInfo>{};
  }
  SandboxDiscoveryResult discover_for_reconciliation(const std::string& sandbox_id) override {
    {
      std::lock_guard lock(mutex_);
      reconciliation_discovers_.push_back(sandbox_id);
    }
    return discover_for_reconciliation_fn ? discover_for_reconciliation_fn(sandbox_id)
                                          : SandboxDiscoveryResult::unknown();
  }
  bool requires_create_validation() const override { return requires_validation.load(); }
  MountModeKind mount_mode_kind() const override { return mode.load(); }
  void refresh_capabilities_if_stale() override {
    std::lock_guard probe(probe_mutex);
    {
      std::lock_guard lock(mutex_);
      ++refresh_calls_;
    }
    if (refresh_fn) refresh_fn();
  }
  MountContractSnapshot mount_contract_snapshot() override {
    std::lock_guard probe(probe_mutex);
    {
      std::lock_guard lock(mutex_);
      ++snapshot_calls_;
    }
    return {cached_version.load(), cached_known.load()};
  }
  int cached_mount_contract_version() const override { return cached_version.load(); }
  bool cached_mount_contract_capability_known() const override { return cached_known.load(); }

  // Back to the defaults (TearDown: scripts may capture a finished test's locals).
  void clear_scripts() {
    create_fn = nullptr;
    destroy_fn = nullptr;
    is_alive_fn = nullptr;
    discover_fn = nullptr;
    list_running_fn = nullptr;
    discover_for_reconciliation_fn = nullptr;
    refresh_fn = nullptr;
  }

  // ── records ──
  std::vector<CreateRequest> creates() const {
    std::lock_guard lock(mutex_);
    return creates_;
  }
  std::vector<std::thread::id> create_threads() const {
    std::lock_guard lock(mutex_);
    return create_threads_;
  }
  std::vector<SandboxInfo> destroys() const {
    std::lock_guard lock(mutex_);
    return destroys_;
  }
  std::vector<std::thread::id> destroy_threads() const {
    std::lock_guard lock(mutex_);
    return destroy_threads_;
  }
  std::vector<std::string> is_alive_calls() const {
    std::lock_guard lock(mutex_);
    return is_alive_calls_;
  }
  std::vector<std::thread::id> is_alive_threads() const {
    std::lock_guard lock(mutex_);
    return is_alive_threads_;
  }
  std::vector<std::string> discovers() const {
    std::lock_guard lock(mutex_);
    return discovers_;
  }
  int refresh_calls() const {
    std::lock_guard lock(mutex_);
    return refresh_calls_;
  }
  int snapshot_calls() const {
    std::lock_guard lock(mutex_);
    return snapshot_calls_;
  }
  // Every backend call of any kind.
  std::size_t total_calls() const {
    std::lock_guard lock(mutex_);
    return creates_.size() + destroys_.size() + is_alive_calls_.size() + discovers_.size() +
           reconciliation_discovers_.size() + static_cast<std::size_t>(list_running_calls_) +
           static_cast<std::size_t>(refresh_calls_) + static_cast<std::size_t>(snapshot_calls_);
  }

 private:
  mutable std::mutex mutex_;  // guards every record below
  std::vector<CreateRequest> creates_;
  std::vector<std::thread::id> create_threads_;
  std::vector<SandboxInfo> destroys_;
  std::vector<std::thread::id> destroy_threads_;
  std::vector<std::string> is_alive_calls_;
  std::vector<std::thread::id> is_alive_threads_;
  std::vector<std::string> discovers_;
  std::vector<std::string> reconciliation_discovers_;
  int list_running_calls_ = 0;
  int refresh_calls_ = 0;
  int snapshot_calls_ = 0;
};

// Holds a FakeBackend's probe lock from a helper thread for `hold` (design §10.2: the Python
// test holds the probe lock and releases it from a timer; std::mutex must be unlocked by the
// thread that locked it, so the helper does both).
class ProbeLockHolder {
 public:
  // Holds the probe lock from a helper thread until release() (or destruction).
  explicit ProbeLockHolder(FakeBackend& backend)
      : thread_([this, &backend] {
          std::lock_guard lock(backend.probe_mutex);
          held_.set_value();
          release_future_.wait();
        }) {
    held_.get_future().wait();
  }
  ~ProbeLockHolder() { release(); }
  ProbeLockHolder(const ProbeLockHolder&) = delete;
  ProbeLockHolder& operator=(const ProbeLockHolder&) = delete;
  void release() {
    if (!released_) {
      released_ = true;
      release_.set_value();
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::promise<void> held_;  // the promises come before thread_: constructed first
  std::promise<void> release_;
  std::shared_future<void> release_future_ = release_.get_future().share();
  bool released_ = false;  // touched by the test thread only
  std::thread thread_;
};

// Runs `call` on another thread and reports whether it returned within `bound`. Used while a
// lock the call must not wait for is held until after the check: returning at all proves it
// did not wait (the bound only keeps a broken build from hanging).
template <typename Call>
bool returns_without_waiting(Call call, std::chrono::seconds bound = std::chrono::seconds(5)) {
  auto done = std::async(std::launch::async, std::move(call));
  if (done.wait_for(bound) != std::future_status::ready) {
    // Leave the call running rather than block here; the test fails.
    new auto(std::move(done));
    return false;
  }
  done.get();
  return true;
}

using core::ProviderSeams;

// The provider a test drives, and what only a test may reach in it. `provider->` is the
// public API, the very calls a gateway makes; `provider.` is the test's side: the creation
// planner it scripts, the seams it replaces (each put back by a guard), the registry with its
// mutex, and the private steps the seed's ports call directly (`provider.peer()`, the
// befriended core/src/lifecycle/provider_test_peer.hpp, whose `base_*` steps run the real step
// so that a replacement can observe and then delegate). Not a subclass of Provider. Empty until
// a provider is made into it; movable, like the unique_ptr it replaces.
class ProviderUnderTest {
 public:
  using Predicate = core::Predicate;
  using Snapshot = core::Snapshot;
  using WarmEntry = core::WarmEntry;

  ProviderUnderTest() = default;
  explicit ProviderUnderTest(ProviderDeps deps)
      : planner_(scripted_planner_over(deps)),
        provider_(std::make_unique<Provider>(planned_by(std::move(deps), planner_))),
        peer_(std::make_unique<core::ProviderTestPeer>(*provider_)) {}

  // ── the public API ──
  Provider* operator->() const { return provider_.get(); }
  Provider& operator*() const { return *provider_; }
  explicit operator bool() const { return provider_ != nullptr; }

  // ── the test's side ──
  // The provider's creation planner: the host's real one unless the test scripts an answer
  // (ids, extra mounts, the skills projection).
  ScriptedCreationPlanner& planner() const { return *planner_; }
  // The private steps the seed calls directly, and the real steps behind the seams.
  core::ProviderTestPeer& peer() const { return *peer_; }
  // Replaces one lifecycle step (a ProviderSeams member) until the returned guard goes.
  template <typename Function>
  core::SeamGuard<Function> inject(Function ProviderSeams::*seam,
                                   std::type_identity_t<Function> replacement) const {
    return peer_->inject(seam, std::move(replacement));
  }
  // The registry and its mutex (lock it while the provider may run elsewhere).
  sandboxd::Mutex& mutex() const { return peer_->mutex(); }
  core::SandboxRegistry& registry() const { return peer_->registry(); }

  // Destroys the provider (its destructor shuts down through the real steps).
  void reset() {
    peer_.reset();
    provider_.reset();
    planner_.reset();
  }
  // Never destroys it: for a test whose task still points into the provider.
  void leak() {
    static_cast<void>(peer_.release());
    static_cast<void>(provider_.release());
    planner_.reset();
  }

 private:
  static std::shared_ptr<ScriptedCreationPlanner> scripted_planner_over(const ProviderDeps& deps) {
    core::MountComposerOptions composer;
    composer.ambient_user = deps.hooks.ambient_user;
    composer.logger = deps.logger;
    return std::make_shared<ScriptedCreationPlanner>(
        std::make_shared<core::HostCreationPlanner>(deps.paths, composer));
  }
  static ProviderDeps planned_by(ProviderDeps deps,
                                 const std::shared_ptr<ScriptedCreationPlanner>& planner) {
    deps.planner = planner;
    return deps;
  }

  // Destroyed in reverse: the peer before the provider it refers to, the planner last.
  std::shared_ptr<ScriptedCreationPlanner> planner_;
  std::unique_ptr<Provider> provider_;
  std::unique_ptr<core::ProviderTestPeer> peer_;
};

// Host hooks the tests replace, shared by the fixture and the provider's ProviderHooks.
struct HookState {
  // Scripted answers (set before the provider runs).
  std::function<bool(const std::string& url, double timeout)> ready_fn;  // default: ready
  // The ambient user (a host's per-request context); default "default".
  std::function<std::optional<std::string>()> ambient_user_fn;
  std::function<ClientPtr(const std::string&, const std::string&)> make_client_fn;
  std::function<void(int handle)> file_lock_fn;  // default: real flock
  std::atomic<bool> lark_runtime{false};
  std::atomic<bool> lark_broker{false};

  void clear_scripts() {
    ready_fn = nullptr;
    make_client_fn = nullptr;
    file_lock_fn = nullptr;
  }

  struct ReadyCall {
    std::string url;
    double timeout;
    std::thread::id thread;
  };
  std::vector<ReadyCall> ready_calls() const {
    std::lock_guard lock(mutex_);
    return ready_calls_;
  }
  std::vector<std::pair<std::string, std::string>> made_clients() const {
    std::lock_guard lock(mutex_);
    return made_clients_;
  }
  std::vector<std::thread::id> lock_file_opens() const {
    std::lock_guard lock(mutex_);
    return opens_;
  }
  std::vector<std::thread::id> lock_file_closes() const {
    std::lock_guard lock(mutex_);
    return closes_;
  }
  int unlock_count() const {
    std::lock_guard lock(mutex_);
    return unlocks_;
  }

  ProviderHooks make_hooks() {
    ProviderHooks hooks;
    hooks.wait_until_ready = [this](const std::string& url, double timeout) {
      {
        std::lock_guard lock(mutex_);
        ready_calls_.push_back({url, timeout, std::this_thread::get_id()});
      }
      return ready_fn ? ready_fn(url, timeout) : true;
    };
    hooks.make_client = [this](const std::string& id, const std::string& url) -> ClientPtr {
      {
        std::lock_guard lock(mutex_);
        made_clients_.emplace_back(id, url);
      }
      if (make_client_fn) return make_client_fn(id, url);
      return std::make_shared<RecordingClient>(id, url);
    };
    hooks.lark_integration_active = [this](const std::string&) { return lark_runtime.load(); };
    hooks.lark_broker_active = [this](const std::string&) { return lark_broker.load(); };
    hooks.ambient_user = [this]() -> std::optional<std::string> {
      if (ambient_user_fn) return ambient_user_fn();
      return std::string("default");
    };
    const core::FileLockOps real = core::FileLockOps::posix_flock();
    hooks.file_lock.open = [this, real](const std::string& path) {
      {
        std::lock_guard lock(mutex_);
        opens_.push_back(std::this_thread::get_id());
      }
      return real.open(path);
    };
    hooks.file_lock.lock = [this, real](int handle) {
      if (file_lock_fn) {
        file_lock_fn(handle);
      } else {
        real.lock(handle);
      }
    };
    hooks.file_lock.unlock = [this, real](int handle) {
      {
        std::lock_guard lock(mutex_);
        ++unlocks_;
      }
      real.unlock(handle);
    };
    hooks.file_lock.close = [this, real](int handle) {
      {
        std::lock_guard lock(mutex_);
        closes_.push_back(std::this_thread::get_id());
      }
      real.close(handle);
    };
    return hooks;
  }

 private:
  mutable std::mutex mutex_;  // guards the records below
  std::vector<ReadyCall> ready_calls_;
  std::vector<std::pair<std::string, std::string>> made_clients_;
  std::vector<std::thread::id> opens_;
  std::vector<std::thread::id> closes_;
  int unlocks_ = 0;
};

// The real ownership_memory:MemoryOwnershipStore, loaded through the plugin loader. TTL 600 s
// like the seed's MemoryOwnershipStore(ttl_seconds=600).
inline std::shared_ptr<OwnershipStore> load_memory_store(std::shared_ptr<Clock> clock,
                                                         std::shared_ptr<Logger> logger,
                                                         const std::string& base_dir) {
  PluginContext context;
  context.config_json = R"({"renewal_interval_seconds": 150, "ttl_multiplier": 4})";
  context.config_key_path = "sandbox.ownership";
  context.owner_id = kTestOwnerId;
  context.base_dir = base_dir;
  context.clock = std::move(clock);
  context.logger = std::move(logger);
  const core::PluginLoader loader({SANDBOXD_TEST_PLUGIN_DIR});
  return loader.load_ownership_store("ownership_memory:MemoryOwnershipStore", context, "test");
}

// The SQLite store on `path` as `owner`: several of these on one file are peers.
inline std::shared_ptr<OwnershipStore> load_sqlite_store(const std::string& path,
                                                         const std::string& owner,
                                                         std::shared_ptr<Clock> clock,
                                                         std::shared_ptr<Logger> logger,
                                                         const std::string& extra_options = "") {
  PluginContext context;
  context.config_json = R"({"path": ")" + path + "\"" + extra_options + "}";
  context.config_key_path = "sandbox.ownership";
  context.owner_id = owner;
  context.base_dir = std::filesystem::path(path).parent_path().string();
  context.clock = std::move(clock);
  context.logger = std::move(logger);
  const core::PluginLoader loader({SANDBOXD_TEST_PLUGIN_DIR});
  return loader.load_ownership_store("ownership_sqlite:SqliteOwnershipStore", context, "test");
}

// The seed's _make_provider: replicas 3, idle_timeout 600, owner "test-worker", no background
// threads, no start-up reconciliation. Tests adjust `options`, `backend` or the hooks, then
// call build().
class ProviderFixture : public ::testing::Test {
 protected:
  ProviderFixture() {
    options.replicas = 3;
    options.idle_timeout = 600;
    options.run_background_threads = false;
    options.reconcile_on_start = false;
  }

  void TearDown() override {
    // Queued acquisitions touch the provider: let them finish before it goes.
    for (auto* executor : {&blocking_executor, &lock_wait_executor}) {
      if (*executor && !(*executor)->wait_idle(std::chrono::seconds(10))) {
        ADD_FAILURE() << "an executor task is still running (a leaked per-thread lock?)";
        // Joining a worker stuck on a lock nobody releases would hang the whole binary: leak
        // the executor (and, below, the provider its task points into) instead.
        new std::shared_ptr<RecordingExecutor>(std::move(*executor));
        leak_provider = true;
      }
    }
    // The provider's destructor shuts down through the real steps and the default fakes:
    // seams and scripts may capture the test's locals.
    backend->clear_scripts();
    hooks.clear_scripts();
    if (claims) claims->clear_scripts();
    if (provider) provider.planner().clear_scripts();
    for (auto& extra : extra_providers) {
      if (extra) extra.planner().clear_scripts();
    }
    if (leak_provider) {
      provider.leak();
    } else {
      provider.reset();
    }
    extra_providers.clear();
  }

  // A provider over `with_backend`, with its own memory store.
  ProviderUnderTest make_provider(std::shared_ptr<SandboxBackend> with_backend,
                                  std::shared_ptr<OwnershipStore>* store_out) {
    auto own_store = load_memory_store(clock, logger, tmp.path().string());
    if (store_out != nullptr) *store_out = own_store;
    return make_provider_over(std::move(with_backend), own_store);
  }

  // A provider over `with_backend` and `with_store`, with this fixture's clock, hooks and
  // executors.
  ProviderUnderTest make_provider_over(std::shared_ptr<SandboxBackend> with_backend,
                                       std::shared_ptr<OwnershipStore> with_store) {
    return ProviderUnderTest(
        deps_over(std::move(with_backend), std::move(with_store), logger, clock));
  }

  // The dependencies make_provider_over uses, for tests that swap the logger or the clock
  // (pass them to the store too when it should see the same ones).
  ProviderDeps deps_over(std::shared_ptr<SandboxBackend> with_backend,
                         std::shared_ptr<OwnershipStore> with_store,
                         std::shared_ptr<Logger> with_logger, std::shared_ptr<Clock> with_clock) {
    ProviderDeps deps;
    deps.backend = std::move(with_backend);
    deps.ownership = std::move(with_store);
    deps.logger = std::move(with_logger);
    deps.clock = std::move(with_clock);
    deps.paths = std::make_shared<const core::Paths>(tmp.path(), tmp.path().string());
    deps.options = options;
    deps.hooks = hooks.make_hooks();
    deps.blocking_executor = blocking_executor;
    deps.lock_wait_executor = lock_wait_executor;
    deps.events = events;
    return deps;
  }

  // The provider under test over the fixture's backend and a memory store whose claims the
  // test may script (`claims`).
  ProviderUnderTest& build() {
    claims = std::make_shared<ScriptedOwnershipStore>(
        load_memory_store(clock, logger, tmp.path().string()));
    store = claims;
    provider = make_provider_over(use_backend ? backend : nullptr, store);
    return provider;
  }

  // ── registry pre-fills (what the seed writes into the provider's dicts) ──

  // _make_provider_with_active_sandbox: an active client + info (http://sandbox-host) with
  // last activity 0.0; no thread mapping.
  std::shared_ptr<RecordingClient> add_active(const std::string& id,
                                              const std::string& url = "http://sandbox-host") {
    auto client = std::make_shared<RecordingClient>(id, url);
    std::lock_guard lock(provider.mutex());
    provider.registry().install_active(id, client, make_info_ptr(id, url), std::nullopt, 0.0);
    return client;
  }
  void map_thread(const std::string& user, const std::string& thread, const std::string& id) {
    std::lock_guard lock(provider.mutex());
    provider.registry().conversations().assign(ThreadKey{user, thread}, id);
  }
  void add_warm(const InfoPtr& info, double released_at,
                std::optional<ThreadKey> identity = std::nullopt) {
    std::lock_guard lock(provider.mutex());
    provider.registry().add_released(info->sandbox_id, info, released_at, std::move(identity));
  }
  // The entry of `id` (it must exist); hold the mutex while using it.
  core::SandboxEntry& entry_of(const std::string& id) {
    core::SandboxEntry* entry = provider.registry().find(id);
    if (entry == nullptr) throw std::logic_error("no registry entry for " + id);
    return *entry;
  }

  // ── registry reads ──
  bool is_active(const std::string& id) const {
    std::lock_guard lock(provider.mutex());
    return provider.registry().is_active(id);
  }
  bool is_warm(const std::string& id) const {
    std::lock_guard lock(provider.mutex());
    return provider.registry().is_released(id);
  }
  std::optional<std::string> mapped(const std::string& user, const std::string& thread) const {
    std::lock_guard lock(provider.mutex());
    const auto& conversations = provider.registry().conversations();
    auto it = conversations.find(ThreadKey{user, thread});
    if (it == conversations.end()) return std::nullopt;
    return it->second;
  }
  ClientPtr client_of(const std::string& id) const {
    std::lock_guard lock(provider.mutex());
    const core::SandboxEntry* entry = provider.registry().find(id);
    return entry && entry->active() ? entry->client : nullptr;
  }
  InfoPtr info_of(const std::string& id) const {
    std::lock_guard lock(provider.mutex());
    const core::SandboxEntry* entry = provider.registry().find(id);
    return entry && entry->active() ? entry->info : nullptr;
  }

  TempDir tmp;
  std::shared_ptr<ManualClock> clock = std::make_shared<ManualClock>();
  std::shared_ptr<CapturingLogger> logger = std::make_shared<CapturingLogger>();
  std::shared_ptr<FakeBackend> backend = std::make_shared<FakeBackend>();
  // false: a provider with no backend at all, which may only be asked uses_thread_data_mounts()
  bool use_backend = true;
  ProviderOptions options;
  HookState hooks;
  std::shared_ptr<RecordingExecutor> blocking_executor = std::make_shared<RecordingExecutor>(4);
  std::shared_ptr<RecordingExecutor> lock_wait_executor = std::make_shared<RecordingExecutor>(4);
  // What happens to sandboxes (lifecycle_events.hpp), recorded by every provider made here.
  std::shared_ptr<core::LifecycleEventLog> events =
      std::make_shared<core::LifecycleEventLog>(clock);
  std::shared_ptr<OwnershipStore> store;           // the built provider's store
  std::shared_ptr<ScriptedOwnershipStore> claims;  // the store build() made, for claim scripts
  std::vector<ProviderUnderTest> extra_providers;
  bool leak_provider = false;  // TearDown found a task that never finished
  ProviderUnderTest provider;  // last: destroyed first
};

}  // namespace sandboxd::testing

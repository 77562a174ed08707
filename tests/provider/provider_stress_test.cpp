// Randomized stress over the real acquisition and teardown paths: 8 threads issue random calls
// over 50 (user, thread) conversations with replicas = 4 — turns (acquire or acquire_async, then
// mostly release, sometimes destroy, rarely keep the sandbox active) mixed with stray release
// and destroy calls — against an in-process backend whose create is instant and which tracks
// every container it ever started. The real memory ownership store and a real SystemClock are
// used; no sleeps.
//
// Invariants, checked while the calls run and at the end:
//  1. an id is never both active and warm (registry snapshots under mutex_, and inside create);
//  2. no two conversations share a sandbox: every acquire returns the caller's deterministic id,
//     and every mapping / recorded identity in the registry matches its id;
//  3. when a creating call returns (its eviction's stops run beside the backend create, and
//     it waits for them), the tracked sandboxes exceed the replica limit only if no warm entry
//     that was already warm when this creation began is left to evict (entries a teardown has
//     reserved are being evicted already);
//  4. no container is created while an earlier container of the same id still runs, the
//     registry never tracks a stopped container outside a teardown, and every container the
//     backend created is destroyed exactly once by the end of shutdown;
//  5. no acquire fails at all — in particular never with SandboxBeingDestroyedError: an acquire
//     that meets a teardown by this same process waits for it, then creates anew.
//
// SANDBOXD_STRESS_OPS (total calls, default 4000) and SANDBOXD_STRESS_SEED override the size
// and the random seed (printed on failure).
#include <gtest/gtest.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "provider_fixtures.hpp"

namespace sandboxd::testing {
namespace {

using core::deterministic_sandbox_id;

constexpr int kDefaultStressOps = 4000;
constexpr int kThreads = 8;
constexpr int kUsers = 10;
constexpr int kThreadsPerUser = 5;  // 50 conversations
constexpr int kReplicas = 4;
constexpr int kCheckEvery = 25;  // ops between registry snapshots, per worker

int env_int(const char* name, int fallback) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return fallback;
  return std::atoi(value);
}

// Monotonic time (the clock of the registry's timers) at which the current thread entered
// Provider::create_sandbox (set by the test's create_sandbox wrapper, read by the backend's create
// on the same thread).
thread_local double t_create_started = 0.0;

// Collects invariant violations from any thread.
class Violations {
 public:
  void add(const std::string& what) {
    std::lock_guard lock(mutex_);
    ++count_;
    if (first_.size() < 20) first_.push_back(what);
  }
  int count() const {
    std::lock_guard lock(mutex_);
    return count_;
  }
  std::string report() const {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& line : first_) out += "  " + line + "\n";
    return out;
  }

 private:
  mutable std::mutex mutex_;  // guards count_ and first_
  int count_ = 0;
  std::vector<std::string> first_;
};

// A message with its sandbox ids (16 hex characters) replaced by {id}.
std::string shape_of(std::string_view message) {
  std::string out(message);
  for (std::size_t at = 0; at + 16 <= out.size();) {
    const bool is_id =
        out.find_first_not_of("0123456789abcdef", at) >= at + 16 &&
        (at + 16 == out.size() || !std::isxdigit(static_cast<unsigned char>(out[at + 16])));
    if (is_id && (at == 0 || !std::isxdigit(static_cast<unsigned char>(out[at - 1])))) {
      out.replace(at, 16, "{id}");
      at += 4;
    } else {
      ++at;
    }
  }
  return out;
}

// Counts lines per level and keeps the first errors; the stress run logs tens of thousands.
class CountingLogger final : public Logger {
 public:
  void log(LogLevel level, std::string_view message) override {
    counts_[static_cast<int>(level)].fetch_add(1);
    if (level == LogLevel::info) {
      for (const char* kind : {"Evicted", "Reclaimed", "Reusing", "Created", "Discovered"}) {
        if (message.rfind(kind, 0) == 0) {
          std::lock_guard lock(mutex_);
          ++info_kinds_[kind];
        }
      }
    }
    if (level == LogLevel::warning) {
      std::lock_guard lock(mutex_);
      ++warning_kinds_[shape_of(message)];
    }
    if (level != LogLevel::error) return;
    // A destroy(id) racing an acquire of that id briefly holds a `del` lease even when nothing
    // is tracked yet; the acquire then rolls its new container back (design §5.9) and retries.
    if (message.find("is being destroyed by another instance") != std::string_view::npos &&
        message.rfind("Could not register new sandbox ", 0) == 0) {
      rollbacks_.fetch_add(1);
      return;
    }
    unexpected_errors_.fetch_add(1);
    std::lock_guard lock(mutex_);
    if (errors_.size() < 20) errors_.emplace_back(message);
  }
  int count(LogLevel level) const { return counts_[static_cast<int>(level)].load(); }
  int unexpected_errors() const { return unexpected_errors_.load(); }
  int rollbacks() const { return rollbacks_.load(); }
  int info_count(const std::string& kind) const {
    std::lock_guard lock(mutex_);
    auto it = info_kinds_.find(kind);
    return it == info_kinds_.end() ? 0 : it->second;
  }
  // Warnings by their first words, for the summary line.
  std::string warning_summary() const {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& [kind, count] : warning_kinds_) {
      out += "\n    " + std::to_string(count) + " × " + kind;
    }
    return out;
  }
  std::vector<std::string> errors() const {
    std::lock_guard lock(mutex_);
    return errors_;
  }

 private:
  std::atomic<int> counts_[4] = {};
  std::atomic<int> unexpected_errors_{0};
  std::atomic<int> rollbacks_{0};
  mutable std::mutex mutex_;  // guards errors_ and warning_kinds_
  std::vector<std::string> errors_;
  std::map<std::string, int> warning_kinds_;
  std::map<std::string, int> info_kinds_;
};

// Instant containers with an identity each; every start and stop is accounted for.
// Lock story: mutex_ guards the container table. create reads the provider's registry under
// the provider's mutex_ first, never while holding mutex_.
class LiveBackend final : public SandboxBackend {
 public:
  LiveBackend(std::shared_ptr<Clock> clock, Violations& violations)
      : clock_(std::move(clock)), violations_(violations) {}

  void attach(const ProviderUnderTest* provider) { provider_ = provider; }

  SandboxInfo create(const CreateRequest& request) override {
    check_registry_at_create(request.sandbox_id);
    std::lock_guard lock(mutex_);
    if (live_by_id_.count(request.sandbox_id)) {
      violations_.add("created " + request.sandbox_id +
                      " while an earlier container of it was still running");
    }
    const int incarnation = static_cast<int>(containers_.size());
    SandboxInfo info;
    info.sandbox_id = request.sandbox_id;
    info.sandbox_url = "http://fake/" + request.sandbox_id + "/" + std::to_string(incarnation);
    info.container_id = std::to_string(incarnation);
    info.created_at = clock_->wall_now();
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    info.mount_contract_version = kSandboxMountContractVersion;
    containers_.push_back({info, true, 0});
    live_by_id_[request.sandbox_id] = incarnation;
    return info;
  }

  void destroy(const SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    const int incarnation = incarnation_of(info);
    if (incarnation < 0) return;
    Container& container = containers_[incarnation];
    ++container.destroys;
    if (!container.live) {
      violations_.add("destroyed container " + info.sandbox_id + "#" + std::to_string(incarnation) +
                      " again");
      return;
    }
    container.live = false;
    auto it = live_by_id_.find(info.sandbox_id);
    if (it != live_by_id_.end() && it->second == incarnation) live_by_id_.erase(it);
  }

  bool is_alive(const SandboxInfo& info) override {
    bool live = false;
    {
      std::lock_guard lock(mutex_);
      const int incarnation = incarnation_of(info);
      live = incarnation >= 0 && containers_[incarnation].live;
    }
    // A health check may race a teardown that already untracked the container (the provider
    // then skips the drop); the registry itself must never keep a stopped one.
    if (!live) check_tracked_containers_live();
    return live;
  }

  // Invariant 4, registry side: every sandbox the registry tracks (active or warm) outside a
  // teardown reservation runs. Every stop happens under a reservation that ends only once the
  // entry is gone, so a tracked, unreserved, stopped container is a stale entry.
  // Lock order: the provider's mutex_, then ours.
  void check_tracked_containers_live() {
    std::lock_guard registry_lock(provider_->mutex());
    const auto& registry = provider_->registry();
    std::vector<std::pair<std::string, InfoPtr>> tracked;
    registry.for_each([&](const std::string& id, const core::SandboxEntry& entry) {
      if ((entry.active() || entry.warm()) && !entry.teardown) tracked.emplace_back(id, entry.info);
    });
    std::lock_guard lock(mutex_);
    for (const auto& [id, info] : tracked) {
      const int incarnation = incarnation_of(*info);
      if (incarnation >= 0 && !containers_[incarnation].live) {
        violations_.add("the registry tracks stopped container " + id + "#" +
                        std::to_string(incarnation) + " outside any teardown");
      }
    }
  }

  std::optional<SandboxInfo> discover(const std::string& sandbox_id) override {
    std::lock_guard lock(mutex_);
    auto it = live_by_id_.find(sandbox_id);
    if (it == live_by_id_.end()) return std::nullopt;
    return containers_[it->second].info;
  }

  MountModeKind mount_mode_kind() const override { return MountModeKind::local_bind_mounts; }

  // After shutdown: every container stopped exactly once.
  void check_all_destroyed_once() {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < containers_.size(); ++i) {
      const Container& container = containers_[i];
      if (container.live || container.destroys != 1) {
        violations_.add("container " + container.info.sandbox_id + "#" + std::to_string(i) +
                        (container.live ? " still running" : " stopped") + " after shutdown, " +
                        std::to_string(container.destroys) + " destroy call(s)");
      }
    }
  }
  std::size_t created() const {
    std::lock_guard lock(mutex_);
    return containers_.size();
  }

 private:
  struct Container {
    SandboxInfo info;
    bool live = true;
    int destroys = 0;
  };

  // Caller holds mutex_.
  int incarnation_of(const SandboxInfo& info) {
    const int incarnation = info.container_id ? std::atoi(info.container_id->c_str()) : -1;
    if (incarnation < 0 || incarnation >= static_cast<int>(containers_.size()) ||
        containers_[incarnation].info.sandbox_id != info.sandbox_id) {
      violations_.add("backend call for unknown container " + info.sandbox_id);
      return -1;
    }
    return incarnation;
  }

  // Invariant 1, at the moment create runs.
  void check_registry_at_create(const std::string&) {
    std::lock_guard lock(provider_->mutex());
    const auto& registry = provider_->registry();
    // One entry per sandbox with one state: "active and warm" cannot be represented. What
    // can still go wrong is the counts drifting from the entries.
    std::size_t active = 0, warm = 0;
    registry.for_each([&](const std::string&, const core::SandboxEntry& entry) {
      active += entry.active() ? 1 : 0;
      warm += entry.warm() ? 1 : 0;
    });
    if (active != registry.active_count() || warm != registry.warm_count()) {
      violations_.add("the registry's counts drifted from its entries");
    }
  }

 public:
  // Invariant 3, when the creating call returns (its own sandbox now counted).
  void check_cap_after_create(const std::string& sandbox_id) {
    const double started = t_create_started;
    std::lock_guard lock(provider_->mutex());
    const auto& registry = provider_->registry();
    const std::size_t tracked = registry.active_count() + registry.warm_count();
    if (tracked <= static_cast<std::size_t>(kReplicas)) return;
    bool reported = false;
    registry.for_each([&](const std::string& id, const core::SandboxEntry& entry) {
      if (!reported && entry.warm() && !entry.teardown && entry.since < started) {
        violations_.add("created " + sandbox_id + " leaving " + std::to_string(tracked) +
                        " tracked sandboxes (replicas=" + std::to_string(kReplicas) +
                        ") while warm " + id + " was left to evict");
        reported = true;
      }
    });
  }

 private:
  const std::shared_ptr<Clock> clock_;
  Violations& violations_;
  const ProviderUnderTest* provider_ = nullptr;  // set before any worker starts

  mutable std::mutex mutex_;               // guards containers_ and live_by_id_
  std::vector<Container> containers_;      // index = incarnation
  std::map<std::string, int> live_by_id_;  // sandbox id → live incarnation
};

struct Conversation {
  std::string user;
  std::string thread;
  std::string sandbox_id;
};

// Invariants 1, 2 and (registry side) 4 over a registry snapshot.
void check_registry(const ProviderUnderTest& provider, LiveBackend& backend,
                    Violations& violations) {
  backend.check_tracked_containers_live();
  std::lock_guard lock(provider.mutex());
  const auto& registry = provider.registry();
  registry.for_each([&](const std::string& id, const core::SandboxEntry& entry) {
    if (entry.active() && !entry.info) violations.add(id + " has a client but no info");
    if (entry.active() && !entry.client) violations.add(id + " has an info but no client");
    if (entry.warm() && entry.client) violations.add(id + " is warm with a client");
    if (entry.info && entry.info->sandbox_id != id) {
      violations.add(id + " holds the info of " + entry.info->sandbox_id);
    }
  });
  for (const auto& [key, id] : registry.conversations()) {
    if (deterministic_sandbox_id(key.thread_id, key.user_id) != id) {
      violations.add(core::to_repr(key) + " is mapped to another conversation's " + id);
    }
    if (!registry.is_active(id)) violations.add(core::to_repr(key) + " maps to inactive " + id);
  }
  const auto check_identity = [&](const std::string& id, const std::optional<ThreadKey>& key,
                                  const char* where) {
    if (key && deterministic_sandbox_id(key->thread_id, key->user_id) != id) {
      violations.add(std::string(where) + " identity of " + id + " is " + core::to_repr(key));
    }
  };
  registry.for_each([&](const std::string& id, const core::SandboxEntry& entry) {
    if (entry.active() || entry.warm()) {
      check_identity(id, entry.identity, entry.active() ? "active" : "warm");
    }
  });
}

TEST(ProviderStressTest, RandomAcquireReleaseDestroyKeepsInvariants) {
  const int total_ops = env_int("SANDBOXD_STRESS_OPS", kDefaultStressOps);
  const unsigned seed = static_cast<unsigned>(
      env_int("SANDBOXD_STRESS_SEED", static_cast<int>(std::random_device{}())));
  SCOPED_TRACE("SANDBOXD_STRESS_SEED=" + std::to_string(seed) +
               " SANDBOXD_STRESS_OPS=" + std::to_string(total_ops));

  TempDir tmp;
  Violations violations;
  auto clock = std::make_shared<SystemClock>();
  auto logger = std::make_shared<CountingLogger>();
  auto backend = std::make_shared<LiveBackend>(clock, violations);
  HookState hooks;

  ProviderDeps deps;
  deps.backend = backend;
  deps.ownership = load_memory_store(clock, logger, tmp.path().string());
  deps.logger = logger;
  deps.clock = clock;
  deps.paths = std::make_shared<const core::Paths>(tmp.path(), tmp.path().string());
  deps.options.replicas = kReplicas;
  deps.options.idle_timeout = 600;
  deps.options.run_background_threads = false;
  deps.options.reconcile_on_start = false;
  deps.hooks = hooks.make_hooks();
  ProviderUnderTest provider(std::move(deps));
  auto restore_create_sandbox = provider.inject(
      &ProviderSeams::create_sandbox,
      [&provider, clock, backend](const std::optional<std::string>& thread, const std::string& id,
                                  const std::string& user,
                                  const ProviderUnderTest::Snapshot& snapshot) {
        t_create_started = clock->monotonic_now();
        std::string created = provider.peer().base_create_sandbox(thread, id, user, snapshot);
        backend->check_cap_after_create(created);
        return created;
      });
  backend->attach(&provider);

  std::vector<Conversation> conversations;
  for (int u = 0; u < kUsers; ++u) {
    for (int t = 0; t < kThreadsPerUser; ++t) {
      const std::string user = "user-" + std::to_string(u);
      const std::string thread = "thread-" + std::to_string(t);
      conversations.push_back({user, thread, deterministic_sandbox_id(thread, user)});
    }
  }

  std::atomic<int> acquires{0}, releases{0}, destroys{0};
  std::atomic<int> being_destroyed_errors{0}, other_errors{0};
  std::mutex error_mutex;
  std::vector<std::string> error_samples;  // guarded by error_mutex
  const auto record_error = [&](const std::string& what) {
    std::lock_guard lock(error_mutex);
    if (error_samples.size() < 10) error_samples.push_back(what);
  };

  const auto started = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < kThreads; ++w) {
    const int ops = total_ops / kThreads + (w < total_ops % kThreads ? 1 : 0);
    workers.emplace_back([&, w, ops] {
      std::mt19937 rng(seed + static_cast<unsigned>(w) * 7919u);
      std::uniform_int_distribution<std::size_t> pick(0, conversations.size() - 1);
      std::uniform_int_distribution<int> dice(0, 99);
      for (int i = 0; i < ops; ++i) {
        const Conversation& c = conversations[pick(rng)];
        const int roll = dice(rng);
        try {
          if (roll < 60) {
            // A turn: acquire, then usually release (sometimes destroy, rarely keep it).
            const std::string id = roll < 50 ? provider->acquire(c.thread, c.user)
                                             : provider->acquire_async(c.thread, c.user).get();
            ++acquires;
            if (id != c.sandbox_id) {
              violations.add("(" + c.user + ", " + c.thread + ") was handed " + id +
                             " instead of its own " + c.sandbox_id);
            }
            const int after = dice(rng);
            if (after < 80) {
              provider->release(id);
              ++releases;
            } else if (after < 95) {
              provider->destroy(id);
              ++destroys;
            }
          } else if (roll < 85) {
            provider->release(c.sandbox_id);
            ++releases;
          } else {
            provider->destroy(c.sandbox_id);
            ++destroys;
          }
        } catch (const SandboxBeingDestroyedError& error) {
          ++being_destroyed_errors;
          record_error(std::string("SandboxBeingDestroyedError: ") + error.what());
        } catch (const std::exception& error) {
          ++other_errors;
          record_error(error.what());
        }
        if (i % kCheckEvery == 0) check_registry(provider, *backend, violations);
      }
    });
  }
  for (auto& worker : workers) worker.join();
  check_registry(provider, *backend, violations);
  provider->shutdown();
  backend->check_all_destroyed_once();
  const auto elapsed = std::chrono::steady_clock::now() - started;

  std::string errors;
  for (const auto& line : error_samples) errors += "  " + line + "\n";
  for (const auto& line : logger->errors()) errors += "  log: " + line + "\n";
  EXPECT_EQ(being_destroyed_errors.load(), 0) << errors;
  EXPECT_EQ(other_errors.load(), 0) << errors;
  EXPECT_EQ(logger->unexpected_errors(), 0) << errors;
  EXPECT_EQ(violations.count(), 0) << violations.report();
  EXPECT_GT(backend->created(), 0u);
  EXPECT_GT(logger->info_count("Evicted"), 0) << "the run never exercised replica eviction";
  EXPECT_GT(logger->info_count("Reclaimed"), 0) << "the run never reclaimed a warm sandbox";
  {
    std::lock_guard lock(provider.mutex());
    EXPECT_EQ(provider.registry().active_count(), 0u);
    EXPECT_EQ(provider.registry().warm_count(), 0u);
    EXPECT_EQ(provider.registry().teardown_count(), 0u);
  }
  std::printf(
      "[stress] %d ops (%d acquire, %d release, %d destroy) in %.2fs; %zu containers "
      "created, %d evicted, %d reclaimed, %d reused; %d registration rollbacks; "
      "warnings:%s\n",
      total_ops, acquires.load(), releases.load(), destroys.load(),
      std::chrono::duration<double>(elapsed).count(), backend->created(),
      logger->info_count("Evicted"), logger->info_count("Reclaimed"), logger->info_count("Reusing"),
      logger->rollbacks(), logger->warning_summary().c_str());
  restore_create_sandbox.restore();  // the seam lives in the provider
  provider.reset();
}

}  // namespace
}  // namespace sandboxd::testing

// Provider: construction, acquisition, registration (SPEC §5.2–§5.11, §12). Teardown, health,
// ownership and background work live in provider_lifecycle.cpp.
#include "sandboxd/core/provider.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <system_error>
#include <utility>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/configured_plugins.hpp"
#include "sandboxd/core/owner_id.hpp"
#include "sandboxd/core/sandbox_id.hpp"
#include "sandboxd/readiness.hpp"

namespace sandboxd::core {

std::string to_repr(const ThreadKey& key) {
  return "(" + python_repr(key.user_id) + ", " + python_repr(key.thread_id) + ")";
}

std::string to_repr(const std::optional<ThreadKey>& key) {
  return key ? to_repr(*key) : "None";
}

FileLockOps FileLockOps::posix_flock() {
  FileLockOps ops;
  ops.open = [](const std::string& path) {
    // O_NOFOLLOW: the thread directory is ours, but a link there is never followed.
    const int fd =
        ::open(path.c_str(), O_CREAT | O_APPEND | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
      throw std::system_error(errno, std::generic_category(), "cannot open lock file " + path);
    }
    return fd;
  };
  ops.lock = [](int fd) {
    while (::flock(fd, LOCK_EX) != 0) {
      if (errno != EINTR) throw std::system_error(errno, std::generic_category(), "flock");
    }
  };
  ops.unlock = [](int fd) { ::flock(fd, LOCK_UN); };
  ops.close = [](int fd) { ::close(fd); };
  return ops;
}

const char* to_string(AcquirePath path) {
  switch (path) {
    case AcquirePath::reused:
      return "reused";
    case AcquirePath::reclaimed:
      return "reclaimed";
    case AcquirePath::discovered:
      return "discovered";
    case AcquirePath::created:
      return "created";
  }
  return "?";
}

namespace {

// Where acquire_traced wants the path of the acquisition running on this thread. A whole
// synchronous acquisition runs on its caller's thread, so the branch that succeeds notes it
// here without every (test-overridable) step having to pass it back.
thread_local AcquirePath* t_acquire_path = nullptr;

void note_acquire_path(AcquirePath path) {
  if (t_acquire_path) *t_acquire_path = path;
}

// Lock-wait tasks only queue a grant on the conversation's lock (they never park in it), so one
// thread serves any number of waiters.
constexpr std::size_t kLockWaitPoolSize = 1;

}  // namespace

Provider::Provider(ProviderDeps deps)
    : backend_(std::move(deps.backend)),
      ownership_(std::move(deps.ownership)),
      logger_(std::move(deps.logger)),
      clock_(std::move(deps.clock)),
      paths_(std::move(deps.paths)),
      mounts_(std::move(deps.mounts)),
      options_(deps.options),
      hooks_(std::move(deps.hooks)),
      blocking_executor_(std::move(deps.blocking_executor)),
      lock_wait_executor_(std::move(deps.lock_wait_executor)) {
  if (!ownership_) throw std::invalid_argument("Provider needs an ownership store");
  if (!logger_) throw std::invalid_argument("Provider needs a logger");
  if (!clock_) clock_ = std::make_shared<SystemClock>();
  if (!paths_) paths_ = std::make_shared<const Paths>(Paths::from_environment());
  if (options_.replicas <= 0) {
    throw std::invalid_argument("replicas must be > 0, got " + std::to_string(options_.replicas));
  }
  if (!hooks_.make_client) {
    hooks_.make_client = [](const std::string& id, const std::string& url) -> ClientPtr {
      return std::make_shared<BasicSandboxClient>(id, url);
    };
  }
  if (!hooks_.wait_until_ready) {
    hooks_.wait_until_ready = [](const std::string& url, double timeout) {
      return wait_for_sandbox_ready(url, timeout);
    };
  }
  if (!hooks_.lark_integration_active) hooks_.lark_integration_active = [](auto&) { return false; };
  if (!hooks_.lark_broker_active) hooks_.lark_broker_active = [](auto&) { return false; };
  if (!mounts_) {
    MountComposerOptions composer;
    composer.ambient_user = hooks_.ambient_user;
    composer.logger = logger_;
    mounts_ = std::make_shared<MountComposer>(paths_, composer);
  }
  async_work_ = make_async_work();
  if (!blocking_executor_) blocking_executor_ = std::make_shared<ThreadPoolExecutor>(4);
  if (!lock_wait_executor_) {
    lock_wait_executor_ = std::make_shared<ThreadPoolExecutor>(kLockWaitPoolSize);
  }
  if (!ownership_->supports_cross_process()) {
    log(LogLevel::warning,
        "Sandbox ownership store cannot coordinate across processes (sandbox.ownership.type: "
        "memory). Run one gateway process per host with it; multi-worker deployments must use a "
        "shared store (sandbox.ownership.use: \"" +
            std::string(kSqliteOwnershipUse) + "\").");
  }
}

Provider::~Provider() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    log(LogLevel::error, std::string("Error during provider shutdown: ") + e.what());
  }
}

std::unique_ptr<Provider> Provider::from_config(const SandboxConfig& config,
                                                std::shared_ptr<Logger> logger,
                                                ProviderHooks hooks) {
  return from_config(config, std::move(logger), std::move(hooks), HostOptions{});
}

std::unique_ptr<Provider> Provider::from_config(const SandboxConfig& config,
                                                std::shared_ptr<Logger> logger, ProviderHooks hooks,
                                                const HostOptions& host) {
  for (const auto& warning : config.warnings) logger->warning(warning);
  auto paths = std::make_shared<const Paths>(Paths::from_environment(config.base_dir));
  // The state directory must be ours before anything is created or opened in it.
  ensure_private_dir(paths->base_dir());
  HostServices services;
  services.logger = logger;
  services.clock = std::make_shared<SystemClock>();
  services.owner_id = host.owner_id ? *host.owner_id : generate_owner_id();
  services.base_dir = paths->base_dir().string();
  ConfiguredPlugins plugins = load_configured_plugins(config, services);
  logger->info("Using sandbox backend " + config.backend.use);

  ProviderDeps deps;
  deps.backend = std::move(plugins.backend);
  deps.ownership = std::move(plugins.ownership);
  deps.logger = logger;
  deps.clock = services.clock;
  deps.paths = paths;
  MountComposerOptions composer;
  composer.skills_container_path = config.skills_container_path;
  composer.ambient_user = hooks.ambient_user;
  composer.logger = logger;
  deps.mounts = std::make_shared<MountComposer>(paths, composer);
  deps.options.replicas = config.replicas;
  deps.options.idle_timeout = config.idle_timeout;
  deps.options.thread_data_mounts = config.thread_data_mounts;
  deps.options.renewal_interval_seconds = config.renewal_interval_seconds;
  deps.hooks = std::move(hooks);
  if (deps.backend->mount_mode_kind() == MountModeKind::contract_negotiated) {
    deps.backend->refresh_capabilities_if_stale();  // first probe here, never in the plugin ctor
  }
  auto provider = std::make_unique<Provider>(std::move(deps));
  if (host.start) provider->start();
  return provider;
}

const std::string& Provider::owner_id() const {
  return ownership_->owner_id();
}

ProviderEventCounts Provider::event_counts() const {
  constexpr auto relaxed = std::memory_order_relaxed;
  return {events_.evictions.load(relaxed),    events_.idle_reaps.load(relaxed),
          events_.adoptions.load(relaxed),    events_.lease_renewals.load(relaxed),
          events_.lease_lapses.load(relaxed), events_.lease_losses.load(relaxed)};
}

Provider::Counts Provider::counts() const {
  std::lock_guard lock(mutex_);
  return {registry_.active.size(), registry_.warm_pool.size(), registry_.local_teardown.size()};
}

std::string Provider::effective_user(const std::optional<std::string>& user_id) const {
  if (user_id && !user_id->empty()) return *user_id;
  if (hooks_.ambient_user) {
    if (auto ambient = hooks_.ambient_user(); ambient && !ambient->empty()) return *ambient;
  }
  return std::string(kDefaultAmbientUser);
}

std::shared_ptr<ThreadLock> Provider::thread_lock(const ThreadKey& key) {
  std::lock_guard lock(mutex_);
  auto& slot = registry_.thread_locks[key];
  if (!slot) slot = std::make_shared<ThreadLock>();
  return slot;
}

ClientPtr Provider::make_client(const std::string& sandbox_id, const std::string& url) {
  return hooks_.make_client(sandbox_id, url);
}

bool Provider::negotiates_contract() const {
  return backend_ && backend_->mount_mode_kind() == MountModeKind::contract_negotiated;
}

// ── mount mode (SPEC §3.6) ───────────────────────────────────────────────────

bool Provider::uses_thread_data_mounts() const {
  if (options_.thread_data_mounts.has_value()) {
    if (!*options_.thread_data_mounts) return false;
    if (negotiates_contract()) {
      return backend_->cached_mount_contract_version() == kSandboxMountContractVersion;
    }
    return true;
  }
  // No backend at all: the uninitialised mount helper, which historically reports mounted.
  if (!backend_) return true;
  return backend_->mount_mode_kind() == MountModeKind::local_bind_mounts;
}

bool Provider::provider_uses_thread_data_mounts() {
  if (negotiates_contract()) backend_->refresh_capabilities_if_stale();
  return uses_thread_data_mounts();
}

bool Provider::sandbox_uses_thread_data_mounts(const std::string& sandbox_id) const {
  if (negotiates_contract() && options_.thread_data_mounts == true) {
    std::lock_guard lock(mutex_);
    InfoPtr info;
    if (auto it = registry_.active.find(sandbox_id);
        it != registry_.active.end() && it->second.info) {
      info = it->second.info;
    } else if (auto warm = registry_.warm_pool.find(sandbox_id);
               warm != registry_.warm_pool.end()) {
      info = warm->second.info;
    }
    if (info) return info->mount_contract_version == kSandboxMountContractVersion;
  }
  return uses_thread_data_mounts();
}

// ── ids and mounts ───────────────────────────────────────────────────────────

std::string Provider::sandbox_id_for_thread(const std::optional<std::string>& thread_id,
                                            const std::string& user_id, const Snapshot& snapshot) {
  if (!thread_id) return random_sandbox_id();
  if (snapshot) return deterministic_sandbox_id(*thread_id, user_id, snapshot->version);
  if (negotiates_contract()) {
    return deterministic_sandbox_id(*thread_id, user_id, backend_->cached_mount_contract_version());
  }
  return deterministic_sandbox_id(*thread_id, user_id);
}

std::vector<Mount> Provider::get_extra_mounts(const std::optional<std::string>& thread_id,
                                              const std::string& user_id) {
  return mounts_->compose_extra_mounts(thread_id, user_id, uses_thread_data_mounts());
}

void Provider::ensure_skills_projection(const std::string& user_id) {
  mounts_->ensure_skills_projection(user_id);
}

// ── acquire (SPEC §5.3, §5.4) ────────────────────────────────────────────────

std::string Provider::acquire(const std::optional<std::string>& thread_id,
                              const std::optional<std::string>& user_id) {
  const std::string user = effective_user(user_id);
  if (!thread_id) return acquire_with_restarts(std::nullopt, user);
  validate_thread_id(*thread_id);
  validate_user_id(user);
  auto lock = thread_lock({user, *thread_id});
  std::lock_guard<ThreadLock> held(*lock);
  return acquire_with_restarts(thread_id, user);
}

AcquireResult Provider::acquire_traced(const std::optional<std::string>& thread_id,
                                       const std::optional<std::string>& user_id) {
  AcquireResult result;
  struct Restore {
    AcquirePath* outer;
    ~Restore() { t_acquire_path = outer; }
  } restore{std::exchange(t_acquire_path, &result.path)};
  result.sandbox_id = acquire(thread_id, user_id);
  return result;
}

Provider::Snapshot Provider::acquisition_contract_snapshot() {
  if (!negotiates_contract()) return std::nullopt;
  backend_->refresh_capabilities_if_stale();
  return backend_->mount_contract_snapshot();
}

std::string Provider::acquire_with_restarts(const std::optional<std::string>& thread_id,
                                            const std::string& user_id) {
  const Deadline teardown_deadline = teardown_wait_deadline();
  int contract_attempts = 0;
  while (true) {
    const Snapshot snapshot = acquisition_contract_snapshot();
    try {
      return acquire_internal(thread_id, user_id, snapshot);
    } catch (const MountContractChangedError& e) {
      if (++contract_attempts >= kMaxContractAttempts) throw;
      log(LogLevel::info, std::string(e.what()) + "; restarting acquisition for user/thread " +
                              user_id + "/" + thread_id.value_or("<anonymous>") +
                              " under the new contract");
    } catch (const SandboxBeingDestroyedError& e) {
      // Our own eviction or a peer may be stopping this conversation's old container right
      // now: wait for that stop to finish, then acquire anew instead of failing the turn.
      if (!wait_out_teardown(e.sandbox_id(), teardown_deadline)) throw;
      log(LogLevel::info, "Teardown of sandbox " + e.sandbox_id() +
                              " finished; retrying acquisition for user/thread " + user_id + "/" +
                              thread_id.value_or("<anonymous>"));
    }
  }
}

std::string Provider::acquire_internal(const std::optional<std::string>& thread_id,
                                       const std::string& user_id, Snapshot snapshot) {
  ensure_skills_projection(user_id);
  if (!snapshot && negotiates_contract()) snapshot = acquisition_contract_snapshot();
  std::optional<std::string> expected;
  if (thread_id && snapshot) expected = sandbox_id_for_thread(thread_id, user_id, snapshot);

  if (auto reused = reuse_in_process_sandbox(thread_id, user_id, expected, false, snapshot)) {
    note_acquire_path(AcquirePath::reused);
    return std::move(*reused);
  }
  const std::string sandbox_id =
      expected ? std::move(*expected) : sandbox_id_for_thread(thread_id, user_id, std::nullopt);
  if (thread_id) {
    std::lock_guard lock(mutex_);
    check_active_identity_locked(sandbox_id, {user_id, *thread_id});
  }
  if (auto reclaimed = reclaim_warm_pool_sandbox(thread_id, sandbox_id, user_id, false, snapshot)) {
    note_acquire_path(AcquirePath::reclaimed);
    return std::move(*reclaimed);
  }
  // A teardown of this very id, by this process (eviction, idle reap) or by a peer, is the one
  // thing that makes discover-or-create meet a dying container: let it finish first.
  if (teardown_in_progress(sandbox_id) &&
      !wait_out_teardown(sandbox_id, teardown_wait_deadline())) {
    throw SandboxBeingDestroyedError(sandbox_id);
  }
  if (thread_id) return discover_or_create_with_lock(*thread_id, sandbox_id, user_id, snapshot);
  note_acquire_path(AcquirePath::created);
  return create_sandbox(std::nullopt, sandbox_id, user_id, snapshot);
}

// ── identity guards (SPEC §4.3) ──────────────────────────────────────────────

void Provider::check_active_identity_locked(const std::string& sandbox_id,
                                            const ThreadKey& key) const {
  auto entry = registry_.active.find(sandbox_id);
  if (entry == registry_.active.end() || (!entry->second.client && !entry->second.info)) return;
  std::optional<ThreadKey> stored;
  if (entry->second.identity) {
    stored = entry->second.identity;
  } else {
    const std::vector<ThreadKey> mapped = registry_.thread_map.keys_of(sandbox_id);
    if (mapped.size() == 1) stored = mapped.front();
  }
  if (stored && *stored != key) {
    throw SandboxIdentityCollisionError("sandbox ID collision for " + sandbox_id +
                                        ": tracked identity is " + to_repr(stored) +
                                        ", requested identity is " + to_repr(key));
  }
}

void Provider::check_warm_identity_locked(const std::string& sandbox_id,
                                          const ThreadKey& key) const {
  auto it = registry_.warm_pool.find(sandbox_id);
  if (it != registry_.warm_pool.end() && it->second.identity && *it->second.identity != key) {
    throw SandboxIdentityCollisionError("sandbox ID collision for " + sandbox_id +
                                        ": tracked identity is " + to_repr(it->second.identity) +
                                        ", requested identity is " + to_repr(key));
  }
}

void Provider::install_active_locked(const std::string& sandbox_id, ClientPtr client, InfoPtr info,
                                     const std::optional<ThreadKey>& key) {
  // Shutdown stops only what it snapshotted: anything installed later would never be stopped.
  // Refusing makes a creation that lost the race destroy its container (register_created).
  if (registry_.shutdown) {
    throw std::runtime_error("the provider is shutting down; not handing out sandbox " +
                             sandbox_id);
  }
  registry_.spare_warm.erase(registry_.warm_pool, sandbox_id);
  ActiveEntry& entry = registry_.spare_active(registry_.active, sandbox_id);
  entry.client = std::move(client);
  entry.info = std::move(info);
  entry.identity = key;
  entry.last_activity = now();
  if (key) registry_.thread_map.assign(*key, sandbox_id);
}

// ── revalidation (SPEC §5.7) ─────────────────────────────────────────────────

CreateRequest Provider::build_create_request(const std::optional<std::string>& thread_id,
                                             const std::string& sandbox_id,
                                             const std::string& user_id) {
  CreateRequest request;
  request.thread_id = thread_id;
  request.sandbox_id = sandbox_id;
  request.extra_mounts = get_extra_mounts(thread_id, user_id);
  request.user_id = user_id;
  request.provision_lark_cli_runtime = hooks_.lark_integration_active(user_id);
  request.provision_lark_cli_broker = hooks_.lark_broker_active(user_id);
  return request;
}

void Provider::check_reported_identity(const SandboxInfo& info, const std::string& thread_id,
                                       const std::string& user_id) const {
  // A verified identity that differs is a collision: nothing is destroyed or re-created.
  if ((info.user_id && *info.user_id != user_id) ||
      (info.thread_id && *info.thread_id != thread_id)) {
    throw SandboxIdentityCollisionError(
        "sandbox ID collision for " + info.sandbox_id + ": backend reports identity " +
        to_repr(ThreadKey{info.user_id.value_or(""), info.thread_id.value_or("")}) +
        ", requested identity is " + to_repr(ThreadKey{user_id, thread_id}));
  }
}

InfoPtr Provider::revalidate_through_create(const std::string& thread_id,
                                            const std::string& sandbox_id,
                                            const std::string& user_id, const Snapshot& snapshot) {
  auto validated = std::make_shared<const SandboxInfo>(
      backend_->create(build_create_request(thread_id, sandbox_id, user_id)));
  check_reported_identity(*validated, thread_id, user_id);
  if (snapshot && validated->mount_contract_version != snapshot->version) {
    throw MountContractChangedError(snapshot->version, validated->mount_contract_version);
  }
  return validated;
}

void Provider::install_validated_info(const std::string& sandbox_id, const InfoPtr& examined,
                                      const InfoPtr& validated) {
  ClientPtr replaced;
  ClientPtr fresh;
  if (validated->sandbox_url != examined->sandbox_url) {
    fresh = make_client(sandbox_id, validated->sandbox_url);
  }
  {
    std::lock_guard lock(mutex_);
    auto it = registry_.active.find(sandbox_id);
    if (it != registry_.active.end() && it->second.info && it->second.info == examined) {
      it->second.info = validated;
      if (fresh) {
        replaced = std::move(it->second.client);
        it->second.client = std::move(fresh);
        fresh.reset();
      }
    }
  }
  close_client(fresh, [&] { return "Error closing unused sandbox client " + sandbox_id; });
  close_client(replaced,
               [&] { return "Error closing sandbox " + sandbox_id + " after its URL changed"; });
}

// ── reuse (SPEC §5.5) ────────────────────────────────────────────────────────

std::optional<std::string> Provider::reuse_in_process_sandbox(
    const std::optional<std::string>& thread_id, const std::string& user_id,
    const std::optional<std::string>& expected_sandbox_id, bool post_lock,
    const Snapshot& snapshot) {
  if (!thread_id) return std::nullopt;
  const ThreadKey key{user_id, *thread_id};
  std::string sandbox_id;
  InfoPtr info;
  bool in_teardown = false;  // logged once the registry mutex is let go
  {
    std::lock_guard lock(mutex_);
    auto mapping = registry_.thread_map.find(key);
    if (mapping == registry_.thread_map.end()) return std::nullopt;
    sandbox_id = mapping->second;
    if (expected_sandbox_id && *expected_sandbox_id != sandbox_id) {
      // Created under another mount contract: the old entry is left to the idle reaper.
      registry_.thread_map.erase(mapping);
      return std::nullopt;
    }
    in_teardown = registry_.local_teardown.count(sandbox_id) > 0;
    if (!in_teardown) {
      auto entry = registry_.active.find(sandbox_id);
      if (entry == registry_.active.end() || !entry->second.client) {
        registry_.thread_map.erase(mapping);
        return std::nullopt;
      }
      info = entry->second.info;
    }
  }
  if (in_teardown) {
    log(LogLevel::info,
        "Not reusing sandbox " + sandbox_id + ": it is being torn down by this instance");
    return std::nullopt;
  }

  if (info) {
    if (check_alive(sandbox_id, *info) == false) {
      drop_unhealthy_sandbox(sandbox_id, "container is no longer running", info);
      return std::nullopt;
    }
    if (backend_ && backend_->requires_create_validation()) {
      install_validated_info(sandbox_id, info,
                             revalidate_through_create(*thread_id, sandbox_id, user_id, snapshot));
    }
  }

  {
    std::lock_guard lock(mutex_);
    auto mapping = registry_.thread_map.find(key);
    if (mapping == registry_.thread_map.end() || mapping->second != sandbox_id) {
      return std::nullopt;
    }
    auto entry = registry_.active.find(sandbox_id);
    if (entry == registry_.active.end() || !entry->second.client) {
      registry_.thread_map.erase(mapping);
      return std::nullopt;
    }
    entry->second.last_activity = now();
  }
  log_lazily(LogLevel::info, [&] {
    return "Reusing in-process sandbox " + sandbox_id + " for user/thread " + user_id + "/" +
           *thread_id + (post_lock ? " (post-lock check)" : "");
  });

  try {
    publish_ownership(sandbox_id);
  } catch (const SandboxBeingDestroyedError& e) {
    log(LogLevel::info, std::string("Not reusing sandbox ") + sandbox_id + ": " + e.what());
    forget(sandbox_id, std::nullopt);
    return std::nullopt;
  }

  std::lock_guard lock(mutex_);
  if (registry_.local_teardown.count(sandbox_id) || !registry_.has_client(sandbox_id)) {
    return std::nullopt;
  }
  return sandbox_id;
}

// ── warm reclaim (SPEC §5.6) ─────────────────────────────────────────────────

std::optional<std::string> Provider::reclaim_warm_pool_sandbox(
    const std::optional<std::string>& thread_id, const std::string& sandbox_id,
    const std::string& user_id, bool post_lock, const Snapshot& snapshot) {
  if (!thread_id) return std::nullopt;
  const ThreadKey key{user_id, *thread_id};
  InfoPtr info;
  {
    std::lock_guard lock(mutex_);
    auto warm = registry_.warm_pool.find(sandbox_id);
    if (warm == registry_.warm_pool.end()) return std::nullopt;
    check_warm_identity_locked(sandbox_id, key);
    if (registry_.local_teardown.count(sandbox_id)) return std::nullopt;
    info = warm->second.info;
  }

  if (check_alive(sandbox_id, *info) == false) {
    drop_unhealthy_sandbox(sandbox_id, "warm-pool container is no longer running", info);
    return std::nullopt;
  }
  if (backend_ && backend_->requires_create_validation()) {
    info = revalidate_through_create(*thread_id, sandbox_id, user_id, snapshot);
  }

  // Publish before the warm→active move: a refusal leaves the entry warm and the lease as is.
  try {
    publish_ownership(sandbox_id);
  } catch (const SandboxBeingDestroyedError& e) {
    log(LogLevel::info,
        std::string("Not reclaiming warm-pool sandbox ") + sandbox_id + ": " + e.what());
    forget(sandbox_id, std::nullopt);
    return std::nullopt;
  }

  ClientPtr client = make_client(sandbox_id, info->sandbox_url);
  {
    std::lock_guard lock(mutex_);
    if (registry_.local_teardown.count(sandbox_id)) {
      client.reset();
    } else {
      check_warm_identity_locked(sandbox_id, key);
      if (!registry_.warm_pool.count(sandbox_id)) {
        client.reset();
      } else {
        install_active_locked(sandbox_id, client, info, key);
      }
    }
  }
  if (!client) return std::nullopt;
  log_lazily(LogLevel::info, [&] {
    return "Reclaimed warm-pool sandbox " + sandbox_id + " for user/thread " + user_id + "/" +
           *thread_id + " at " + info->sandbox_url + (post_lock ? " (post-lock check)" : "");
  });
  return sandbox_id;
}

// ── discover-or-create (SPEC §5.8) ───────────────────────────────────────────

std::optional<std::string> Provider::recheck_cached_sandbox(const std::string& thread_id,
                                                            const std::string& sandbox_id,
                                                            const std::string& user_id,
                                                            const Snapshot& snapshot) {
  const std::optional<std::string> expected =
      snapshot ? std::optional<std::string>(sandbox_id) : std::nullopt;
  if (auto reused = reuse_in_process_sandbox(thread_id, user_id, expected, true, snapshot)) {
    note_acquire_path(AcquirePath::reused);
    return reused;
  }
  auto reclaimed = reclaim_warm_pool_sandbox(thread_id, sandbox_id, user_id, true, snapshot);
  if (reclaimed) note_acquire_path(AcquirePath::reclaimed);
  return reclaimed;
}

std::string Provider::discover_or_create_with_lock(const std::string& thread_id,
                                                   const std::string& sandbox_id,
                                                   const std::string& user_id,
                                                   const Snapshot& snapshot) {
  paths_->ensure_thread_dirs(thread_id, user_id);
  const Paths::ThreadDirsEnsured ensured(thread_id, user_id);  // the mount composition skips
  const std::string lock_path = paths_->lock_file(thread_id, user_id, sandbox_id).string();
  const int handle = hooks_.file_lock.open(lock_path);
  bool locked = false;
  struct Finally {
    std::function<void()> run;
    ~Finally() { run(); }
  } finally{[&] {
    if (locked) hooks_.file_lock.unlock(handle);
    hooks_.file_lock.close(handle);
  }};
  hooks_.file_lock.lock(handle);
  locked = true;

  if (auto cached = recheck_cached_sandbox(thread_id, sandbox_id, user_id, snapshot)) {
    return *cached;
  }
  if (backend_->requires_create_validation()) {
    note_acquire_path(AcquirePath::created);
    return create_sandbox(thread_id, sandbox_id, user_id, snapshot);
  }
  if (auto discovered = backend_->discover(sandbox_id)) {
    note_acquire_path(AcquirePath::discovered);
    return register_discovered_sandbox(thread_id, std::make_shared<const SandboxInfo>(*discovered),
                                       user_id);
  }
  note_acquire_path(AcquirePath::created);
  return create_sandbox(thread_id, sandbox_id, user_id, snapshot);
}

// ── registration (SPEC §5.9) ─────────────────────────────────────────────────

std::string Provider::register_discovered_sandbox(const std::string& thread_id, InfoPtr info,
                                                  const std::string& user_id) {
  const std::string& sandbox_id = info->sandbox_id;
  const ThreadKey key{user_id, thread_id};
  check_reported_identity(*info, thread_id, user_id);
  {
    std::lock_guard lock(mutex_);
    // A container this process is stopping must not be re-registered: its name would collide.
    if (registry_.local_teardown.count(sandbox_id)) throw SandboxBeingDestroyedError(sandbox_id);
    check_active_identity_locked(sandbox_id, key);
    check_warm_identity_locked(sandbox_id, key);
  }
  ClientPtr client = make_client(sandbox_id, info->sandbox_url);
  try {
    publish_ownership(sandbox_id);
    std::lock_guard lock(mutex_);
    if (registry_.local_teardown.count(sandbox_id)) throw SandboxBeingDestroyedError(sandbox_id);
    check_active_identity_locked(sandbox_id, key);
    check_warm_identity_locked(sandbox_id, key);
    install_active_locked(sandbox_id, client, info, key);
  } catch (const std::exception&) {
    close_client(client, [&] {
      return "Error closing sandbox " + sandbox_id + " after failed ownership publish";
    });
    throw;
  }
  log(LogLevel::info, "Discovered existing sandbox " + sandbox_id + " for user/thread " + user_id +
                          "/" + thread_id + " at " + info->sandbox_url);
  return sandbox_id;
}

std::string Provider::register_created_sandbox(const std::optional<std::string>& thread_id,
                                               const std::string& sandbox_id, InfoPtr info,
                                               const std::string& user_id) {
  ClientPtr client = make_client(sandbox_id, info->sandbox_url);
  std::optional<ThreadKey> key;
  if (thread_id) key = ThreadKey{user_id, *thread_id};
  try {
    if (key) {
      std::lock_guard lock(mutex_);
      check_active_identity_locked(sandbox_id, *key);
      check_warm_identity_locked(sandbox_id, *key);
    }
    publish_ownership(sandbox_id);
    std::lock_guard lock(mutex_);
    if (key) {
      check_active_identity_locked(sandbox_id, *key);
      check_warm_identity_locked(sandbox_id, *key);
    }
    install_active_locked(sandbox_id, client, info, key);
  } catch (const SandboxIdentityCollisionError&) {
    // The id belongs to another tenant's tracked sandbox: never touch that container.
    close_client(client, [&] {
      return "Error closing sandbox " + sandbox_id + " during ownership rollback";
    });
    throw;
  } catch (const std::exception& e) {
    log(LogLevel::error,
        "Could not register new sandbox " + sandbox_id +
            "; destroying it rather than leaking an untracked container: " + e.what());
    close_client(client, [&] {
      return "Error closing sandbox " + sandbox_id + " during ownership rollback";
    });
    try {
      backend_->destroy(*info);
    } catch (const std::exception& destroy_error) {
      log(LogLevel::error, "Failed to destroy sandbox " + sandbox_id +
                               " after registration failure: " + destroy_error.what());
    }
    throw;
  }
  log(LogLevel::info, "Created sandbox " + sandbox_id + " for thread " +
                          thread_id.value_or("<anonymous>") + " at " + info->sandbox_url);
  return sandbox_id;
}

// ── create (SPEC §5.10, §5.11) ───────────────────────────────────────────────

std::string Provider::create_sandbox(const std::optional<std::string>& thread_id,
                                     const std::string& sandbox_id, const std::string& user_id,
                                     const Snapshot& snapshot) {
  const CreateRequest request = build_create_request(thread_id, sandbox_id, user_id);

  // This creation holds a replica slot from its capacity check until it is registered or has
  // failed, so concurrent creations count each other instead of all seeing the same free slot.
  {
    std::lock_guard lock(mutex_);
    ++registry_.creating[sandbox_id];
  }
  struct Uncount {
    Provider* self;
    const std::string& id;
    ~Uncount() {
      std::lock_guard lock(self->mutex_);
      auto it = self->registry_.creating.find(id);
      if (it != self->registry_.creating.end() && --it->second <= 0) {
        self->registry_.creating.erase(it);
      }
    }
  } uncount{this, sandbox_id};
  // Evict until within the cap: after a burst beyond the soft limit one eviction per create
  // would leave warm sandboxes running above it.
  auto make_room = [this, &sandbox_id] {
    while (true) {
      std::size_t in_use = 0;
      {
        std::lock_guard lock(mutex_);
        in_use = replica_slots_in_use_locked(sandbox_id);
      }
      if (in_use < static_cast<std::size_t>(options_.replicas)) break;
      if (auto evicted = evict_oldest_warm()) {
        log(LogLevel::info, "Evicted warm-pool sandbox " + *evicted +
                                " to stay within replicas=" + std::to_string(options_.replicas));
        continue;
      }
      log(LogLevel::warning, "All " + std::to_string(options_.replicas) +
                                 " replica slots are in active use; creating sandbox " +
                                 sandbox_id + " beyond the soft limit");
      break;
    }
  };
  // On a real engine a stop and a create each take a second or so: the eviction's stops run
  // beside the backend create instead of before it (issue 10). The creating call still waits
  // for them before it registers its sandbox, and on every way out, so the oldest warm
  // sandbox has been destroyed, once, by the time it returns (SPEC §5.10).
  bool over_cap = false;
  {
    std::lock_guard lock(mutex_);
    over_cap =
        replica_slots_in_use_locked(sandbox_id) >= static_cast<std::size_t>(options_.replicas);
  }
  std::future<void> room;
  if (over_cap) {
    try {
      room = std::async(std::launch::async, [this, make_room] {
        try {
          make_room();
        } catch (const std::exception& e) {
          log(LogLevel::error, std::string("Evicting a warm-pool sandbox failed: ") + e.what());
        }
      });
    } catch (const std::system_error&) {
      make_room();  // no thread to spare: evict first, as before
    }
  }
  struct WaitForRoom {
    std::future<void>& room;
    ~WaitForRoom() {
      if (room.valid()) room.wait();
    }
  } wait_for_room{room};

  // A contract change found by the create itself means the backend made (or found) an instance
  // under the id of the old contract. The acquisition restarts under a new id, so nothing would
  // ever track or stop this one: destroy it now, unless a peer holds its lease.
  InfoPtr info;
  try {
    info = std::make_shared<const SandboxInfo>(backend_->create(request));
  } catch (const MountContractChangedError& changed) {
    SandboxInfo stale;
    stale.sandbox_id = sandbox_id;
    stale.user_id = request.user_id;
    stale.thread_id = request.thread_id;
    destroy_untracked_creation(sandbox_id, stale,
                               "sandbox " + sandbox_id + " created under mount contract " +
                                   std::to_string(changed.current_version()) + " instead of " +
                                   std::to_string(changed.previous_version()));
    throw;
  }
  if (snapshot && backend_->requires_create_validation() &&
      info->mount_contract_version != snapshot->version) {
    destroy_untracked_creation(sandbox_id, *info,
                               "sandbox " + sandbox_id + " created under mount contract " +
                                   std::to_string(info->mount_contract_version) + " instead of " +
                                   std::to_string(snapshot->version));
    throw MountContractChangedError(snapshot->version, info->mount_contract_version);
  }
  if (!hooks_.wait_until_ready(info->sandbox_url, options_.readiness_timeout_seconds)) {
    destroy_unready_sandbox(sandbox_id, *info);
    throw std::runtime_error("Sandbox " + sandbox_id +
                             " failed to become ready within timeout at " + info->sandbox_url);
  }
  if (room.valid()) room.get();
  return register_created_sandbox(thread_id, sandbox_id, info, user_id);
}

std::size_t Provider::replica_slots_in_use_locked(const std::string& creating_id) const {
  std::size_t in_use = registry_.active.size() + registry_.warm_pool.size();
  for (const auto& [id, count] : registry_.creating) {
    // A creation already registered is counted as active, not twice.
    if (id == creating_id || registry_.active.count(id) || registry_.warm_pool.count(id)) {
      continue;
    }
    in_use += static_cast<std::size_t>(count);
  }
  return in_use;
}

void Provider::destroy_unready_sandbox(const std::string& sandbox_id, const SandboxInfo& info) {
  destroy_untracked_creation(sandbox_id, info, "unready sandbox " + sandbox_id);
}

void Provider::destroy_untracked_creation(const std::string& sandbox_id, const SandboxInfo& info,
                                          const std::string& what) {
  const bool reserved = reserve_local_teardown(sandbox_id, [&] {
    return !registry_.has_client(sandbox_id) && !registry_.has_info(sandbox_id) &&
           !registry_.warm_pool.count(sandbox_id);
  });
  if (!reserved) {
    log(LogLevel::warning,
        "Not destroying " + what + ": adopted or being torn down by this instance");
    return;
  }
  struct Finish {
    Provider* self;
    const std::string& id;
    ~Finish() { self->finish_local_teardown(id); }
  } finish{this, sandbox_id};
  if (!claim_ownership(sandbox_id, true)) {
    log(LogLevel::warning,
        "Not destroying " + what + ": owned by another instance or ownership unavailable");
    return;
  }
  log(LogLevel::info, "Destroying " + what);
  with_held_teardown_lease(sandbox_id, [&] {
    try {
      backend_->destroy(info);
    } catch (const std::exception& e) {
      log(LogLevel::warning, "Error destroying " + what + ": " + e.what());
    }
  });
}

// ── the registry as data (hosts that persist it between processes) ───────────

TrackedSandbox Provider::tracked_active(const ActiveEntry& entry) const {
  TrackedSandbox tracked;
  tracked.info = *entry.info;
  tracked.conversation = entry.identity;
  tracked.since = to_wall(entry.last_activity);
  return tracked;
}

TrackedSandbox Provider::tracked_warm(const WarmEntry& entry) const {
  TrackedSandbox tracked;
  tracked.info = *entry.info;
  tracked.warm = true;
  tracked.since = to_wall(entry.released_at);
  tracked.conversation = entry.identity;
  return tracked;
}

RegistrySnapshot Provider::export_registry() const {
  RegistrySnapshot snapshot;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [id, entry] : registry_.active) {
      if (entry.info) snapshot.sandboxes.push_back(tracked_active(entry));
    }
    for (const auto& [id, entry] : registry_.warm_pool) {
      snapshot.sandboxes.push_back(tracked_warm(entry));
    }
    for (const auto& [id, first_seen] : registry_.unowned_since) {
      snapshot.unowned_since.emplace(id, to_wall(first_seen));
    }
  }
  std::sort(snapshot.sandboxes.begin(), snapshot.sandboxes.end(),
            [](const TrackedSandbox& a, const TrackedSandbox& b) {
              return a.info.sandbox_id < b.info.sandbox_id;
            });
  return snapshot;
}

std::optional<TrackedSandbox> Provider::find(const std::string& sandbox_id) const {
  std::lock_guard lock(mutex_);
  if (auto it = registry_.active.find(sandbox_id);
      it != registry_.active.end() && it->second.info) {
    return tracked_active(it->second);
  }
  if (auto it = registry_.warm_pool.find(sandbox_id); it != registry_.warm_pool.end()) {
    return tracked_warm(it->second);
  }
  return std::nullopt;
}

void Provider::import_registry(const RegistrySnapshot& snapshot) {
  // Clients are made outside the registry mutex (the factory is a host hook).
  std::vector<std::pair<const TrackedSandbox*, ClientPtr>> active;
  for (const auto& tracked : snapshot.sandboxes) {
    if (!tracked.warm) {
      active.emplace_back(&tracked, make_client(tracked.info.sandbox_id, tracked.info.sandbox_url));
    }
  }
  std::lock_guard lock(mutex_);
  for (const auto& tracked : snapshot.sandboxes) {
    const std::string& id = tracked.info.sandbox_id;
    if (registry_.has_info(id) || registry_.warm_pool.count(id) || !tracked.warm) continue;
    registry_.warm_pool[id] = WarmEntry{std::make_shared<const SandboxInfo>(tracked.info),
                                        from_wall(tracked.since), tracked.conversation};
  }
  for (auto& [tracked, client] : active) {
    const std::string& id = tracked->info.sandbox_id;
    if (registry_.has_info(id) || registry_.warm_pool.count(id)) continue;
    install_active_locked(id, std::move(client), std::make_shared<const SandboxInfo>(tracked->info),
                          tracked->conversation);
    registry_.active[id].last_activity = from_wall(tracked->since);
  }
  for (const auto& [id, first_seen] : snapshot.unowned_since) {
    registry_.unowned_since.try_emplace(id, from_wall(first_seen));
  }
}

// ── get (SPEC §5.14) ─────────────────────────────────────────────────────────

ClientPtr Provider::get(const std::string& sandbox_id) {
  std::lock_guard lock(mutex_);
  auto it = registry_.active.find(sandbox_id);
  if (it == registry_.active.end() || !it->second.client) return nullptr;
  it->second.last_activity = now();
  return it->second.client;
}

// ── reconciliation reconnect (SPEC §5.19) ────────────────────────────────────

std::optional<ReconciliationIdentity> Provider::prepare_sandbox_reconciliation_identity(
    const std::string& sandbox_id) {
  if (!backend_) return std::nullopt;
  SandboxDiscoveryResult result;
  try {
    result = backend_->discover_for_reconciliation(sandbox_id);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (result.status != SandboxDiscoveryResult::Status::found || !result.incarnation_id ||
      result.incarnation_id->empty()) {
    return std::nullopt;
  }
  return ReconciliationIdentity{reconciliation_provider_key(), result.backend_namespace,
                                *result.incarnation_id};
}

ReconnectResult Provider::reconnect_sandbox_for_reconciliation(
    const std::string& sandbox_id, const std::string& thread_id, const std::string& user_id,
    const ReconciliationIdentity& identity) {
  using Status = SandboxDiscoveryResult::Status;
  if (identity.provider_key != reconciliation_provider_key() || !backend_) return {};
  SandboxDiscoveryResult result;
  try {
    result = backend_->discover_for_reconciliation(sandbox_id);
  } catch (const std::exception&) {
    return {};
  }
  if (result.status == Status::unknown) return {};
  if (result.backend_namespace != identity.backend_namespace) return {};
  if (result.status == Status::absent) return {Status::absent, nullptr, false};
  if (result.incarnation_id != identity.incarnation_id) return {Status::absent, nullptr, false};
  if (!result.info) return {};
  if (result.info->thread_id != thread_id || result.info->user_id != user_id) return {};
  return {Status::found, make_client(sandbox_id, result.info->sandbox_url), true};
}

}  // namespace sandboxd::core

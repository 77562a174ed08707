// Provider: construction, the public API (each a call into Impl), mount mode, ids and mounts,
// and the registry as data (design §3.6, §4, §5.2, §5.14, §5.19).
#include "sandboxd/core/provider.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#include "config/sandbox_options.hpp"
#include "provider_impl.hpp"
#include "running_cancellation.hpp"
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
    case AcquirePath::claimed:
      return "claimed";
    case AcquirePath::restored:
      return "restored";
    case AcquirePath::resumed:
      return "resumed";
    case AcquirePath::discovered:
      return "discovered";
    case AcquirePath::created:
      return "created";
  }
  return "?";
}

std::optional<AcquirePath> acquire_path_from(std::string_view word) {
  for (const AcquirePath path :
       {AcquirePath::reused, AcquirePath::reclaimed, AcquirePath::resumed, AcquirePath::discovered,
        AcquirePath::created, AcquirePath::claimed, AcquirePath::restored}) {
    if (word == to_string(path)) return path;
  }
  return std::nullopt;
}

namespace {

// Lock-wait tasks only queue a grant on the conversation's lock (they never park in it), so one
// thread serves any number of waiters.
constexpr std::size_t kLockWaitPoolSize = 1;

}  // namespace

// ── construction ─────────────────────────────────────────────────────────────

Provider::Impl::Impl(ProviderDeps deps)
    : backend_(std::move(deps.backend)),
      ownership_(std::move(deps.ownership)),
      logger_(std::move(deps.logger)),
      clock_(std::move(deps.clock)),
      paths_(std::move(deps.paths)),
      planner_(std::move(deps.planner)),
      options_(deps.options),
      hooks_(std::move(deps.hooks)),
      policy_(std::move(deps.policy)),
      event_log_(std::move(deps.events)),
      teardown_(ownership_, logger_, deps.options.renewal_interval_seconds,
                deps.options.teardown_join_timeout_seconds),
      blocking_executor_(std::move(deps.blocking_executor)),
      lock_wait_executor_(std::move(deps.lock_wait_executor)) {
  if (!ownership_) throw std::invalid_argument("Provider needs an ownership store");
  if (!logger_) throw std::invalid_argument("Provider needs a logger");
  if (!clock_) clock_ = std::make_shared<SystemClock>();
  if (!paths_) paths_ = std::make_shared<const Paths>(Paths::from_environment());
  if (!policy_) policy_ = default_lifecycle_policy();
  check_provider_options(options_);
  if (backend_) {
    negotiation_ = backend_capability<MountContractNegotiation>(*backend_);
    if (backend_->mount_mode_kind() == MountModeKind::contract_negotiated && !negotiation_) {
      throw std::invalid_argument(
          "the backend says its mounts are contract_negotiated but offers no "
          "MountContractNegotiation capability (sandboxd/capabilities.hpp)");
    }
    pausing_ = backend_capability<SandboxPausing>(*backend_);
    slots_ = backend_capability<PreStartedSlots>(*backend_);
    namespaced_ = backend_capability<NamespacedSandboxes>(*backend_);
    network_policy_ = backend_capability<SandboxNetworkPolicy>(*backend_);
    isolation_ = backend_capability<IsolationKeeping>(*backend_);
    writable_layers_ = backend_capability<WritableLayerUsage>(*backend_);
    snapshots_ = backend_capability<SandboxSnapshots>(*backend_);
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
  if (!planner_) {
    MountComposerOptions composer;
    composer.ambient_user = hooks_.ambient_user;
    composer.logger = logger_;
    planner_ = std::make_shared<HostCreationPlanner>(paths_, composer);
  }
  snapshot_store_ = std::make_unique<SnapshotStore>(paths_->base_dir());
  backend_use_ = deps.backend_use;
  async_ = std::make_shared<AsyncAcquisitions>();
  if (!blocking_executor_) blocking_executor_ = std::make_shared<ThreadPoolExecutor>(4);
  if (!lock_wait_executor_) {
    lock_wait_executor_ = std::make_shared<ThreadPoolExecutor>(kLockWaitPoolSize);
  }
  if (options_.pause_after_seconds > 0 && !pausing_) {
    log(LogLevel::warning,
        "pause_after_seconds is set but the backend cannot pause sandboxes (no SandboxPausing "
        "capability); released sandboxes stay warm until idle_timeout");
  }
  if (enforces_ceilings()) {
    ledger_ = store_capability<CapacityLedger>(*ownership_);
    if (ledger_) {
      log(LogLevel::info,
          "Sandbox ceilings are deployment-wide: every gateway sharing this lease "
          "store counts against them (reservations expire one lease TTL after "
          "their gateway stops renewing them)");
    } else if (ownership_->supports_cross_process()) {
      log(LogLevel::warning,
          "The sandbox ceilings hold per gateway process: this lease store keeps no capacity "
          "ledger, so gateways sharing it each keep their own count");
    }
  }
  if (!ownership_->supports_cross_process()) {
    log(LogLevel::warning,
        "Sandbox ownership store cannot coordinate across processes (sandbox.ownership.type: "
        "memory). Run one gateway process per host with it; multi-worker deployments must use a "
        "shared store (sandbox.ownership.use: \"" +
            std::string(kSqliteOwnershipUse) + "\").");
  }
}

Provider::Impl::~Impl() {
  try {
    shutdown();
  } catch (const std::exception& e) {
    log(LogLevel::error, std::string("Error during provider shutdown: ") + e.what());
  }
}

Provider::Provider(ProviderDeps deps) : impl_(std::make_unique<Impl>(std::move(deps))) {}

Provider::~Provider() = default;

std::unique_ptr<Provider> Provider::from_config(const SandboxConfig& config,
                                                std::shared_ptr<Logger> logger,
                                                ProviderHooks hooks) {
  return from_config(config, std::move(logger), std::move(hooks), HostOptions{});
}

std::unique_ptr<Provider> Provider::from_config(const SandboxConfig& config,
                                                std::shared_ptr<Logger> logger, ProviderHooks hooks,
                                                const HostOptions& host) {
  for (const auto& warning : config.warnings) logger->warning(warning);
  // A size key of the config (checked when a file is read; an embedder's may not be).
  const auto bytes_of = [](const std::optional<std::string>& text, const char* fallback,
                           const char* key) {
    const auto bytes = parse_size(text.value_or(fallback));
    if (!bytes) {
      throw ConfigError(std::string("sandbox.") + key +
                        ": expected a size such as \"10g\" or a number of bytes, got \"" +
                        text.value_or("") + "\"");
    }
    return *bytes;
  };
  Paths resolved = Paths::from_environment(config.base_dir);
  // The state directory must be ours before anything is created or opened in it.
  ensure_private_dir(resolved.base_dir());
  // Each conversation's storage bound, with the mechanism this host gives (docs/storage.md).
  resolved.set_storage(ThreadStorage::for_base_dir(
      resolved.base_dir(), bytes_of(config.disk_limit, kDefaultDiskLimit, "disk_limit"),
      config.disk_limit ? "sandbox.disk_limit" : "the default"));
  logger->log(resolved.storage().bounded() ? LogLevel::debug : LogLevel::info,
              "Conversation storage: " + resolved.storage().description());
  auto paths = std::make_shared<const Paths>(std::move(resolved));
  HostServices services;
  services.logger = logger;
  services.clock = std::make_shared<SystemClock>();
  services.owner_id = host.owner_id ? *host.owner_id : generate_owner_id();
  services.base_dir = paths->base_dir().string();
  ConfiguredPlugins plugins = load_configured_plugins(config, services);
  logger->info("Using sandbox backend " + config.backend.use);

  ProviderDeps deps;
  deps.backend = std::move(plugins.backend);
  deps.backend_use = config.backend.use;
  deps.ownership = std::move(plugins.ownership);
  deps.logger = logger;
  deps.clock = services.clock;
  deps.paths = paths;
  MountComposerOptions composer;
  composer.skills_container_path = config.skills_container_path;
  composer.ambient_user = hooks.ambient_user;
  composer.logger = logger;
  deps.planner = std::make_shared<HostCreationPlanner>(paths, composer);
  copy_sandbox_options(config, deps.options);
  deps.options.min_free_disk_bytes =
      bytes_of(config.min_free_disk, kDefaultMinFreeDisk, "min_free_disk");
  deps.options.snapshot_limits.max_per_user =
      static_cast<std::size_t>(config.max_snapshots_per_user);
  deps.options.snapshot_limits.max_bytes_per_user =
      bytes_of(config.max_snapshot_bytes_per_user, "20g", "max_snapshot_bytes_per_user");
  deps.options.snapshot_limits.ttl_seconds = config.snapshot_ttl_seconds;
  deps.options.max_waiting = host.max_capacity_waiters;
  deps.events = host.events;
  deps.options.renewal_interval_seconds = config.renewal_interval_seconds;
  deps.hooks = std::move(hooks);
  if (auto* negotiation = backend_capability<MountContractNegotiation>(*deps.backend);
      negotiation && deps.backend->mount_mode_kind() == MountModeKind::contract_negotiated) {
    negotiation->refresh_capabilities_if_stale();  // first probe here, never in the plugin ctor
  }
  auto provider = std::make_unique<Provider>(std::move(deps));
  if (host.start) provider->start();
  return provider;
}

// ── the public API: each a call into Impl ────────────────────────────────────

void Provider::start() {
  impl_->start();
}
std::string Provider::acquire(const std::optional<std::string>& thread_id,
                              const std::optional<std::string>& user_id) {
  return impl_->acquire(thread_id, user_id);
}
AcquireResult Provider::acquire_traced(const std::optional<std::string>& thread_id,
                                       const std::optional<std::string>& user_id) {
  return impl_->acquire_traced(thread_id, user_id);
}
AcquireResult Provider::acquire_traced(const std::optional<std::string>& thread_id,
                                       const std::optional<std::string>& user_id,
                                       Cancellation& cancellation) {
  const RunningCancellation running(&cancellation);
  return impl_->acquire_traced(thread_id, user_id);
}
AsyncAcquisition Provider::acquire_async(const std::optional<std::string>& thread_id,
                                         const std::optional<std::string>& user_id) {
  return impl_->acquire_async(thread_id, user_id);
}
ClientPtr Provider::get(const std::string& sandbox_id) {
  return impl_->get(sandbox_id);
}
ReleaseOutcome Provider::release(const std::string& sandbox_id) {
  return impl_->release(sandbox_id);
}
DestroyOutcome Provider::destroy(const std::string& sandbox_id) {
  return impl_->destroy(sandbox_id);
}
void Provider::shutdown() {
  impl_->shutdown();
}
void Provider::detach() {
  impl_->detach();
}
RegistrySnapshot Provider::export_registry() const {
  return impl_->export_registry();
}
Provider::TrackedInfos Provider::tracked_infos(std::size_t limit) const {
  return impl_->tracked_infos(limit);
}
std::optional<TrackedSandbox> Provider::find(const std::string& sandbox_id) const {
  return impl_->find(sandbox_id);
}
bool Provider::namespaced(const SandboxInfo& info) const {
  return impl_->namespaced(info);
}
bool Provider::makes_namespaced_sandboxes() const {
  return impl_->makes_namespaced_sandboxes();
}
std::string Provider::configured_network_policy() const {
  return impl_->network_policy_
             ? Impl::policy_or_open(impl_->network_policy_->configured_network_policy())
             : "";
}
std::optional<SandboxEndpoint> Provider::endpoint(const std::string& sandbox_id) const {
  return impl_->endpoint(sandbox_id);
}
void Provider::import_registry(const RegistrySnapshot& snapshot) {
  impl_->import_registry(snapshot);
}
bool Provider::uses_thread_data_mounts() const {
  return impl_->uses_thread_data_mounts();
}
bool Provider::provider_uses_thread_data_mounts() {
  return impl_->provider_uses_thread_data_mounts();
}
bool Provider::sandbox_uses_thread_data_mounts(const std::string& sandbox_id) const {
  return impl_->sandbox_uses_thread_data_mounts(sandbox_id);
}
void Provider::cleanup_idle_sandboxes(double idle_timeout) {
  impl_->cleanup_idle_sandboxes(idle_timeout);
}
void Provider::reap_expired_warm(std::optional<double> timeout) {
  impl_->reap_expired_warm(timeout);
}
std::optional<std::string> Provider::evict_oldest_warm() {
  return impl_->evict_oldest_warm();
}
int Provider::pause_idle_warm() {
  return impl_->pause_idle_warm();
}
int Provider::archive_idle_released() {
  return impl_->archive_idle_released();
}
ReconcileReport Provider::reconcile_orphans() {
  return impl_->reconcile_orphans();
}
void Provider::renew_owned_leases() {
  impl_->renew_owned_leases();
}
void Provider::prune_idle_thread_locks() {
  impl_->prune_idle_thread_locks();
}
std::optional<ReconciliationIdentity> Provider::prepare_sandbox_reconciliation_identity(
    const std::string& sandbox_id) {
  return impl_->prepare_sandbox_reconciliation_identity(sandbox_id);
}
ReconnectResult Provider::reconnect_sandbox_for_reconciliation(
    const std::string& sandbox_id, const std::string& thread_id, const std::string& user_id,
    const ReconciliationIdentity& identity) {
  return impl_->reconnect_sandbox_for_reconciliation(sandbox_id, thread_id, user_id, identity);
}
const std::string& Provider::owner_id() const {
  return impl_->ownership_->owner_id();
}
SandboxBackend* Provider::backend() const {
  return impl_->backend_.get();
}
OwnershipStore* Provider::ownership() const {
  return impl_->ownership_.get();
}
Provider::Counts Provider::counts() const {
  return impl_->counts();
}
Provider::Capacity Provider::capacity() const {
  return impl_->capacity();
}
PreStartedSlots::Status Provider::slot_status() const {
  return impl_->slots_ ? impl_->slots_->slot_status() : PreStartedSlots::Status{};
}

ProviderEventCounts Provider::event_counts() const {
  return impl_->event_counts();
}

// ── helpers ──────────────────────────────────────────────────────────────────

ProviderEventCounts Provider::Impl::event_counts() const {
  constexpr auto relaxed = std::memory_order_relaxed;
  ProviderEventCounts counts;
  counts.evictions = events_.evictions.load(relaxed);
  counts.idle_reaps = events_.idle_reaps.load(relaxed);
  counts.adoptions = events_.adoptions.load(relaxed);
  counts.lease_renewals = events_.lease_renewals.load(relaxed);
  counts.lease_lapses = events_.lease_lapses.load(relaxed);
  counts.lease_losses = events_.lease_losses.load(relaxed);
  counts.pauses = events_.pauses.load(relaxed);
  counts.pause_failures = events_.pause_failures.load(relaxed);
  counts.resumes = events_.resumes.load(relaxed);
  counts.resume_seconds = static_cast<double>(events_.resume_microseconds.load(relaxed)) / 1e6;
  counts.capacity_waits = events_.capacity_waits.load(relaxed);
  counts.capacity_wait_seconds =
      static_cast<double>(events_.capacity_wait_microseconds.load(relaxed)) / 1e6;
  for (std::size_t i = 0; i < counts.capacity_wait_buckets.size(); ++i) {
    counts.capacity_wait_buckets[i] = events_.capacity_wait_buckets[i].load(relaxed);
  }
  counts.rejections_capacity = events_.rejections_capacity.load(relaxed);
  counts.rejections_per_user = events_.rejections_per_user.load(relaxed);
  counts.rejections_wait_timeout = events_.rejections_wait_timeout.load(relaxed);
  counts.rejections_queue_full = events_.rejections_queue_full.load(relaxed);
  counts.rejections_min_free_disk = events_.rejections_min_free_disk.load(relaxed);
  counts.disk_limit_stops = events_.disk_limit_stops.load(relaxed);
  counts.bursts = events_.bursts.load(relaxed);
  counts.slot_claims = events_.slot_claims.load(relaxed);
  counts.slot_claim_seconds =
      static_cast<double>(events_.slot_claim_microseconds.load(relaxed)) / 1e6;
  for (std::size_t i = 0; i < counts.slot_misses.size(); ++i) {
    counts.slot_misses[i] = events_.slot_misses[i].load(relaxed);
  }
  return counts;
}

Provider::Counts Provider::Impl::counts() {
  MutexLock lock(mutex_);
  return {registry_.active_count(),   registry_.warm_count(), registry_.paused_count(),
          registry_.teardown_count(), capacity_queue_.size(), registry_.creating_count()};
}

std::string Provider::Impl::effective_user(const std::optional<std::string>& user_id) const {
  if (user_id && !user_id->empty()) return *user_id;
  if (hooks_.ambient_user) {
    if (auto ambient = hooks_.ambient_user(); ambient && !ambient->empty()) return *ambient;
  }
  return std::string(kDefaultAmbientUser);
}

std::shared_ptr<ThreadLock> Provider::Impl::thread_lock(const ThreadKey& key) {
  MutexLock lock(mutex_);
  return registry_.thread_lock(key);
}

ClientPtr Provider::Impl::make_client(const std::string& sandbox_id, const std::string& url) {
  return hooks_.make_client(sandbox_id, url);
}

bool Provider::Impl::negotiates_contract() const {
  return negotiation_ && backend_->mount_mode_kind() == MountModeKind::contract_negotiated;
}

// ── mount mode (design §3.6) ───────────────────────────────────────────────────

bool Provider::Impl::uses_thread_data_mounts() const {
  if (options_.thread_data_mounts.has_value()) {
    if (!*options_.thread_data_mounts) return false;
    if (negotiates_contract()) {
      return negotiation_->cached_mount_contract_version() == kSandboxMountContractVersion;
    }
    return true;
  }
  // No backend at all: the uninitialised mount helper, which historically reports mounted.
  if (!backend_) return true;
  return backend_->mount_mode_kind() == MountModeKind::local_bind_mounts;
}

bool Provider::Impl::provider_uses_thread_data_mounts() {
  if (negotiates_contract()) negotiation_->refresh_capabilities_if_stale();
  return uses_thread_data_mounts();
}

bool Provider::Impl::sandbox_uses_thread_data_mounts(const std::string& sandbox_id) {
  if (negotiates_contract() && options_.thread_data_mounts == true) {
    InfoPtr info;
    {
      MutexLock lock(mutex_);
      if (const SandboxEntry* entry = registry_.find(sandbox_id);
          entry && (entry->active() || entry->released())) {
        info = entry->info;
      }
    }
    if (info) return info->mount_contract_version == kSandboxMountContractVersion;
  }
  return uses_thread_data_mounts();
}

// ── ids and mounts ───────────────────────────────────────────────────────────

std::string Provider::Impl::sandbox_id_for_thread(const std::optional<std::string>& thread_id,
                                                  const std::string& user_id,
                                                  const Snapshot& snapshot) {
  // The contract the id is made under: the acquisition's snapshot, else what a negotiating
  // backend last learned, else this build's.
  int version = kSandboxMountContractVersion;
  if (snapshot) {
    version = snapshot->version;
  } else if (thread_id && negotiates_contract()) {
    version = negotiation_->cached_mount_contract_version();
  }
  return planner_->sandbox_id(thread_id, user_id, version);
}

std::vector<Mount> Provider::Impl::get_extra_mounts(const std::optional<std::string>& thread_id,
                                                    const std::string& user_id) {
  return planner_->extra_mounts(thread_id, user_id, uses_thread_data_mounts());
}

void Provider::Impl::ensure_skills_projection(const std::string& user_id) {
  planner_->ensure_skills_projection(user_id);
}

CreateRequest Provider::Impl::build_create_request(const std::optional<std::string>& thread_id,
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

// ── the registry as data (hosts that persist it between processes) ───────────

TrackedSandbox Provider::Impl::tracked_entry(const SandboxEntry& entry) const {
  TrackedSandbox tracked;
  tracked.info = *entry.info;
  tracked.conversation = entry.identity;
  tracked.state = entry.state;
  tracked.since = to_wall(entry.since);
  tracked.last_acquire = entry.last_acquire;
  return tracked;
}

Provider::TrackedInfos Provider::Impl::tracked_infos(std::size_t limit) {
  Provider::TrackedInfos out;
  MutexLock lock(mutex_);
  registry_.for_each([&](const std::string&, const SandboxEntry& entry) {
    if (!entry.info || !(entry.active() || entry.released())) return;
    if (out.infos.size() < limit) {
      out.infos.push_back(entry.info);
    } else {
      ++out.left_out;
    }
  });
  return out;
}

RegistrySnapshot Provider::Impl::export_registry() {
  RegistrySnapshot snapshot;
  {
    MutexLock lock(mutex_);
    snapshot.sandboxes.reserve(registry_.active_count() + registry_.warm_count() +
                               registry_.paused_count());
    registry_.for_each([&](const std::string&, const SandboxEntry& entry) {
      if (entry.info && (entry.active() || entry.released())) {
        snapshot.sandboxes.push_back(tracked_entry(entry));
      }
    });
    for (const auto& [id, first_seen] : registry_.unowned_since()) {
      snapshot.unowned_since.emplace(id, to_wall(first_seen));
    }
  }
  // Ordered here, not under the mutex (EgressHost exports every 2 s).
  std::sort(snapshot.sandboxes.begin(), snapshot.sandboxes.end(),
            [](const TrackedSandbox& a, const TrackedSandbox& b) {
              return a.info.sandbox_id < b.info.sandbox_id;
            });
  return snapshot;
}

std::optional<TrackedSandbox> Provider::Impl::find(const std::string& sandbox_id) {
  MutexLock lock(mutex_);
  const SandboxEntry* entry = registry_.find(sandbox_id);
  if (!entry || !entry->info || !(entry->active() || entry->released())) return std::nullopt;
  return tracked_entry(*entry);
}

// ── network isolation ─────────────────────────────────────────────

bool Provider::Impl::namespaced(const SandboxInfo& info) const {
  return namespaced_ != nullptr && namespaced_->namespaced(info);
}

bool Provider::Impl::makes_namespaced_sandboxes() const {
  return core::makes_namespaced_sandboxes(*backend_);
}

// An unset policy is DeerFlow's default, open: a sandbox made before policies were recorded, and
// a backend that records and configures none (both sides "", the load run's loopback_backend).
std::string Provider::Impl::policy_or_open(const std::string& policy) {
  return policy.empty() ? "open" : policy;
}

bool Provider::Impl::network_policy_matches(const SandboxInfo& info) const {
  if (network_policy_ == nullptr) return true;
  return policy_or_open(info.network_policy) ==
         policy_or_open(network_policy_->configured_network_policy());
}

SandboxRoute Provider::Impl::route_to(const SandboxInfo& info) const {
  SandboxRoute route;
  route.headers = info.request_headers;
  if (namespaced(info)) {
    route.open_socket = [backend = backend_, access = namespaced_, info] {
      return access->open_socket(info);
    };
  }
  return route;
}

bool Provider::Impl::wait_until_ready(const SandboxInfo& info, double timeout_seconds) {
  if (!namespaced(info) && info.request_headers.empty()) {
    return hooks_.wait_until_ready(info.sandbox_url, timeout_seconds);
  }
  return wait_for_sandbox_ready(info.sandbox_url, timeout_seconds, {}, {}, route_to(info));
}

std::optional<SandboxEndpoint> Provider::Impl::endpoint(const std::string& sandbox_id) {
  InfoPtr info;
  bool paused = false;
  {
    MutexLock lock(mutex_);
    const SandboxEntry* entry = registry_.find(sandbox_id);
    if (!entry || !entry->info || !(entry->active() || entry->released())) return std::nullopt;
    info = entry->info;
    paused = entry->paused();
  }
  std::optional<SandboxEndpoint> out = endpoint_of(*info, backend_, namespaced_);
  if (out) out->paused = paused;
  return out;
}

void Provider::Impl::import_registry(const RegistrySnapshot& snapshot) {
  // Clients are made outside the registry mutex (the factory is a host hook).
  std::vector<std::pair<const TrackedSandbox*, ClientPtr>> active;
  for (const auto& tracked : snapshot.sandboxes) {
    if (!tracked.released()) {
      active.emplace_back(&tracked, make_client(tracked.info.sandbox_id, tracked.info.sandbox_url));
    }
  }
  MutexLock lock(mutex_);
  for (const auto& tracked : snapshot.sandboxes) {
    const std::string& id = tracked.info.sandbox_id;
    if (!tracked.released() || registry_.held(id)) continue;
    registry_.add_released(id, std::make_shared<const SandboxInfo>(tracked.info),
                           from_wall(tracked.since), tracked.conversation,
                           tracked.state == SandboxState::paused);
  }
  for (auto& [tracked, client] : active) {
    const std::string& id = tracked->info.sandbox_id;
    if (registry_.held(id)) continue;
    registry_.install_active(id, std::move(client),
                             std::make_shared<const SandboxInfo>(tracked->info),
                             tracked->conversation, from_wall(tracked->since));
  }
  for (const auto& [id, first_seen] : snapshot.unowned_since) {
    registry_.unowned_since().try_emplace(id, from_wall(first_seen));
  }
  for (const auto& tracked : snapshot.sandboxes) {
    SandboxEntry* entry = registry_.find(tracked.info.sandbox_id);
    if (entry != nullptr && !entry->last_acquire) entry->last_acquire = tracked.last_acquire;
  }
}

// ── get (design §5.14) ─────────────────────────────────────────────────────────

ClientPtr Provider::Impl::get(const std::string& sandbox_id) {
  MutexLock lock(mutex_);
  SandboxEntry* entry = registry_.find(sandbox_id);
  if (!entry || !entry->active() || !entry->client) return nullptr;
  entry->since = now();
  return entry->client;
}

// ── reconciliation reconnect (design §5.19) ────────────────────────────────────

std::optional<ReconciliationIdentity> Provider::Impl::prepare_sandbox_reconciliation_identity(
    const std::string& sandbox_id) {
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

ReconnectResult Provider::Impl::reconnect_sandbox_for_reconciliation(
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

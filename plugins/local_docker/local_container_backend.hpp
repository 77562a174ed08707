// local_docker:LocalContainerBackend — sandboxes as containers of a local engine, driven
// through the Docker Engine REST API (Docker, or `podman system service`), design §9. Its options
// are in backend_settings.hpp and plugins/local_docker/README.md.
//
// The class is split by concern: local_container_backend.cpp (construction, create with its
// port search, pull and name-conflict adoption, destroy, pause), backend_discovery.cpp (what
// runs: is_alive, discover, list_running, discover_for_reconciliation), backend_slots.cpp
// (pre-started slots). The Engine API calls themselves are engine_api.hpp's.
//
// Deviations from the Python reference, on purpose:
// - Ports: without a base port the engine picks a free host port (empty HostPort) and we read
//   it back, which removes the host-port race of scanning locally; with a base port we search
//   upward as §9.2 does, skipping ports this process is starting containers on.
// - A name conflict adopts the existing container once it runs (starting it if it is still
//   in the "created" state), without the discovery readiness probe: readiness after create is
//   the core's job, and a racing creator's container is not ready yet.
// - destroy() throws on every failure other than "already gone"/"already stopped" (not only on
//   a timeout), so a stop that did not happen is never reported as clean (backend.hpp).
// - is_alive() answers false when the name now belongs to a different container than the
//   info's container_id: the instance the info describes is gone.
//
// Lock story: after construction the settings are immutable. EngineClient uses one CURL handle
// per request (no shared libcurl state) and guards its cached API version with its own mutex.
// `pending_mutex_` guards the pending removals; the port reservations have their own
// (port_reservation.hpp). No lock is held across an HTTP call.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sandboxd/capabilities.hpp>
#include <sandboxd/readiness.hpp>
#include <sandboxd/sdk.hpp>
#include <sandboxd/thread_annotations.hpp>
#include <set>
#include <string>
#include <vector>

#include "backend_settings.hpp"
#include "engine_answers.hpp"
#include "engine_api.hpp"
#include "engine_client.hpp"
#include "engine_slots.hpp"
#include "isolation_keeper.hpp"
#include "sandbox_network.hpp"
#include "slot_pool.hpp"

namespace sandboxd::local_docker {

inline constexpr const char* kLogPrefix = "local_docker: ";

inline constexpr const char* kLabelManagedBy = "sandboxd.managed-by";
inline constexpr const char* kManagedByValue = "sandboxd";
inline constexpr const char* kLabelSandboxId = "sandboxd.sandbox-id";
inline constexpr const char* kLabelUserId = "sandboxd.user-id";
inline constexpr const char* kLabelThreadId = "sandboxd.thread-id";
inline constexpr const char* kLabelContract = "sandboxd.mount-contract-version";
inline constexpr const char* kLabelNetworkPolicy = "sandboxd.network-policy";
inline constexpr const char* kLabelNetworkFor = "sandboxd.network-for";  // on our own network
inline constexpr const char* kLabelSnapshot = "sandboxd.snapshot";       // on a snapshot's image
// Where a sandbox's API listens inside its own network namespace (namespaced sandboxes).
inline constexpr const char* kNamespacedUrl = "http://127.0.0.1:8080";

inline constexpr int kMaxStartAttempts = 10;           // design §9.2
inline constexpr double kInspectTimeoutSeconds = 5.0;  // design §9.6
inline constexpr double kListTimeoutSeconds = 10.0;    // design §9.8
inline constexpr double kDiscoveryReadySeconds = 5.0;  // design §5.17
// Pause and unpause freeze or thaw a cgroup: milliseconds (11–38 ms measured); 10 s bounds a
// stuck engine.
inline constexpr double kFreezeTimeoutSeconds = 10.0;
inline constexpr int kAdoptWaitSeconds = 30;  // how long a name conflict waits for the holder
// dockerd answers a create with 409 while another create of the name is in flight, yet inspects
// the name as 404 for tens of milliseconds: a conflict waits this long for the holder to appear
// before it concludes the holder went away.
inline constexpr auto kNameHolderAppearWait = std::chrono::seconds(2);
// Creates again after a holder that went away; these never use up the port attempts.
inline constexpr int kMaxNameConflictRounds = 5;

inline std::string short_id(const std::string& id) {
  return id.size() > 12 ? id.substr(0, 12) : id;
}

inline bool same_container(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  return a.rfind(b, 0) == 0 || b.rfind(a, 0) == 0;
}

// What one container is created with: a sandbox's, or a pre-started slot's.
struct ContainerSpec {
  std::string sandbox_id;  // for messages and adoption
  std::string name;
  std::string image;  // "": the configured one (a snapshot's image otherwise)
  std::vector<Mount> mounts;
  std::size_t rslave_from = SIZE_MAX;  // mounts from this index bind with rslave propagation
  std::map<std::string, std::string> labels;
};

class LocalContainerBackend final : public SandboxBackend,
                                    public SandboxPausing,
                                    public PreStartedSlots,
                                    public SettingsReport,
                                    public SandboxNetworkPolicy,
                                    public NamespacedSandboxes,
                                    public SandboxUsage,
                                    public IsolationKeeping,
                                    public EngineStorage,
                                    public WritableLayerUsage,
                                    public SandboxSnapshots {
 public:
  explicit LocalContainerBackend(const PluginContext& context)
      : logger_(context.logger),
        clock_(context.clock ? context.clock : std::make_shared<SystemClock>()),
        settings_(read_settings(context, *context.logger)),
        client_(settings_.endpoint),
        api_(client_, settings_.request_timeout_seconds),
        keeper_(netns_,
                IsolationKeeper::Hooks{
                    .pid_of =
                        [this](const std::string& container) {
                          return api_.container_pid(container, kInspectTimeoutSeconds);
                        },
                    .recheck = [this] { keep_all_isolation(); }},
                logger_) {
    if (settings_.warm_slots > 0) {
      SlotPoolOptions options;
      options.target = settings_.warm_slots;
      options.root = settings_.slots_dir;
      options.name_prefix = settings_.prefix + "-";
      options.declared_shape = settings_.slot_mounts;
      options.sweep_interval_seconds = settings_.slot_sweep_seconds;
      slot_engine_ = std::make_unique<EngineSlots>(
          api_, settings_.prefix + "-",
          [this](const std::string& name, const std::vector<Mount>& mounts,
                 const std::map<std::string, std::string>& labels) {
            return start_slot(name, mounts, labels);
          });
      slots_ = std::make_unique<SlotPool>(std::move(options), *slot_engine_, logger_);
    }
  }
  ~LocalContainerBackend() override;

  SandboxInfo create(const CreateRequest& request) override;
  // create(), from `image` when it is not "" (a snapshot's).
  SandboxInfo create_with_image(const CreateRequest& request, const std::string& image);
  void destroy(const SandboxInfo& info) override;
  bool is_alive(const SandboxInfo& info) override;
  // The engine's one-shot stats of the sandbox's container (by id, else name); throws when it is
  // gone or the engine cannot answer.
  Reading usage(const SandboxInfo& info) override;
  std::optional<SandboxInfo> discover(const std::string& sandbox_id) override;
  std::vector<SandboxInfo> list_running() override;
  SandboxDiscoveryResult discover_for_reconciliation(const std::string& sandbox_id) override;
  bool requires_create_validation() const override { return false; }
  MountModeKind mount_mode_kind() const override { return MountModeKind::local_bind_mounts; }
  void pause(const SandboxInfo& info) override;
  void unpause(const SandboxInfo& info) override;
  Claim claim_slot(const CreateRequest& request) override;
  Status slot_status() const override;
  std::string slot_preflight() override;
  void start_slots() override {
    if (slots_) slots_->start();
  }
  std::vector<SettingsReport::Line> effective_settings() const override {
    std::vector<SettingsReport::Line> out;
    for (const auto& [setting, source] : settings_.effective) out.push_back({setting, source});
    return out;
  }
  // Network isolation (backend_network.cpp).
  std::string configured_network_policy() const override { return settings_.policy.label(); }
  std::string network_preflight() override;
  bool namespaced(const SandboxInfo& info) const override;
  int open_socket(const SandboxInfo& info) override;
  // Isolation kept (backend_network.cpp, isolation_keeper.hpp): a sandbox's bridge port checked
  // at each hand-out, every port of our network's bridge at each reconciliation pass and as soon
  // as one joins.
  void keep_isolation(const SandboxInfo& info) override;
  std::vector<std::string> keep_all_isolation() override;
  void start_keeping_isolation() override;
  // The engine's storage (its /info DockerRootDir: Docker's data root, podman's graph root),
  // when the engine is reached through a local unix socket; "" otherwise.
  std::string engine_storage_path() override;
  // The engine's SizeRw of the sandbox's container (by id, else name).
  std::optional<std::uint64_t> writable_layer_bytes(const SandboxInfo& info) override;
  // Snapshots (docs/snapshots.md): the engine's commit of the container, paused for it, to
  // localhost/{prefix}-snapshot:{name}-{random}, labelled ours; never pushed.
  Image commit_snapshot(const SandboxInfo& info, const std::string& name) override;
  void remove_snapshot_image(const std::string& image) override;
  SandboxInfo create_from_snapshot(const CreateRequest& request, const std::string& image) override;

 private:
  // Why this host cannot enter the engine's namespaces (setns, bridge flags; `host_mounts`:
  // also see its mounts, which a TCP engine's may not): not root, a rootless engine; "" when
  // it can. Asks the engine once.
  std::string host_namespace_reason(bool host_mounts);
  // open mode: our bridge network exists (made on first use). Throws naming the failure.
  void ensure_network();
  // Our own network's id: the one labelled for this prefix with the least id, made when there
  // is none; duplicates a racing process made are removed when unused.
  std::string resolve_own_network();
  // Our prefix's networks of our name, least id first.
  std::vector<NetworkState> own_networks_named();
  // Removes each of `named` but `keep` (by id); the engine refuses one a container is on.
  void remove_duplicate_networks(const std::vector<NetworkState>& named, const std::string& keep);
  // A peer's create landed after ours was chosen, so the engine calls the name ambiguous at a
  // start (Docker resolves a container's network by name there): the copies but the one in use
  // here are removed, and the start is tried again. False when the message is another failure.
  bool settle_duplicate_network(const std::string& engine_message);
  // What a container's NetworkMode names: our network's id once known, else its name.
  std::string network_target() const;
  // Our bridge network, removed when no container is attached to it any more (the engine
  // refuses while one is, which is left as is): nothing of ours outlives its last sandbox.
  void remove_network_if_unused();
  // With the orphans (list_running): our prefix's networks that a process that ended left and
  // no container is attached to are removed. Nothing while this process uses its network.
  void sweep_unused_networks();
  // After `destroyed` went: our network, removed if nothing else is on it, once the engine has
  // removed the container (bounded by kNetworkReleaseWait).
  void remove_network_after(const SandboxInfo& destroyed);
  // The backend's end: our network, removed once only stopping containers were on it and they
  // are gone (bounded by kNetworkReleaseWait); one a running container is on stays.
  void remove_network_at_exit();
  static constexpr std::chrono::milliseconds kNetworkReleaseWait{2000};
  // A network nobody uses is swept by a process that did not make it only after this long: a
  // peer that just made it is about to start its first sandbox on it.
  static constexpr double kOrphanNetworkAgeSeconds = 60;
  bool old_enough_to_sweep(const NetworkState& network) const;
  // DELETE of one of our networks that the engine refuses while a container is attached;
  // true when it went.
  bool remove_network_unless_used(const NetworkState& network);
  // open mode with isolation: the started container's bridge port isolated, or throws
  // (PortOnNoBridge when the network's bridge went away under it).
  void isolate(const std::string& container_id, const std::string& name);
  // The configured runtime (settings_.runtime) is one the engine lists in /info; throws naming
  // what it knows otherwise. Asked once.
  void check_runtime_known();
  // Container `id` was made with the configured runtime (read back: podman's libpod inspect, or
  // Docker's HostConfig.Runtime); throws otherwise (the caller removes it).
  void check_runtime_of(const std::string& id, const std::string& name);
  // How readiness reaches `info`: through its namespace when it is namespaced.
  SandboxRoute route_to(const SandboxInfo& info);

  // How the slot pool starts a slot: as a sandbox, its mount points bound rslave.
  SlotEngine::Started start_slot(const std::string& name, const std::vector<Mount>& slot_mounts,
                                 const std::map<std::string, std::string>& labels);

  // Creates and starts one container (port search, pull, name-conflict adoption); the info
  // carries no identity beyond what the labels say.
  SandboxInfo start_container(const ContainerSpec& spec, bool* adopted);
  // A slot container that is nobody's yet: labelled a slot and not claimed.
  // info_from, and for a slot-labelled container the identity its claim record gives (read
  // once); nullopt for an unclaimed slot, which is nobody's sandbox.
  std::optional<SandboxInfo> sandbox_info(const std::string& sandbox_id,
                                          const ContainerState& state) const;
  // POST /containers/{target}/{verb} for pause and unpause; `done_already` recognises the
  // engine's "already in that state" refusal, which counts as done.
  void freeze_call(const SandboxInfo& info, const std::string& verb,
                   bool (*done_already)(const std::string& message));
  // destroy(); a stop refused because the container is paused thaws it and retries once.
  void destroy_once(const SandboxInfo& info, bool thawed_for_stop);

  void log(LogLevel level, const std::string& message) {
    logger_->log(level, kLogPrefix + message);
  }

  std::string container_name(const std::string& sandbox_id) const {
    return settings_.prefix + "-" + sandbox_id;
  }
  std::string backend_namespace() const { return "local:docker:" + settings_.prefix; }

  ContainerCreateBody create_body(const ContainerSpec& spec, int host_port) const;
  void pull_image();
  // nullopt: the holder of the name went away, try creating again.
  std::optional<SandboxInfo> adopt_existing(const std::string& name);
  // Removes a container a failed create made; if the engine cannot be reached (or refuses),
  // the container is remembered and removed by the next create or listing that reaches it.
  void remove_quietly(const std::string& id);
  void retry_pending_removals();
  // nullopt: no such container. Throws on anything else that is not an answer.
  std::optional<ContainerState> inspect(const std::string& target);
  // The container an info names: its id, else its name; for an info holding the sandbox id
  // alone (another process's, a record's), the container named for that id when its label says
  // it is that sandbox's (a stranger that took the name is not ours). nullopt: none.
  std::optional<std::string> container_target(const SandboxInfo& info);
  SandboxInfo info_from(const std::string& sandbox_id, const ContainerState& state) const;

  std::shared_ptr<Logger> logger_;
  const std::shared_ptr<Clock> clock_;  // the host's: how old an orphan network is
  const Settings settings_;
  EngineClient client_;
  EngineApi api_;
  // Containers that failed creates left behind because the engine could not be reached to
  // remove them (it vanished between /containers/create and /start). Only never-started ones
  // are removed later: a running one is an orphan like any other, which reconciliation adopts
  // through list_running(). `pending_mutex_` guards the set, never held across an engine call.
  Mutex pending_mutex_;
  std::set<std::string> pending_removals_ GUARDED_BY(pending_mutex_);
  // Whether this backend's sandboxes sit on a bridge with their ports isolated (open mode with
  // isolate_sandboxes): the only ones whose isolation is a port flag to keep.
  bool keeps_bridge_ports() const {
    return settings_.policy.mode == "open" && settings_.policy.isolate;
  }
  // Our own network's bridge guarded by the keeper, learnt from the engine when no sandbox of
  // this process taught it yet; the containers on it that are not ours, named.
  std::vector<std::string> guard_own_bridge();

  // Sockets in sandboxes' network namespaces, and bridge port isolation (sandbox_network.hpp).
  NetnsSockets netns_;
  // Each sandbox's port kept isolated for its life (isolation_keeper.hpp); its watcher thread
  // calls back into this object, so it is declared after what it uses and stops before them.
  IsolationKeeper keeper_;
  // The network checks (network_mutex_ guards these four, never held across an engine
  // call): our bridge network exists and the id containers join it by, and the host-namespace
  // probe's answer, asked of the engine once ("" : it can). network_create_mutex_ serializes
  // ensure_network's check-and-create and settle_duplicate_network, engine calls included.
  Mutex network_create_mutex_ ACQUIRED_BEFORE(network_mutex_);
  mutable Mutex network_mutex_;
  bool network_ready_ GUARDED_BY(network_mutex_) = false;
  // This process made or destroyed a sandbox on our network.
  bool network_touched_ GUARDED_BY(network_mutex_) = false;
  std::string network_target_ GUARDED_BY(network_mutex_);
  std::optional<std::string> namespace_reason_ GUARDED_BY(network_mutex_);
  // The configured runtime was found among the engine's (asked once).
  bool runtime_checked_ GUARDED_BY(network_mutex_) = false;
  std::unique_ptr<EngineSlots> slot_engine_;  // the pool's engine; outlives the pool
  // Last member: its refill thread calls the engine through this object, so it stops first.
  std::unique_ptr<SlotPool> slots_;
};

}  // namespace sandboxd::local_docker

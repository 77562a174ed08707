// local_docker:LocalContainerBackend — sandboxes as containers of a local engine, driven
// through the Docker Engine REST API (Docker, or `podman system service`), SPEC §9.
//
//   "backend": {
//     "use": "local_docker:LocalContainerBackend",
//     "socket": "unix:///var/run/docker.sock",  // default: DOCKER_HOST, else this path;
//                                                // tcp://127.0.0.1:2375 works too (no TLS)
//     "image": "…",                              // default: SPEC §11
//     "container_prefix": "deer-flow-sandbox",
//     "port": 0,                   // base host port, searched upward; 0/absent: engine picks
//     "mounts": [{"host_path": "/srv/x", "container_path": "/mnt/x", "read_only": true}],
//     "environment": {"KEY": "value"},          // values are never logged
//     "memory": "2g", "cpus": 2, "pids_limit": 1024,
//     "stop_timeout_seconds": 10,
//     "security_opt": [],          // e.g. ["seccomp=unconfined"] for an image that needs it
//     "no_new_privileges": true,   // adds "no-new-privileges" to security_opt
//     "cap_drop": ["ALL"], "cap_add": ["CHOWN", "DAC_OVERRIDE", …]  // kDefaultSandboxCapabilities
//     "init": true,
//     "bind_host": "127.0.0.1",    // else DEER_FLOW_SANDBOX_BIND_HOST, else SPEC §9.4
//     "sandbox_host": "localhost", // host in sandbox URLs; else DEER_FLOW_SANDBOX_HOST
//     "request_timeout_seconds": 30, "pull_timeout_seconds": 600,
//     "warm_slots": 0,             // pre-started slots for new conversations (issue 22)
//     "slots_dir": "…",            // default: {base_dir}/local_docker-slots; must be ours
//     "slot_mounts": [{"container_path": "/mnt/user-data/workspace"}],  // else learned
//     "slot_ready_timeout_seconds": 60, "slot_sweep_seconds": 60
//   }
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
// The only other shared state is the process-wide set of host ports being started, guarded by
// `port_mutex()`. No lock is held across an HTTP call.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sandboxd/json.hpp>
#include <sandboxd/readiness.hpp>
#include <sandboxd/sdk.hpp>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend_settings.hpp"
#include "docker_support.hpp"
#include "engine_answers.hpp"
#include "engine_client.hpp"
#include "host_mounts.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/sandbox_capabilities.hpp"
#include "slot_pool.hpp"

namespace sandboxd::local_docker {
namespace {

constexpr const char* kLogPrefix = "local_docker: ";

constexpr const char* kLabelManagedBy = "sandboxd.managed-by";
constexpr const char* kManagedByValue = "sandboxd";
constexpr const char* kLabelSandboxId = "sandboxd.sandbox-id";
constexpr const char* kLabelUserId = "sandboxd.user-id";
constexpr const char* kLabelThreadId = "sandboxd.thread-id";
constexpr const char* kLabelContract = "sandboxd.mount-contract-version";

constexpr int kMaxStartAttempts = 10;           // SPEC §9.2
constexpr double kInspectTimeoutSeconds = 5.0;  // SPEC §9.6
constexpr double kListTimeoutSeconds = 10.0;    // SPEC §9.8
constexpr double kDiscoveryReadySeconds = 5.0;  // SPEC §5.17
// Pause and unpause freeze or thaw a cgroup: milliseconds (11–38 ms measured); 10 s bounds a
// stuck engine.
constexpr double kFreezeTimeoutSeconds = 10.0;
constexpr int kAdoptWaitSeconds = 30;  // how long a name conflict waits for the holder
// dockerd answers a create with 409 while another create of the name is in flight, yet inspects
// the name as 404 for tens of milliseconds: a conflict waits this long for the holder to appear
// before it concludes the holder went away.
constexpr auto kNameHolderAppearWait = std::chrono::seconds(2);
// Creates again after a holder that went away; these never use up the port attempts.
constexpr int kMaxNameConflictRounds = 5;

std::string short_id(const std::string& id) {
  return id.size() > 12 ? id.substr(0, 12) : id;
}

bool same_container(const std::string& a, const std::string& b) {
  if (a.empty() || b.empty()) return false;
  return a.rfind(b, 0) == 0 || b.rfind(a, 0) == 0;
}

// Host ports this process is currently starting containers on (only with a base port): two
// threads never offer the engine the same port at once. Process-wide, like SPEC §9.2's
// allocator.
std::mutex& port_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<int>& reserved_ports() {
  static std::set<int> ports;  // guarded by port_mutex()
  return ports;
}

class PortReservation {
 public:
  PortReservation() = default;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  ~PortReservation() { release(); }

  // Reserves the first port >= start that no other thread of this process is starting on.
  int claim_from(int start) {
    release();
    std::lock_guard lock(port_mutex());
    for (int port = start; port <= 65535 && port < start + 100; ++port) {
      if (reserved_ports().insert(port).second) {
        port_ = port;
        return port;
      }
    }
    throw std::runtime_error("No available port found in range " + std::to_string(start) + "-" +
                             std::to_string(start + 100));
  }

  void release() {
    if (port_ == 0) return;
    std::lock_guard lock(port_mutex());
    reserved_ports().erase(port_);
    port_ = 0;
  }

 private:
  int port_ = 0;
};

// What one container is created with: a sandbox's, or a pre-started slot's.
struct ContainerSpec {
  std::string sandbox_id;  // for messages and adoption
  std::string name;
  std::vector<Mount> mounts;
  std::size_t rslave_from = SIZE_MAX;  // mounts from this index bind with rslave propagation
  std::map<std::string, std::string> labels;
};

}  // namespace

class LocalContainerBackend final : public SandboxBackend,
                                    public SandboxPausing,
                                    public PreStartedSlots,
                                    public SettingsReport,
                                    private SlotEngine {
 public:
  explicit LocalContainerBackend(const PluginContext& context)
      : logger_(context.logger),
        settings_(read_settings(context, *context.logger)),
        client_(settings_.endpoint) {
    if (settings_.warm_slots > 0) {
      SlotPoolOptions options;
      options.target = settings_.warm_slots;
      options.root = settings_.slots_dir;
      options.name_prefix = settings_.prefix + "-";
      options.declared_shape = settings_.slot_mounts;
      options.sweep_interval_seconds = settings_.slot_sweep_seconds;
      slots_ =
          std::make_unique<SlotPool>(std::move(options), static_cast<SlotEngine&>(*this), logger_);
    }
  }
  ~LocalContainerBackend() override;

  SandboxInfo create(const CreateRequest& request) override;
  void destroy(const SandboxInfo& info) override;
  bool is_alive(const SandboxInfo& info) override;
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

 private:
  // SlotEngine, for the slot pool.
  Started start_slot(const std::string& name, const std::vector<Mount>& slot_mounts,
                     const std::map<std::string, std::string>& labels) override;
  void remove_container(const std::string& id) override;
  bool rename_container(const std::string& id, const std::string& name) override;
  bool container_sees(const std::string& id, const std::string& path) override;
  std::vector<Listed> list_slots() override;
  bool container_exists(const std::string& id) override;

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

  std::string create_body(const ContainerSpec& spec, int host_port) const;
  void pull_image();
  // nullopt: the holder of the name went away, try creating again.
  std::optional<SandboxInfo> adopt_existing(const std::string& name);
  // Removes a container a failed create made; if the engine cannot be reached (or refuses),
  // the container is remembered and removed by the next create or listing that reaches it.
  void remove_quietly(const std::string& id);
  void retry_pending_removals();
  // nullopt: no such container. Throws on anything else that is not an answer.
  std::optional<ContainerState> inspect(const std::string& target);
  SandboxInfo info_from(const std::string& sandbox_id, const ContainerState& state) const;

  std::shared_ptr<Logger> logger_;
  const Settings settings_;
  EngineClient client_;
  // Containers that failed creates left behind because the engine could not be reached to
  // remove them (it vanished between /containers/create and /start). Only never-started ones
  // are removed later: a running one is an orphan like any other, which reconciliation adopts
  // through list_running(). `pending_mutex_` guards the set, never held across an engine call.
  std::mutex pending_mutex_;
  std::set<std::string> pending_removals_;
  // Last member: its refill thread calls the engine through this object, so it stops first.
  std::unique_ptr<SlotPool> slots_;
};

LocalContainerBackend::~LocalContainerBackend() {
  slots_.reset();
  retry_pending_removals();
  std::lock_guard lock(pending_mutex_);
  for (const std::string& id : pending_removals_) {
    log(LogLevel::warning, "Container " + short_id(id) +
                               " left by a failed start could not be removed; remove it by "
                               "hand: docker rm -f " +
                               short_id(id));
  }
}

std::string LocalContainerBackend::create_body(const ContainerSpec& spec, int host_port) const {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  const auto str = [&w](const std::string& text) { write_json_string(w, text); };
  w.StartObject();
  w.Key("Image");
  str(settings_.image);
  if (!settings_.user.empty()) {
    w.Key("User");
    str(settings_.user);
  }
  w.Key("Env");
  w.StartArray();
  for (const auto& [key, value] : settings_.environment) str(key + "=" + value);
  w.EndArray();
  w.Key("Labels");
  w.StartObject();
  for (const auto& [key, value] : spec.labels) {
    str(key);
    str(value);
  }
  w.EndObject();
  w.Key("ExposedPorts");
  w.StartObject();
  w.Key(kContainerPort);
  w.StartObject();
  w.EndObject();
  w.EndObject();

  w.Key("HostConfig");
  w.StartObject();
  w.Key("PortBindings");
  w.StartObject();
  w.Key(kContainerPort);
  w.StartArray();
  w.StartObject();
  std::string host_ip = settings_.bind_host;
  if (host_ip.size() > 2 && host_ip.front() == '[' && host_ip.back() == ']') {
    host_ip = host_ip.substr(1, host_ip.size() - 2);
  }
  w.Key("HostIp");
  str(host_ip);
  w.Key("HostPort");
  str(host_port > 0 ? std::to_string(host_port) : std::string());
  w.EndObject();
  w.EndArray();
  w.EndObject();
  w.Key("AutoRemove");
  w.Bool(true);
  if (!settings_.network.empty()) {
    w.Key("NetworkMode");
    str(settings_.network);
  }
  if (!settings_.security_opt.empty()) {
    w.Key("SecurityOpt");
    w.StartArray();
    for (const auto& opt : settings_.security_opt) str(opt);
    w.EndArray();
  }
  for (const auto& [key, list] :
       {std::pair{"CapDrop", &settings_.cap_drop}, std::pair{"CapAdd", &settings_.cap_add}}) {
    if (list->empty()) continue;
    w.Key(key);
    w.StartArray();
    for (const auto& capability : *list) str(capability);
    w.EndArray();
  }
  w.Key("Init");
  w.Bool(settings_.init);
  if (settings_.memory_bytes > 0) {
    w.Key("Memory");
    w.Int64(settings_.memory_bytes);
  }
  if (settings_.cpus > 0) {
    w.Key("NanoCpus");
    w.Int64(static_cast<long long>(settings_.cpus * 1e9));
  }
  if (settings_.pids_limit > 0) {
    w.Key("PidsLimit");
    w.Int64(settings_.pids_limit);
  }
  w.Key("Mounts");
  w.StartArray();
  for (std::size_t i = 0; i < spec.mounts.size(); ++i) {
    const Mount& m = spec.mounts[i];
    w.StartObject();
    if (i >= spec.rslave_from) {
      // A slot's mount point: binds made on the host later reach the running container.
      w.Key("BindOptions");
      w.StartObject();
      w.Key("Propagation");
      w.String("rslave");
      w.EndObject();
    }
    w.Key("Type");
    w.String("bind");
    w.Key("Source");
    str(m.host_path);
    w.Key("Target");
    str(m.container_path);
    w.Key("ReadOnly");
    w.Bool(m.read_only);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();  // HostConfig
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

SandboxInfo LocalContainerBackend::create(const CreateRequest& request) {
  retry_pending_removals();
  const std::string name = container_name(request.sandbox_id);
  if (request.sandbox_id.empty() || !is_valid_container_name(name)) {
    throw std::invalid_argument("Invalid sandbox id \"" + request.sandbox_id +
                                "\": container names allow letters, digits, '_', '.' and '-'");
  }
  // Only a conversation's mounts teach the slots: an anonymous sandbox is never claimed.
  if (slots_ && request.thread_id) slots_->learn_shape(request);
  ContainerSpec spec;
  spec.sandbox_id = request.sandbox_id;
  spec.name = name;
  spec.mounts = settings_.mounts;
  spec.mounts.insert(spec.mounts.end(), request.extra_mounts.begin(), request.extra_mounts.end());
  spec.labels = {{kLabelManagedBy, kManagedByValue},
                 {kLabelSandboxId, request.sandbox_id},
                 {kLabelContract, std::to_string(kSandboxMountContractVersion)}};
  if (request.user_id) spec.labels[kLabelUserId] = *request.user_id;
  if (request.thread_id) spec.labels[kLabelThreadId] = *request.thread_id;
  bool adopted = false;
  SandboxInfo info = start_container(spec, &adopted);
  if (adopted) return info;  // its own labels say whose it is
  // Identity as requested: these are the labels we just wrote.
  info.user_id = request.user_id;
  info.thread_id = request.thread_id;
  info.mount_contract_version = kSandboxMountContractVersion;
  return info;
}

SandboxInfo LocalContainerBackend::start_container(const ContainerSpec& spec, bool* adopted) {
  const std::string& name = spec.name;
  const std::vector<Mount>& mounts = spec.mounts;

  log(LogLevel::info,
      "Starting container " + name + " using the engine API at " + settings_.endpoint.display +
          ": image " + settings_.image + ", port " + settings_.bind_host + ":" +
          (settings_.base_port > 0 ? std::to_string(settings_.base_port) + "+" : "auto") +
          "->8080, mounts: " + render_mounts(mounts) + ", environment: " +
          (settings_.environment.empty() ? "none" : redacted_environment(settings_.environment)));

  int next_port = settings_.base_port;
  bool pulled = false;
  int name_conflicts = 0;
  for (int attempt = 0; attempt < kMaxStartAttempts; ++attempt) {
    PortReservation reservation;
    int host_port = 0;
    if (settings_.base_port > 0) {
      host_port = reservation.claim_from(next_port);
    }

    const HttpResponse created =
        client_.call("POST", "/containers/create?name=" + url_encode(name),
                     settings_.request_timeout_seconds, create_body(spec, host_port));
    if (created.status != 201) {
      const std::string message = created.message();
      if (!pulled && is_missing_image(created.status, message)) {
        pull_image();
        pulled = true;
        --attempt;  // the pull does not use up a port attempt
        continue;
      }
      if (is_name_conflict(created.status, message)) {
        log(LogLevel::warning, "Container name " + name +
                                   " already in use, attempting to discover existing sandbox "
                                   "instance");
        if (auto existing = adopt_existing(name)) {
          if (adopted != nullptr) *adopted = true;
          return *existing;
        }
        // Its holder went away meanwhile: create again, on the same port budget.
        if (++name_conflicts >= kMaxNameConflictRounds) {
          throw std::runtime_error(
              "Could not start sandbox container: the engine reported container name " + name +
              " as in use " + std::to_string(name_conflicts) +
              " times, but no container of that name stayed long enough to adopt");
        }
        --attempt;
        continue;
      }
      log(LogLevel::error, "Failed to create container " + name + " using the engine API: HTTP " +
                               std::to_string(created.status) + ": " + message);
      throw std::runtime_error("Failed to start sandbox container: " + message +
                               engine_failure_hint(message));
    }

    const std::string id = created_container_id(created.body);
    if (id.empty()) {
      throw std::runtime_error(
          "Failed to start sandbox container: the engine's create answer "
          "carried no container id");
    }
    // The container exists from here on: every way out of this attempt but success removes it
    // (a /start or inspect that times out or fails must not leave it behind).
    struct RemoveUnlessKept {
      LocalContainerBackend* backend;
      const std::string& id;
      bool keep = false;
      ~RemoveUnlessKept() {
        if (!keep) backend->remove_quietly(id);
      }
    } created_container{this, id};

    const HttpResponse started =
        client_.call("POST", "/containers/" + id + "/start", settings_.request_timeout_seconds);
    bool running_anyway = false;
    if (started.status != 204 && started.status != 304) {
      // A racing create of the same name may have started it meanwhile (adopt_existing starts
      // a container left in "created"); if it runs, it is the sandbox.
      try {
        const std::optional<ContainerState> now = inspect(id);
        running_anyway = now && now->running;
      } catch (const std::exception&) {
      }
    }
    if (started.status != 204 && started.status != 304 && !running_anyway) {
      const std::string message = started.message();
      if (is_port_conflict_message(message)) {
        log(LogLevel::warning,
            "Port " + (host_port > 0 ? std::to_string(host_port) : std::string("(engine-chosen)")) +
                " rejected by Docker (already allocated), retrying with next port");
        if (host_port > 0) next_port = host_port + 1;
        continue;
      }
      log(LogLevel::error, "Failed to start container using the engine API: " + message);
      throw std::runtime_error("Failed to start sandbox container: " + message +
                               engine_failure_hint(message));
    }

    std::optional<ContainerState> state = inspect(id);
    if (!state || !state->running) {
      throw std::runtime_error("Sandbox container " + name + " (ID: " + short_id(id) +
                               ") exited right after it started (" +
                               (state ? "state " + state->status : std::string("removed")) +
                               "); check that image " + settings_.image +
                               " runs a long-lived server on port 8080");
    }
    if (state->host_port == 0) state->host_port = host_port;
    if (state->host_port == 0) {
      throw std::runtime_error("Sandbox container " + name +
                               " started but the engine reported no host port for 8080/tcp");
    }
    log(LogLevel::info, "Started container " + name + " (ID: " + short_id(id) +
                            ") using the engine API on port " + std::to_string(state->host_port));
    SandboxInfo info = info_from(spec.sandbox_id, *state);
    info.container_name = name;
    created_container.keep = true;
    return info;
  }
  throw std::runtime_error(
      "Could not start sandbox container: all candidate ports are already allocated by Docker");
}

void LocalContainerBackend::pull_image() {
  const auto [repository, tag] = split_image_reference(settings_.image);
  log(LogLevel::info, "Image " + settings_.image + " is not present on the engine; pulling it");

  std::string pending;                             // an incomplete line of the progress stream
  std::string error;                               // the last error the stream reported
  std::string head;                                // the start of the answer, for HTTP errors
  std::map<std::string, std::string> last_status;  // layer id → last status logged
  const auto handle_line = [&](const std::string& line) {
    const std::optional<PullProgress> progress = parse_pull_progress_line(line);
    if (!progress) return;
    if (!progress->error.empty()) {
      error = progress->error;
      return;
    }
    const std::string& status = progress->status;
    const std::string& id = progress->layer;
    if (status.empty() || last_status[id] == status) return;
    if (last_status.size() > 4096) last_status.clear();  // layer ids come from the engine
    last_status[id] = status;
    log(LogLevel::info,
        "Pulling image " + settings_.image + ": " + (id.empty() ? "" : id + ": ") + status);
  };
  // The engine's progress lines are a few hundred bytes; one that grows past this without a
  // newline is dropped up to its end, so a misbehaving engine cannot grow the buffer forever.
  constexpr std::size_t kMaxProgressLine = 1u << 20;
  bool dropping_line = false;
  const BodySink sink = [&](std::string_view chunk) {
    if (head.size() < 4096) head.append(chunk.substr(0, 4096 - head.size()));
    while (!chunk.empty()) {
      const std::size_t newline = chunk.find('\n');
      const std::string_view piece = chunk.substr(0, newline);
      if (!dropping_line) {
        if (pending.size() + piece.size() > kMaxProgressLine) {
          dropping_line = true;
          pending.clear();
        } else {
          pending.append(piece);
        }
      }
      if (newline == std::string_view::npos) break;
      if (!dropping_line) handle_line(pending);
      pending.clear();
      dropping_line = false;
      chunk.remove_prefix(newline + 1);
    }
  };

  HttpResponse response;
  try {
    response = client_.call(
        "POST", "/images/create?fromImage=" + url_encode(repository) + "&tag=" + url_encode(tag),
        settings_.pull_timeout_seconds, "", sink);
  } catch (const EngineTimeoutError& e) {
    throw std::runtime_error(
        "Sandbox image " + settings_.image +
        " is not present on the engine and pulling it did not finish: " + e.what());
  }
  handle_line(pending);
  if (!response.ok()) {
    response.body = head;
    error = response.message();
  }
  if (!error.empty()) {
    log(LogLevel::error, "Failed to pull image " + settings_.image + ": " + error);
    throw std::runtime_error("Sandbox image " + settings_.image +
                             " is not present on the engine at " + settings_.endpoint.display +
                             " and pulling it failed: " + error);
  }
  log(LogLevel::info, "Pulled image " + settings_.image);
}

std::optional<SandboxInfo> LocalContainerBackend::adopt_existing(const std::string& name) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kAdoptWaitSeconds);
  auto delay = std::chrono::milliseconds(10);
  bool start_tried = false;
  // Since when the container has been seen in "created"; time_point::max() = not seen.
  // (A plain value, not an optional: GCC's -Wmaybe-uninitialized misfires on the latter.)
  constexpr auto kNotSeen = std::chrono::steady_clock::time_point::max();
  auto created_since = kNotSeen;
  std::string last_status;
  const auto holder_wait_end = std::chrono::steady_clock::now() + kNameHolderAppearWait;
  bool seen = false;
  while (true) {
    std::optional<ContainerState> state = inspect(name);
    if (!state) {
      // Seen and now gone: the holder removed it. Never seen: it may still be on its way.
      if (seen || std::chrono::steady_clock::now() + delay > holder_wait_end) return std::nullopt;
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::milliseconds(200));
      continue;
    }
    seen = true;
    last_status = state->status;
    if (state->running && state->host_port > 0) {
      const std::string sandbox_id = name.substr(settings_.prefix.size() + 1);
      // A claimed slot holding the name is adopted with its record's identity.
      SandboxInfo info = sandbox_info(sandbox_id, *state).value_or(info_from(sandbox_id, *state));
      log(LogLevel::info, "Adopted existing container " + name + " (ID: " + short_id(state->id) +
                              ") on port " + std::to_string(state->host_port));
      return info;
    }
    if (state->status != "created") {
      created_since = kNotSeen;
    } else if (created_since == kNotSeen) {
      created_since = std::chrono::steady_clock::now();
    }
    if (created_since != kNotSeen && !start_tried &&
        std::chrono::steady_clock::now() - created_since > std::chrono::seconds(2)) {
      // Its creator normally starts it within milliseconds; one that stays "created" lost its
      // creator (crash, timeout). Starting it is harmless if someone else does too (304).
      start_tried = true;
      try {
        client_.call("POST", "/containers/" + state->id + "/start",
                     settings_.request_timeout_seconds);
      } catch (const EngineTimeoutError&) {
      }
    }
    if (std::chrono::steady_clock::now() + delay > deadline) break;
    std::this_thread::sleep_for(delay);
    delay = std::min(delay * 2, std::chrono::milliseconds(500));
  }
  throw std::runtime_error("Container name " + name + " is held by a container in state \"" +
                           last_status + "\" that did not start serving within " +
                           std::to_string(kAdoptWaitSeconds) + "s; not adopting it");
}

void LocalContainerBackend::remove_quietly(const std::string& id) {
  std::string failure;
  try {
    const HttpResponse r = client_.call("DELETE", "/containers/" + id + "?force=true&v=true",
                                        settings_.request_timeout_seconds);
    if (r.ok() || r.status == 404) return;
    failure = r.message();
  } catch (const std::exception& e) {
    failure = e.what();
  }
  {
    std::lock_guard lock(pending_mutex_);
    pending_removals_.insert(id);
  }
  log(LogLevel::warning, "Container " + short_id(id) +
                             " could not be removed after a failed start (" + failure +
                             "); it is removed once the engine answers again, unless it runs by "
                             "then");
}

void LocalContainerBackend::retry_pending_removals() {
  std::vector<std::string> pending;
  {
    std::lock_guard lock(pending_mutex_);
    if (pending_removals_.empty()) return;
    pending.assign(pending_removals_.begin(), pending_removals_.end());
  }
  for (const std::string& id : pending) {
    std::string outcome;
    try {
      // A container that runs by now was started by someone (a name-conflict adoption, here or
      // in a peer gateway): it is an orphan for reconciliation, not ours to remove.
      const std::optional<ContainerState> state = inspect(id);
      if (!state) {
        outcome = "is gone";
      } else if (state->running) {
        outcome = "runs now; left to reconciliation";
      } else {
        const HttpResponse r = client_.call("DELETE", "/containers/" + id + "?force=true&v=true",
                                            settings_.request_timeout_seconds);
        if (!r.ok() && r.status != 404) continue;  // kept for the next try
        outcome = "removed";
      }
    } catch (const std::exception&) {
      return;  // the engine is still out of reach: every one stays pending
    }
    {
      std::lock_guard lock(pending_mutex_);
      pending_removals_.erase(id);
    }
    log(LogLevel::info, "Container " + short_id(id) + " left by a failed start " + outcome);
  }
}

std::optional<ContainerState> LocalContainerBackend::inspect(const std::string& target) {
  HttpResponse response;
  try {
    response =
        client_.call("GET", "/containers/" + url_encode(target) + "/json", kInspectTimeoutSeconds);
  } catch (const EngineTimeoutError&) {
    throw std::runtime_error("Timed out checking container " + target);
  } catch (const EngineUnreachableError& e) {
    throw std::runtime_error("Failed to inspect container " + target + ": " + e.what());
  }
  if (response.status == 200) {
    std::optional<ContainerState> state = parse_inspect_answer(response.body);
    if (!state) {
      throw std::runtime_error("Failed to inspect container " + target +
                               ": the engine's answer could not be read");
    }
    return state;
  }
  if (is_no_such_container(response.status, response.message(), target)) return std::nullopt;
  throw std::runtime_error("Failed to inspect container " + target + ": " +
                           trimmed(response.message()));
}

SandboxInfo LocalContainerBackend::info_from(const std::string& sandbox_id,
                                             const ContainerState& state) const {
  SandboxInfo info;
  info.sandbox_id = sandbox_id;
  info.sandbox_url =
      state.host_port > 0 ? sandbox_url(settings_.sandbox_host, state.host_port) : std::string();
  info.container_name = state.name.empty() ? container_name(sandbox_id) : state.name;
  info.container_id = state.id;
  info.created_at = state.created_at;
  if (auto it = state.labels.find(kLabelUserId); it != state.labels.end())
    info.user_id = it->second;
  if (auto it = state.labels.find(kLabelThreadId); it != state.labels.end()) {
    info.thread_id = it->second;
  }
  if (auto it = state.labels.find(kLabelContract); it != state.labels.end()) {
    info.mount_contract_version = parse_port_text(it->second);  // small non-negative integer
  }
  return info;
}

std::optional<SandboxInfo> LocalContainerBackend::sandbox_info(const std::string& sandbox_id,
                                                               const ContainerState& state) const {
  if (state.labels.count(kLabelSlotOwner) == 0) return info_from(sandbox_id, state);
  // A slot's labels were written before anyone claimed it; its record says whose it is now.
  if (settings_.slots_dir.empty()) return std::nullopt;
  const auto record = SlotPool::claimed(settings_.slots_dir, sandbox_id, state.id);
  if (!record) return std::nullopt;
  SandboxInfo info = info_from(sandbox_id, state);
  info.user_id = record->user_id;
  info.thread_id = record->thread_id;
  return info;
}

void LocalContainerBackend::destroy(const SandboxInfo& info) {
  destroy_once(info, false);
  // A claimed slot's host mounts go with it (nothing mounted on the host outlives its sandbox).
  if (!settings_.slots_dir.empty()) {
    SlotPool::forget_claim(settings_.slots_dir, info.sandbox_id, info.container_id.value_or(""),
                           *logger_);
  }
}

PreStartedSlots::Claim LocalContainerBackend::claim_slot(const CreateRequest& request) {
  if (!slots_) return {std::nullopt, Miss::unsupported, "warm_slots is 0"};
  const std::string name = container_name(request.sandbox_id);
  if (request.sandbox_id.empty() || !is_valid_container_name(name)) {
    return {std::nullopt, Miss::claim_failed, "invalid sandbox id"};
  }
  Claim claim = slots_->claim(request, name);
  if (request.thread_id) slots_->learn_shape(request);
  return claim;
}

std::string LocalContainerBackend::slot_preflight() {
  if (settings_.warm_slots == 0) return "";
  if (::geteuid() != 0) {
    return "this process runs as uid " + std::to_string(::geteuid()) +
           ", not root; binding into a running slot needs root in the engine's mount namespace";
  }
  if (settings_.endpoint.unix_socket.empty()) {
    return "the engine is reached at " + settings_.endpoint.display +
           ", not through a local unix socket; a host mount here may not reach its containers";
  }
  try {
    const HttpResponse info = client_.call("GET", "/info", settings_.request_timeout_seconds);
    rapidjson::Document doc;
    doc.Parse(info.body.c_str(), info.body.size());
    const auto options = doc.IsObject() ? doc.FindMember("SecurityOptions") : doc.MemberEnd();
    if (info.status == 200 && options != doc.MemberEnd() && options->value.IsArray()) {
      for (const auto& option : options->value.GetArray()) {
        if (option.IsString() && std::string(option.GetString()).find("name=rootless") == 0) {
          return "the engine at " + settings_.endpoint.display +
                 " runs rootless; its containers do not see this host's mounts";
        }
      }
    }
  } catch (const std::exception& e) {
    return std::string("the engine could not be asked: ") + e.what();
  }
  if (const std::string why = links_on_the_way(settings_.slots_dir); !why.empty()) {
    return "slots_dir " + settings_.slots_dir.string() + " cannot be used: " + why +
           "; give its real path";
  }
  struct stat st {};
  if (::lstat(settings_.slots_dir.c_str(), &st) == 0) {
    const std::string why = host_fs::untrusted_reason(st);
    if (!why.empty()) return "slots_dir " + settings_.slots_dir.string() + ": " + why;
  }
  return "";
}

PreStartedSlots::Status LocalContainerBackend::slot_status() const {
  return slots_ ? slots_->status() : Status{};
}

SlotEngine::Started LocalContainerBackend::start_slot(
    const std::string& name, const std::vector<Mount>& slot_mounts,
    const std::map<std::string, std::string>& labels) {
  ContainerSpec spec;
  spec.sandbox_id = name.substr(settings_.prefix.size() + 1);
  spec.name = name;
  spec.mounts = settings_.mounts;
  spec.rslave_from = spec.mounts.size();
  spec.mounts.insert(spec.mounts.end(), slot_mounts.begin(), slot_mounts.end());
  spec.labels = labels;
  spec.labels[kLabelManagedBy] = kManagedByValue;
  spec.labels[kLabelContract] = std::to_string(kSandboxMountContractVersion);
  const SandboxInfo info = start_container(spec, nullptr);
  if (!wait_for_sandbox_ready(info.sandbox_url, settings_.slot_ready_timeout_seconds)) {
    remove_container(info.container_id.value_or(name));
    throw std::runtime_error(
        "slot " + name + " did not answer its readiness probe within " +
        std::to_string(static_cast<int>(settings_.slot_ready_timeout_seconds)) + " s");
  }
  return {info.container_id.value_or(""), info.sandbox_url, info.created_at};
}

void LocalContainerBackend::remove_container(const std::string& id) {
  const HttpResponse r =
      client_.call("DELETE", "/containers/" + url_encode(id) + "?force=true&v=true",
                   settings_.request_timeout_seconds);
  if (r.ok() || r.status == 404) return;
  throw std::runtime_error("removing container " + short_id(id) + ": " + r.message());
}

bool LocalContainerBackend::rename_container(const std::string& id, const std::string& name) {
  const HttpResponse r =
      client_.call("POST", "/containers/" + url_encode(id) + "/rename?name=" + url_encode(name),
                   settings_.request_timeout_seconds);
  if (r.ok()) return true;
  if (r.status == 409 || is_name_conflict(r.status, r.message())) return false;
  throw std::runtime_error("renaming container " + short_id(id) + " to " + name + ": " +
                           r.message());
}

bool LocalContainerBackend::container_sees(const std::string& id, const std::string& path) {
  const HttpResponse r =
      client_.call("GET", "/containers/" + url_encode(id) + "/archive?path=" + url_encode(path),
                   settings_.request_timeout_seconds);
  if (r.status == 200) return true;
  if (r.status == 404) return false;
  throw std::runtime_error("reading " + path + " in container " + short_id(id) + ": " +
                           r.message());
}

std::vector<SlotEngine::Listed> LocalContainerBackend::list_slots() {
  const std::string filters = std::string("{\"label\":[\"") + kLabelSlotOwner + "\"]}";
  const HttpResponse r = client_.call(
      "GET", "/containers/json?all=true&filters=" + url_encode(filters), kListTimeoutSeconds);
  if (r.status != 200) {
    throw std::runtime_error("HTTP " + std::to_string(r.status) + ": " + r.message());
  }
  std::vector<Listed> out;
  for (ContainerState& state : parse_listing(r.body, settings_.prefix + "-")) {
    auto owner = state.labels.find(kLabelSlotOwner);
    if (owner == state.labels.end() || owner->second.empty()) continue;
    out.push_back({std::move(state.id), std::move(state.name), owner->second});
  }
  return out;
}

bool LocalContainerBackend::container_exists(const std::string& id) {
  return inspect(id).has_value();
}

void LocalContainerBackend::destroy_once(const SandboxInfo& info, bool thawed_for_stop) {
  std::string target;
  if (info.container_id && !info.container_id->empty()) {
    target = *info.container_id;
  } else if (info.container_name && !info.container_name->empty()) {
    target = *info.container_name;
  } else {
    log(LogLevel::debug, "Sandbox " + info.sandbox_id + " names no container; nothing to stop");
    return;
  }
  const std::string shown = target == info.container_id.value_or("") ? short_id(target) : target;
  const double timeout = static_cast<double>(settings_.stop_timeout_seconds) + 30.0;
  HttpResponse response;
  try {
    response = client_.call("POST",
                            "/containers/" + url_encode(target) +
                                "/stop?t=" + std::to_string(settings_.stop_timeout_seconds),
                            timeout);
  } catch (const EngineTimeoutError& e) {
    const std::string message =
        "Timed out stopping container " + shown + " using the engine API: " + e.what();
    log(LogLevel::error, message);
    throw std::runtime_error(message);
  } catch (const EngineUnreachableError& e) {
    log(LogLevel::warning, "Failed to stop container " + shown + ": " + e.what());
    throw std::runtime_error("Failed to stop container " + shown + ": " + e.what());
  }
  if (response.status == 204) {
    log(LogLevel::info, "Stopped container " + shown + " using the engine API");
  } else if (response.status == 304) {
    log(LogLevel::info, "Container " + shown + " was already stopped");
  } else if (is_no_such_container(response.status, response.message(), target)) {
    log(LogLevel::info, "Container " + shown + " is already gone");
  } else if (!thawed_for_stop && response.message().find("paused") != std::string::npos) {
    // podman refuses to stop a paused container ("container state improper"); Docker stops
    // it. Thaw it and stop again, once.
    unpause(info);
    destroy_once(info, /*thawed_for_stop=*/true);
  } else {
    const std::string message = response.message();
    log(LogLevel::warning, "Failed to stop container " + shown + ": " + message);
    throw std::runtime_error("Failed to stop container " + shown + ": " + message);
  }
}

void LocalContainerBackend::pause(const SandboxInfo& info) {
  freeze_call(info, "pause", [](const std::string& message) {
    return message.find("already paused") != std::string::npos;
  });
}

void LocalContainerBackend::unpause(const SandboxInfo& info) {
  freeze_call(info, "unpause", [](const std::string& message) {
    return message.find("not paused") != std::string::npos;
  });
}

void LocalContainerBackend::freeze_call(const SandboxInfo& info, const std::string& verb,
                                        bool (*done_already)(const std::string& message)) {
  std::string target = info.container_id.value_or("");
  if (target.empty()) target = info.container_name.value_or("");
  if (target.empty()) {
    throw std::runtime_error("Cannot " + verb + " sandbox " + info.sandbox_id +
                             ": it names no container");
  }
  const std::string shown = target == info.container_id.value_or("") ? short_id(target) : target;
  HttpResponse response;
  try {
    response = client_.call("POST", "/containers/" + url_encode(target) + "/" + verb,
                            kFreezeTimeoutSeconds);
  } catch (const std::exception& e) {
    throw std::runtime_error("Failed to " + verb + " container " + shown + ": " + e.what());
  }
  if (response.status == 204 || response.status == 200) {
    log(LogLevel::info, (verb == "pause" ? "Paused container " : "Unpaused container ") + shown);
    return;
  }
  const std::string message = response.message();
  if (done_already(message)) return;
  if (is_no_such_container(response.status, message, target)) {
    throw std::runtime_error("Cannot " + verb + " container " + shown + ": it is gone");
  }
  throw std::runtime_error("Failed to " + verb + " container " + shown + ": " + message);
}

bool LocalContainerBackend::is_alive(const SandboxInfo& info) {
  std::string target;
  if (info.container_name && !info.container_name->empty()) {
    target = *info.container_name;
  } else if (info.container_id && !info.container_id->empty()) {
    target = *info.container_id;
  } else {
    return false;
  }
  std::optional<ContainerState> state = inspect(target);
  if (!state) return false;
  if (info.container_id && !info.container_id->empty() &&
      !same_container(state->id, *info.container_id)) {
    log(LogLevel::debug, "Container name " + target + " now belongs to container " +
                             short_id(state->id) + ", not " + short_id(*info.container_id));
    return false;
  }
  return state->running || state->paused;  // a paused sandbox is frozen, not dead
}

std::optional<SandboxInfo> LocalContainerBackend::discover(const std::string& sandbox_id) {
  const std::string name = container_name(sandbox_id);
  if (sandbox_id.empty() || !is_valid_container_name(name)) return std::nullopt;
  std::optional<ContainerState> state;
  try {
    state = inspect(name);
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Could not verify container " + name + " during discovery; not adopting it: " + e.what());
    return std::nullopt;
  }
  if (!state || !(state->running || state->paused)) return std::nullopt;
  std::optional<SandboxInfo> ours = sandbox_info(sandbox_id, *state);
  if (!ours) return std::nullopt;  // an unclaimed slot
  if (state->host_port == 0) {
    log(LogLevel::debug, "Container " + name + " publishes no host port for 8080/tcp");
    return std::nullopt;
  }
  SandboxInfo info = std::move(*ours);
  if (state->paused) {
    // Paused by an earlier process (issue 23): discovery hands it out, so thaw it first.
    try {
      unpause(info);
    } catch (const std::exception& e) {
      log(LogLevel::warning, "Container " + name + " is paused and could not be thawed; not " +
                                 "adopting it: " + e.what());
      return std::nullopt;
    }
  }
  if (!wait_for_sandbox_ready(info.sandbox_url, kDiscoveryReadySeconds)) {
    log(LogLevel::info, "Container " + name + " is running but not ready at " + info.sandbox_url +
                            "; not adopting it");
    return std::nullopt;
  }
  return info;
}

std::vector<SandboxInfo> LocalContainerBackend::list_running() {
  retry_pending_removals();
  const std::string name_prefix = settings_.prefix + "-";
  const auto list = [this](const std::string& filter_key, const std::string& filter_value) {
    const std::string filters = "{\"" + filter_key + "\":[\"" + filter_value + "\"]}";
    HttpResponse response =
        client_.call("GET", "/containers/json?filters=" + url_encode(filters), kListTimeoutSeconds);
    if (response.status != 200) {
      throw std::runtime_error("HTTP " + std::to_string(response.status) + ": " +
                               response.message());
    }
    return response.body;
  };

  // id → info; both listings merged.
  std::map<std::string, SandboxInfo> found;
  try {
    for (const std::string& body :
         {list("label", std::string(kLabelManagedBy) + "=" + kManagedByValue),
          list("name", name_prefix)}) {
      for (const ContainerState& state : parse_running_listing(body, name_prefix)) {
        if (found.count(state.id) != 0) continue;
        const std::string sandbox_id = state.name.substr(name_prefix.size());
        // An unclaimed slot is nobody's: never listed, so never adopted.
        if (auto info = sandbox_info(sandbox_id, state)) found.emplace(state.id, std::move(*info));
      }
    }
  } catch (const std::exception& e) {
    log(LogLevel::warning, "Failed to list running containers with the engine API at " +
                               settings_.endpoint.display + ": " + e.what());
    return {};
  }
  std::vector<SandboxInfo> out;
  out.reserve(found.size());
  for (auto& [id, info] : found) out.push_back(std::move(info));
  log(LogLevel::info, "Found " + std::to_string(out.size()) + " running sandbox container(s)");
  return out;
}

SandboxDiscoveryResult LocalContainerBackend::discover_for_reconciliation(
    const std::string& sandbox_id) {
  const std::string name = container_name(sandbox_id);
  if (sandbox_id.empty() || !is_valid_container_name(name)) {
    return SandboxDiscoveryResult::absent(backend_namespace());
  }
  std::optional<ContainerState> state;
  try {
    state = inspect(name);
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Could not look up container " + name + " for reconciliation: " + e.what());
    return SandboxDiscoveryResult::unknown();
  }
  std::optional<SandboxInfo> ours;
  if (state) ours = sandbox_info(sandbox_id, *state);
  if (!ours) return SandboxDiscoveryResult::absent(backend_namespace());  // or an unclaimed slot
  if (state->running) {
    std::optional<SandboxInfo> info;
    if (state->host_port > 0) info = std::move(ours);
    return SandboxDiscoveryResult::found(std::move(info), backend_namespace(), state->id);
  }
  // Stopped, dying or removed-on-exit: that instance is over.
  if (state->status == "exited" || state->status == "dead" || state->status == "removing" ||
      state->status == "stopping" || state->status == "stopped") {
    return SandboxDiscoveryResult::absent(backend_namespace());
  }
  // created / restarting / paused: it exists but cannot be reached now.
  return SandboxDiscoveryResult::found(std::nullopt, backend_namespace(), state->id);
}

SANDBOXD_EXPORT_BACKEND(LocalContainerBackend,
                        "sandboxes as containers of a local Docker-compatible engine (REST API)")

}  // namespace sandboxd::local_docker

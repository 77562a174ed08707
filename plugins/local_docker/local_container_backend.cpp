#include "local_container_backend.hpp"

#include <rapidjson/document.h>

#include <algorithm>
#include <chrono>
#include <sandboxd/readiness.hpp>
#include <stdexcept>
#include <thread>

#include "docker_support.hpp"
#include "host_mounts.hpp"
#include "image_pull.hpp"
#include "port_reservation.hpp"
#include "sandboxd/sandbox_capabilities.hpp"

namespace sandboxd::local_docker {

LocalContainerBackend::~LocalContainerBackend() {
  slots_.reset();
  retry_pending_removals();
  remove_network_at_exit();
  MutexLock lock(pending_mutex_);
  for (const std::string& id : pending_removals_) {
    log(LogLevel::warning, "Container " + short_id(id) +
                               " left by a failed start could not be removed; remove it by "
                               "hand: docker rm -f " +
                               short_id(id));
  }
}

ContainerCreateBody LocalContainerBackend::create_body(const ContainerSpec& spec,
                                                       int host_port) const {
  ContainerCreateBody body;
  body.image = spec.image.empty() ? settings_.image : spec.image;
  body.user = settings_.user;
  const bool through_proxy = settings_.policy.mode == "allowlist";
  static const char* const kProxyVariables[] = {"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                                                "http_proxy", "https_proxy", "all_proxy"};
  const auto proxy_variable = [](const std::string& key) {
    return key == "NO_PROXY" || key == "no_proxy" ||
           std::find(std::begin(kProxyVariables), std::end(kProxyVariables), key) !=
               std::end(kProxyVariables);
  };
  for (const auto& [key, value] : settings_.environment) {
    if (through_proxy && proxy_variable(key)) continue;  // the host's proxy is the way out
    body.env.push_back(key + "=" + value);
  }
  if (through_proxy) {
    for (const char* key : kProxyVariables)
      body.env.push_back(std::string(key) + "=" + kEgressProxyUrl);
    body.env.push_back("NO_PROXY=localhost,127.0.0.1");
    body.env.push_back("no_proxy=localhost,127.0.0.1");
  }
  body.labels = spec.labels;
  body.exposed_port = kContainerPort;
  std::string host_ip = settings_.bind_host;
  if (host_ip.size() > 2 && host_ip.front() == '[' && host_ip.back() == ']') {
    host_ip = host_ip.substr(1, host_ip.size() - 2);
  }
  body.publish_host_ip = host_ip;
  body.publish_host_port = host_port;
  // open: our bridge network (or the operator's); isolated: no network, no published port.
  const bool open = settings_.policy.mode == "open";
  body.network_mode = open ? network_target() : "none";  // "": the engine's default bridge
  body.publish = open && settings_.policy.publish;
  body.security_opt = settings_.security_opt;
  body.cap_drop = settings_.cap_drop;
  body.cap_add = settings_.cap_add;
  body.init = settings_.init;
  body.runtime = settings_.runtime;
  body.memory_bytes = settings_.memory_bytes;
  body.nano_cpus = settings_.cpus > 0 ? static_cast<long long>(settings_.cpus * 1e9) : 0;
  body.pids_limit = settings_.pids_limit;
  for (std::size_t i = 0; i < spec.mounts.size(); ++i) {
    const Mount& m = spec.mounts[i];
    // A slot's mount points: binds made on the host later reach the running container.
    body.mounts.push_back(
        {m.host_path, m.container_path, m.read_only, i >= spec.rslave_from ? "rslave" : ""});
  }
  return body;
}

SandboxInfo LocalContainerBackend::create(const CreateRequest& request) {
  return create_with_image(request, "");
}

SandboxInfo LocalContainerBackend::create_with_image(const CreateRequest& request,
                                                     const std::string& image) {
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
  spec.image = image;
  spec.mounts = settings_.mounts;
  spec.mounts.insert(spec.mounts.end(), request.extra_mounts.begin(), request.extra_mounts.end());
  spec.labels = {{kLabelManagedBy, kManagedByValue},
                 {kLabelSandboxId, request.sandbox_id},
                 {kLabelContract, std::to_string(kSandboxMountContractVersion)},
                 {kLabelNetworkPolicy, settings_.policy.label()}};
  if (request.user_id) spec.labels[kLabelUserId] = *request.user_id;
  if (request.thread_id) spec.labels[kLabelThreadId] = *request.thread_id;
  bool adopted = false;
  SandboxInfo info = start_container(spec, &adopted);
  if (adopted) return info;  // its own labels say whose it is
  // Identity as requested: these are the labels we just wrote.
  info.user_id = request.user_id;
  info.thread_id = request.thread_id;
  info.mount_contract_version = kSandboxMountContractVersion;
  info.network_policy = settings_.policy.label();
  return info;
}

SandboxInfo LocalContainerBackend::start_container(const ContainerSpec& spec, bool* adopted) {
  const std::string& name = spec.name;
  const std::vector<Mount>& mounts = spec.mounts;
  const bool open = settings_.policy.mode == "open";
  const bool published = open && settings_.policy.publish;
  // What this host must be able to do to keep the sandbox apart from others: fail closed.
  if (settings_.policy.namespaced() || (open && (settings_.policy.isolate || !published))) {
    if (const std::string why = network_preflight(); !why.empty()) {
      throw std::runtime_error("Cannot start sandbox container " + name + " under network mode " +
                               settings_.policy.mode + ": " + why);
    }
  }
  if (open) ensure_network();
  check_runtime_known();  // before any container exists

  log(LogLevel::info,
      "Starting container " + name + " using the engine API at " + settings_.endpoint.display +
          ": image " + settings_.image + ", port " + settings_.bind_host + ":" +
          (settings_.base_port > 0 ? std::to_string(settings_.base_port) + "+" : "auto") +
          "->8080, mounts: " + render_mounts(mounts) + ", environment: " +
          (settings_.environment.empty() ? "none" : redacted_environment(settings_.environment)));

  int next_port = settings_.base_port;
  bool pulled = false;
  int network_remakes = 0;
  int duplicate_networks_settled = 0;
  int name_conflicts = 0;
  // Our network was removed between its check and this create (a destroy of the last sandbox
  // on it, in this or another process): made again, and the attempt repeated. Gateways sharing
  // a prefix can each remove it again before this create lands (seen with three gateways under
  // load), so a few rounds, not one; once a container is on it, the engine refuses its removal.
  const auto make_network_again = [&] {
    if (!open || !settings_.own_network || network_remakes >= kMaxNameConflictRounds) {
      return false;
    }
    ++network_remakes;
    {
      MutexLock lock(network_mutex_);
      network_ready_ = false;
    }
    ensure_network();
    return true;
  };
  const auto network_went_away = [&](const std::string& message) {
    return message.find("network") != std::string::npos &&
           message.find("not found") != std::string::npos && make_network_again();
  };
  for (int attempt = 0; attempt < kMaxStartAttempts; ++attempt) {
    PortReservation reservation;
    int host_port = 0;
    if (settings_.base_port > 0 && published) {
      host_port = reservation.claim_from(next_port);
    }

    const EngineApi::Created created = api_.create_container(name, create_body(spec, host_port));
    if (created.outcome.status != 201) {
      const std::string& message = created.outcome.message;
      if (!spec.image.empty() && is_missing_image(created.outcome.status, message)) {
        throw std::runtime_error("snapshot image " + spec.image + " is gone from the engine at " +
                                 settings_.endpoint.display +
                                 " (removed by hand?); its snapshot "
                                 "cannot be restored: delete it");
      }
      if (!pulled && is_missing_image(created.outcome.status, message)) {
        pull_image();
        pulled = true;
        --attempt;  // the pull does not use up a port attempt
        continue;
      }
      if (network_went_away(message)) {
        --attempt;
        continue;
      }
      if (is_name_conflict(created.outcome.status, message)) {
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
                               std::to_string(created.outcome.status) + ": " + message);
      throw std::runtime_error("Failed to start sandbox container: " + message +
                               engine_failure_hint(message));
    }

    const std::string& id = created.id;
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
    // Made with the runtime asked for, or not started at all (podman 4.3 ignores the field).
    check_runtime_of(id, name);

    const EngineApi::Started started = api_.start_container(id);
    bool running_anyway = false;
    if (!started.ok()) {
      // A racing create of the same name may have started it meanwhile (adopt_existing starts
      // a container left in "created"); if it runs, it is the sandbox.
      try {
        const std::optional<ContainerState> now = inspect(id);
        running_anyway = now && now->running;
      } catch (const std::exception&) {
      }
    }
    if (!started.ok() && !running_anyway) {
      const std::string& message = started.outcome.message;
      if (network_went_away(message)) {  // Docker finds out at the start, podman at the create
        --attempt;
        continue;
      }
      // A racing peer may make its copy again before it settles too: a few rounds, not forever.
      if (duplicate_networks_settled < kMaxNameConflictRounds &&
          settle_duplicate_network(message)) {
        ++duplicate_networks_settled;
        --attempt;
        continue;
      }
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
    if (published && state->host_port == 0) state->host_port = host_port;
    if (published && state->host_port == 0) {
      throw std::runtime_error("Sandbox container " + name +
                               " started but the engine reported no host port for 8080/tcp");
    }
    // Before anyone is handed the sandbox, and before its own code can run: its port on the
    // bridge no longer exchanges frames with any other sandbox's.
    if (open && settings_.policy.isolate) {
      try {
        isolate(id, name);
      } catch (const PortOnNoBridge& e) {
        // The removal was decided before this container existed and ran after it joined
        // (podman's check and removal are not one step): what remains of the network is a
        // name, or nothing, with no bridge under it. Without this container on it, it goes
        // too (the engine refuses while another is on it), and is made again.
        if (network_remakes >= kMaxNameConflictRounds) throw;
        log(LogLevel::warning, std::string(e.what()) + "; making the network again");
        remove_quietly(id);
        created_container.keep = true;  // removed just now
        try {
          remove_network_unless_used(
              NetworkState{.id = network_target(), .name = settings_.network});
        } catch (const std::exception&) {
        }
        if (!make_network_again()) throw;
        --attempt;
        continue;
      }
    }
    log(LogLevel::info, "Started container " + name + " (ID: " + short_id(id) + ") using the " +
                            "engine API " +
                            (published ? "on port " + std::to_string(state->host_port)
                                       : std::string("without a published port (network ") +
                                             settings_.policy.label() + ")"));
    SandboxInfo info = info_from(spec.sandbox_id, *state);
    info.container_name = name;
    created_container.keep = true;
    return info;
  }
  throw std::runtime_error(
      "Could not start sandbox container: all candidate ports are already allocated by Docker");
}

void LocalContainerBackend::pull_image() {
  pull_image_into(api_, settings_.image, settings_.endpoint.display, settings_.pull_timeout_seconds,
                  *logger_);
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
        api_.start_container(state->id);
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
    const EngineApi::Removed removed = api_.remove_container(id);
    if (removed.ok()) return;
    failure = removed.outcome.message;
  } catch (const std::exception& e) {
    failure = e.what();
  }
  {
    MutexLock lock(pending_mutex_);
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
    MutexLock lock(pending_mutex_);
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
        if (!api_.remove_container(id).ok()) continue;  // kept for the next try
        outcome = "removed";
      }
    } catch (const std::exception&) {
      return;  // the engine is still out of reach: every one stays pending
    }
    {
      MutexLock lock(pending_mutex_);
      pending_removals_.erase(id);
    }
    log(LogLevel::info, "Container " + short_id(id) + " left by a failed start " + outcome);
  }
}

void LocalContainerBackend::destroy(const SandboxInfo& info) {
  if (info.container_id) keeper_.forget(*info.container_id);
  destroy_once(info, false);
  netns_.forget(info.container_id.value_or(""));
  // The last sandbox on our network takes it along (the engine refuses while one is attached;
  // a create racing this one makes it again).
  if (settings_.policy.mode == "open" && settings_.own_network) remove_network_after(info);
  // A claimed slot's host mounts go with it (nothing mounted on the host outlives its sandbox).
  if (!settings_.slots_dir.empty()) {
    SlotPool::forget_claim(settings_.slots_dir, info.sandbox_id, info.container_id.value_or(""),
                           *logger_);
  }
}

void LocalContainerBackend::destroy_once(const SandboxInfo& info, bool thawed_for_stop) {
  const std::optional<std::string> found = container_target(info);
  if (!found) {
    log(LogLevel::debug, "Sandbox " + info.sandbox_id + " has no container; nothing to stop");
    return;
  }
  const std::string& target = *found;
  const std::string shown = target == info.container_id.value_or("") ? short_id(target) : target;
  Outcome response;
  try {
    response = api_.stop_container(target, settings_.stop_timeout_seconds, 30.0);
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
  } else if (is_no_such_container(response.status, response.message, target)) {
    log(LogLevel::info, "Container " + shown + " is already gone");
  } else if (!thawed_for_stop && response.message.find("paused") != std::string::npos) {
    // podman refuses to stop a paused container ("container state improper"); Docker stops
    // it. Thaw it and stop again, once.
    unpause(info);
    destroy_once(info, /*thawed_for_stop=*/true);
  } else {
    const std::string& message = response.message;
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
  Outcome response;
  try {
    response = verb == "pause" ? api_.pause_container(target, kFreezeTimeoutSeconds)
                               : api_.unpause_container(target, kFreezeTimeoutSeconds);
  } catch (const std::exception& e) {
    throw std::runtime_error("Failed to " + verb + " container " + shown + ": " + e.what());
  }
  if (response.status == 204 || response.status == 200) {
    log(LogLevel::info, (verb == "pause" ? "Paused container " : "Unpaused container ") + shown);
    return;
  }
  const std::string& message = response.message;
  if (done_already(message)) return;
  if (is_no_such_container(response.status, message, target)) {
    throw std::runtime_error("Cannot " + verb + " container " + shown + ": it is gone");
  }
  throw std::runtime_error("Failed to " + verb + " container " + shown + ": " + message);
}

SANDBOXD_EXPORT_BACKEND(LocalContainerBackend,
                        "sandboxes as containers of a local Docker-compatible engine (REST API)")

std::string LocalContainerBackend::engine_storage_path() {
  if (settings_.endpoint.unix_socket.empty()) return "";  // another host's disk
  std::string body;
  if (!api_.info(&body).ok()) return "";
  rapidjson::Document doc;
  doc.Parse(body.c_str(), body.size());
  if (!doc.IsObject()) return "";
  const auto root = doc.FindMember("DockerRootDir");
  if (root == doc.MemberEnd() || !root->value.IsString()) return "";
  const std::string path = root->value.GetString();
  return !path.empty() && path.front() == '/' ? path : "";
}

std::optional<std::uint64_t> LocalContainerBackend::writable_layer_bytes(const SandboxInfo& info) {
  const std::string target = info.container_id && !info.container_id->empty()
                                 ? *info.container_id
                                 : info.container_name.value_or("");
  if (target.empty()) return std::nullopt;
  // A layer's size is walked by the engine: its own bound, longer than an inspect's.
  return api_.container_writable_bytes(target, std::max(settings_.request_timeout_seconds, 30.0));
}

void LocalContainerBackend::check_runtime_known() {
  if (settings_.runtime.empty()) return;
  {
    MutexLock lock(network_mutex_);
    if (runtime_checked_) return;
  }
  std::string body;
  const Outcome asked = api_.info(&body);
  rapidjson::Document doc;
  doc.Parse(body.c_str(), body.size());
  const auto runtimes = doc.IsObject() ? doc.FindMember("Runtimes") : doc.MemberEnd();
  if (!asked.ok() || runtimes == doc.MemberEnd() || !runtimes->value.IsObject()) {
    throw std::runtime_error("runtime " + settings_.runtime + " was asked (" + kLogPrefix +
                             "runtime) but the engine at " + settings_.endpoint.display +
                             " does not list its runtimes (GET /info): refusing to make a "
                             "sandbox that may run under another");
  }
  std::string known;
  for (const auto& runtime : runtimes->value.GetObject()) {
    if (settings_.runtime == runtime.name.GetString()) {
      MutexLock lock(network_mutex_);
      runtime_checked_ = true;
      return;
    }
    known += (known.empty() ? "" : ", ") + std::string(runtime.name.GetString());
  }
  throw std::runtime_error("runtime " + settings_.runtime + " is not one the engine at " +
                           settings_.endpoint.display + " knows (it knows: " + known +
                           "); declare it first (Docker: \"runtimes\" in daemon.json; podman: "
                           "[engine.runtimes] in containers.conf) - no sandbox was made");
}

void LocalContainerBackend::check_runtime_of(const std::string& id, const std::string& name) {
  if (settings_.runtime.empty()) return;
  // podman's own inspect names the OCI runtime a container really got; its Docker-compatible
  // one answers "oci" whatever was asked, and Docker's echoes the runtime it honours.
  std::string made;
  const HttpResponse libpod =
      client_.call("GET", "/libpod/containers/" + url_encode(id) + "/json", kInspectTimeoutSeconds);
  rapidjson::Document doc;
  if (libpod.status == 200 && (doc.Parse(libpod.body.c_str()), doc.IsObject()) &&
      doc.HasMember("OCIRuntime") && doc["OCIRuntime"].IsString()) {
    made = doc["OCIRuntime"].GetString();
  } else {
    const HttpResponse docker =
        client_.call("GET", "/containers/" + url_encode(id) + "/json", kInspectTimeoutSeconds);
    rapidjson::Document inspected;
    inspected.Parse(docker.body.c_str());
    if (docker.status == 200 && inspected.IsObject() && inspected.HasMember("HostConfig") &&
        inspected["HostConfig"].IsObject() && inspected["HostConfig"].HasMember("Runtime") &&
        inspected["HostConfig"]["Runtime"].IsString()) {
      made = inspected["HostConfig"]["Runtime"].GetString();
    }
  }
  if (made == settings_.runtime) return;
  throw std::runtime_error(
      "the engine made sandbox container " + name + " with runtime " +
      (made.empty() ? std::string("(unknown)") : made) + ", not " + settings_.runtime +
      " as asked; it was removed. podman 4.3 ignores the runtime asked through its "
      "Docker-compatible API: run its service with that runtime as its default (declare it in "
      "containers.conf [engine.runtimes] and start `podman --runtime " +
      settings_.runtime + " system service`) - docs/runtimes.md");
}

SandboxSnapshots::Image LocalContainerBackend::commit_snapshot(const SandboxInfo& info,
                                                               const std::string& name) {
  const std::string target = info.container_id && !info.container_id->empty()
                                 ? *info.container_id
                                 : info.container_name.value_or("");
  if (target.empty()) {
    throw std::runtime_error("sandbox " + info.sandbox_id + " names no container to snapshot");
  }
  // An image of ours, never pushed: labelled so it is known for what it is, and tagged with
  // the snapshot's name and a random part (two hosts never collide on a tag).
  const std::string repository = "localhost/" + settings_.prefix + "-snapshot";
  std::string tag = name + "-" + random_token();
  const std::string labels = "LABEL " + std::string(kLabelManagedBy) + "=" + kManagedByValue + " " +
                             kLabelSnapshot + "=" + name;
  const std::string body = "{\"Labels\":{\"" + std::string(kLabelManagedBy) + "\":\"" +
                           kManagedByValue + "\",\"" + kLabelSnapshot + "\":\"" + name + "\"}}";
  const HttpResponse committed =
      client_.call("POST",
                   "/commit?container=" + url_encode(target) + "&repo=" + url_encode(repository) +
                       "&tag=" + url_encode(tag) + "&pause=true&changes=" + url_encode(labels),
                   std::max(settings_.request_timeout_seconds, 120.0), body);
  rapidjson::Document doc;
  doc.Parse(committed.body.c_str());
  if (committed.status != 201 && committed.status != 200) {
    throw std::runtime_error("the engine could not commit sandbox " + info.sandbox_id +
                             "'s container: HTTP " + std::to_string(committed.status) + ": " +
                             committed.body.substr(0, 300));
  }
  if (!doc.IsObject() || !doc.HasMember("Id") || !doc["Id"].IsString()) {
    throw std::runtime_error("the engine's commit answer names no image: " +
                             committed.body.substr(0, 300));
  }
  SandboxSnapshots::Image image;
  image.image = doc["Id"].GetString();
  const auto size_of = [this](const std::string& reference) -> std::uint64_t {
    const HttpResponse inspected = client_.call("GET", "/images/" + url_encode(reference) + "/json",
                                                settings_.request_timeout_seconds);
    rapidjson::Document answer;
    answer.Parse(inspected.body.c_str());
    if (inspected.status != 200 || !answer.IsObject() || !answer.HasMember("Size") ||
        !answer["Size"].IsNumber()) {
      return 0;
    }
    return static_cast<std::uint64_t>(std::max(0.0, answer["Size"].GetDouble()));
  };
  const std::uint64_t whole = size_of(image.image);
  const std::uint64_t base = size_of(settings_.image);
  image.bytes = whole > base ? whole - base : 0;
  return image;
}

void LocalContainerBackend::remove_snapshot_image(const std::string& image) {
  // A destroy stops the container and the engine removes it after (AutoRemove), so right after
  // the last sandbox of an image is destroyed the engine may still refuse: in use. While every
  // container from the image is one of our sandboxes that has stopped (exited, or being
  // removed), that is a removal under way: the removal is asked again for a bounded time. Any
  // other user of the image (one running, or a container not ours) keeps it at once, so a
  // command's start-up never waits on an image that stays.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  HttpResponse removed;
  for (;;) {
    removed = client_.call("DELETE", "/images/" + url_encode(image),
                           std::max(settings_.request_timeout_seconds, 60.0));
    if (removed.status == 200 || removed.status == 404) return;
    if (removed.status != 409 || std::chrono::steady_clock::now() >= deadline) break;
    std::string listed;
    const Outcome users =
        api_.list_containers("ancestor", image, /*all=*/true, kInspectTimeoutSeconds, &listed);
    rapidjson::Document doc;
    if (users.status != 200 || (doc.Parse(listed.c_str()), !doc.IsArray())) break;
    const bool all_ours_stopping =
        std::all_of(doc.Begin(), doc.End(), [](const rapidjson::Value& c) {
          if (!c.IsObject() || !c.HasMember("State") || !c["State"].IsString()) return false;
          const std::string state = c["State"].GetString();
          const bool ours =
              c.HasMember("Labels") && c["Labels"].IsObject() &&
              c["Labels"].HasMember(kLabelManagedBy) && c["Labels"][kLabelManagedBy].IsString() &&
              std::string(c["Labels"][kLabelManagedBy].GetString()) == kManagedByValue;
          // Docker says exited, then removing; podman's compat API may say stopping or stopped.
          return ours && (state == "exited" || state == "removing" || state == "stopping" ||
                          state == "stopped");
        });
    if (!all_ours_stopping) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error("the engine could not remove snapshot image " + image + ": HTTP " +
                           std::to_string(removed.status) + ": " + removed.body.substr(0, 300));
}

SandboxInfo LocalContainerBackend::create_from_snapshot(const CreateRequest& request,
                                                        const std::string& image) {
  if (image.empty()) throw std::invalid_argument("a snapshot image is needed");
  return create_with_image(request, image);
}

}  // namespace sandboxd::local_docker

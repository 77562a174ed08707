#include <sandboxd/readiness.hpp>
#include <stdexcept>

#include "docker_support.hpp"
#include "local_container_backend.hpp"

namespace sandboxd::local_docker {

std::optional<ContainerState> LocalContainerBackend::inspect(const std::string& target) {
  try {
    return api_.inspect_container(target, kInspectTimeoutSeconds);
  } catch (const EngineTimeoutError&) {
    throw std::runtime_error("Timed out checking container " + target);
  } catch (const EngineUnreachableError& e) {
    throw std::runtime_error("Failed to inspect container " + target + ": " + e.what());
  }
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
  if (auto it = state.labels.find(kLabelNetworkPolicy); it != state.labels.end()) {
    info.network_policy = it->second;
    if (is_namespaced_policy(it->second)) info.sandbox_url = kNamespacedUrl;
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

std::optional<std::string> LocalContainerBackend::container_target(const SandboxInfo& info) {
  if (info.container_id && !info.container_id->empty()) return *info.container_id;
  if (info.container_name && !info.container_name->empty()) return *info.container_name;
  const std::string name = container_name(info.sandbox_id);
  if (info.sandbox_id.empty() || !is_valid_container_name(name)) return std::nullopt;
  const std::optional<ContainerState> state = inspect(name);
  if (!state) return std::nullopt;
  const auto label = state->labels.find(kLabelSandboxId);
  if (label == state->labels.end() || label->second != info.sandbox_id) {
    log(LogLevel::warning, "Container " + name + " is not labelled as sandbox " + info.sandbox_id +
                               "'s; not acting on it");
    return std::nullopt;
  }
  return state->id;
}

bool LocalContainerBackend::is_alive(const SandboxInfo& info) {
  // By name first when there is one: a container re-created under the name is caught below.
  std::optional<std::string> target;
  if (info.container_name && !info.container_name->empty()) {
    target = *info.container_name;
  } else {
    target = container_target(info);
  }
  if (!target) return false;
  std::optional<ContainerState> state = inspect(*target);
  if (!state) return false;
  if (info.container_id && !info.container_id->empty() &&
      !same_container(state->id, *info.container_id)) {
    log(LogLevel::debug, "Container name " + *target + " now belongs to container " +
                             short_id(state->id) + ", not " + short_id(*info.container_id));
    return false;
  }
  return state->running || state->paused;  // a paused sandbox is frozen, not dead
}

SandboxUsage::Reading LocalContainerBackend::usage(const SandboxInfo& info) {
  const std::string target = info.container_id && !info.container_id->empty()
                                 ? *info.container_id
                                 : info.container_name.value_or("");
  if (target.empty()) {
    throw std::runtime_error("sandbox " + info.sandbox_id + " names no container");
  }
  std::optional<Reading> reading = api_.container_stats(target, kInspectTimeoutSeconds);
  if (!reading) throw std::runtime_error("sandbox container " + target + " is gone");
  return *reading;
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
  if (state->host_port == 0 && !namespaced(*ours)) {
    log(LogLevel::debug, "Container " + name + " publishes no host port for 8080/tcp");
    return std::nullopt;
  }
  SandboxInfo info = std::move(*ours);
  if (state->paused) {
    // Paused by an earlier process: discovery hands it out, so thaw it first.
    try {
      unpause(info);
    } catch (const std::exception& e) {
      log(LogLevel::warning, "Container " + name + " is paused and could not be thawed; not " +
                                 "adopting it: " + e.what());
      return std::nullopt;
    }
  }
  if (!wait_for_sandbox_ready(info.sandbox_url, kDiscoveryReadySeconds, {}, {}, route_to(info))) {
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
    std::string body;
    const Outcome listed =
        api_.list_containers(filter_key, filter_value, /*all=*/false, kListTimeoutSeconds, &body);
    if (listed.status != 200) {
      throw std::runtime_error("HTTP " + std::to_string(listed.status) + ": " + listed.message);
    }
    return body;
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
  sweep_unused_networks();
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
    if (state->host_port > 0 || namespaced(*ours)) info = std::move(ours);
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

}  // namespace sandboxd::local_docker

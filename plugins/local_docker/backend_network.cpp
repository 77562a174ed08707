// LocalContainerBackend: keeping sandboxes apart on the network (sandbox_network.hpp): the
// host checks, our bridge network, port isolation, and sockets into namespaced sandboxes.
#include <net/if.h>
#include <rapidjson/document.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "local_container_backend.hpp"

namespace sandboxd::local_docker {

std::string LocalContainerBackend::host_namespace_reason(bool host_mounts) {
  if (host_mounts && settings_.endpoint.unix_socket.empty()) {
    return "the engine is reached at " + settings_.endpoint.display +
           ", not through a local unix socket; a host mount here may not reach its containers";
  }
  {
    MutexLock lock(network_mutex_);
    if (namespace_reason_) return *namespace_reason_;
  }
  std::string why;
  if (::geteuid() != 0) {
    why = "this process runs as uid " + std::to_string(::geteuid()) +
          ", not root; entering a container's namespaces needs root";
  } else {
    try {
      std::string body;
      const Outcome info = api_.info(&body);
      rapidjson::Document doc;
      doc.Parse(body.c_str(), body.size());
      const auto options = doc.IsObject() ? doc.FindMember("SecurityOptions") : doc.MemberEnd();
      if (info.status == 200 && options != doc.MemberEnd() && options->value.IsArray()) {
        for (const auto& option : options->value.GetArray()) {
          if (option.IsString() && std::string(option.GetString()).find("name=rootless") == 0) {
            why = "the engine at " + settings_.endpoint.display +
                  " runs rootless; its containers' namespaces are not this host's";
          }
        }
      }
    } catch (const std::exception& e) {
      return std::string("the engine could not be asked: ") + e.what();  // not cached
    }
  }
  MutexLock lock(network_mutex_);
  namespace_reason_ = why;
  return why;
}

std::string LocalContainerBackend::network_preflight() {
  const NetworkPolicy& policy = settings_.policy;
  if (policy.mode == "open" && !policy.isolate && policy.publish) return "";
  const std::string why = host_namespace_reason(/*host_mounts=*/false);
  if (why.empty()) return "";
  if (policy.mode == "open" && policy.isolate) {
    return why + "; isolating each sandbox's bridge port needs it (or set network " +
           "isolate_sandboxes false, and sandboxes can reach each other)";
  }
  return why + "; a sandbox without a network is reached only from inside its namespace";
}

void LocalContainerBackend::ensure_network() {
  // One check-and-create at a time in this process; the engine's own duplicate check is not
  // atomic (Docker 20.10 makes two networks of one name for two racing creates).
  MutexLock creating(network_create_mutex_);
  {
    MutexLock lock(network_mutex_);
    if (network_ready_) return;
  }
  std::string target = settings_.network;
  if (settings_.own_network) target = resolve_own_network();
  MutexLock lock(network_mutex_);
  network_target_ = target;
  network_ready_ = true;
  network_touched_ = true;
}

std::vector<NetworkState> LocalContainerBackend::own_networks_named() {
  const std::string label = std::string(kLabelNetworkFor) + "=" + settings_.prefix;
  std::vector<NetworkState> named;
  for (NetworkState& network : api_.list_networks(label)) {
    if (network.name == settings_.network) named.push_back(std::move(network));
  }
  // Every process on this prefix settles on the same one: the least id.
  std::sort(named.begin(), named.end(),
            [](const NetworkState& a, const NetworkState& b) { return a.id < b.id; });
  return named;
}

std::string LocalContainerBackend::resolve_own_network() {
  std::vector<NetworkState> found = own_networks_named();
  if (found.empty()) {
    NetworkCreateBody body;
    body.name = settings_.network;
    body.labels = {{kLabelManagedBy, kManagedByValue}, {kLabelNetworkFor, settings_.prefix}};
    const EngineApi::NetworkCreated made = api_.create_network(body);
    found = own_networks_named();  // refused as a duplicate: another process made it meanwhile
    if (found.empty()) {
      if (const auto other = api_.inspect_network(settings_.network)) {
        throw std::runtime_error("network " + settings_.network + " (id " +
                                 other->id.substr(0, 12) + ") exists but is not sandboxd's (no " +
                                 "label " + kLabelNetworkFor + "=" + settings_.prefix +
                                 "); remove it or choose another container_prefix");
      }
      throw std::runtime_error("cannot create the sandboxes' bridge network " + settings_.network +
                               ": " +
                               (made.outcome.ok() ? "it vanished at once" : made.outcome.message));
    }
    if (made.outcome.ok()) {
      log(LogLevel::info, "Created bridge network " + settings_.network +
                              " for the sandboxes (each one's port isolated on it)");
    }
  }
  remove_duplicate_networks(found, found.front().id);
  return found.front().id;
}

void LocalContainerBackend::remove_duplicate_networks(const std::vector<NetworkState>& named,
                                                      const std::string& keep) {
  // Another process raced ours on an engine that let both through: the others go when no
  // container is on them (the engine refuses otherwise, and their last sandbox takes them).
  for (const NetworkState& network : named) {
    if (network.id == keep) continue;
    try {
      // By id (Docker only: podman refuses a second network of a name, and would remove one in
      // use when named by id); Docker refuses while a container is attached.
      if (api_.remove_network(network.id).outcome.ok()) {
        log(LogLevel::debug, "Removed duplicate bridge network " + settings_.network + " (id " +
                                 network.id.substr(0, 12) + ")");
      }
    } catch (const std::exception&) {
    }
  }
}

bool LocalContainerBackend::settle_duplicate_network(const std::string& engine_message) {
  if (settings_.policy.mode != "open" || !settings_.own_network ||
      engine_message.find("network") == std::string::npos ||
      engine_message.find("ambiguous") == std::string::npos) {
    return false;
  }
  MutexLock creating(network_create_mutex_);  // no resolution of ours runs meanwhile
  const std::vector<NetworkState> named = own_networks_named();
  if (named.empty()) return false;
  // The copy to keep is the one a sandbox is on, whichever process made it and whatever its
  // id: while two exist no container starts on either, so at most one has sandboxes (those
  // started before the other appeared), and the engine refuses to remove that one. Removing
  // every copy it lets go, the greatest id first and always leaving one, ends on it, or on the
  // least id when none is in use; every process doing this ends on the same one. (Only Docker
  // says "ambiguous": podman refuses a second network of a name, and would remove one in use
  // when named by id.)
  std::size_t left = named.size();
  for (auto it = named.rbegin(); it != named.rend() && left > 1; ++it) {
    try {
      if (api_.remove_network(it->id).ok()) --left;  // a peer removing it too counts
    } catch (const std::exception&) {
    }
  }
  const std::vector<NetworkState> remaining = own_networks_named();
  const std::string keep = remaining.empty() ? named.front().id : remaining.front().id;
  {
    MutexLock lock(network_mutex_);
    network_target_ = keep;  // gone altogether: the next start finds it went away, and resolves
  }
  log(LogLevel::warning, "Network " + settings_.network + " was made twice by racing gateways (" +
                             std::to_string(named.size()) + " of that name); keeping id " +
                             keep.substr(0, 12) + ", the one in use, and removing the others");
  return true;
}

std::string LocalContainerBackend::network_target() const {
  MutexLock lock(network_mutex_);
  return network_target_.empty() ? settings_.network : network_target_;
}

void LocalContainerBackend::remove_network_if_unused() {
  NetworkState ours;
  {
    MutexLock lock(network_mutex_);
    if (!network_ready_) return;  // this backend never used it
    network_ready_ = false;
    ours.id = network_target_;
  }
  if (!settings_.own_network) return;
  ours.name = settings_.network;
  try {
    if (remove_network_unless_used(ours)) {
      log(LogLevel::debug, "Removed bridge network " + settings_.network + ": no sandbox on it");
    }
  } catch (const std::exception&) {
    // The engine is gone: the next backend on this prefix finds the network and keeps it.
  }
}

bool LocalContainerBackend::remove_network_unless_used(const NetworkState& network) {
  // By name: podman 4.3 checks "in use" against the name only, and removes a network that
  // running containers are on when it is named by id. Docker refuses either way, and a name
  // two networks share (duplicates, above) is ambiguous to it: then by id.
  const EngineApi::Removed by_name = api_.remove_network(network.name);
  if (by_name.outcome.ok()) return true;
  if (network.id.empty() || by_name.outcome.message.find("ambiguous") == std::string::npos) {
    return false;
  }
  return api_.remove_network(network.id).outcome.ok();
}

void LocalContainerBackend::remove_network_after(const SandboxInfo& destroyed) {
  {
    MutexLock lock(network_mutex_);
    network_touched_ = true;
  }
  std::optional<NetworkState> network;
  try {
    network = api_.inspect_network(settings_.network);
  } catch (const std::exception&) {
    return;  // unreachable, or two of one name: the orphan sweep deals with it
  }
  if (!network || network->containers.size() > 1) return;  // gone, or another is on it
  // The engine removes a stopped container (AutoRemove) after the stop answers: until then it
  // is still attached and the network's removal is refused. Wait for it, briefly.
  const std::string target = destroyed.container_id && !destroyed.container_id->empty()
                                 ? *destroyed.container_id
                                 : destroyed.container_name.value_or("");
  if (network->containers.size() == 1 && !target.empty()) {
    const auto deadline = std::chrono::steady_clock::now() + kNetworkReleaseWait;
    try {
      while (inspect(target) && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    } catch (const std::exception&) {
      return;
    }
  }
  {
    MutexLock lock(network_mutex_);
    network_ready_ = true;  // so that remove_network_if_unused tries
  }
  remove_network_if_unused();
}

bool LocalContainerBackend::old_enough_to_sweep(const NetworkState& network) const {
  return network.created_at > 0 &&
         clock_->wall_now() - network.created_at >= kOrphanNetworkAgeSeconds;
}

void LocalContainerBackend::remove_network_at_exit() {
  // Whichever process made it: the last sandbox may have gone through another one (a one-shot
  // destroy, a serve that inherited it), or beside a slot this one's pool removes only now.
  if (!settings_.own_network || settings_.policy.mode != "open") return;
  bool ours = false;
  {
    MutexLock lock(network_mutex_);
    ours = network_touched_;
  }
  // Sandboxes destroyed side by side (a shutdown's) each saw the others still attached, and the
  // engine removes stopped containers after their stop answered: wait, briefly, while nothing
  // but stopping containers is on the network, then take it along.
  const auto deadline = std::chrono::steady_clock::now() + kNetworkReleaseWait;
  while (true) {
    std::optional<NetworkState> network;
    try {
      network = api_.inspect_network(settings_.network);
      if (!network) return;
      for (const std::string& id : network->containers) {
        const std::optional<ContainerState> state = inspect(id);
        if (state && state->running) return;  // a sandbox or slot runs on it: it stays
      }
    } catch (const std::exception&) {
      return;
    }
    if (network->containers.empty()) {
      // Not one this process made or destroyed a sandbox on: a peer may have just made it for
      // its first sandbox.
      if (!ours && !old_enough_to_sweep(*network)) return;
      try {
        if (remove_network_unless_used(*network)) {
          log(LogLevel::debug,
              "Removed bridge network " + settings_.network + ": no sandbox on it");
        }
      } catch (const std::exception&) {
      }
      return;
    }
    if (std::chrono::steady_clock::now() >= deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void LocalContainerBackend::sweep_unused_networks() {
  if (!settings_.own_network) return;
  {
    MutexLock lock(network_mutex_);
    if (network_ready_) return;  // ours, in use by this process: its last destroy removes it
  }
  try {
    for (const NetworkState& network :
         api_.list_networks(std::string(kLabelNetworkFor) + "=" + settings_.prefix)) {
      // One a peer has just made is about to get its first sandbox: left alone.
      if (!old_enough_to_sweep(network)) continue;
      // The engine refuses while a container (a sandbox, a slot, a paused one) is attached.
      if (remove_network_unless_used(network)) {
        log(LogLevel::info, "Removed bridge network " + network.name +
                                " that no sandbox uses (left by a process that ended)");
      }
    }
  } catch (const std::exception& e) {
    log(LogLevel::debug, std::string("Could not sweep unused networks: ") + e.what());
  }
}

void LocalContainerBackend::isolate(const std::string& container_id, const std::string& name) {
  try {
    const BridgePort port = keeper_.isolate(container_id, settings_.own_network);
    log(LogLevel::debug, "Isolated sandbox container " + name + "'s bridge port " + port.name);
  } catch (const PortOnNoBridge& e) {
    throw PortOnNoBridge("Could not isolate sandbox container " + name + " on network " +
                         settings_.network + ": " + e.what());
  } catch (const std::exception& e) {
    throw std::runtime_error("Could not isolate sandbox container " + name + " on network " +
                             settings_.network + " (it was removed): " + e.what());
  }
}

void LocalContainerBackend::keep_isolation(const SandboxInfo& info) {
  if (!keeps_bridge_ports()) return;
  const std::string& policy = info.network_policy;
  // Only sandboxes made on a bridge with their port isolated ("open", "open+unpublished"): a
  // namespaced one has no port; "+shared" was made without isolation on purpose.
  if (!(policy.empty() || policy.rfind("open", 0) == 0) ||
      policy.find("+shared") != std::string::npos) {
    return;
  }
  const std::string target = info.container_id && !info.container_id->empty()
                                 ? *info.container_id
                                 : info.container_name.value_or("");
  if (target.empty()) {
    throw std::runtime_error("sandbox " + info.sandbox_id + " names no container to keep isolated");
  }
  try {
    keeper_.keep(target, settings_.own_network);
  } catch (const std::exception& e) {
    throw std::runtime_error("sandbox " + info.sandbox_id + "'s port on network " +
                             settings_.network + " cannot be kept isolated: " + e.what());
  }
}

std::vector<std::string> LocalContainerBackend::guard_own_bridge() {
  std::vector<std::string> lines;
  if (!settings_.own_network) return lines;
  const std::optional<NetworkState> network = api_.inspect_network(settings_.network);
  if (!network) return lines;  // no sandbox yet
  if (!keeper_.guards_any() && !network->bridge.empty()) {
    keeper_.guard(static_cast<int>(::if_nametoindex(network->bridge.c_str())));
  }
  if (network->containers.empty()) return lines;
  // Ours (sandboxes and slots, running or not) by the label every one carries; whatever else is
  // attached was joined to the network by hand.
  std::string body;
  const Outcome listed =
      api_.list_containers("label", std::string(kLabelManagedBy) + "=" + kManagedByValue,
                           /*all=*/true, kListTimeoutSeconds, &body);
  if (!listed.ok()) return lines;
  for (const std::string& id : network->containers) {
    if (body.find("\"" + id) != std::string::npos) continue;
    std::string name = short_id(id);
    try {
      if (const auto state = inspect(id); state && !state->name.empty()) name = state->name;
    } catch (const std::exception&) {
    }
    lines.push_back("container " + name + " (" + short_id(id) + ") is on the sandboxes' network " +
                    settings_.network +
                    " but is not a sandbox: its port is isolated like theirs, so it reaches no "
                    "sandbox and no sandbox reaches it; disconnect it from the network if it "
                    "should not be there");
  }
  return lines;
}

std::vector<std::string> LocalContainerBackend::keep_all_isolation() {
  std::vector<std::string> lines;
  if (!keeps_bridge_ports()) return lines;
  try {
    lines = guard_own_bridge();
  } catch (const std::exception& e) {
    lines.push_back("cannot read network " + settings_.network + " to keep its ports isolated: " +
                    e.what());
  }
  const IsolationKeeper::Sweep swept = keeper_.sweep();
  for (const std::string& port : swept.isolated) {
    lines.push_back("port " + port + " was open on the bridge of network " + settings_.network +
                    " (a container restarted or joined by hand); isolated it");
  }
  for (const std::string& container : swept.lost) {
    try {
      keeper_.keep(container, settings_.own_network);
    } catch (const std::exception&) {
      keeper_.forget(container);  // not running any more: its next hand-out decides
    }
  }
  return lines;
}

void LocalContainerBackend::start_keeping_isolation() {
  if (keeps_bridge_ports()) keeper_.start_watching();
}

bool LocalContainerBackend::namespaced(const SandboxInfo& info) const {
  return is_namespaced_policy(info.network_policy);
}

int LocalContainerBackend::open_socket(const SandboxInfo& info) {
  const std::string target = info.container_id && !info.container_id->empty()
                                 ? *info.container_id
                                 : info.container_name.value_or("");
  if (target.empty()) {
    throw std::runtime_error("sandbox " + info.sandbox_id + " names no container to reach");
  }
  return netns_.socket_in_container(
      target, [&] { return api_.container_pid(target, kInspectTimeoutSeconds); }, AF_INET,
      SOCK_STREAM, 0);
}

SandboxRoute LocalContainerBackend::route_to(const SandboxInfo& info) {
  SandboxRoute route;
  if (namespaced(info)) route.open_socket = [this, info] { return open_socket(info); };
  return route;
}

}  // namespace sandboxd::local_docker

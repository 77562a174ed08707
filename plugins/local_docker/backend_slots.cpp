#include <rapidjson/document.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sandboxd/host_fs.hpp>
#include <sandboxd/readiness.hpp>
#include <stdexcept>

#include "docker_support.hpp"
#include "host_mounts.hpp"
#include "local_container_backend.hpp"

namespace sandboxd::local_docker {

PreStartedSlots::Claim LocalContainerBackend::claim_slot(const CreateRequest& request) {
  if (!slots_) return {std::nullopt, Miss::unsupported, "warm_slots is 0"};
  const std::string name = container_name(request.sandbox_id);
  if (request.sandbox_id.empty() || !is_valid_container_name(name)) {
    return {std::nullopt, Miss::claim_failed, "invalid sandbox id"};
  }
  Claim claim = slots_->claim(request, name);
  if (claim.sandbox) claim.sandbox->network_policy = settings_.policy.label();  // its label's
  if (request.thread_id) slots_->learn_shape(request);
  return claim;
}

std::string LocalContainerBackend::slot_preflight() {
  if (settings_.warm_slots == 0) return "";
  if (const std::string why = host_namespace_reason(/*host_mounts=*/true); !why.empty()) {
    return why + " (binding into a running slot needs root in the engine's mount namespace)";
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
  spec.labels[kLabelNetworkPolicy] = settings_.policy.label();
  const SandboxInfo info = start_container(spec, nullptr);
  if (!wait_for_sandbox_ready(info.sandbox_url, settings_.slot_ready_timeout_seconds, {}, {},
                              route_to(info))) {
    remove_quietly(info.container_id.value_or(name));
    throw std::runtime_error(
        "slot " + name + " did not answer its readiness probe within " +
        std::to_string(static_cast<int>(settings_.slot_ready_timeout_seconds)) + " s");
  }
  return {info.container_id.value_or(""), info.sandbox_url, info.created_at};
}

}  // namespace sandboxd::local_docker

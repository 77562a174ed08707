// endpoint_of: a sandbox's address as a relay dials it (sandbox_endpoint.hpp).
#include "sandboxd/core/sandbox_endpoint.hpp"

#include "sandboxd/core/relay_tokens.hpp"

namespace sandboxd::core {

std::optional<SandboxEndpoint> endpoint_of(const SandboxInfo& info,
                                           const std::shared_ptr<SandboxBackend>& backend,
                                           NamespacedSandboxes* access) {
  SandboxEndpoint out;
  out.incarnation = incarnation_of(info);
  const std::string& url = info.sandbox_url;
  std::size_t start = url.find("://");
  start = start == std::string::npos ? 0 : start + 3;
  const std::size_t end = url.find('/', start);
  const std::string authority = url.substr(start, end == std::string::npos ? end : end - start);
  const std::size_t colon = authority.rfind(':');
  if (colon == std::string::npos || colon + 1 >= authority.size()) return std::nullopt;
  out.host = authority.substr(0, colon);
  if (out.host.size() > 2 && out.host.front() == '[') {
    out.host = out.host.substr(1, out.host.size() - 2);
  }
  try {
    std::size_t used = 0;
    out.port = std::stoi(authority.substr(colon + 1), &used);
    if (used != authority.size() - colon - 1 || out.port <= 0 || out.port > 65535) {
      return std::nullopt;
    }
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (access != nullptr && access->namespaced(info)) {
    out.open_socket = [backend, access, info] { return access->open_socket(info); };
  }
  return out;
}

bool makes_namespaced_sandboxes(SandboxBackend& backend) {
  auto* access = backend_capability<NamespacedSandboxes>(backend);
  auto* policy = backend_capability<SandboxNetworkPolicy>(backend);
  if (access == nullptr || policy == nullptr) return false;
  SandboxInfo made;
  made.network_policy = policy->configured_network_policy();
  return access->namespaced(made);
}

}  // namespace sandboxd::core

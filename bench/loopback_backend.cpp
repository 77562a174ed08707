// loopback_backend:LoopbackBackend, for load runs of the daemons (scripts/load.sh): every
// sandbox is an entry in a map, and every sandbox URL is one in-process HTTP responder on
// 127.0.0.1 that answers the readiness probe (GET /v1/sandbox → 200). So `sandboxctl serve` and
// `sandboxd-provisioner` run their whole request path (auth, provider, leases, readiness)
// without an engine, and a load run measures the daemons, not container starts. Not installed.
//
// Lock story: `mutex_` guards `live_`. The responder's thread owns its listening socket and
// answers one connection at a time (a probe is one short request).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <sandboxd/capabilities.hpp>
#include <sandboxd/sdk.hpp>
#include <stdexcept>
#include <string>
#include <thread>

namespace loopback_backend {

class Responder {
 public:
  Responder() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t size = sizeof address;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd_, 512) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
      throw std::runtime_error("loopback_backend: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~Responder() {
    stop_.store(true);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }

 private:
  void serve() {
    static const std::string kAnswer =
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 15\r\n"
        "Connection: close\r\n\r\n{\"status\":\"ok\"}";
    while (!stop_.load()) {
      pollfd waiting{fd_, POLLIN, 0};
      if (::poll(&waiting, 1, 100) <= 0) continue;
      const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      timeval limit{1, 0};
      ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
      char request[4096];
      std::string head;
      while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536) {
        const ssize_t n = ::recv(client, request, sizeof request, 0);
        if (n <= 0) break;
        head.append(request, static_cast<std::size_t>(n));
      }
      ::send(client, kAnswer.data(), kAnswer.size(), MSG_NOSIGNAL);
      ::close(client);
    }
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Option `namespaced: true` (issue 33's scale figure): every sandbox says network mode
// `isolated`, so the daemons reach it only through their relay, with an ordinary socket
// standing in for one made in a network namespace.
class LoopbackBackend final : public sandboxd::SandboxBackend,
                              public sandboxd::NamespacedSandboxes,
                              public sandboxd::SandboxNetworkPolicy {
 public:
  explicit LoopbackBackend(const sandboxd::PluginContext& context)
      : namespaced_(context.options().get_bool("namespaced", false)) {}

  bool namespaced(const sandboxd::SandboxInfo& info) const override {
    return info.network_policy == "isolated";
  }
  int open_socket(const sandboxd::SandboxInfo&) override {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw std::runtime_error("loopback_backend: no socket");
    return fd;
  }
  std::string configured_network_policy() const override { return namespaced_ ? "isolated" : ""; }
  std::string network_preflight() override { return ""; }

  sandboxd::SandboxInfo create(const sandboxd::CreateRequest& request) override {
    sandboxd::SandboxInfo info;
    info.sandbox_id = request.sandbox_id;
    info.sandbox_url = "http://127.0.0.1:" + std::to_string(responder_.port());
    info.container_name = "loopback-" + request.sandbox_id;
    info.user_id = request.user_id;
    info.thread_id = request.thread_id;
    info.mount_contract_version = sandboxd::kSandboxMountContractVersion;
    if (namespaced_) info.network_policy = "isolated";
    std::lock_guard lock(mutex_);
    live_[request.sandbox_id] = info;
    return info;
  }
  void destroy(const sandboxd::SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    live_.erase(info.sandbox_id);
  }
  bool is_alive(const sandboxd::SandboxInfo& info) override {
    std::lock_guard lock(mutex_);
    return live_.count(info.sandbox_id) > 0;
  }
  std::optional<sandboxd::SandboxInfo> discover(const std::string& sandbox_id) override {
    std::lock_guard lock(mutex_);
    auto it = live_.find(sandbox_id);
    if (it == live_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<sandboxd::SandboxInfo> list_running() override {
    std::lock_guard lock(mutex_);
    std::vector<sandboxd::SandboxInfo> out;
    for (const auto& [id, info] : live_) out.push_back(info);
    return out;
  }
  sandboxd::SandboxDiscoveryResult discover_for_reconciliation(const std::string& id) override {
    std::lock_guard lock(mutex_);
    auto it = live_.find(id);
    if (it == live_.end()) return sandboxd::SandboxDiscoveryResult::absent("loopback");
    return sandboxd::SandboxDiscoveryResult::found(it->second, "loopback", "loopback-" + id);
  }
  sandboxd::MountModeKind mount_mode_kind() const override {
    return sandboxd::MountModeKind::other;
  }

 private:
  const bool namespaced_;
  Responder responder_;
  std::mutex mutex_;
  std::map<std::string, sandboxd::SandboxInfo> live_;
};

SANDBOXD_EXPORT_BACKEND(LoopbackBackend,
                        "in-process sandboxes behind one 127.0.0.1 responder (load runs only)")

}  // namespace loopback_backend

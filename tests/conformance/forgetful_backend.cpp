// A backend that breaks the contract the way a first attempt does, so the conformance kit can
// be shown to catch it: it keeps its sandboxes in the plugin object's memory (another process
// finds nothing), reports no creation time, and starts its children with whatever signal mask
// the host has (the daemons block SIGTERM, so its destroy's SIGTERM is ignored). Each sandbox is
// `busybox httpd` serving GET /v1/sandbox from a directory of its own. Test-only: the object's
// destructor SIGKILLs what it started, so a test leaves nothing running.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>

#include "sandboxd/sdk.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace fs = std::filesystem;

class ForgetfulBackend final : public sandboxd::SandboxBackend {
 public:
  explicit ForgetfulBackend(const sandboxd::PluginContext& context)
      : dir_(fs::path(context.base_dir) / "forgetful") {
    fs::create_directories(dir_);
  }
  ~ForgetfulBackend() override {
    sandboxd::MutexLock lock(mutex_);
    for (const auto& [id, sandbox] : sandboxes_) {
      ::kill(sandbox.pid, SIGKILL);
      ::waitpid(sandbox.pid, nullptr, 0);
    }
  }

  sandboxd::SandboxInfo create(const sandboxd::CreateRequest& request) override {
    sandboxd::MutexLock lock(mutex_);
    auto found = sandboxes_.find(request.sandbox_id);
    if (found != sandboxes_.end()) return found->second.info;
    const fs::path root = dir_ / request.sandbox_id;
    fs::create_directories(root / "v1");
    std::ofstream(root / "v1" / "sandbox") << "{}\n";
    const int port = free_port();
    const pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      // The mistake under test: no sandboxd::reset_signals_in_child() here.
      const std::string address = "127.0.0.1:" + std::to_string(port);
      ::execlp("busybox", "busybox", "httpd", "-f", "-p", address.c_str(), "-h", root.c_str(),
               static_cast<char*>(nullptr));
      ::_exit(127);
    }
    Sandbox sandbox;
    sandbox.pid = pid;
    sandbox.info.sandbox_id = request.sandbox_id;
    sandbox.info.sandbox_url = "http://127.0.0.1:" + std::to_string(port);
    sandbox.info.user_id = request.user_id;
    sandbox.info.thread_id = request.thread_id;
    sandbox.info.mount_contract_version = sandboxd::kSandboxMountContractVersion;
    sandboxes_[request.sandbox_id] = sandbox;
    return sandbox.info;
  }

  void destroy(const sandboxd::SandboxInfo& info) override {
    sandboxd::MutexLock lock(mutex_);
    auto found = sandboxes_.find(info.sandbox_id);
    if (found == sandboxes_.end()) return;  // "not mine": the other mistake under test
    ::kill(found->second.pid, SIGTERM);     // ignored by a child that inherited a blocked mask
  }

  bool is_alive(const sandboxd::SandboxInfo& info) override {
    sandboxd::MutexLock lock(mutex_);
    auto found = sandboxes_.find(info.sandbox_id);
    return found != sandboxes_.end() && ::kill(found->second.pid, 0) == 0;
  }

  std::optional<sandboxd::SandboxInfo> discover(const std::string& sandbox_id) override {
    sandboxd::MutexLock lock(mutex_);
    auto found = sandboxes_.find(sandbox_id);
    if (found == sandboxes_.end()) return std::nullopt;
    return found->second.info;
  }

 private:
  struct Sandbox {
    pid_t pid = -1;
    sandboxd::SandboxInfo info;
  };

  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("no free port on 127.0.0.1");
    }
    ::close(fd);
    return ntohs(address.sin_port);
  }

  const fs::path dir_;
  sandboxd::Mutex mutex_;  // guards sandboxes_: the core calls verbs from several threads
  std::map<std::string, Sandbox> sandboxes_ GUARDED_BY(mutex_);
};

SANDBOXD_EXPORT_BACKEND(ForgetfulBackend, "test only: breaks the backend contract on purpose")

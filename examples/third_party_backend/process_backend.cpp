// An example third-party sandbox backend, built only against the installed sandboxd SDK.
//
// Each sandbox is a local child process: `busybox httpd` serving the readiness endpoint
// (GET /v1/sandbox → 200, design §5.17) on 127.0.0.1 from a per-sandbox directory. It has no
// isolation at all; it exists to show the shape of a real plugin (options with key-path
// errors, logging through the host, a lock story, children that never outlive the backend).
//
//   "backend": {
//     "use": "process_backend:ProcessSandboxBackend",
//     "work_dir": "/var/lib/sandboxd/process-sandboxes",   // default {base_dir}/process-sandboxes
//     "httpd_command": "busybox",                         // a busybox with the httpd applet
//     "stop_timeout_seconds": 5                           // SIGTERM → SIGKILL grace period
//   }
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sandboxd/sdk.hpp>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace process_backend {

namespace fs = std::filesystem;

namespace {

constexpr const char* kLogPrefix = "process_backend: ";

std::string errno_message(int error) {
  return std::system_category().message(error);
}

// Sandbox ids become directory names, so only a conservative alphabet is accepted.
bool valid_sandbox_id(const std::string& id) {
  if (id.empty() || id.size() > 128 || id.front() == '.' || id.front() == '-') return false;
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

bool is_executable_file(const fs::path& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec) && ::access(path.c_str(), X_OK) == 0;
}

// The absolute path `command` runs, searching PATH for a bare name like a shell does; empty
// when there is none.
std::string resolve_command(const std::string& command) {
  if (command.find('/') != std::string::npos) {
    return is_executable_file(command) ? fs::absolute(command).string() : std::string();
  }
  const char* path_env = std::getenv("PATH");
  const std::string search = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= search.size()) {
    std::size_t end = search.find(':', start);
    if (end == std::string::npos) end = search.size();
    const std::string dir = search.substr(start, end - start);
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / command;
    if (is_executable_file(candidate)) return fs::absolute(candidate).string();
    start = end + 1;
  }
  return {};
}

// Asks the kernel for a free port on 127.0.0.1 and gives it back. The child binds it a moment
// later; another process could take it first, in which case the child exits and is_alive()
// reports the sandbox gone.
int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(kLogPrefix + std::string("socket: ") + errno_message(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    ::close(fd);
    throw std::runtime_error(kLogPrefix + std::string("could not pick a free port on 127.0.0.1: ") +
                             errno_message(error));
  }
  ::close(fd);
  return ntohs(address.sin_port);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped (status " + std::to_string(status) + ")";
}

// Owns a posix_spawn file-actions / attributes pair for the duration of one spawn.
struct SpawnSetup {
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attributes;
  SpawnSetup() {
    posix_spawn_file_actions_init(&actions);
    posix_spawnattr_init(&attributes);
  }
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
  }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
};

}  // namespace

class ProcessSandboxBackend final : public sandboxd::SandboxBackend {
 public:
  explicit ProcessSandboxBackend(const sandboxd::PluginContext& context);
  ~ProcessSandboxBackend() override;

  ProcessSandboxBackend(const ProcessSandboxBackend&) = delete;
  ProcessSandboxBackend& operator=(const ProcessSandboxBackend&) = delete;

  sandboxd::SandboxInfo create(const sandboxd::CreateRequest& request) override;
  void destroy(const sandboxd::SandboxInfo& info) override;
  bool is_alive(const sandboxd::SandboxInfo& info) override;
  std::optional<sandboxd::SandboxInfo> discover(const std::string& sandbox_id) override;
  std::vector<sandboxd::SandboxInfo> list_running() override;

 private:
  struct Child {
    sandboxd::SandboxInfo info;
    pid_t pid = -1;
    fs::path dir;         // this incarnation's own directory; removed when it stops
    bool exited = false;  // reaped: `pid` may now belong to an unrelated process
  };

  // true while the child runs; reaps it (exited = true) once it has gone. Requires mutex_.
  bool refresh_locked(Child& child);
  // Starts the httpd for one sandbox directory; returns its pid. Does not block.
  pid_t spawn_httpd(const fs::path& dir, int port) const;
  // SIGTERM, wait up to stop_timeout_, SIGKILL, wait again; throws if the child still has
  // not exited. Blocks, so it is only called on a child already taken out of children_.
  void stop_child(Child& child);
  // Waits (polling, real time) until `child` is reaped or `timeout` passes; true if reaped.
  bool await_exit(Child& child, std::chrono::milliseconds timeout);
  void remove_dir(const fs::path& dir);

  std::shared_ptr<sandboxd::Logger> logger_;
  std::shared_ptr<sandboxd::Clock> clock_;
  fs::path work_dir_;
  std::string httpd_command_;  // as configured, for messages
  std::string httpd_path_;     // resolved absolute path
  std::chrono::milliseconds stop_timeout_{5000};

  // Lock story: mutex_ guards children_, next_incarnation_ and every Child::exited in the map,
  // and every waitpid()/kill() on a child that is still in the map, so exactly one thread
  // reaps a pid and no signal goes to a pid after it was reaped (and possibly reused). It is
  // held for bookkeeping and for create()'s short, non-blocking mkdir + spawn (so two creates
  // of one id start one child), but never while waiting for a child to exit: destroy() and
  // the destructor first take the child out of children_ under the lock, then signal, wait
  // and reap without it; a child out of the map belongs to the thread that took it out.
  // Nothing else is locked while mutex_ is held (the logger is called with it held; loggers
  // are thread-safe and never call back into a backend).
  std::mutex mutex_;
  std::map<std::string, Child> children_;
  std::uint64_t next_incarnation_ = 0;
};

ProcessSandboxBackend::ProcessSandboxBackend(const sandboxd::PluginContext& context)
    : logger_(context.logger), clock_(context.clock) {
  const sandboxd::PluginConfig options = context.options();

  std::string default_work_dir;
  if (!context.base_dir.empty()) {
    default_work_dir = (fs::path(context.base_dir) / "process-sandboxes").string();
  }
  const std::string work_dir = options.get_string("work_dir", default_work_dir);
  httpd_command_ = options.get_string("httpd_command", "busybox");
  const double stop_timeout_seconds = options.get_number("stop_timeout_seconds", 5.0);
  for (const std::string& key : options.unread_keys()) {
    logger_->warning(kLogPrefix + std::string("ignoring unknown option ") + key);
  }

  if (work_dir.empty()) {
    options.reject("work_dir", "is required when the host gives no base directory");
  }
  if (httpd_command_.empty()) options.reject("httpd_command", "must not be empty");
  if (!(stop_timeout_seconds > 0.0 && stop_timeout_seconds <= 3600.0)) {
    options.reject("stop_timeout_seconds", "must be a number of seconds in (0, 3600], got " +
                                               std::to_string(stop_timeout_seconds));
  }
  stop_timeout_ = std::chrono::milliseconds(static_cast<long long>(stop_timeout_seconds * 1000));

  httpd_path_ = resolve_command(httpd_command_);
  if (httpd_path_.empty()) {
    const char* path_env = std::getenv("PATH");
    options.reject("httpd_command",
                   "\"" + httpd_command_ + "\" is not an executable file" +
                       (httpd_command_.find('/') == std::string::npos
                            ? std::string(" on PATH (") + (path_env ? path_env : "") + ")"
                            : std::string()) +
                       "; install busybox (it needs the httpd applet) or set httpd_command to "
                       "its path");
  }

  work_dir_ = fs::absolute(work_dir);
  std::error_code ec;
  fs::create_directories(work_dir_, ec);
  if (ec) {
    options.reject("work_dir", "cannot create " + work_dir_.string() + ": " + ec.message());
  }
  logger_->info(kLogPrefix + std::string("sandboxes run under ") + work_dir_.string() + " with " +
                httpd_path_ + " httpd");
}

ProcessSandboxBackend::~ProcessSandboxBackend() {
  std::map<std::string, Child> children;
  {
    std::lock_guard lock(mutex_);
    children.swap(children_);
  }
  // Signal every child first so they shut down in parallel, then wait for each.
  for (auto& [id, child] : children) {
    if (!child.exited) ::kill(child.pid, SIGTERM);
  }
  for (auto& [id, child] : children) {
    try {
      stop_child(child);
      remove_dir(child.dir);
      logger_->info(kLogPrefix + std::string("stopped sandbox ") + id + " at shutdown");
    } catch (const std::exception& e) {
      logger_->error(kLogPrefix + std::string("could not stop sandbox ") + id +
                     " at shutdown: " + e.what());
    }
  }
}

bool ProcessSandboxBackend::refresh_locked(Child& child) {
  if (child.exited) return false;
  for (;;) {
    int status = 0;
    const pid_t reaped = ::waitpid(child.pid, &status, WNOHANG);
    if (reaped == child.pid) {
      child.exited = true;
      logger_->warning(kLogPrefix + std::string("sandbox ") + child.info.sandbox_id + " (pid " +
                       std::to_string(child.pid) + ") " + describe_status(status));
      return false;
    }
    if (reaped == 0) break;  // still our child, not exited
    if (errno == EINTR) continue;
    if (errno == ECHILD) {  // someone reaped it for us (for example SIGCHLD set to SIG_IGN)
      child.exited = true;
      return false;
    }
    throw std::runtime_error(kLogPrefix + std::string("waitpid(") + std::to_string(child.pid) +
                             "): " + errno_message(errno));
  }
  if (::kill(child.pid, 0) == 0 || errno == EPERM) return true;
  return false;
}

pid_t ProcessSandboxBackend::spawn_httpd(const fs::path& dir, int port) const {
  const std::string log_path = (dir / "httpd.log").string();
  std::vector<std::string> args = {
      httpd_path_,           "httpd", "-f", "-p", "127.0.0.1:" + std::to_string(port), "-h",
      (dir / "www").string()};
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);

  SpawnSetup setup;
  posix_spawn_file_actions_addopen(&setup.actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&setup.actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&setup.actions, STDOUT_FILENO, STDERR_FILENO);
  // The child must die on SIGTERM even when the host blocks or ignores it (the daemons do).
  sandboxd::set_child_signal_defaults(setup.attributes);

  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, httpd_path_.c_str(), &setup.actions, &setup.attributes,
                               argv.data(), environ);
  if (rc != 0) {
    throw std::runtime_error(kLogPrefix + std::string("could not start \"") + httpd_command_ +
                             "\" (" + httpd_path_ + "): " + errno_message(rc));
  }
  return pid;
}

bool ProcessSandboxBackend::await_exit(Child& child, std::chrono::milliseconds timeout) {
  // Real time on purpose: the child is a real process, and a host clock may be a test's
  // manual clock that never moves on its own.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t reaped = ::waitpid(child.pid, &status, WNOHANG);
    if (reaped == child.pid || (reaped < 0 && errno == ECHILD)) {
      child.exited = true;
      return true;
    }
    if (reaped < 0 && errno != EINTR) {
      throw std::runtime_error(kLogPrefix + std::string("waitpid(") + std::to_string(child.pid) +
                               "): " + errno_message(errno));
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ProcessSandboxBackend::stop_child(Child& child) {
  if (child.exited) return;
  ::kill(child.pid, SIGTERM);
  if (await_exit(child, stop_timeout_)) return;
  logger_->warning(kLogPrefix + std::string("sandbox ") + child.info.sandbox_id + " (pid " +
                   std::to_string(child.pid) + ") ignored SIGTERM for " +
                   std::to_string(stop_timeout_.count()) + " ms; sending SIGKILL");
  ::kill(child.pid, SIGKILL);
  if (await_exit(child, stop_timeout_)) return;
  throw std::runtime_error(kLogPrefix + std::string("sandbox ") + child.info.sandbox_id + " (pid " +
                           std::to_string(child.pid) +
                           ") has not exited even after SIGKILL; its stop may still be in flight");
}

void ProcessSandboxBackend::remove_dir(const fs::path& dir) {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) {
    logger_->warning(kLogPrefix + std::string("could not remove ") + dir.string() + ": " +
                     ec.message());
  }
}

sandboxd::SandboxInfo ProcessSandboxBackend::create(const sandboxd::CreateRequest& request) {
  if (!valid_sandbox_id(request.sandbox_id)) {
    throw std::invalid_argument(kLogPrefix + std::string("invalid sandbox id \"") +
                                request.sandbox_id +
                                "\" (expected 1-128 of [A-Za-z0-9._-], not starting with . or -)");
  }
  if (!request.extra_mounts.empty()) {
    logger_->debug(kLogPrefix + std::string("sandbox ") + request.sandbox_id + ": ignoring " +
                   std::to_string(request.extra_mounts.size()) +
                   " mount(s); child processes share the host filesystem");
  }

  std::lock_guard lock(mutex_);
  auto existing = children_.find(request.sandbox_id);
  if (existing != children_.end()) {
    if (refresh_locked(existing->second)) {
      logger_->debug(kLogPrefix + std::string("sandbox ") + request.sandbox_id +
                     " already running at " + existing->second.info.sandbox_url);
      return existing->second.info;
    }
    remove_dir(existing->second.dir);  // a dead incarnation; start afresh
    children_.erase(existing);
  }

  // Each incarnation gets its own directory, so a stop still cleaning up an older one (it has
  // left the map already) never removes the files of a new one.
  const fs::path dir = work_dir_ / (request.sandbox_id + "-" + std::to_string(::getpid()) + "-" +
                                    std::to_string(++next_incarnation_));
  Child child;
  child.dir = dir;
  try {
    fs::create_directories(dir / "www" / "v1");
    {
      std::ofstream ready(dir / "www" / "v1" / "sandbox", std::ios::binary | std::ios::trunc);
      ready << "ok";
      if (!ready.flush()) {
        throw std::runtime_error("cannot write " + (dir / "www" / "v1" / "sandbox").string());
      }
    }
    const int port = pick_free_port();
    child.pid = spawn_httpd(dir, port);
    child.info.sandbox_id = request.sandbox_id;
    child.info.sandbox_url = "http://127.0.0.1:" + std::to_string(port);
    child.info.created_at = clock_->wall_now();
    child.info.user_id = request.user_id;
    child.info.thread_id = request.thread_id;
    child.info.mount_contract_version = sandboxd::kSandboxMountContractVersion;
  } catch (const fs::filesystem_error& e) {
    remove_dir(dir);
    throw std::runtime_error(kLogPrefix + std::string("sandbox ") + request.sandbox_id + ": " +
                             e.what());
  } catch (...) {
    remove_dir(dir);
    throw;
  }

  logger_->info(kLogPrefix + std::string("started sandbox ") + request.sandbox_id + " (pid " +
                std::to_string(child.pid) + ") at " + child.info.sandbox_url);
  sandboxd::SandboxInfo info = child.info;
  children_.emplace(request.sandbox_id, std::move(child));
  return info;
}

void ProcessSandboxBackend::destroy(const sandboxd::SandboxInfo& info) {
  Child child;
  {
    std::lock_guard lock(mutex_);
    auto it = children_.find(info.sandbox_id);
    if (it == children_.end()) {
      logger_->debug(kLogPrefix + std::string("destroy: sandbox ") + info.sandbox_id +
                     " is not running here");
      return;
    }
    if (!info.sandbox_url.empty() && info.sandbox_url != it->second.info.sandbox_url) {
      // The instance this info names is gone; the one running now is a newer incarnation.
      logger_->debug(kLogPrefix + std::string("destroy: sandbox ") + info.sandbox_id + " at " +
                     info.sandbox_url + " is already gone");
      return;
    }
    child = std::move(it->second);
    children_.erase(it);
  }
  stop_child(child);  // throws when the stop may still be in flight; the directory stays then
  remove_dir(child.dir);
  logger_->info(kLogPrefix + std::string("stopped sandbox ") + info.sandbox_id);
}

bool ProcessSandboxBackend::is_alive(const sandboxd::SandboxInfo& info) {
  std::lock_guard lock(mutex_);
  auto it = children_.find(info.sandbox_id);
  if (it == children_.end()) return false;
  if (!info.sandbox_url.empty() && info.sandbox_url != it->second.info.sandbox_url) return false;
  return refresh_locked(it->second);
}

std::optional<sandboxd::SandboxInfo> ProcessSandboxBackend::discover(
    const std::string& sandbox_id) {
  std::lock_guard lock(mutex_);
  auto it = children_.find(sandbox_id);
  if (it == children_.end() || !refresh_locked(it->second)) return std::nullopt;
  return it->second.info;
}

std::vector<sandboxd::SandboxInfo> ProcessSandboxBackend::list_running() {
  std::vector<sandboxd::SandboxInfo> running;
  std::lock_guard lock(mutex_);
  for (auto& [id, child] : children_) {
    if (refresh_locked(child)) running.push_back(child.info);
  }
  return running;
}

SANDBOXD_EXPORT_BACKEND(ProcessSandboxBackend,
                        "each sandbox a local busybox httpd child process on 127.0.0.1 (example)")

}  // namespace process_backend

// An example third-party sandbox backend, built only against the installed sandboxd SDK.
//
// Each sandbox is a local child process: `busybox httpd` serving the readiness endpoint
// (GET /v1/sandbox → 200, design §5.17) on 127.0.0.1 from a per-sandbox directory. It has no
// isolation at all; it exists to show the shape of a real plugin (options with key-path
// errors, logging through the host, children started with fresh signals) and the rule most
// easily missed (docs/writing-a-backend.md): a sandbox outlives the process that made it and
// any other process finds it again. Each sandbox's state is a record on disk next to it, so
// `sandboxctl acquire` (one process) and the next command (another) see the same sandbox.
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
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sandboxd/sdk.hpp>
#include <sstream>
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

// Where one sandbox's state lives, so that any process can find it: {work_dir}/{id}.record
// names the running incarnation (its process, the process's start time, its port, when it was
// made, whose it is); {work_dir}/{id}-{n} is that incarnation's directory; {work_dir}/{id}.lock
// serialises the creates and destroys of one id across threads and processes (flock).
struct Record {
  pid_t pid = -1;
  unsigned long long start_ticks = 0;  // /proc/{pid}/stat field 22: tells a reused pid apart
  int port = 0;
  double created_at = 0.0;
  std::string user_id;
  std::string thread_id;
  std::string dir;  // the incarnation's directory name under work_dir
};

class ProcessSandboxBackend final : public sandboxd::SandboxBackend {
 public:
  explicit ProcessSandboxBackend(const sandboxd::PluginContext& context);
  // Sandboxes outlive the backend object (and the process that loaded it), as a container
  // outlives the engine client that made it: the next process finds them by their records.
  ~ProcessSandboxBackend() override = default;

  ProcessSandboxBackend(const ProcessSandboxBackend&) = delete;
  ProcessSandboxBackend& operator=(const ProcessSandboxBackend&) = delete;

  sandboxd::SandboxInfo create(const sandboxd::CreateRequest& request) override;
  void destroy(const sandboxd::SandboxInfo& info) override;
  bool is_alive(const sandboxd::SandboxInfo& info) override;
  std::optional<sandboxd::SandboxInfo> discover(const std::string& sandbox_id) override;
  std::vector<sandboxd::SandboxInfo> list_running() override;

 private:
  // Holds {work_dir}/{id}.lock exclusively for its lifetime.
  class IdLock {
   public:
    IdLock(const fs::path& work_dir, const std::string& sandbox_id);
    ~IdLock() { ::close(fd_); }
    IdLock(const IdLock&) = delete;
    IdLock& operator=(const IdLock&) = delete;

   private:
    int fd_ = -1;
  };

  fs::path record_path(const std::string& sandbox_id) const {
    return work_dir_ / (sandbox_id + ".record");
  }
  std::optional<Record> read_record(const std::string& sandbox_id) const;
  void write_record(const std::string& sandbox_id, const Record& record) const;
  // Whether the record's process still runs (the same process: its start time matches). Reaps
  // it when it is a child of this process that has exited, logging how it ended.
  bool running(const std::string& sandbox_id, const Record& record) const;
  sandboxd::SandboxInfo info_of(const std::string& sandbox_id, const Record& record) const;
  // Starts the httpd for one sandbox directory in a session of its own (so destroy stops its
  // whole process group); returns its pid. Does not block.
  pid_t spawn_httpd(const fs::path& dir, int port) const;
  // SIGTERM to the process group, wait up to stop_timeout_, SIGKILL, wait again; throws if it
  // still runs.
  void stop(const std::string& sandbox_id, const Record& record) const;
  // destroy() once the id's lock is held and its record read.
  void destroy_locked(const sandboxd::SandboxInfo& info, const Record& record);
  bool await_exit(const std::string& sandbox_id, const Record& record,
                  std::chrono::milliseconds timeout) const;
  void remove_dir(const fs::path& dir) const;

  // Set once in the constructor, read-only after: no lock needed. Every piece of state a
  // sandbox has is on disk, guarded by its id's lock file.
  std::shared_ptr<sandboxd::Logger> logger_;
  std::shared_ptr<sandboxd::Clock> clock_;
  fs::path work_dir_;
  std::string httpd_command_;  // as configured, for messages
  std::string httpd_path_;     // resolved absolute path
  std::chrono::milliseconds stop_timeout_{5000};
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

namespace {

// The start time of a live process, in clock ticks since boot; nullopt when it is gone or a
// zombie (exited, not yet reaped).
std::optional<unsigned long long> process_start_ticks(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::size_t comm_end = stat.rfind(')');  // the command name may hold spaces and ')'
  if (comm_end == std::string::npos) return std::nullopt;
  std::istringstream fields(stat.substr(comm_end + 1));
  std::string state;
  fields >> state;
  if (state == "Z" || state == "X") return std::nullopt;
  std::string field;
  for (int index = 4; index < 22 && fields >> field; ++index) {
  }
  unsigned long long ticks = 0;
  if (!(fields >> ticks)) return std::nullopt;
  return ticks;
}

// An incarnation directory's name as a record may give it: the id, a dash, no separator.
bool valid_incarnation_dir(const std::string& sandbox_id, const std::string& dir) {
  return dir.size() > sandbox_id.size() + 1 && dir.rfind(sandbox_id + "-", 0) == 0 &&
         dir.find('/') == std::string::npos;
}

}  // namespace

ProcessSandboxBackend::IdLock::IdLock(const fs::path& work_dir, const std::string& sandbox_id) {
  const std::string path = (work_dir / (sandbox_id + ".lock")).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd_ < 0) {
    throw std::runtime_error(kLogPrefix + std::string("cannot open ") + path + ": " +
                             errno_message(errno));
  }
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const int error = errno;
    ::close(fd_);
    throw std::runtime_error(kLogPrefix + std::string("cannot lock ") + path + ": " +
                             errno_message(error));
  }
}

std::optional<Record> ProcessSandboxBackend::read_record(const std::string& sandbox_id) const {
  std::ifstream in(record_path(sandbox_id));
  if (!in) return std::nullopt;
  Record record;
  std::string line;
  while (std::getline(in, line)) {
    const std::size_t equals = line.find('=');
    if (equals == std::string::npos) continue;
    const std::string key = line.substr(0, equals);
    const std::string value = line.substr(equals + 1);
    try {
      if (key == "pid") record.pid = static_cast<pid_t>(std::stol(value));
      if (key == "start_ticks") record.start_ticks = std::stoull(value);
      if (key == "port") record.port = std::stoi(value);
      if (key == "created_at") record.created_at = std::stod(value);
    } catch (const std::exception&) {
      return std::nullopt;  // not a record of ours: treated as no sandbox
    }
    if (key == "user_id") record.user_id = value;
    if (key == "thread_id") record.thread_id = value;
    if (key == "dir") record.dir = value;
  }
  if (record.pid <= 0 || record.port <= 0 || !valid_incarnation_dir(sandbox_id, record.dir)) {
    return std::nullopt;
  }
  return record;
}

void ProcessSandboxBackend::write_record(const std::string& sandbox_id,
                                         const Record& record) const {
  // Written beside and renamed into place: a reader sees the old record or the new one.
  const fs::path path = record_path(sandbox_id);
  const fs::path staged = work_dir_ / (sandbox_id + ".record.new");
  {
    std::ofstream out(staged, std::ios::trunc);
    char created[64];
    std::snprintf(created, sizeof created, "%.6f", record.created_at);
    out << "pid=" << record.pid << "\nstart_ticks=" << record.start_ticks
        << "\nport=" << record.port << "\ncreated_at=" << created << "\nuser_id=" << record.user_id
        << "\nthread_id=" << record.thread_id << "\ndir=" << record.dir << "\n";
    if (!out.flush()) throw std::runtime_error("cannot write " + staged.string());
  }
  fs::rename(staged, path);
}

bool ProcessSandboxBackend::running(const std::string& sandbox_id, const Record& record) const {
  int status = 0;
  if (::waitpid(record.pid, &status, WNOHANG) == record.pid) {  // ours, and it has exited
    logger_->warning(kLogPrefix + std::string("sandbox ") + sandbox_id + " (pid " +
                     std::to_string(record.pid) + ") " + describe_status(status));
    return false;
  }
  return process_start_ticks(record.pid) == record.start_ticks;
}

sandboxd::SandboxInfo ProcessSandboxBackend::info_of(const std::string& sandbox_id,
                                                     const Record& record) const {
  sandboxd::SandboxInfo info;
  info.sandbox_id = sandbox_id;
  info.sandbox_url = "http://127.0.0.1:" + std::to_string(record.port);
  info.created_at = record.created_at;
  if (!record.user_id.empty()) info.user_id = record.user_id;
  if (!record.thread_id.empty()) info.thread_id = record.thread_id;
  info.mount_contract_version = sandboxd::kSandboxMountContractVersion;
  return info;
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
  // A session of its own: no terminal's signals reach it, and its pid is its process group.
  short flags = 0;
  posix_spawnattr_getflags(&setup.attributes, &flags);
  posix_spawnattr_setflags(&setup.attributes, static_cast<short>(flags | POSIX_SPAWN_SETSID));

  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, httpd_path_.c_str(), &setup.actions, &setup.attributes,
                               argv.data(), environ);
  if (rc != 0) {
    throw std::runtime_error(kLogPrefix + std::string("could not start \"") + httpd_command_ +
                             "\" (" + httpd_path_ + "): " + errno_message(rc));
  }
  return pid;
}

bool ProcessSandboxBackend::await_exit(const std::string& sandbox_id, const Record& record,
                                       std::chrono::milliseconds timeout) const {
  // Real time on purpose: the child is a real process, and a host clock may be a test's
  // manual clock that never moves on its own.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (!running(sandbox_id, record)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ProcessSandboxBackend::stop(const std::string& sandbox_id, const Record& record) const {
  if (!running(sandbox_id, record)) return;
  // Checked just above against the process's start time, so the group is the sandbox's own.
  ::kill(-record.pid, SIGTERM);
  if (await_exit(sandbox_id, record, stop_timeout_)) return;
  logger_->warning(kLogPrefix + std::string("sandbox ") + sandbox_id + " (pid " +
                   std::to_string(record.pid) + ") ignored SIGTERM for " +
                   std::to_string(stop_timeout_.count()) + " ms; sending SIGKILL");
  ::kill(-record.pid, SIGKILL);
  if (await_exit(sandbox_id, record, stop_timeout_)) return;
  throw std::runtime_error(kLogPrefix + std::string("sandbox ") + sandbox_id + " (pid " +
                           std::to_string(record.pid) +
                           ") has not exited even after SIGKILL; its stop may still be in flight");
}

void ProcessSandboxBackend::remove_dir(const fs::path& dir) const {
  std::error_code ec;
  fs::remove_all(dir, ec);
  if (ec) {
    logger_->warning(kLogPrefix + std::string("could not remove ") + dir.string() + ": " +
                     ec.message());
  }
}

sandboxd::SandboxInfo ProcessSandboxBackend::create(const sandboxd::CreateRequest& request) {
  const std::string& id = request.sandbox_id;
  if (!valid_sandbox_id(id)) {
    throw std::invalid_argument(kLogPrefix + std::string("invalid sandbox id \"") + id +
                                "\" (expected 1-128 of [A-Za-z0-9._-], not starting with . or -)");
  }
  if (!request.extra_mounts.empty()) {
    logger_->debug(kLogPrefix + std::string("sandbox ") + id + ": ignoring " +
                   std::to_string(request.extra_mounts.size()) +
                   " mount(s); child processes share the host filesystem");
  }

  const IdLock lock(work_dir_, id);  // one create or destroy of this id at a time, anywhere
  std::optional<Record> existing = read_record(id);
  if (existing && running(id, *existing)) {
    logger_->debug(kLogPrefix + std::string("sandbox ") + id + " already running on port " +
                   std::to_string(existing->port));
    return info_of(id, *existing);  // another process may have made it: the same sandbox
  }
  if (existing) remove_dir(work_dir_ / existing->dir);  // a dead incarnation; start afresh

  // Each incarnation gets its own directory, so a stop still cleaning up an older one never
  // removes the files of a new one.
  Record record;
  record.dir = id + "-" + std::to_string(::getpid()) + "-" +
               std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const fs::path dir = work_dir_ / record.dir;
  try {
    fs::create_directories(dir / "www" / "v1");
    {
      std::ofstream ready(dir / "www" / "v1" / "sandbox", std::ios::binary | std::ios::trunc);
      ready << "ok";
      if (!ready.flush()) {
        throw std::runtime_error("cannot write " + (dir / "www" / "v1" / "sandbox").string());
      }
    }
    record.port = pick_free_port();
    record.pid = spawn_httpd(dir, record.port);
    const std::optional<unsigned long long> started = process_start_ticks(record.pid);
    if (!started) {
      int status = 0;
      ::waitpid(record.pid, &status, 0);
      throw std::runtime_error(kLogPrefix + std::string("\"") + httpd_command_ + "\" " +
                               describe_status(status) + " at once (see " +
                               (dir / "httpd.log").string() + ")");
    }
    record.start_ticks = *started;
    record.created_at = clock_->wall_now();
    record.user_id = request.user_id.value_or("");
    record.thread_id = request.thread_id.value_or("");
    write_record(id, record);
  } catch (...) {
    // Nothing of a failed create stays: its process and its directory go.
    if (record.pid > 0) {
      ::kill(-record.pid, SIGKILL);
      int status = 0;
      ::waitpid(record.pid, &status, 0);
    }
    remove_dir(dir);
    try {
      throw;
    } catch (const fs::filesystem_error& e) {
      throw std::runtime_error(kLogPrefix + std::string("sandbox ") + id + ": " + e.what());
    }
  }
  logger_->info(kLogPrefix + std::string("started sandbox ") + id + " (pid " +
                std::to_string(record.pid) + ") on port " + std::to_string(record.port));
  return info_of(id, record);
}

void ProcessSandboxBackend::destroy(const sandboxd::SandboxInfo& info) {
  const std::string& id = info.sandbox_id;
  if (!valid_sandbox_id(id)) return;  // never one of ours
  // Nothing recorded: nothing to stop, and no lock file is made for an id never created.
  std::optional<Record> record = read_record(id);
  if (record) {
    const IdLock lock(work_dir_, id);
    record = read_record(id);  // as it is now that no create or destroy of it runs
    if (record) {
      destroy_locked(info, *record);
      return;
    }
  }
  logger_->debug(kLogPrefix + std::string("destroy: sandbox ") + id + " is not running here");
}

void ProcessSandboxBackend::destroy_locked(const sandboxd::SandboxInfo& info,
                                           const Record& record) {
  const std::string& id = info.sandbox_id;
  if (!info.sandbox_url.empty() && info.sandbox_url != info_of(id, record).sandbox_url) {
    // The instance this info names is gone; the one running now is a newer incarnation.
    logger_->debug(kLogPrefix + std::string("destroy: sandbox ") + id + " at " + info.sandbox_url +
                   " is already gone");
    return;
  }
  stop(id, record);  // throws when the stop may still be in flight; the record stays then
  std::error_code ignored;
  fs::remove(record_path(id), ignored);
  remove_dir(work_dir_ / record.dir);
  logger_->info(kLogPrefix + std::string("stopped sandbox ") + id);
}

bool ProcessSandboxBackend::is_alive(const sandboxd::SandboxInfo& info) {
  if (!valid_sandbox_id(info.sandbox_id)) return false;
  const std::optional<Record> record = read_record(info.sandbox_id);
  if (!record) return false;
  if (!info.sandbox_url.empty() &&
      info.sandbox_url != info_of(info.sandbox_id, *record).sandbox_url) {
    return false;  // an older incarnation
  }
  return running(info.sandbox_id, *record);
}

std::optional<sandboxd::SandboxInfo> ProcessSandboxBackend::discover(
    const std::string& sandbox_id) {
  if (!valid_sandbox_id(sandbox_id)) return std::nullopt;
  const std::optional<Record> record = read_record(sandbox_id);
  if (!record || !running(sandbox_id, *record)) return std::nullopt;
  return info_of(sandbox_id, *record);
}

std::vector<sandboxd::SandboxInfo> ProcessSandboxBackend::list_running() {
  // Bounded: a work directory holding more entries than this is not read past them.
  constexpr std::size_t kMaxEntries = 100000;
  std::vector<sandboxd::SandboxInfo> running_now;
  std::error_code ec;
  std::size_t seen = 0;
  for (const auto& entry : fs::directory_iterator(work_dir_, ec)) {
    if (++seen > kMaxEntries) break;
    const fs::path name = entry.path().filename();
    if (name.extension() != ".record") continue;
    if (auto info = discover(name.stem().string())) running_now.push_back(std::move(*info));
  }
  return running_now;
}

SANDBOXD_EXPORT_BACKEND(ProcessSandboxBackend,
                        "each sandbox a local busybox httpd child process on 127.0.0.1 (example)")

}  // namespace process_backend

// The example third-party backend (examples/third_party_backend), built out of tree against the
// installed SDK by the example_plugin CTest fixture, loaded through PluginLoader like any
// configured plugin, and driven through real child processes.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/sdk.hpp"
#include "test_support.hpp"

namespace {

namespace fs = std::filesystem;
using sandboxd::CreateRequest;
using sandboxd::PluginContext;
using sandboxd::SandboxBackend;
using sandboxd::SandboxInfo;
using sandboxd::core::PluginLoader;
using ::testing::HasSubstr;

constexpr const char* kExampleDir = SANDBOXD_EXAMPLE_PLUGIN_DIR;
constexpr const char* kClassName = "ProcessSandboxBackend";
constexpr const char* kBareUse = "process_backend:ProcessSandboxBackend";
constexpr double kClockStart = 1'700'000'000.0;

std::string plugin_path() {
  return std::string(kExampleDir) + "/process_backend.so";
}

int port_of(const SandboxInfo& info) {
  const std::string prefix = "http://127.0.0.1:";
  if (info.sandbox_url.rfind(prefix, 0) != 0) return -1;
  return std::stoi(info.sandbox_url.substr(prefix.size()));
}

// A connected TCP socket to 127.0.0.1:port, or -1 with errno set.
int connect_local(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  timeval timeout{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    ::close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

// The status code of GET /v1/sandbox, or nothing on a transport error. A plain socket, so no
// proxy from the environment gets in the way.
std::optional<int> get_readiness_status(int port) {
  const int fd = connect_local(port);
  if (fd < 0) return std::nullopt;
  const std::string request = "GET /v1/sandbox HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return std::nullopt;
  }
  std::string response;
  char buffer[512];
  while (response.find("\r\n") == std::string::npos) {
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) break;
    response.append(buffer, static_cast<std::size_t>(n));
  }
  ::close(fd);
  // "HTTP/1.x NNN ..."
  const std::size_t space = response.find(' ');
  if (response.rfind("HTTP/", 0) != 0 || space == std::string::npos) return std::nullopt;
  try {
    return std::stoi(response.substr(space + 1, 3));
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Readiness wait (design §5.17), not a timed assertion: the child needs a moment to bind.
std::optional<int> wait_for_readiness(int port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  std::optional<int> status;
  while (std::chrono::steady_clock::now() < deadline) {
    status = get_readiness_status(port);
    if (status == 200) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return status;
}

bool connection_refused(int port) {
  const int fd = connect_local(port);
  if (fd >= 0) {
    ::close(fd);
    return false;
  }
  return errno == ECONNREFUSED;
}

// The pid of the process whose command line serves 127.0.0.1:port, if any.
std::optional<pid_t> pid_serving(int port) {
  const std::string needle = "127.0.0.1:" + std::to_string(port);
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "cmdline", std::ios::binary);
    std::string cmdline((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find("httpd") != std::string::npos &&
        cmdline.find(" " + needle + " ") != std::string::npos) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return std::nullopt;
}

// The per-sandbox directories under a work dir whose name starts with the sandbox id.
std::vector<fs::path> sandbox_dirs(const fs::path& work_dir, const std::string& sandbox_id) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(work_dir, ec)) {
    if (entry.path().filename().string().rfind(sandbox_id + "-", 0) == 0) {
      out.push_back(entry.path());
    }
  }
  return out;
}

CreateRequest request_for(const std::string& sandbox_id) {
  CreateRequest request;
  request.sandbox_id = sandbox_id;
  request.thread_id = "thread-1";
  request.user_id = "user-1";
  return request;
}

class ExampleBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(plugin_path()))
        << plugin_path()
        << " is missing: it is built by the example_backend.build_out_of_tree CTest fixture; run "
           "`ctest -L example` rather than this binary directly";
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    base_dir_ = fs::path(SANDBOXD_TEST_BINARY_DIR) / "example_backend_work" / test->name();
    fs::remove_all(base_dir_);
    fs::create_directories(base_dir_);
  }

  PluginContext context(const std::string& options_json = "{}") const {
    PluginContext context;
    context.config_json = options_json;
    context.config_key_path = "sandbox.backend";
    context.config_file = "example-test.json";
    context.owner_id = "test-host:0123456789abcdef";
    context.base_dir = base_dir_.string();
    context.logger = logger_;
    context.clock = clock_;
    return context;
  }

  fs::path work_dir() const { return base_dir_ / "process-sandboxes"; }

  std::shared_ptr<SandboxBackend> load_by_path(const std::string& options_json = "{}") const {
    PluginLoader loader;
    return loader.load_backend(plugin_path() + ":" + kClassName, context(options_json),
                               "example-test.json: sandbox.backend.use");
  }

  // Loads `options_json` by bare name and returns what() of the error it must throw.
  std::string load_error(const std::string& options_json) const {
    PluginLoader loader({kExampleDir});
    try {
      loader.load_backend(kBareUse, context(options_json),
                          "example-test.json: sandbox.backend.use");
    } catch (const std::exception& e) {
      return e.what();
    }
    ADD_FAILURE() << "loading with " << options_json << " did not throw";
    return {};
  }

  // create → ready → alive → listed → discoverable → destroy → gone, refused, cleaned up.
  void exercise_lifecycle(SandboxBackend& backend, const std::string& sandbox_id) {
    const SandboxInfo info = backend.create(request_for(sandbox_id));
    EXPECT_EQ(info.sandbox_id, sandbox_id);
    EXPECT_THAT(info.sandbox_url, ::testing::StartsWith("http://127.0.0.1:"));
    EXPECT_DOUBLE_EQ(info.created_at, kClockStart);
    EXPECT_EQ(info.user_id, std::optional<std::string>("user-1"));
    EXPECT_EQ(info.thread_id, std::optional<std::string>("thread-1"));
    EXPECT_EQ(info.mount_contract_version, sandboxd::kSandboxMountContractVersion);
    const int port = port_of(info);
    ASSERT_GT(port, 0) << info.sandbox_url;

    EXPECT_EQ(wait_for_readiness(port), std::optional<int>(200)) << info.sandbox_url;
    EXPECT_TRUE(backend.is_alive(info));

    const std::vector<SandboxInfo> running = backend.list_running();
    ASSERT_EQ(running.size(), 1u);
    EXPECT_EQ(running[0], info);
    EXPECT_EQ(backend.discover(sandbox_id), std::optional<SandboxInfo>(info));

    const std::vector<fs::path> dirs = sandbox_dirs(work_dir(), sandbox_id);
    ASSERT_EQ(dirs.size(), 1u);
    std::ifstream ready(dirs[0] / "www" / "v1" / "sandbox");
    std::string content((std::istreambuf_iterator<char>(ready)), std::istreambuf_iterator<char>());
    EXPECT_EQ(content, "ok");

    backend.destroy(info);
    EXPECT_FALSE(backend.is_alive(info));
    EXPECT_TRUE(connection_refused(port)) << "port " << port << " still accepts after destroy";
    EXPECT_EQ(backend.discover(sandbox_id), std::nullopt);
    EXPECT_TRUE(backend.list_running().empty());
    EXPECT_FALSE(fs::exists(dirs[0])) << dirs[0] << " was not removed";
    EXPECT_TRUE(logger_->contains(sandboxd::LogLevel::info, "started sandbox " + sandbox_id));
    EXPECT_TRUE(logger_->contains(sandboxd::LogLevel::info, "stopped sandbox " + sandbox_id));

    backend.destroy(info);  // already gone: a no-op
  }

  fs::path base_dir_;
  std::shared_ptr<sandboxd::testing::CapturingLogger> logger_ =
      std::make_shared<sandboxd::testing::CapturingLogger>();
  std::shared_ptr<sandboxd::testing::ManualClock> clock_ =
      std::make_shared<sandboxd::testing::ManualClock>(kClockStart);
};

TEST_F(ExampleBackendTest, LoaderListsTheOutOfTreeClass) {
  PluginLoader loader({kExampleDir});
  const std::vector<sandboxd::core::PluginClassInfo> classes = loader.list();
  auto it = std::find_if(classes.begin(), classes.end(), [](const auto& c) {
    return c.module == "process_backend" && c.class_name == kClassName;
  });
  ASSERT_NE(it, classes.end()) << "process_backend:ProcessSandboxBackend not listed from "
                               << kExampleDir;
  EXPECT_EQ(it->kind, sandboxd::PluginKind::backend);
  EXPECT_EQ(it->abi_version, sandboxd::kSdkAbiVersion);
  EXPECT_EQ(it->problem, "");
  EXPECT_EQ(it->use_string(), kBareUse);
  EXPECT_THAT(it->description, HasSubstr("httpd"));
  EXPECT_EQ(fs::weakly_canonical(it->path), fs::weakly_canonical(plugin_path()));
}

TEST_F(ExampleBackendTest, LoadedByPathUseStringRunsASandboxLifecycle) {
  std::shared_ptr<SandboxBackend> backend = load_by_path();
  ASSERT_NE(backend, nullptr);
  exercise_lifecycle(*backend, "sbx-by-path");
}

TEST_F(ExampleBackendTest, LoadedByBareNameFromPluginDirsRunsASandboxLifecycle) {
  PluginLoader loader({kExampleDir});
  std::shared_ptr<SandboxBackend> backend =
      loader.load_backend(kBareUse, context(), "example-test.json: sandbox.backend.use");
  ASSERT_NE(backend, nullptr);
  exercise_lifecycle(*backend, "sbx-by-name");
}

TEST_F(ExampleBackendTest, CreateIsIdempotentPerIdAndEachIdGetsItsOwnChild) {
  std::shared_ptr<SandboxBackend> backend = load_by_path();
  const SandboxInfo first = backend->create(request_for("sbx-a"));
  clock_->advance(10);
  const SandboxInfo again = backend->create(request_for("sbx-a"));
  EXPECT_EQ(again, first);  // same instance, same created_at
  const SandboxInfo other = backend->create(request_for("sbx-b"));
  EXPECT_NE(other.sandbox_url, first.sandbox_url);
  EXPECT_EQ(wait_for_readiness(port_of(first)), std::optional<int>(200));
  EXPECT_EQ(wait_for_readiness(port_of(other)), std::optional<int>(200));
  EXPECT_EQ(backend->list_running().size(), 2u);

  backend->destroy(first);
  EXPECT_FALSE(backend->is_alive(first));
  EXPECT_TRUE(backend->is_alive(other));
  backend->destroy(other);
  EXPECT_TRUE(backend->list_running().empty());
}

TEST_F(ExampleBackendTest, ASandboxOutlivesItsBackendAndAnotherInstanceFindsAndStopsIt) {
  // As one `sandboxctl` command after another: the backend that made the sandbox goes, and a
  // new one (another process in real use) finds it by its record, reuses it, and stops it.
  std::shared_ptr<SandboxBackend> first = load_by_path();
  const SandboxInfo made = first->create(request_for("sbx-kept"));
  ASSERT_EQ(wait_for_readiness(port_of(made)), std::optional<int>(200));
  first.reset();
  EXPECT_EQ(wait_for_readiness(port_of(made)), std::optional<int>(200)) << "died with its backend";

  std::shared_ptr<SandboxBackend> second = load_by_path();
  EXPECT_EQ(second->discover("sbx-kept"), std::optional<SandboxInfo>(made));
  EXPECT_TRUE(second->is_alive(made));
  ASSERT_EQ(second->list_running().size(), 1u);
  EXPECT_EQ(second->list_running()[0], made);
  clock_->advance(10);
  EXPECT_EQ(second->create(request_for("sbx-kept")), made) << "a second sandbox for one id";
  second->destroy(made);
  EXPECT_TRUE(connection_refused(port_of(made)));
  EXPECT_EQ(pid_serving(port_of(made)), std::nullopt) << "the sandbox's process outlived destroy";
  EXPECT_TRUE(sandbox_dirs(work_dir(), "sbx-kept").empty());
  EXPECT_EQ(second->discover("sbx-kept"), std::nullopt);
}

TEST_F(ExampleBackendTest, AChildThatDiesIsReportedGoneAndCanBeRecreated) {
  std::shared_ptr<SandboxBackend> backend = load_by_path();
  const SandboxInfo old_info = backend->create(request_for("sbx-dies"));
  ASSERT_EQ(wait_for_readiness(port_of(old_info)), std::optional<int>(200));
  const std::optional<pid_t> pid = pid_serving(port_of(old_info));
  ASSERT_TRUE(pid.has_value());
  ASSERT_EQ(::kill(*pid, SIGKILL), 0);

  // The kernel needs a moment to turn the child into a zombie the backend can reap.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (backend->is_alive(old_info) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(backend->is_alive(old_info));
  EXPECT_EQ(backend->discover("sbx-dies"), std::nullopt);
  EXPECT_TRUE(backend->list_running().empty());
  EXPECT_TRUE(logger_->contains(sandboxd::LogLevel::warning, "killed by signal 9"));

  const SandboxInfo new_info = backend->create(request_for("sbx-dies"));
  EXPECT_NE(new_info.sandbox_url, old_info.sandbox_url);
  EXPECT_EQ(wait_for_readiness(port_of(new_info)), std::optional<int>(200));
  EXPECT_EQ(sandbox_dirs(work_dir(), "sbx-dies").size(), 1u);  // the dead one's dir is gone

  backend->destroy(old_info);  // names the dead incarnation: must not stop the new one
  EXPECT_TRUE(backend->is_alive(new_info));
  EXPECT_FALSE(backend->is_alive(old_info));
  backend->destroy(new_info);
  EXPECT_FALSE(backend->is_alive(new_info));
}

TEST_F(ExampleBackendTest, UnknownIdsAreNoOpsAndUnsafeIdsAreRefused) {
  std::shared_ptr<SandboxBackend> backend = load_by_path();
  SandboxInfo unknown;
  unknown.sandbox_id = "never-created";
  unknown.sandbox_url = "http://127.0.0.1:1";
  EXPECT_NO_THROW(backend->destroy(unknown));
  EXPECT_FALSE(backend->is_alive(unknown));
  EXPECT_EQ(backend->discover("never-created"), std::nullopt);
  EXPECT_TRUE(backend->list_running().empty());

  const std::vector<std::string> bad_ids = {"", "../escape", "a/b", ".hidden",
                                            std::string(129, 'x')};
  for (const std::string& bad : bad_ids) {
    EXPECT_THROW(backend->create(request_for(bad)), std::invalid_argument) << '"' << bad << '"';
  }
  EXPECT_TRUE(fs::is_empty(work_dir()));
}

TEST_F(ExampleBackendTest, OptionsAreReadWithKeyPathErrorsAndUnknownKeysWarned) {
  const fs::path custom = base_dir_ / "custom-work";
  std::shared_ptr<SandboxBackend> backend = load_by_path(
      R"({"use": "ignored", "work_dir": ")" + custom.string() +
      R"(", "httpd_command": "busybox", "stop_timeout_seconds": 2, "colour": "blue"})");
  EXPECT_TRUE(logger_->contains(sandboxd::LogLevel::warning, "sandbox.backend.colour"));
  EXPECT_FALSE(logger_->contains("sandbox.backend.use"));
  const SandboxInfo info = backend->create(request_for("sbx-custom"));
  EXPECT_EQ(sandbox_dirs(custom, "sbx-custom").size(), 1u);
  EXPECT_FALSE(fs::exists(work_dir()));
  backend->destroy(info);
  EXPECT_TRUE(sandbox_dirs(custom, "sbx-custom").empty());

  const std::string missing = load_error(R"({"httpd_command": "no-such-httpd-for-sandboxd"})");
  EXPECT_THAT(missing, HasSubstr("sandbox.backend.httpd_command"));
  EXPECT_THAT(missing, HasSubstr("no-such-httpd-for-sandboxd"));

  EXPECT_THAT(load_error(R"({"work_dir": 5})"), HasSubstr("sandbox.backend.work_dir"));
  EXPECT_THAT(load_error(R"({"stop_timeout_seconds": 0})"),
              HasSubstr("sandbox.backend.stop_timeout_seconds"));
}

}  // namespace

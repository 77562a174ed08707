#include "kit.hpp"

#include <fcntl.h>
#include <poll.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "sandboxd/capabilities.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/configured_plugins.hpp"
#include "sandboxd/core/creation_planner.hpp"
#include "sandboxd/core/logging.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/readiness.hpp"

extern char** environ;

namespace sandboxd::conformance {
namespace fs = std::filesystem;

namespace {

Kit* g_kit = nullptr;

// The config the settings describe: the file's, or one naming the backend alone; `--use` and
// `--plugin` override its backend's `use` (a path form, so no search path is involved).
core::SandboxConfig settings_config(const KitSettings& settings) {
  core::SandboxConfig config;
  if (!settings.config_file.empty()) {
    config = core::load_config_file(settings.config_file);
  } else {
    if (settings.use.empty()) {
      throw std::invalid_argument(
          "--use module:Class is required when no --config names a backend");
    }
    config = core::parse_config(R"({"sandbox": {"backend": {"use": "x:y"}}})", "<command line>");
    config.backend.options_json = "{}";
  }
  std::string use = settings.use.empty() ? config.backend.use : settings.use;
  if (!settings.plugin.empty()) {
    const std::size_t colon = use.rfind(':');
    if (colon == std::string::npos) {
      throw std::invalid_argument("--use " + use + ": expected module:Class (e.g. " +
                                  "my_backend:MyBackend)");
    }
    use = fs::absolute(settings.plugin).string() + use.substr(colon);
  }
  config.backend.use = use;
  return config;
}

std::string to_json_line(const SecondLook& look) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> out(buffer);
  out.StartObject();
  out.Key("found");
  out.Bool(look.found);
  out.Key("alive");
  out.Bool(look.alive);
  out.Key("listed");
  out.Bool(look.listed);
  write_json_member(out, "error", look.error);
  if (look.found) {
    write_json_member(out, "sandbox_id", look.info.sandbox_id);
    write_json_member(out, "sandbox_url", look.info.sandbox_url);
    out.Key("created_at");
    out.Double(look.info.created_at);
    write_json_optional(out, "user_id", look.info.user_id);
    write_json_optional(out, "thread_id", look.info.thread_id);
  }
  out.EndObject();
  return buffer.GetString();
}

SecondLook from_json_line(const std::string& line) {
  rapidjson::Document document;
  SecondLook look;
  if (!parse_json(document, line) || !document.IsObject()) {
    look.error = "the second process printed no answer (its output: " + line.substr(0, 400) + ")";
    return look;
  }
  look.ran = true;
  const auto text = [&](const char* key) -> std::optional<std::string> {
    const auto found = document.FindMember(key);
    if (found == document.MemberEnd() || !found->value.IsString()) return std::nullopt;
    return std::string(found->value.GetString(), found->value.GetStringLength());
  };
  const auto flag = [&](const char* key) {
    const auto found = document.FindMember(key);
    return found != document.MemberEnd() && found->value.IsBool() && found->value.GetBool();
  };
  look.found = flag("found");
  look.alive = flag("alive");
  look.listed = flag("listed");
  look.error = text("error").value_or("");
  look.info.sandbox_id = text("sandbox_id").value_or("");
  look.info.sandbox_url = text("sandbox_url").value_or("");
  look.info.user_id = text("user_id");
  look.info.thread_id = text("thread_id");
  const auto created = document.FindMember("created_at");
  if (created != document.MemberEnd() && created->value.IsNumber()) {
    look.info.created_at = created->value.GetDouble();
  }
  return look;
}

}  // namespace

std::vector<std::string> KitSettings::child_arguments() const {
  std::vector<std::string> arguments;
  if (!plugin.empty()) arguments.insert(arguments.end(), {"--plugin", plugin});
  if (!use.empty()) arguments.insert(arguments.end(), {"--use", use});
  if (!config_file.empty()) arguments.insert(arguments.end(), {"--config", config_file});
  arguments.insert(arguments.end(), {"--state-dir", state_dir});
  return arguments;
}

std::shared_ptr<SandboxBackend> load_backend(const KitSettings& settings, const fs::path& state_dir,
                                             core::SandboxConfig* config_out) {
  core::SandboxConfig config = settings_config(settings);
  core::HostServices services;
  services.logger = std::make_shared<core::StderrLogger>(LogLevel::warning);
  services.clock = std::make_shared<SystemClock>();
  services.owner_id = "conformance:" + std::to_string(::getpid());
  services.base_dir = state_dir.string();
  const core::PluginLoader loader(config.plugin_dirs);
  std::shared_ptr<SandboxBackend> backend = loader.load_backend(
      config.backend.use, core::make_plugin_context(config, config.backend, services),
      (config.source_file.empty() ? std::string("--use") : config.source_file) +
          ": sandbox.backend.use");
  if (config_out) *config_out = std::move(config);
  return backend;
}

Kit::Kit(KitSettings settings) : settings_(std::move(settings)) {
  if (settings_.state_dir.empty()) {
    std::string pattern = (fs::temp_directory_path() / "sandboxd-conformance-XXXXXX").string();
    if (!::mkdtemp(pattern.data())) {
      throw std::system_error(errno, std::generic_category(), "mkdtemp " + pattern);
    }
    state_dir_ = pattern;
    own_state_dir_ = true;
    settings_.state_dir = pattern;
  } else {
    state_dir_ = settings_.state_dir;
    fs::create_directories(state_dir_);
  }
  backend_ = load_backend(settings_, state_dir_, &config_);
}

Kit::~Kit() {
  for (const auto& [id, info] : made_) {
    try {
      backend_->destroy(info);
    } catch (const std::exception& e) {
      std::cerr << "conformance: could not destroy sandbox " << id << " at the end: " << e.what()
                << "\n";
    }
  }
  backend_.reset();
  if (own_state_dir_) {
    std::error_code ignored;
    fs::remove_all(state_dir_, ignored);
  }
}

CreateRequest Kit::request_for(const std::string& user_id, const std::string& thread_id) {
  // As the provider plans a creation: the contract a negotiating backend reports (it enters the
  // id), thread data mounted only where the backend shares the host's directories, the rest of
  // the composition (skills views) always.
  auto paths = std::make_shared<core::Paths>(state_dir_, core::host_base_dir(state_dir_));
  const core::HostCreationPlanner planner(paths, core::MountComposerOptions{});
  int contract_version = kSandboxMountContractVersion;
  bool thread_data_mounted = backend_->mount_mode_kind() == MountModeKind::local_bind_mounts;
  auto* negotiation = backend_capability<MountContractNegotiation>(*backend_);
  if (negotiation && backend_->mount_mode_kind() == MountModeKind::contract_negotiated) {
    negotiation->refresh_capabilities_if_stale();
    contract_version = negotiation->mount_contract_snapshot().version;
  }
  CreateRequest request;
  request.user_id = user_id;
  request.thread_id = thread_id;
  request.sandbox_id = planner.sandbox_id(thread_id, user_id, contract_version);
  planner.ensure_skills_projection(user_id);
  request.extra_mounts = planner.extra_mounts(thread_id, user_id, thread_data_mounted);
  return request;
}

void Kit::remember(const SandboxInfo& info) {
  made_[info.sandbox_id] = info;
}
void Kit::forget(const std::string& sandbox_id) {
  made_.erase(sandbox_id);
}

SecondLook Kit::look_from_another_process(const std::string& sandbox_id) {
  return run_child({"--child", "look", sandbox_id});
}

SecondLook Kit::destroy_from_another_process(const SandboxInfo& info) {
  return run_child({"--child", "destroy", info.sandbox_id, info.sandbox_url});
}

SecondLook Kit::run_child(const std::vector<std::string>& verb_arguments) {
  std::vector<std::string> arguments{"/proc/self/exe"};
  for (const std::string& argument : settings_.child_arguments()) arguments.push_back(argument);
  for (const std::string& argument : verb_arguments) arguments.push_back(argument);
  std::vector<char*> argv;
  for (std::string& argument : arguments) argv.push_back(argument.data());
  argv.push_back(nullptr);

  int pipe_ends[2];
  if (::pipe2(pipe_ends, O_CLOEXEC) != 0) {
    return SecondLook{false, "pipe: " + std::string(std::strerror(errno))};
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_ends[1], STDOUT_FILENO);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  pid_t child = -1;
  const int spawned = ::posix_spawn(&child, argv[0], &actions, &attributes, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  ::close(pipe_ends[1]);
  if (spawned != 0) {
    ::close(pipe_ends[0]);
    return SecondLook{false,
                      "could not start the second process: " + std::string(std::strerror(spawned))};
  }
  // A plugin whose verb hangs in the second process must not hang the kit: its answer is read
  // until a deadline (what the verbs may take, and a margin), then the process is killed.
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(
          settings_.ready_seconds + settings_.destroy_seconds + 30.0));
  std::string output;
  bool timed_out = false;
  char chunk[4096];
  while (output.size() <= (1u << 20)) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd readable{pipe_ends[0], POLLIN, 0};
    const int ready =
        ::poll(&readable, 1, static_cast<int>(std::min<long long>(left.count(), 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    if (ready == 0) continue;
    const ssize_t got = ::read(pipe_ends[0], chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    output.append(chunk, static_cast<std::size_t>(got));
  }
  ::close(pipe_ends[0]);
  if (timed_out) ::kill(child, SIGKILL);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  const std::size_t last_line = output.rfind('\n', output.size() > 1 ? output.size() - 2 : 0);
  SecondLook look =
      from_json_line(last_line == std::string::npos ? output : output.substr(last_line + 1));
  if (timed_out) {
    return SecondLook{false, "the second process did not answer within " +
                                 std::to_string(static_cast<int>(settings_.ready_seconds +
                                                                 settings_.destroy_seconds + 30)) +
                                 " s and was killed: a verb of the plugin hangs"};
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    look.ran = false;
    if (look.error.empty())
      look.error = "the second process failed (status " + std::to_string(status) + ")";
  }
  return look;
}

int child_main(const KitSettings& settings, const std::string& verb,
               const std::vector<std::string>& arguments) {
  SecondLook look;
  try {
    const std::shared_ptr<SandboxBackend> backend = load_backend(settings, settings.state_dir);
    if (verb == "look" && arguments.size() == 1) {
      const std::optional<SandboxInfo> found = backend->discover(arguments[0]);
      look.found = found.has_value();
      if (found) {
        look.info = *found;
        look.alive = backend->is_alive(*found);
      }
      for (const SandboxInfo& listed : backend->list_running()) {
        if (listed.sandbox_id == arguments[0]) look.listed = true;
      }
    } else if (verb == "destroy" && arguments.size() == 2) {
      SandboxInfo stale;
      stale.sandbox_id = arguments[0];
      stale.sandbox_url = arguments[1];
      backend->destroy(stale);
    } else {
      std::cerr << "conformance: unknown child verb " << verb << "\n";
      return 2;
    }
  } catch (const std::exception& e) {
    look.error = e.what();
  }
  std::cout << to_json_line(look) << std::endl;
  return 0;
}

void take_the_daemons_signal_mask() {
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGHUP);
  sigaddset(&blocked, SIGINT);
  sigaddset(&blocked, SIGTERM);
  ::pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

bool answers_ready(const SandboxInfo& info, double seconds) {
  SandboxRoute route;
  route.headers = info.request_headers;
  return wait_for_sandbox_ready(info.sandbox_url, seconds, {}, {}, route);
}

bool stops_answering(const SandboxInfo& info, double seconds) {
  SandboxRoute route;
  route.headers = info.request_headers;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(seconds));
  while (true) {
    if (!probe_sandbox_ready_once(info.sandbox_url, 2.0, route)) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

Kit& the_kit() {
  if (!g_kit) throw std::logic_error("the conformance kit was not set up");
  return *g_kit;
}
void set_the_kit(Kit* kit) {
  g_kit = kit;
}

}  // namespace sandboxd::conformance

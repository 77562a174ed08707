// sandboxd-provisioner: DeerFlow's provisioner HTTP API (design §10.8) in front of any sandbox
// backend plugin, so gateways on several hosts can share one container host. Gateways reach it
// with the remote_provisioner plugin (`provisioner_url`, `provisioner_api_key`).
#include <pthread.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <signal.h>

#include <atomic>
#include <boost/program_options.hpp>
#include <chrono>
#include <iostream>
#include <memory>
#include <string>
#include <thread>

#include "http_binding.hpp"
#include "provisioner_service.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/default_config.hpp"
#include "sandboxd/core/egress_host.hpp"
#include "sandboxd/core/logging.hpp"
#include "sandboxd/core/owner_id.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/core/relay.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/redact.hpp"
#include "service_config.hpp"

namespace po = boost::program_options;
using namespace sandboxd;
using namespace sandboxd::provisioner;

namespace {

constexpr const char* kUsage =
    "Usage: sandboxd-provisioner [--config FILE] [--listen HOST:PORT]\n"
    "                            [--mount-contract-version N] [--log-level LEVEL]\n"
    "                            [--check-config [--json]]\n"
    "\n"
    "Serves DeerFlow's provisioner API (/health, /api/capabilities, /api/sandboxes...) over\n"
    "a sandbox backend plugin (default local_docker:LocalContainerBackend on DOCKER_HOST,\n"
    "else /var/run/docker.sock, else the podman service scripts/setup.sh starts). Every\n"
    "/api/* request needs the X-API-Key header.\n"
    "\n";

constexpr const char* kDetails =
    "\nSettings come from a flag, else the config file's \"provisioner\" section, else these\n"
    "environment variables, else the default:\n"
    "  PROVISIONER_API_KEY      api_key            (empty: every /api/* request gets 401)\n"
    "  DEER_FLOW_HOST_BASE_DIR  host_base_dir      (/.deer-flow) root of skills views and\n"
    "                                              extra mounts\n"
    "  SANDBOXD_USER_DATA_LAYOUT user_data_layout  (per_user) per_user: a sandbox's\n"
    "                                              /mnt/user-data is {host_base_dir}/users/\n"
    "                                              {user}/threads/{thread}/user-data; legacy:\n"
    "                                              {threads_host_path}/{thread}/user-data,\n"
    "                                              shared by every user of a thread id\n"
    "  THREADS_HOST_PATH        threads_host_path  ({host_base_dir}/threads) legacy only\n"
    "  SANDBOX_IMAGE            image              (the backend's own default)\n"
    "  SANDBOX_CONTAINER_PORT   container_port     (8080, the only port backends serve)\n"
    "File-only settings: listen (127.0.0.1:8002), mount_contract_version (2; 0 answers as a\n"
    "legacy provisioner), backend_timeout_seconds (120), max_request_bytes (1048576),\n"
    "worker_threads (16), max_connections (1024), shutdown_grace_seconds (10), plugin_dirs,\n"
    "backend {\"use\": \"module:Class\", ...options}; relay_listen, relay_advertised_host,\n"
    "relay_state_dir ({host_base_dir}/.sandboxd-relay).\n"
    "\n"
    "With the backend's network mode isolated (backend.network.mode), sandboxes have no host\n"
    "address: a relay (on relay_listen, default the listen host and the port its last run\n"
    "used) is the only way in, and each answer's sandbox_url is the relay's, with the token to\n"
    "send in request_headers (X-Sandboxd-Relay-Token). With network mode allowlist as well,\n"
    "each sandbox's only way out is this service's egress proxy; the gateway decides refused\n"
    "names through /api/sandboxes/ID/egress[/events|/deny-pending|/decide] (docs/egress.md).\n"
    "\n"
    "Every client has deadlines (10 s for a request's line and headers, 30 s for its body and\n"
    "for taking the answer, 30 s between kept-alive requests); X-API-Key is checked as soon as\n"
    "the headers are in. Connections cost no thread; when no worker or thread is to be had the\n"
    "answer is 503 and the service keeps going.\n"
    "\n"
    "The operator's live view is at /ui: a browser logs in with the API key, kept in an\n"
    "HttpOnly cookie for /ui, and watches sandboxes come and go (docs/ui.md).\n"
    "\n"
    "Once listening it prints one line on stdout: \"listening on http://HOST:PORT\".\n"
    "SIGINT or SIGTERM stops it: it stops accepting, lets requests in flight finish within\n"
    "shutdown_grace_seconds, then closes what is left and exits.\n"
    "\n"
    "Exit codes: 0 stopped by a signal, 2 bad usage, 3 bad config or plugin, 4 cannot listen.\n"
    "\n"
    "Example:\n"
    "  PROVISIONER_API_KEY=k DEER_FLOW_HOST_BASE_DIR=/srv/deer-flow \\\n"
    "    sandboxd-provisioner --listen 127.0.0.1:8002\n";

int fail(int code, const std::string& message) {
  std::cerr << "sandboxd-provisioner: " << message << "\n";
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  ServiceFlags flags;
  std::string log_level_text = "info";
  po::options_description options("Options");
  options.add_options()("help,h", "show this help")("config", po::value<std::string>(),
                                                    "JSON file with a \"provisioner\" section")(
      "listen", po::value<std::string>(),
      "address to listen on (default 127.0.0.1:8002; port 0: "
      "a free one)")(
      "mount-contract-version", po::value<int>(),
      "2 (current) or 0 (answer as a legacy provisioner: no /api/capabilities, no identity "
      "fields)")("check-config",
                 "load the config and the backend plugin, print what was "
                 "resolved, and exit (0: usable)")(
      "json", "with --check-config: print one JSON object instead of lines")(
      "log-level", po::value<std::string>(&log_level_text),
      "debug, info, warning or error (default info)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, options), vm);
    po::notify(vm);
  } catch (const std::exception& error) {
    return fail(2, std::string(error.what()) + " (see --help)");
  }
  if (vm.count("help")) {
    std::cout << kUsage << options << kDetails;
    return 0;
  }
  if (vm.count("config")) flags.config_file = vm["config"].as<std::string>();
  if (vm.count("listen")) flags.listen = vm["listen"].as<std::string>();
  if (vm.count("mount-contract-version")) {
    flags.mount_contract_version = vm["mount-contract-version"].as<int>();
  }
  const std::optional<LogLevel> level = core::parse_log_level(log_level_text);
  if (!level)
    return fail(2, "--log-level '" + log_level_text +
                       "': expected debug, info, "
                       "warning or error");
  auto logger = std::make_shared<core::StderrLogger>(*level);

  ServiceConfig config;
  try {
    config = load_service_config(flags, process_environment());
  } catch (const ServiceConfigError& error) {
    return fail(3, error.what());
  }
  for (const std::string& note : config.notes) logger->warning(note);

  // Signals are taken by one thread with sigwait, so block them before any thread starts.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // The default backend finds the engine as sandboxctl does (DOCKER_HOST, the system socket,
  // else the podman service scripts/setup.sh starts) unless the section names a socket.
  if (config.backend_use == kDefaultBackendUse) {
    rapidjson::Document section;
    section.Parse(config.backend_json.c_str());  // written by load_service_config: an object
    if (section.IsObject() && !section.HasMember("socket")) {
      const core::EngineChoice engine = core::default_engine();
      section.AddMember("socket", rapidjson::Value(engine.socket.c_str(), section.GetAllocator()),
                        section.GetAllocator());
      rapidjson::StringBuffer buffer;
      rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
      section.Accept(writer);
      config.backend_json.assign(buffer.GetString(), buffer.GetSize());
      logger->info("Engine " + redacted_url(engine.socket) + ": " + engine.reason);
    }
  }

  // The egress proxy's settings (network mode allowlist) are read before the backend
  // is made: each secret's placeholder goes into the sandboxes' environment. The grants and
  // placeholders are kept beside the relay's secret.
  std::optional<core::EgressSettings> egress_settings;
  try {
    egress_settings = core::egress_settings_from(config.backend_json, "provisioner.backend");
    if (egress_settings) {
      core::ensure_private_dir(config.relay_state_dir);
      core::assign_secret_placeholders(*egress_settings, config.relay_state_dir);
      config.backend_json = core::with_secret_placeholders(config.backend_json, *egress_settings,
                                                           "provisioner.backend");
    }
  } catch (const std::exception& error) {
    return fail(
        3, (config.source_file.empty() ? std::string() : config.source_file + ": ") + error.what());
  }

  std::shared_ptr<SandboxBackend> backend;
  try {
    PluginContext context;
    context.config_json = config.backend_json;
    context.config_key_path = "provisioner.backend";
    context.config_file = config.source_file;
    context.owner_id = core::generate_owner_id();
    context.base_dir = config.roots.host_base_dir;
    context.logger = logger;
    context.clock = std::make_shared<SystemClock>();
    const core::PluginLoader loader(config.plugin_dirs);
    backend = loader.load_backend(
        config.backend_use, context,
        (config.source_file.empty() ? std::string("<default>") : config.source_file) +
            ": provisioner.backend.use");
  } catch (const std::exception& error) {
    return fail(3, error.what());
  }
  // The proxy listens inside each sandbox's own network namespace: a backend that makes none
  // would leave allowlist sandboxes with nobody to proxy for them.
  if (egress_settings && !core::makes_namespaced_sandboxes(*backend)) {
    return fail(3, (config.source_file.empty() ? std::string() : config.source_file + ": ") +
                       "provisioner.backend.network.mode: allowlist needs a backend that makes "
                       "each sandbox in its own network namespace (" +
                       config.backend_use + " does not); use local_docker, or mode open");
  }

  if (vm.count("check-config")) {
    const std::string config_shown =
        config.source_file.empty() ? "<none: flags, environment, defaults>" : config.source_file;
    const bool legacy = config.roots.user_data_layout == UserDataLayout::legacy;
    const std::string user_data =
        legacy ? config.roots.threads_host_path +
                     "/{thread}/user-data (legacy: shared by every user of a thread id)"
               : config.roots.host_base_dir + "/users/{user}/threads/{thread}/user-data";
    const std::string key_shown = config.api_key.empty() ? "none: every /api/* request gets 401"
                                                         : "set, from " + config.api_key_source;
    // How gateways reach the sandboxes: their published ports, or (no host address: network
    // mode isolated or allowlist, or open without publishing) this provisioner's relay only.
    const auto* policy = backend_capability<SandboxNetworkPolicy>(*backend);
    const std::string network_mode = policy ? policy->configured_network_policy() : "";
    const bool relayed = core::makes_namespaced_sandboxes(*backend);
    const std::string relay_at =
        (config.relay_host.empty() ? config.listen_host : config.relay_host) + ":" +
        (config.relay_port_given ? std::to_string(config.relay_port)
                                 : std::string("the port its last run used, else a free one"));
    const std::string reached =
        relayed ? "only through this provisioner's relay on " + relay_at +
                      " (each answer's sandbox_url is the relay's, with the token to send)"
                : "at each sandbox's published port (sandbox_url)";
    if (vm.count("json")) {
      rapidjson::StringBuffer buffer;
      rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
      auto put = [&](const char* key, const std::string& value) {
        write_json_member(w, key, value);
      };
      w.StartObject();
      put("config", config.source_file);
      put("listen", config.listen_host + ":" + std::to_string(config.listen_port));
      put("backend", config.backend_use);
      w.Key("mount_contract_version");
      w.Int(config.mount_contract_version);
      put("host_base_dir", config.roots.host_base_dir);
      put("threads_host_path", config.roots.threads_host_path);
      put("user_data_layout", legacy ? "legacy" : "per_user");
      put("user_data", user_data);
      w.Key("api_key_set");
      w.Bool(!config.api_key.empty());
      put("api_key_source", config.api_key.empty() ? "" : config.api_key_source);
      put("network_mode", network_mode.empty() ? "open" : network_mode);
      w.Key("relayed");
      w.Bool(relayed);
      put("sandboxes_reached", reached);
      w.EndObject();
      std::cout << buffer.GetString() << "\n";
      return 0;
    }
    std::cout << "config:          " << config_shown << "\nlisten:          " << config.listen_host
              << ":" << config.listen_port << "\nbackend:         " << config.backend_use
              << "\nmount contract:  " << config.mount_contract_version
              << (config.mount_contract_version == 0 ? " (legacy)" : "")
              << "\nstate:           " << config.roots.host_base_dir
              << "\nuser data:       " << user_data << "\napi key:         " << key_shown
              << "\nnetwork mode:    " << (network_mode.empty() ? "open" : network_mode)
              << "\nsandboxes:       reached " << reached << "\n";
    return 0;
  }

  ServiceSettings settings;
  settings.api_key = config.api_key;
  settings.roots = config.roots;
  settings.mount_contract_version = config.mount_contract_version;
  settings.backend_timeout_seconds = config.backend_timeout_seconds;
  // Pre-started slots, when the backend offers them and its options ask for some:
  // a gateway creating through this provisioner gets a new conversation's sandbox from one.
  if (auto* slots = backend_capability<PreStartedSlots>(*backend)) slots->start_slots();
  ProvisionerService service(settings, backend, logger);
  try {
    service.prepare_state_roots();
    service.start_usage_sampling();
  } catch (const std::exception& error) {
    return fail(3, error.what());
  }
  if (config.api_key.empty()) {
    logger->warning(
        "No API key (PROVISIONER_API_KEY or provisioner.api_key): every /api/* "
        "request will be refused with 401");
  }

  // The relay: sandboxes the backend makes without a host address are reached only
  // through it, with the token each answer carries in request_headers.
  std::unique_ptr<core::BackendRelayTargets> relay_targets;
  std::unique_ptr<core::Relay> relay;
  std::unique_ptr<core::EgressHost> egress;  // after relay_targets: it asks them
  if (core::makes_namespaced_sandboxes(*backend)) {
    core::RelayOptions relay_options;
    relay_options.host = config.relay_host;
    relay_options.port = config.relay_port;
    relay_options.advertised_host = config.relay_advertised_host;
    if ((relay_options.host == "0.0.0.0" || relay_options.host == "::") &&
        relay_options.advertised_host.empty()) {
      return fail(3, "provisioner.relay_advertised_host: required when the relay listens on " +
                         relay_options.host +
                         " (sandbox URLs must name a host the gateway reaches)");
    }
    relay_targets =
        std::make_unique<core::BackendRelayTargets>(backend, std::make_shared<SystemClock>());
    try {
      core::ensure_private_dir(config.relay_state_dir);
      relay = core::start_relay_in(
          config.relay_state_dir,
          [targets = relay_targets.get()](const std::string& id) { return targets->lookup(id); },
          relay_options, logger, /*reuse_port=*/!config.relay_port_given);
    } catch (const std::exception& error) {
      return fail(4, std::string("relay: ") + error.what());
    }
    service.set_relay(relay.get(), relay_targets.get());
    // The egress proxy, for network mode allowlist: each sandbox's only way out. Its
    // sandboxes are the backend's running ones; their namespaces are the relay's endpoints.
    if (egress_settings) {
      core::EgressSandboxes sandboxes;
      sandboxes.tracked = [backend] {
        std::vector<core::EgressSandboxes::Tracked> tracked;
        for (SandboxInfo& info : backend->list_running()) tracked.push_back({std::move(info)});
        return tracked;
      };
      sandboxes.endpoint = [targets = relay_targets.get()](const std::string& id) {
        return targets->lookup(id);
      };
      egress = std::make_unique<core::EgressHost>(std::move(sandboxes), std::move(*egress_settings),
                                                  config.relay_state_dir, logger,
                                                  std::make_shared<SystemClock>());
      try {
        egress->start();
      } catch (const std::exception& error) {
        return fail(4, std::string("egress proxy: ") + error.what());
      }
      service.set_egress(egress.get(), egress.get());
    }
    logger->info("Relay at " + relay->base_url() +
                 ": the only way into this backend's sandboxes, which have no host address "
                 "(secret and port in " +
                 config.relay_state_dir + ")");
  }

  HttpSettings http;
  http.max_request_bytes = config.max_request_bytes;
  http.worker_threads = static_cast<std::size_t>(config.worker_threads);
  http.max_connections = static_cast<std::size_t>(config.max_connections);
  http.shutdown_grace_seconds = config.shutdown_grace_seconds;
  ProvisionerHttpServer server(service, logger, http);
  int port = 0;
  try {
    port = server.bind(config.listen_host, config.listen_port);
  } catch (const std::exception& error) {
    return fail(4, error.what());
  }
  if (config.listen_host != "127.0.0.1" && config.listen_host != "::1") {
    logger->warning("Listening on " + config.listen_host +
                    ", beyond this host: requests and the API key travel as plain HTTP");
  }
  logger->info("sandboxd-provisioner: backend " + config.backend_use + ", mount contract " +
               std::to_string(config.mount_contract_version) + ", state " +
               config.roots.host_base_dir + ", user data " +
               (config.roots.user_data_layout == UserDataLayout::legacy
                    ? config.roots.threads_host_path + "/{thread}/user-data (legacy layout)"
                    : config.roots.host_base_dir + "/users/{user}/threads/{thread}/user-data") +
               ", API key from " + config.api_key_source);

  std::atomic<bool> stopped{false};
  std::thread signal_watcher([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    if (stopped.load()) return;
    logger->info(std::string("Stopping on ") + (signal == SIGINT ? "SIGINT" : "SIGTERM") +
                 " after the requests in flight");
    server.stop();  // taken even before run() starts serving
  });
  const std::string shown_host = config.listen_host.find(':') != std::string::npos
                                     ? "[" + config.listen_host + "]"
                                     : config.listen_host;
  std::cout << "listening on http://" << shown_host << ":" << port << std::endl;
  logger->info("operator page at http://" + shown_host + ":" + std::to_string(port) +
               "/ui (log in with the API key; docs/ui.md)");
  const std::size_t handlers_left = server.run();
  stopped.store(true);
  if (egress) egress->stop();  // no new tunnel; the sandboxes keep running
  if (signal_watcher.joinable()) {
    pthread_kill(signal_watcher.native_handle(), SIGTERM);  // wakes sigwait if still waiting
    signal_watcher.join();
  }
  // Backend calls that outlived their requests (504s) get the grace period too; one stuck in
  // a backend that never returns must not keep the process alive, and must not have the
  // backend destroyed under it: then the process leaves as it is.
  const int calls_left = service.drain_until(
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<long long>(config.shutdown_grace_seconds * 1000)));
  if (handlers_left > 0 || calls_left > 0) {
    logger->warning("sandboxd-provisioner stopped with " + std::to_string(calls_left) +
                    " backend calls still running; leaving without waiting for them");
    std::cout.flush();
    std::cerr.flush();
    std::_Exit(0);
  }
  logger->info("sandboxd-provisioner stopped");
  return 0;
}

// What sandboxd-provisioner runs with: its own JSON section, design §10.7's environment variables
// where they make sense without Kubernetes, and command-line flags, resolved once at start-up.
//
//   {"provisioner": {
//      "listen": "127.0.0.1:8002",
//      "api_key": "…",                       // else PROVISIONER_API_KEY
//      "host_base_dir": "/.deer-flow",       // else DEER_FLOW_HOST_BASE_DIR
//      "user_data_layout": "per_user",       // else SANDBOXD_USER_DATA_LAYOUT; or "legacy"
//      "threads_host_path": "/.deer-flow/threads",  // else THREADS_HOST_PATH (legacy only)
//      "image": "…",                          // else SANDBOX_IMAGE; the backend's "image"
//      "container_port": 8080,               // else SANDBOX_CONTAINER_PORT
//      "mount_contract_version": 2,          // 0: answer as a legacy provisioner
//      "backend_timeout_seconds": 120,
//      "max_request_bytes": 1048576,
//      "worker_threads": 16,                 // requests handled at once
//      "max_connections": 1024,              // open at once (no thread each)
//      "shutdown_grace_seconds": 10,         // for requests in flight after SIGTERM
//      "plugin_dirs": [],
//      "relay_listen": "127.0.0.1:0",        // the relay (network mode isolated); default: the
//                                            // listen host and the port the last run used
//      "relay_advertised_host": "",          // the host sandbox URLs name (default: relay host)
//      "relay_state_dir": "/.deer-flow/.sandboxd-relay",  // its secret and port (0700)
//      "backend": {"use": "local_docker:LocalContainerBackend", …its options}}}
//
// Precedence: a flag, then the file, then the environment, then the default. Every error
// names the value and where it came from ("provisioner.json: provisioner.listen: …",
// "SANDBOX_CONTAINER_PORT: …"); the API key is never shown.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "extra_mount_validation.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxd::provisioner {

class ServiceConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr const char* kDefaultBackendUse = "local_docker:LocalContainerBackend";
inline constexpr int kDefaultListenPort = 8002;

struct ServiceConfig {
  std::string listen_host = "127.0.0.1";
  int listen_port = kDefaultListenPort;
  std::string api_key;         // empty: every /api/* request is refused
  std::string api_key_source;  // where the key came from, for the start-up line
  StateRoots roots;
  int container_port = 8080;
  int mount_contract_version = 2;  // 0: legacy (no capabilities route, no identity fields)
  double backend_timeout_seconds = 120.0;
  std::size_t max_request_bytes = 1024 * 1024;
  int worker_threads = 16;
  int max_connections = 1024;
  double shutdown_grace_seconds = 10.0;
  std::vector<std::string> plugin_dirs;
  std::string relay_host;  // default: listen_host
  int relay_port = 0;
  bool relay_port_given = false;  // relay_listen set: its port, never the remembered one
  std::string relay_advertised_host;
  std::string relay_state_dir;  // default: {host_base_dir}/.sandboxd-relay
  std::string backend_use = kDefaultBackendUse;
  std::string backend_json = "{}";  // the backend section as a JSON object ("use" included)
  std::string backend_key_path = "provisioner.backend";
  std::string source_file;         // "" without --config
  std::vector<std::string> notes;  // unread keys and other start-up warnings
};

struct ServiceFlags {
  std::optional<std::string> config_file;
  std::optional<std::string> listen;
  std::optional<int> mount_contract_version;
};

using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvironmentLookup process_environment();

// Throws ServiceConfigError with one sentence naming the bad value's source.
ServiceConfig load_service_config(const ServiceFlags& flags, const EnvironmentLookup& env);

// "HOST:PORT" (IPv4 dotted or "localhost"); throws ServiceConfigError naming `where`.
void parse_listen(const std::string& text, const std::string& where, std::string& host, int& port);

}  // namespace sandboxd::provisioner

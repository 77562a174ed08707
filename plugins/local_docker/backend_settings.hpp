// local_docker's settings: every option of the backend section, read and checked once at
// construction (plugins/local_docker/README.md lists them), with DeerFlow's environment
// variables as the fallback of the knobs DeerFlow has them for (DEER_FLOW_SANDBOX_MEMORY,
// _CPUS, _PIDS_LIMIT, _SECCOMP_PROFILE, _CONTAINER_USER, _NETWORK, _IMAGE_STARTUP_CAPS,
// _BIND_HOST, _HOST). An error names the option's key path, or the variable, and the value.
//
// The defaults are at least as strict as DeerFlow's local Docker path (issue 32 D): every
// capability dropped but CHOWN, DAC_OVERRIDE, FOWNER, SETGID and SETUID, no-new-privileges,
// 2 GiB of memory, 2 CPUs, 512 processes, the engine's default seccomp profile; `host`,
// `container:*` and `none` networks are refused as DeerFlow refuses them.
//
// Immutable after construction; shared read-only by every thread of the backend.
#pragma once

#include <filesystem>
#include <map>
#include <sandboxd/logger.hpp>
#include <sandboxd/plugin.hpp>
#include <sandboxd/types.hpp>
#include <string>
#include <utility>
#include <vector>

#include "engine_client.hpp"
#include "sandbox_network.hpp"

namespace sandboxd::local_docker {

struct Settings {
  EngineEndpoint endpoint;
  std::string socket_source;  // which setting chose the socket, for messages
  std::string image;
  std::string prefix;
  int base_port = 0;
  std::vector<Mount> mounts;
  std::map<std::string, std::string> environment;
  long long memory_bytes = 0;  // 0: no limit
  double cpus = 0;             // 0: no limit
  long long pids_limit = 0;    // 0: no limit
  // The OCI runtime every container is made with ("runsc": gVisor); "": the engine's default.
  // Checked against the engine's runtimes before the first create and read back from each
  // container (docs/runtimes.md).
  std::string runtime;
  long long stop_timeout_seconds = 10;
  // Engine security options: no-new-privileges unless turned off, the seccomp profile's JSON
  // when one is given (the Engine API takes the profile itself, not its path), then the
  // operator's own.
  std::vector<std::string> security_opt;
  std::vector<std::string> cap_drop;
  std::vector<std::string> cap_add;
  std::string user;  // Config.User ("" : the image's)
  // The network policy (DeerFlow's `sandbox.network`) and, in `open` mode, the engine network
  // the sandboxes join: the operator's (`network` as a string, DEER_FLOW_SANDBOX_NETWORK), or
  // ours, `{prefix}-sandboxes`, made on first use (sandbox_network.hpp), or with isolation off
  // the engine's default bridge ("").
  NetworkPolicy policy;
  std::string network;
  bool own_network = true;
  bool init = true;
  std::string bind_host;     // as design §9.4 renders it ("[::1]" for IPv6 loopback)
  std::string sandbox_host;  // host part of sandbox URLs
  double request_timeout_seconds = 30;
  double pull_timeout_seconds = 600;
  std::size_t warm_slots = 0;
  std::filesystem::path slots_dir;  // normal form; where claimed slots' records live
  std::vector<Mount> slot_mounts;
  double slot_ready_timeout_seconds = 60;
  double slot_sweep_seconds = 60;

  // What check-config shows of the settings a sandbox runs with, each with where it came
  // from ("default", "sandbox.backend.memory", "environment variable DEER_FLOW_SANDBOX_…").
  // Never a secret: environment values, a seccomp profile's text are not in it.
  std::vector<std::pair<std::string, std::string>> effective;
};

// Reads and checks the backend section of `context`; unknown keys are warned about through
// `logger`. Throws PluginConfigError naming the key path (or the environment variable).
Settings read_settings(const PluginContext& context, Logger& logger);

// DeerFlow's refusal of a network that would void the sandbox's port bind or leave it
// unreachable (`host`, `container:NAME`, `none`, also in the `name=` long form), worded as
// DeerFlow words it with `shown` naming where the value came from; "" for a usable network.
std::string refused_network(const std::string& network, const std::string& shown);

}  // namespace sandboxd::local_docker

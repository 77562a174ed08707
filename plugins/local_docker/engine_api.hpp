// The Engine API operations local_docker uses, one function each (moby's `client/` shape:
// `container_create.go`, `container_start.go`, …): a typed request in, the engine's answer
// read through engine_answers.hpp out. No policy lives here (which port to try, when to adopt,
// what a refusal means for a sandbox): that is the backend's. What every function does with an
// answer:
//  - a transport failure (no HTTP answer) throws EngineUnreachableError or EngineTimeoutError
//    (engine_client.hpp);
//  - an answer is returned as an Outcome: the status, and the engine's message when it refused;
//    the functions whose answers have one meaning for "already so" (start 304, stop 304,
//    remove 404) say so in their result.
// Tested against recorded answers of Docker 20.10 and podman 4.3
// (tests/local_docker/engine_api_test.cpp).
#pragma once

#include <map>
#include <optional>
#include <sandboxd/capabilities.hpp>
#include <sandboxd/types.hpp>
#include <string>
#include <vector>

#include "engine_answers.hpp"
#include "engine_client.hpp"

namespace sandboxd::local_docker {

// One bind mount of a container; `propagation` "" leaves the engine's default (rprivate).
struct BindMount {
  std::string source;
  std::string target;
  bool read_only = false;
  std::string propagation;  // "rslave" for a pre-started slot's mount points
};

// POST /containers/create's body, as far as local_docker sets it.
struct ContainerCreateBody {
  std::string image;
  std::string user;                           // Config.User; "": the image's
  std::vector<std::string> env;               // "KEY=value"
  std::map<std::string, std::string> labels;  // immutable once created
  std::string exposed_port;                   // "8080/tcp"
  // HostConfig
  bool publish = true;          // a PortBindings entry for exposed_port
  std::string publish_host_ip;  // "127.0.0.1", "::1"
  int publish_host_port = 0;    // 0: the engine picks
  bool auto_remove = true;
  std::string network_mode;  // "": the engine's default bridge; "none"; a network name
  std::vector<std::string> security_opt;
  std::vector<std::string> cap_drop;
  std::vector<std::string> cap_add;
  bool init = true;
  std::string runtime;         // HostConfig.Runtime; "": the engine's default
  long long memory_bytes = 0;  // 0: unset
  long long nano_cpus = 0;     // 0: unset
  long long pids_limit = 0;    // <= 0: unset
  std::vector<BindMount> mounts;
};

// The body as JSON, keys in the order the Engine API documents them.
std::string to_json(const ContainerCreateBody& body);

// What the engine answered to a call whose success has no body worth reading.
struct Outcome {
  long status = 0;
  std::string message;  // the engine's error text when it refused
  bool ok() const { return status >= 200 && status < 300; }
};

// POST /networks/create's body, as far as local_docker sets it.
struct NetworkCreateBody {
  std::string name;
  std::string driver = "bridge";
  bool internal = false;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> options;  // driver options ("isolate": "true", …)
};

// A network as GET /networks/{id} describes it.
struct NetworkState {
  std::string id;
  std::string name;
  bool internal = false;
  std::string bridge;     // the host's bridge interface when the engine says (podman, Docker)
  double created_at = 0;  // epoch seconds; 0 when the engine did not say
  // The ids of the containers on it, as GET /networks/{id} names them (a listing leaves this
  // empty on Docker).
  std::vector<std::string> containers;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> options;
};

class EngineApi {
 public:
  // `timeout_seconds` bounds every call but the ones that take their own.
  EngineApi(EngineClient& client, double timeout_seconds)
      : client_(client), timeout_(timeout_seconds) {}

  EngineClient& client() { return client_; }

  // POST /containers/create?name=NAME. `id` is set on 201.
  struct Created {
    Outcome outcome;
    std::string id;
  };
  Created create_container(const std::string& name, const ContainerCreateBody& body);

  // POST /containers/{id}/start. `already_running`: 304.
  struct Started {
    Outcome outcome;
    bool already_running = false;
    bool ok() const { return outcome.ok() || already_running; }
  };
  Started start_container(const std::string& id);

  // POST /containers/{id}/stop?t=SECONDS, bounded by the grace plus `extra_seconds`.
  Outcome stop_container(const std::string& id, long long grace_seconds, double extra_seconds);

  // DELETE /containers/{id}?force=true&v=true. `gone`: the engine has no such container.
  struct Removed {
    Outcome outcome;
    bool gone = false;
    bool ok() const { return outcome.ok() || gone; }
  };
  Removed remove_container(const std::string& id);

  // GET /containers/{id}/json: nullopt when the engine says there is no such container;
  // throws std::runtime_error for an answer that is neither.
  std::optional<ContainerState> inspect_container(const std::string& id_or_name,
                                                  double timeout_seconds);
  // The same answer's State.Pid (0: not running), for reaching the container's namespaces.
  int container_pid(const std::string& id_or_name, double timeout_seconds);

  // GET /containers/{id}/json?size=true: its writable layer's bytes (SizeRw; both engines
  // walk the layer for it). nullopt when the answer has none; throws for a non-200.
  std::optional<std::uint64_t> container_writable_bytes(const std::string& id_or_name,
                                                        double timeout_seconds);

  // GET /containers/{id}/stats?stream=false&one-shot=true: one reading, no wait for a second
  // (the caller derives CPU rates from two). nullopt when there is no such container; throws
  // std::runtime_error for another failure.
  std::optional<SandboxUsage::Reading> container_stats(const std::string& id_or_name,
                                                       double timeout_seconds);

  // GET /containers/json?[all=true&]filters=… with one filter (`key`: `value`).
  Outcome list_containers(const std::string& filter_key, const std::string& filter_value, bool all,
                          double timeout_seconds, std::string* body);

  Outcome pause_container(const std::string& id, double timeout_seconds);
  Outcome unpause_container(const std::string& id, double timeout_seconds);
  // POST /containers/{id}/rename?name=NAME.
  Outcome rename_container(const std::string& id, const std::string& name);
  // GET /containers/{id}/archive?path=PATH: 200 when it exists, 404 when not.
  Outcome archive_head(const std::string& id, const std::string& path);
  // POST /images/create?fromImage=REPO&tag=TAG: the progress stream goes to `sink`.
  HttpResponse pull_image(const std::string& repository, const std::string& tag,
                          double timeout_seconds, const BodySink& sink);
  // GET /info: the engine's description (SecurityOptions, …).
  Outcome info(std::string* body);

  // POST /networks/create. `id` set on 201.
  struct NetworkCreated {
    Outcome outcome;
    std::string id;
  };
  NetworkCreated create_network(const NetworkCreateBody& body);
  // GET /networks/{id}: nullopt when there is no such network.
  std::optional<NetworkState> inspect_network(const std::string& id_or_name);
  // DELETE /networks/{id}. `gone`: no such network.
  Removed remove_network(const std::string& id_or_name);
  // GET /networks?filters={"label":[LABEL]}.
  std::vector<NetworkState> list_networks(const std::string& label);

 private:
  Outcome outcome_of(const HttpResponse& response) const;

  EngineClient& client_;
  const double timeout_;
};

// Reading answers, for the functions above and their tests.
std::optional<NetworkState> parse_network_answer(const std::string& body);
std::vector<NetworkState> parse_network_listing(const std::string& body);
int parse_container_pid(const std::string& inspect_body);
// An inspect answer's SizeRw (asked with size=true); nullopt when absent or not a byte count.
std::optional<std::uint64_t> parse_writable_bytes(const std::string& inspect_body);
// Docker's and podman's stats answer: cpu_stats.cpu_usage.total_usage and system_cpu_usage (ns),
// online_cpus, memory_stats.usage less the inactive page cache (cgroup v1 total_inactive_file,
// v2 inactive_file; what `docker stats` shows), memory_stats.limit, pids_stats.current. A figure
// missing or of another type stays empty; a body that is not a JSON object throws.
SandboxUsage::Reading parse_container_stats(const std::string& body);

}  // namespace sandboxd::local_docker

// What the local_docker plugin reads from the engine's JSON answers: a container as inspect
// describes it, the running containers of a listing, the id of a fresh container, a pull
// progress line. Pure functions over the answer's text, so that unit tests and the
// `engine_answers` fuzz target reach them without an engine. Every reader tolerates any body:
// what it cannot read is "absent" or a std::runtime_error, never a crash.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace sandboxd::local_docker {

inline constexpr const char* kContainerPort = "8080/tcp";

// One container as GET /containers/{name}/json (or a listing entry) describes it.
struct ContainerState {
  std::string id;
  std::string name;
  std::string status;  // "created", "running", "exited", ...
  bool running = false;
  bool paused = false;  // frozen by /pause (Docker keeps running true, podman may not)
  int host_port = 0;    // 0: not published (yet)
  double created_at = 0.0;
  std::map<std::string, std::string> labels;
};

// "0".."65535" as a number; anything else (empty, signs, spaces, too long) is 0.
int parse_port_text(const std::string& text);

// An inspect answer; nullopt when it is not a JSON object carrying an Id.
std::optional<ContainerState> parse_inspect_answer(const std::string& body);

// GET /containers/json?all=true: every container named `{name_prefix}{…}` whatever its state
// (running: running or paused), with name, labels and host port. Throws like the one below.
std::vector<ContainerState> parse_listing(const std::string& body, const std::string& name_prefix);

// GET /containers/json: the running containers named `{name_prefix}{sandbox id}` (the engine's
// name filter is a substring match; other prefixes are dropped), with `name` and `host_port`
// (the public port of 8080/tcp) filled in. Throws std::runtime_error when the body is not a
// JSON array.
std::vector<ContainerState> parse_running_listing(const std::string& body,
                                                  const std::string& name_prefix);

// The `Id` of a POST /containers/create answer; "" when there is none.
std::string created_container_id(const std::string& body);

// One line of POST /images/create's progress stream.
struct PullProgress {
  std::string error;   // the stream's own error (error or errorDetail.message), if any
  std::string status;  // e.g. "Downloading"
  std::string layer;   // the layer id the status is about, if any
};
// nullopt for a line that is not a JSON object (blank, partial, garbage).
std::optional<PullProgress> parse_pull_progress_line(const std::string& line);

}  // namespace sandboxd::local_docker

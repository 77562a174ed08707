// Pure helpers of the local container backend: no I/O, no engine. Kept apart so that unit
// tests can check them without a container engine (tests/local_docker/support_test.cpp).
#pragma once

#include <map>
#include <optional>
#include <sandboxd/types.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::local_docker {

// Where the engine's REST API listens: a unix socket, or plain HTTP on host:port.
struct EngineEndpoint {
  std::string unix_socket;  // non-empty for unix sockets
  std::string base_url;     // "http://localhost" for unix sockets, else "http://host:port"
  std::string display;      // what messages name: "unix:///run/docker.sock", "tcp://…"

  // Accepts "unix:///path", a bare absolute path, and "tcp://host:port" (also http://).
  // Throws std::invalid_argument naming the problem.
  static EngineEndpoint parse(const std::string& spec);
};

// "2g", "512m", "1024k", "1073741824", "1.5g" (case-insensitive, optional trailing "b").
// Throws std::invalid_argument. 0 means "no limit".
long long parse_memory_bytes(const std::string& text);

// Docker/RFC 3339 timestamps ("2026-04-08T01:22:50.123456789Z", offsets allowed) to epoch
// seconds; empty or unparsable → 0.0 (design §9.9).
double parse_docker_timestamp(const std::string& text);

// design §9.4: the host address `-p` binds to. `reason` receives the debug-log wording.
std::string resolve_bind_host(const std::optional<std::string>& explicit_bind_host,
                              const std::string& sandbox_host, std::string* reason);

// "http://{host}:{port}", with IPv6 literals bracketed.
std::string sandbox_url(const std::string& host, int port);

// The engine refused a host port because something else holds it (design §9.2).
bool is_port_conflict_message(const std::string& message);

// The engine refused a container name that is taken. Docker answers 409 "Conflict. The container
// name … is already in use by container …"; podman 4.3 answers 500 "… the container name "x"
// is already in use by <id> … that name is already in use".
bool is_name_conflict(long status, const std::string& message);

// design §9.6 "does not exist": 404, or a message saying "no such container" / "no such object",
// or "not found" together with the container's name, "container" or "object". podman 4.3
// answers an inspect racing an auto-removal with HTTP 500 "container … does not exist in
// database: no such container", which this counts as gone too.
bool is_no_such_container(long status, const std::string& message, const std::string& name);

// A create that failed because the image is not present locally.
bool is_missing_image(long status, const std::string& message);

// What to do about an engine refusal a user can fix on the host, appended to its message: a
// missing init binary (podman's catatonit, Docker's docker-init) names the binary, the Debian
// package and the `init: false` alternative; Docker's missing bind source points at the
// mounts option. "" when the message is not one of those.
std::string engine_failure_hint(const std::string& message);

// `text` without leading and trailing white space.
std::string trimmed(std::string text);

// Mounts rendered for logs: "/src:/dst, /ro:/in:ro", or "none".
std::string render_mounts(const std::vector<Mount>& mounts);

// Environment rendered for logs: "A=<redacted> B=<redacted>"; values never appear.
std::string redacted_environment(const std::map<std::string, std::string>& environment);

// Docker container names: [a-zA-Z0-9][a-zA-Z0-9_.-]*.
bool is_valid_container_name(std::string_view name);

// Splits an image reference into (repository, tag-or-digest) for POST /images/create.
// "busybox" → ("busybox", "latest"); "host:5000/a/b:1" → ("host:5000/a/b", "1");
// "a@sha256:…" → ("a", "sha256:…").
std::pair<std::string, std::string> split_image_reference(const std::string& image);

// Percent-encodes everything outside RFC 3986 unreserved characters.
std::string url_encode(std::string_view text);

// "1.41" → {1, 41}; malformed → nullopt.
using ApiVersion = std::pair<int, int>;  // (major, minor)
std::optional<ApiVersion> parse_api_version(const std::string& text);
std::string format_api_version(ApiVersion version);  // "1.41"

// What an engine says it speaks; min is unknown when it did not say.
struct EngineApiRange {
  std::optional<ApiVersion> min;
  std::optional<ApiVersion> max;
};
struct ApiRange {
  ApiVersion min;
  ApiVersion max;
};
// The newest version in both ranges (an unknown engine minimum admits anything up to its
// maximum); nothing when they do not overlap.
std::optional<ApiVersion> negotiate_api_version(const EngineApiRange& engine, const ApiRange& ours);
// "the engine speaks 1.44 to 1.52, this plugin 1.30 to 1.47" and which side must move.
std::string describe_api_mismatch(const EngineApiRange& engine, const ApiRange& ours);

// Eight random hex characters (std::random_device): names that must not collide between
// hosts and runs (a slot pool's token, a snapshot image's tag).
std::string random_token();

}  // namespace sandboxd::local_docker

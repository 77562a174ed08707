#include "sandboxd/core/default_config.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>
#include <sys/stat.h>

#include <cstdlib>

#include "sandboxd/core/paths.hpp"
#include "sandboxd/json.hpp"

namespace sandboxd::core {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

bool is_socket(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// {"sandbox": {"backend": {...}, "ownership": {...}, "base_dir": ...}} as parse_config reads it.
std::string default_config_text(const std::string& socket, const std::string& image,
                                const std::filesystem::path& state) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  const auto pair = [&w](const char* key, const std::string& value) {
    write_json_member(w, key, value);
  };
  w.StartObject();
  w.Key("sandbox");
  w.StartObject();
  w.Key("backend");
  w.StartObject();
  pair("use", kLocalDockerUse);
  pair("socket", socket);
  pair("image", image);
  w.EndObject();
  w.Key("ownership");
  w.StartObject();
  pair("use", kSqliteOwnershipUse);
  pair("path", (state / "leases.db").string());
  w.EndObject();
  pair("base_dir", state.string());
  w.EndObject();
  w.EndObject();
  return buffer.GetString();
}

}  // namespace

std::filesystem::path default_state_dir() {
  const std::string xdg = env("XDG_STATE_HOME");
  if (!xdg.empty()) {
    if (xdg.front() != '/') {
      throw ConfigError("XDG_STATE_HOME must be an absolute path, got '" + xdg +
                        "' (it chooses sandboxctl's state directory)");
    }
    return std::filesystem::path(xdg) / "sandboxd";
  }
  const std::string home = env("HOME");
  if (home.empty() || home.front() != '/') {
    throw ConfigError(
        "neither XDG_STATE_HOME nor an absolute HOME is set, so sandboxctl has no state "
        "directory; set one of them or pass --config FILE");
  }
  return std::filesystem::path(home) / ".local" / "state" / "sandboxd";
}

EngineChoice default_engine() {
  if (const std::string docker_host = env("DOCKER_HOST"); !docker_host.empty()) {
    return {docker_host, "DOCKER_HOST is set"};
  }
  const std::string docker_socket = "/var/run/docker.sock";
  if (is_socket(docker_socket)) return {"unix://" + docker_socket, docker_socket + " exists"};
  std::string engine_dir = env("SANDBOXD_ENGINE_DIR");
  if (engine_dir.empty()) engine_dir = "/tmp/sandboxd-test-engine";
  const std::string podman_socket = engine_dir + "/podman.sock";
  if (is_socket(podman_socket)) {
    return {"unix://" + podman_socket, "no DOCKER_HOST and no " + docker_socket +
                                           "; the podman service of " +
                                           "scripts/test_engine.sh answers there"};
  }
  return {"unix://" + docker_socket, "no DOCKER_HOST, no " + docker_socket + " and no " +
                                         podman_socket +
                                         " (start an engine: bash scripts/test_engine.sh start)"};
}

SandboxConfig default_config() {
  const std::filesystem::path state = default_state_dir();
  try {
    ensure_private_dir(state);  // leases, the registry and thread data live here
  } catch (const std::filesystem::filesystem_error& e) {
    throw ConfigError("cannot create sandboxctl's state directory " + state.string() + ": " +
                      e.code().message() + " (set XDG_STATE_HOME or pass --config FILE)");
  }
  const EngineChoice engine = default_engine();
  std::string image = env("SANDBOXD_IMAGE");
  const bool image_from_env = !image.empty();
  if (!image_from_env) image = kLocalTestImage;
  const std::string text = default_config_text(engine.socket, image, state);
  SandboxConfig config = parse_config(text, kDefaultConfigSource);
  config.mapping_notes.push_back("no --config: the built-in default, state directory " +
                                 state.string() + " ($XDG_STATE_HOME/sandboxd, else " +
                                 "~/.local/state/sandboxd)");
  config.mapping_notes.push_back("engine " + engine.socket + " because " + engine.reason);
  config.mapping_notes.push_back(
      "image " + image +
      (image_from_env ? " from SANDBOXD_IMAGE"
                      : " (the offline test image; set SANDBOXD_IMAGE or use --config for "
                        "production, e.g. " +
                            std::string(kDeerFlowSandboxImage) + ")"));
  return config;
}

}  // namespace sandboxd::core

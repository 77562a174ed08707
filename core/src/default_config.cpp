#include "sandboxd/core/default_config.hpp"

#include <sys/stat.h>

#include <cstdlib>

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

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
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
  std::error_code ec;
  if (!std::filesystem::is_directory(state, ec)) {
    std::filesystem::create_directories(state, ec);
    if (ec) {
      throw ConfigError("cannot create sandboxctl's state directory " + state.string() + ": " +
                        ec.message() + " (set XDG_STATE_HOME or pass --config FILE)");
    }
    ::chmod(state.c_str(), 0700);  // leases, the registry and thread data live here
  }
  const EngineChoice engine = default_engine();
  std::string image = env("SANDBOXD_IMAGE");
  const bool image_from_env = !image.empty();
  if (!image_from_env) image = kLocalTestImage;
  const std::string text =
      "{\"sandbox\": {"
      "\"backend\": {\"use\": " +
      json_string(kLocalDockerUse) + ", \"socket\": " + json_string(engine.socket) +
      ", \"image\": " + json_string(image) +
      "}, \"ownership\": {\"use\": " + json_string(kSqliteOwnershipUse) +
      ", \"path\": " + json_string((state / "leases.db").string()) +
      "}, \"base_dir\": " + json_string(state.string()) + "}}";
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

// The built-in configuration `sandboxctl` uses without --config, so that it works on a fresh
// machine right after scripts/setup.sh: SQLite leases in a per-user state directory, the local
// container engine, and an image that exists there after set-up.
#pragma once

#include <filesystem>
#include <string>

#include "sandboxd/core/config.hpp"

namespace sandboxd::core {

inline constexpr const char* kDefaultConfigSource = "<built-in default>";
// Built offline by scripts/test_engine.sh (busybox httpd answering /v1/sandbox on 8080).
inline constexpr const char* kLocalTestImage = "localhost/sandboxd-test-sandbox:latest";
// The production choice: DeerFlow's all-in-one sandbox image (local_docker's own default).
inline constexpr const char* kDeerFlowSandboxImage =
    "enterprise-public-cn-beijing.cr.volces.com/vefaas-public/all-in-one-sandbox:latest";

// $XDG_STATE_HOME/sandboxd, else $HOME/.local/state/sandboxd. Throws ConfigError when neither
// variable is set (or either is set but not absolute).
std::filesystem::path default_state_dir();

// Where the built-in config finds the container engine, and why:
// DOCKER_HOST when set; else /var/run/docker.sock when it is a socket; else the podman service
// scripts/test_engine.sh runs ($SANDBOXD_ENGINE_DIR/podman.sock, default
// /tmp/sandboxd-test-engine/podman.sock) when it is a socket; else /var/run/docker.sock.
struct EngineChoice {
  std::string socket;  // "unix:///…" or DOCKER_HOST's value
  std::string reason;  // a sentence for check-config
};
EngineChoice default_engine();

// The built-in `sandbox` section (as parse_config would return it, source kDefaultConfigSource):
// backend local_docker on default_engine() with image $SANDBOXD_IMAGE or kLocalTestImage,
// ownership_sqlite at {state dir}/leases.db, base_dir = the state dir. mapping_notes say what was
// chosen and why. Creates the state directory (mode 0700) when it does not exist yet.
SandboxConfig default_config();

}  // namespace sandboxd::core

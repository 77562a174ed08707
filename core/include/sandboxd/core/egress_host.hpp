// What a long-running host (sandboxctl serve, sandboxd-provisioner) runs for network mode
// `allowlist` (docs/egress.md): the egress proxy, with each allowlist sandbox's listener made in
// its network namespace and attached when the sandbox is handed out (and again after a restart
// of the host, and in the new namespace after a restart of the sandbox's container, by the sync
// pass), closed when the sandbox goes; the gateway's grants kept in the state directory
// (`egress-grants.json`, 0600) so that a restart keeps them, dropped with their sandbox, and
// bound to its instance (a re-created sandbox of the same conversation starts with none).
//
// Lock story: the proxy has its own (egress_proxy.hpp). `mutex_` guards the sync thread's stop
// flag only. `save_mutex_` is held across one save of the grants, from taking the proxy's
// snapshot to its rename into place, so that saves from the doors and the sync thread land in
// the order their snapshots were taken (file I/O under it, nothing else).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <condition_variable>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sandboxd/clock.hpp"
#include "sandboxd/core/egress_proxy.hpp"
#include "sandboxd/core/sandbox_endpoint.hpp"
#include "sandboxd/core/sandbox_service.hpp"
#include "sandboxd/logger.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::core {

class Provider;

// DeerFlow's `sandbox.network` for allowlist mode, as the proxy enforces it.
struct EgressSettings {
  EgressPolicy policy;
  // FOR TESTS ONLY (`network.test_only_upstreams`: {"name": "127.0.0.x:PORT"}): names resolved
  // to these loopback upstreams instead of through DNS (test_upstream_network).
  std::map<std::string, boost::asio::ip::tcp::endpoint> test_only_upstreams;
};

// The settings in the backend's options (its "network" object), or nullopt when its mode is not
// allowlist. Throws ConfigError naming the key (`{key_path}.network.allow_domains[2]`, …):
// allow_domains must be names or *.suffix, approval deny or prompt, temporary_grant_ttl 30 to
// 3600 seconds; each of `secrets` names an environment variable, a secret file of ours that
// nobody else can read, and a destination on the allow-list, https (the default) only with
// `inject_tls_ca`, a CA certificate and its private key checked here (its file is read here;
// its placeholder comes from assign_secret_placeholders); `upstream_ca_file` adds roots.
std::optional<EgressSettings> egress_settings_from(const std::string& backend_options_json,
                                                   const std::string& key_path);

// Secrets (network.secrets): each one's placeholder, kept in the state directory
// (`egress-placeholders.json`, 0600) so that sandboxes made before a restart still hold the
// right one; a new name gets a new random placeholder.
void assign_secret_placeholders(EgressSettings& settings, const std::filesystem::path& state_dir);
// The backend's options with each secret's placeholder in its `environment` (what the sandbox
// sees instead of the secret). Throws ConfigError when the environment names it too.
std::string with_secret_placeholders(const std::string& backend_options_json,
                                     const EgressSettings& settings, const std::string& key_path);

// Where an egress host finds its sandboxes: a collaborator, so that a host without a Provider
// (sandboxd-provisioner, which asks its backend) runs one as serve does.
struct EgressSandboxes {
  struct Tracked {
    SandboxInfo info;
    bool paused = false;  // a paused sandbox keeps its listener but is not attached anew
  };
  // The sandboxes the host keeps now; one not among them loses its listener at the next pass.
  std::function<std::vector<Tracked>()> tracked;
  // A sandbox's endpoint (its namespace's socket maker), or nullopt.
  std::function<std::optional<SandboxEndpoint>(const std::string& sandbox_id)> endpoint;
};

// The provider's registry and endpoints (serve).
EgressSandboxes provider_egress_sandboxes(Provider& provider);

class EgressHost final : public SandboxEgress {
 public:
  EgressHost(EgressSandboxes sandboxes, EgressSettings settings, std::filesystem::path state_dir,
             std::shared_ptr<Logger> logger, std::shared_ptr<Clock> clock);
  EgressHost(Provider& provider, EgressSettings settings, std::filesystem::path state_dir,
             std::shared_ptr<Logger> logger, std::shared_ptr<Clock> clock)
      : EgressHost(provider_egress_sandboxes(provider), std::move(settings), std::move(state_dir),
                   std::move(logger), std::move(clock)) {}
  ~EgressHost() override;  // stop()

  // The proxy, the grants kept from the last run, a sync pass, and the sync thread (every
  // `sync_interval`).
  void start(std::chrono::milliseconds sync_interval = std::chrono::milliseconds(2000));
  void stop();

  // SandboxEgress: the sandbox's listener, if it is an allowlist one not attached yet.
  void attach_if_needed(const SandboxInfo& info) override;
  void forget(const std::string& sandbox_id) override;

  // One pass: tracked allowlist sandboxes attached (a listener made again in a sandbox whose
  // namespace was made anew: a restarted container), gone ones detached.
  void sync();
  // Decisions kept only for the sandboxes tracked now, each for the instance tracked (a
  // destroyed sandbox's grants never pass to the next sandbox of its conversation), then
  // saved. start() runs it after loading the last run's grants; a host that destroyed its
  // sandboxes at exit runs it after.
  void prune();

  EgressProxy& proxy() { return *proxy_; }
  const EgressSettings& settings() const { return settings_; }
  // After a decision: the grants written to the state directory (a failure is logged).
  void save_grants();

 private:
  // An attached sandbox whose network namespace changed gets its listener again there.
  void keep_listener(const SandboxInfo& info);

  const EgressSandboxes sandboxes_;
  const EgressSettings settings_;
  const std::filesystem::path state_dir_;
  std::shared_ptr<Logger> logger_;
  std::unique_ptr<EgressProxy> proxy_;
  Mutex mutex_;
  Mutex save_mutex_;
  std::condition_variable wake_;
  bool stopping_ GUARDED_BY(mutex_) = false;
  std::thread sync_thread_;
};

}  // namespace sandboxd::core

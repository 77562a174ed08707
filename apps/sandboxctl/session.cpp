#include "session.hpp"

#include "sandboxd/core/default_config.hpp"
#include "sandboxd/core/paths.hpp"

namespace sandboxctl {

using namespace sandboxd;

core::SandboxConfig load_command_config(const std::optional<std::string>& config_file) {
  if (config_file) return core::load_config_file(*config_file);
  return core::default_config();
}

std::filesystem::path registry_path(const std::filesystem::path& state_dir) {
  return state_dir / "sandboxctl-registry.json";
}

std::filesystem::path serve_registry_path(const std::filesystem::path& state_dir) {
  return state_dir / "serve-registry.json";
}

Session::Session(const core::SandboxConfig& config, std::shared_ptr<Logger> logger,
                 core::ProviderHooks hooks, SessionKind kind, std::size_t max_capacity_waiters)
    // Nobody renews a one-shot command's leases, so they must last at least as long as the
    // sandbox may sit idle before this state directory's own reaper would stop it.
    : config_(kind == SessionKind::one_shot
                  ? core::with_lease_ttl_at_least(config, config.idle_timeout)
                  : config),
      logger_(std::move(logger)),
      state_dir_(core::resolve_base_dir(config.base_dir)),
      registry_(kind == SessionKind::one_shot ? registry_path(state_dir_)
                                              : serve_registry_path(state_dir_)),
      loaded_(registry_.load()) {
  core::Provider::HostOptions host;
  host.owner_id = core::one_shot_owner_id(registry_.path());
  host.start = false;
  host.max_capacity_waiters = max_capacity_waiters;
  if (kind == SessionKind::daemon) {
    events_ = std::make_shared<core::LifecycleEventLog>(std::make_shared<SystemClock>());
    host.events = events_;
  }
  provider_ = core::Provider::from_config(config_, logger_, std::move(hooks), host);
  provider_->import_registry(loaded_);
  service_ = std::make_unique<core::SandboxService>(*provider_, state_dir_.string(), where());
  // A daemon starts its background work only once what it inherited is in place, so the first
  // reconciliation does not adopt its own sandboxes as orphans.
  if (kind == SessionKind::daemon) provider_->start();
  // A one-shot command takes the idle pass's turn with snapshots (no daemon may run here):
  // those past snapshot_ttl_seconds go, and the images of deleted ones nothing runs from now.
  if (kind == SessionKind::one_shot) {
    try {
      provider_->delete_expired_snapshots();
    } catch (const std::exception& e) {
      logger_->warning(std::string("Snapshots past their time could not be deleted: ") + e.what());
    }
  }
}

Session::~Session() {
  if (committed_ || !provider_) return;
  try {
    commit();
  } catch (const std::exception& e) {
    logger_->error(std::string("Could not record this command's changes: ") + e.what());
  }
}

void Session::commit() {
  committed_ = true;
  const core::RegistrySnapshot now = provider_->export_registry();
  provider_->detach();
  registry_.apply(loaded_, now);
  loaded_ = now;
}

}  // namespace sandboxctl

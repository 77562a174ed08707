#include "provisioner_service.hpp"

#include <openssl/crypto.h>
#include <openssl/sha.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>

#include "create_request.hpp"
#include "egress_routes.hpp"
#include "error_status.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "sandboxd/core/service_json.hpp"
#include "sandboxd/errors.hpp"
#include "sandboxd/host_fs.hpp"
#include "sandboxd/json.hpp"
#include "state_directories.hpp"

namespace sandboxd::provisioner {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

template <class Fill>
std::string json_object(Fill fill) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  fill(w);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

void put(Writer& w, const char* key, const std::string& value) {
  write_json_member(w, key, value);
}

void put(Writer& w, const char* key, const std::optional<std::string>& value) {
  write_json_optional(w, key, value);
}

Reply not_found(const std::string& sandbox_id) {
  return detail(404, "Sandbox '" + sandbox_id + "' not found");
}

std::array<unsigned char, SHA256_DIGEST_LENGTH> digest(std::string_view text) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> out{};
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), out.data());
  return out;
}

std::string join(const std::string& base, std::initializer_list<std::string> parts) {
  std::filesystem::path path(base);
  for (const std::string& part : parts) path /= part;
  return path.lexically_normal().string();
}

}  // namespace

Reply detail(int status, const std::string& message) {
  return {
      status, json_object([&](Writer& w) { put(w, "detail", message); }), "application/json", {}};
}

Reply failure(const std::string& prefix, const std::exception& error) {
  const core::ServiceError typed = core::as_service_error(error, core::ErrorKind::unavailable);
  Reply reply = detail(door::http_status(typed.kind()), prefix + typed.what());
  if (typed.kind() == core::ErrorKind::capacity) reply.headers.emplace_back("Retry-After", "1");
  return reply;
}

ProvisionerService::ProvisionerService(ServiceSettings settings,
                                       std::shared_ptr<SandboxBackend> backend,
                                       std::shared_ptr<Logger> logger)
    : settings_(std::move(settings)),
      backend_(std::move(backend)),
      logger_(std::move(logger)),
      events_(std::make_shared<core::LifecycleEventLog>(std::make_shared<SystemClock>())),
      usage_(
          backend_ ? backend_capability<SandboxUsage>(*backend_) : nullptr,
          [backend = backend_](std::size_t limit) {
            // On the sampler's thread: the backend's listing, as the page's table shows it.
            core::Provider::TrackedInfos tracked;
            for (SandboxInfo& info : backend->list_running()) {
              if (info.sandbox_id.empty()) continue;
              if (tracked.infos.size() < limit) {
                tracked.infos.push_back(std::make_shared<const SandboxInfo>(std::move(info)));
              } else {
                ++tracked.left_out;
              }
            }
            return tracked;
          },
          std::make_shared<SystemClock>()) {}

ProvisionerService::~ProvisionerService() {
  calls_.drain();
}

bool ProvisionerService::authorized(std::string_view presented_key) const {
  if (settings_.api_key.empty()) return false;
  // Digests have one length whatever the key, so the comparison time tells nothing about it.
  const auto expected = digest(settings_.api_key);
  const auto presented = digest(presented_key);
  return CRYPTO_memcmp(expected.data(), presented.data(), expected.size()) == 0;
}

void ProvisionerService::prepare_state_roots() const {
  // Everything the service makes for sandboxes lives below these roots, so each must be ours
  // (made 0700 when missing): a root another user made could hold their links.
  std::vector<std::string> roots = {settings_.roots.host_base_dir};
  if (settings_.roots.user_data_layout == UserDataLayout::legacy) {
    roots.push_back(settings_.roots.threads_host_path);
  }
  for (const std::string& root : roots) {
    try {
      const std::filesystem::path absolute = std::filesystem::absolute(root);
      host_fs::require_trusted_links(absolute, "state root");
      host_fs::ensure_trusted_dir(std::filesystem::weakly_canonical(absolute), "state root");
    } catch (const std::filesystem::filesystem_error& error) {
      throw std::runtime_error("cannot use state root " + root + ": " + error.code().message());
    }
  }
}

Reply ProvisionerService::health() const {
  return {200, json_object([](Writer& w) { put(w, "status", std::string("ok")); })};
}

Reply ProvisionerService::capabilities() const {
  if (legacy()) return detail(404, "Not Found");
  return {200, json_object([&](Writer& w) {
            // No lark-cli images: a backend plugin has no init containers or sidecars.
            w.Key("lark_cli_init_image");
            w.Bool(false);
            w.Key("lark_cli_broker_image");
            w.Bool(false);
            w.Key("mount_contract_version");
            w.Int(settings_.mount_contract_version);
          })};
}

// sandbox_url (and request_headers when only `relay` reaches it) of `info`.
static void write_address(Writer& w, const SandboxInfo& info, SandboxBackend& backend,
                          const core::SandboxAddressing* relay) {
  const auto* access = backend_capability<NamespacedSandboxes>(backend);
  if (relay != nullptr && access != nullptr && access->namespaced(info)) {
    // No host address reaches it: the relay's URL, and the headers every request carries.
    put(w, "sandbox_url", relay->url_for(info.sandbox_id));
    w.Key("request_headers");
    w.StartObject();
    for (const auto& [name, value] : relay->headers_for(info)) {
      put(w, name.c_str(), value);
    }
    w.EndObject();
  } else {
    put(w, "sandbox_url", info.sandbox_url);
  }
}

std::string ProvisionerService::sandbox_json(const SandboxInfo& info) const {
  return json_object([&](Writer& w) {
    put(w, "sandbox_id", info.sandbox_id);
    write_address(w, info, *backend_, relay_);
    put(w, "status", std::string("Running"));
    if (!legacy()) {
      put(w, "user_id", info.user_id);
      put(w, "thread_id", info.thread_id);
      w.Key("mount_contract_version");
      w.Int(info.mount_contract_version);
    }
  });
}

std::vector<Mount> ProvisionerService::composed_mounts(const std::string& user_id,
                                                       const std::string& thread_id,
                                                       const std::vector<Mount>& extra) const {
  const std::string& base = settings_.roots.host_base_dir;
  const bool legacy_user_data = settings_.roots.user_data_layout == UserDataLayout::legacy;
  const std::string user_data =
      legacy_user_data ? join(settings_.roots.threads_host_path, {thread_id, "user-data"})
                       : join(base, {"users", user_id, "threads", thread_id, "user-data"});
  std::vector<Mount> mounts = {
      {join(base, {"skills_view", "public"}), "/mnt/skills/public", true},
      {join(base, {"users", user_id, "skills_view", "custom"}), "/mnt/skills/custom", true},
      {join(base, {"users", user_id, "skills_view", "legacy"}), "/mnt/skills/legacy", true},
      {user_data, "/mnt/user-data", false},
  };
  for (const Mount& mount : mounts) {
    const std::string& root = mount.container_path == "/mnt/user-data" && legacy_user_data
                                  ? settings_.roots.threads_host_path
                                  : base;
    ensure_directory_inside(mount.host_path, root,
                            "Sandbox mount source is outside DeerFlow state: " + mount.host_path);
  }
  // An extra mount at a path the service composes replaces the composed one.
  for (const Mount& mount : extra) {
    std::erase_if(mounts, [&](const Mount& m) { return m.container_path == mount.container_path; });
  }
  mounts.insert(mounts.end(), extra.begin(), extra.end());
  return mounts;
}

Reply ProvisionerService::create(std::string_view body) {
  CreateBody request;
  try {
    request = parse_create_body(body);
  } catch (const SchemaViolation& violation) {
    return {422, schema_violation_json(violation)};
  }
  const std::string& id = request.sandbox_id;

  // Validated before the fast path, so the answer never depends on whether the sandbox exists.
  std::vector<Mount> extra;
  try {
    extra = validated_extra_mounts(request.extra_mounts, request.thread_id, request.user_id,
                                   settings_.roots);
    for (const Mount& mount : extra) {
      const std::string message =
          "Extra mount host path is outside DeerFlow state: " + mount.host_path;
      if (mount.read_only) {
        try {
          require_directory_inside(mount.host_path, settings_.roots.host_base_dir, message);
        } catch (const DirectoryMissing&) {
          return detail(400, "Extra mount host path does not exist: " + mount.host_path);
        }
      } else {
        ensure_directory_inside(mount.host_path, settings_.roots.host_base_dir, message);
      }
    }
  } catch (const ExtraMountRejected& rejected) {
    return detail(400, rejected.what());
  } catch (const PathEscapesRoot& escape) {
    return detail(400, escape.what());
  } catch (const DirectoryUnavailable& unavailable) {
    return detail(500, std::string("Sandbox creation failed: ") + unavailable.what());
  }

  const int version = settings_.mount_contract_version;
  if (!legacy() && request.required_mount_contract_version &&
      *request.required_mount_contract_version != version) {
    return {409, json_object([&](Writer& w) {
              put(w, "detail",
                  "This provisioner serves mount contract " + std::to_string(version) + ", not " +
                      std::to_string(*request.required_mount_contract_version));
              w.Key("mount_contract_version");
              w.Int(version);
            })};
  }

  std::optional<SandboxInfo> existing;
  try {
    existing = calls_.run([backend = backend_, id] { return backend->discover(id); },
                          settings_.backend_timeout_seconds, "Looking up sandbox '" + id + "'");
  } catch (const NoCallSlot& busy) {
    return detail(503, busy.what());
  } catch (const BackendTimeout& timeout) {
    return detail(504, timeout.what());
  } catch (const std::exception& error) {
    // A lookup that fails is "not there yet"; the create below is idempotent.
    logger_->warning("Could not look up sandbox " + id + " before creating it: " + error.what());
  }
  if (existing) {
    if (!legacy()) {
      if (existing->user_id != request.user_id || existing->thread_id != request.thread_id) {
        logger_->warning("Refused create of sandbox " + id +
                         ": it exists for another user or thread");
        return detail(409, "Sandbox '" + id + "' exists for a different user or thread");
      }
      if (existing->mount_contract_version != version) {
        return {409, json_object([&](Writer& w) {
                  put(w, "detail",
                      "Sandbox '" + id + "' was created under mount contract " +
                          std::to_string(existing->mount_contract_version) +
                          "; delete it to recreate it under " + std::to_string(version));
                  w.Key("mount_contract_version");
                  w.Int(version);
                })};
      }
    }
    events_->record(core::LifecycleEventKind::reused, id, request.user_id, request.thread_id);
    return {200, sandbox_json(*existing)};
  }

  CreateRequest create;
  create.sandbox_id = id;
  create.thread_id = request.thread_id;
  create.user_id = request.user_id;
  create.provision_lark_cli_runtime = request.provision_lark_cli_runtime;
  create.provision_lark_cli_broker = request.provision_lark_cli_broker;
  try {
    create.extra_mounts = composed_mounts(request.user_id, request.thread_id, extra);
  } catch (const PathEscapesRoot& escape) {
    return detail(400, escape.what());
  } catch (const DirectoryUnavailable& unavailable) {
    return detail(500, std::string("Sandbox creation failed: ") + unavailable.what());
  }
  try {
    // The call may outlive this request (a timeout): it shares nothing with it by reference.
    auto [info, claimed] = calls_.run(
        [backend = backend_, logger = logger_, create]() -> std::pair<SandboxInfo, bool> {
          // A ready pre-started slot first; a miss is logged with its reason and
          // the sandbox is created cold as before.
          auto* slots = backend_capability<PreStartedSlots>(*backend);
          if (slots != nullptr && slots->slot_status().target > 0) {
            PreStartedSlots::Claim claim = slots->claim_slot(create);
            if (claim.sandbox) return {std::move(*claim.sandbox), true};
            logger->info("No pre-started slot for sandbox " + create.sandbox_id + " (" +
                         to_string(claim.miss) + ": " + claim.detail + "); creating it");
          }
          return {backend->create(create), false};
        },
        settings_.backend_timeout_seconds, "Creating sandbox '" + id + "'");
    if (!info.user_id) info.user_id = request.user_id;
    if (!info.thread_id) info.thread_id = request.thread_id;
    if (egress_ != nullptr) egress_->attach_if_needed(info);  // its way out, before it is used
    events_->record(claimed ? core::LifecycleEventKind::claimed : core::LifecycleEventKind::created,
                    id, request.user_id, request.thread_id);
    logger_->info(
        std::string(claimed ? "Claimed a pre-started slot as sandbox " : "Created sandbox ") + id +
        " for user " + request.user_id + ", thread " + request.thread_id + ": " + info.sandbox_url);
    return {200, sandbox_json(info)};
  } catch (const NoCallSlot& busy) {
    return detail(503, busy.what());
  } catch (const BackendTimeout& timeout) {
    logger_->error(timeout.what());
    return detail(504, timeout.what());
  } catch (const std::exception& error) {
    logger_->error("Sandbox creation failed for " + id + ": " + error.what());
    return failure("Sandbox creation failed: ", error);
  }
}

Reply ProvisionerService::get(const std::string& sandbox_id) {
  if (!is_valid_sandbox_id(sandbox_id)) return not_found(sandbox_id);
  try {
    std::optional<SandboxInfo> info =
        calls_.run([backend = backend_, sandbox_id] { return backend->discover(sandbox_id); },
                   settings_.backend_timeout_seconds, "Looking up sandbox '" + sandbox_id + "'");
    if (!info || info->sandbox_url.empty()) return not_found(sandbox_id);
    return {200, sandbox_json(*info)};
  } catch (const NoCallSlot& busy) {
    return detail(503, busy.what());
  } catch (const BackendTimeout& timeout) {
    return detail(504, timeout.what());
  } catch (const std::exception& error) {
    return failure("Failed to read sandbox '" + sandbox_id + "': ", error);
  }
}

namespace {

// One sandbox's reading, with its writable layer where the backend measures it.
struct UsageAnswer {
  SandboxUsage::Reading reading;
  std::optional<std::uint64_t> writable_layer_bytes;
};

std::string usage_json(const UsageAnswer& answer) {
  const SandboxUsage::Reading& reading = answer.reading;
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  // A NaN or an infinity has no JSON form: such a figure is one the engine did not give.
  const auto seconds = [&w](const char* name, const std::optional<double>& value) {
    if (value && std::isfinite(*value)) w.Key(name), w.Double(*value);
  };
  seconds("cpu_seconds", reading.cpu_seconds);
  seconds("host_cpu_seconds", reading.host_cpu_seconds);
  if (reading.online_cpus) w.Key("online_cpus"), w.Int(*reading.online_cpus);
  if (reading.memory_bytes) w.Key("memory_bytes"), w.Uint64(*reading.memory_bytes);
  if (reading.memory_limit_bytes) {
    w.Key("memory_limit_bytes"), w.Uint64(*reading.memory_limit_bytes);
  }
  if (reading.pids) w.Key("pids"), w.Uint64(*reading.pids);
  if (answer.writable_layer_bytes) {
    w.Key("writable_layer_bytes"), w.Uint64(*answer.writable_layer_bytes);
  }
  w.EndObject();
  return buffer.GetString();
}

}  // namespace

Reply ProvisionerService::usage(const std::string& sandbox_id) {
  SandboxUsage* const meter = backend_capability<SandboxUsage>(*backend_);
  if (meter == nullptr) return detail(501, "This provisioner's backend reports no usage");
  if (!is_valid_sandbox_id(sandbox_id)) return not_found(sandbox_id);
  try {
    // The backend object outlives the call: the lambda holds it, and `meter` is part of it.
    const std::optional<UsageAnswer> reading = calls_.run(
        [backend = backend_, meter, sandbox_id]() -> std::optional<UsageAnswer> {
          const std::optional<SandboxInfo> info = backend->discover(sandbox_id);
          if (!info || info->sandbox_url.empty()) return std::nullopt;
          UsageAnswer answer{meter->usage(*info), std::nullopt};
          // The disk its sandbox wrote outside its mounts (the gateway's disk_limit counts it);
          // a figure the engine would not give is left out, as the others are.
          if (auto* layer = backend_capability<WritableLayerUsage>(*backend)) {
            try {
              answer.writable_layer_bytes = layer->writable_layer_bytes(*info);
            } catch (const std::exception&) {
            }
          }
          return answer;
        },
        settings_.backend_timeout_seconds, "Reading the usage of sandbox '" + sandbox_id + "'");
    if (!reading) return not_found(sandbox_id);
    return {200, usage_json(*reading)};
  } catch (const NoCallSlot& busy) {
    return detail(503, busy.what());
  } catch (const BackendTimeout& timeout) {
    return detail(504, timeout.what());
  } catch (const std::exception& error) {
    return failure("Failed to read the usage of sandbox '" + sandbox_id + "': ", error);
  }
}

Reply ProvisionerService::instance(const std::string& sandbox_id) {
  SandboxDiscoveryResult result;
  if (is_valid_sandbox_id(sandbox_id)) {
    try {
      result =
          calls_.run([backend = backend_,
                      sandbox_id] { return backend->discover_for_reconciliation(sandbox_id); },
                     settings_.backend_timeout_seconds, "Looking up sandbox '" + sandbox_id + "'");
    } catch (const NoCallSlot& busy) {
      return detail(503, busy.what());
    } catch (const BackendTimeout& timeout) {
      return detail(504, timeout.what());
    } catch (const std::exception& error) {
      return detail(503,
                    "Could not tell whether sandbox '" + sandbox_id + "' exists: " + error.what());
    }
  } else {
    result = SandboxDiscoveryResult::absent();
  }
  if (result.status == SandboxDiscoveryResult::Status::unknown) {
    return detail(503, "Could not tell whether sandbox '" + sandbox_id + "' exists");
  }
  const bool found = result.status == SandboxDiscoveryResult::Status::found;
  const std::optional<SandboxInfo>& info = result.info;
  return {200, json_object([&](Writer& w) {
            put(w, "backend_namespace", result.backend_namespace);
            put(w, "incarnation_id", found ? result.incarnation_id : std::nullopt);
            if (found && info && !info->sandbox_url.empty()) {
              write_address(w, *info, *backend_, relay_);
            } else {
              put(w, "sandbox_url", std::optional<std::string>());
            }
            put(w, "user_id", found && info ? info->user_id : std::nullopt);
            put(w, "thread_id", found && info ? info->thread_id : std::nullopt);
            w.Key("mount_contract_version");
            if (found && info) {
              w.Int(info->mount_contract_version);
            } else {
              w.Null();
            }
          })};
}

Reply ProvisionerService::remove(const std::string& sandbox_id) {
  auto ok = [&] {
    return Reply{200, json_object([&](Writer& w) {
                   w.Key("ok");
                   w.Bool(true);
                   put(w, "sandbox_id", sandbox_id);
                 })};
  };
  if (!is_valid_sandbox_id(sandbox_id)) return ok();  // nothing of that name can exist
  std::optional<SandboxInfo> removed;
  try {
    removed = calls_.run(
        [backend = backend_, sandbox_id]() -> std::optional<SandboxInfo> {
          // The exact-instance lookup also finds one that runs but is not ready (no URL).
          SandboxDiscoveryResult found = backend->discover_for_reconciliation(sandbox_id);
          if (found.status == SandboxDiscoveryResult::Status::absent) return std::nullopt;
          SandboxInfo info;
          info.sandbox_id = sandbox_id;
          if (found.status == SandboxDiscoveryResult::Status::found) {
            if (found.info) {
              info = *found.info;
            } else {
              info.container_id = found.incarnation_id;
            }
          } else if (std::optional<SandboxInfo> discovered = backend->discover(sandbox_id)) {
            // A backend without exact-instance lookups (the SDK's default answers "unknown"):
            // its own discovery, then its listing, then destroy by id, which every backend
            // must accept ("already gone" counts as done).
            info = *discovered;
          } else {
            for (SandboxInfo& running : backend->list_running()) {
              if (running.sandbox_id == sandbox_id) {
                info = std::move(running);
                break;
              }
            }
          }
          backend->destroy(info);
          return info;
        },
        settings_.backend_timeout_seconds, "Deleting sandbox '" + sandbox_id + "'");
  } catch (const NoCallSlot& busy) {
    return detail(503, busy.what());
  } catch (const BackendTimeout& timeout) {
    return detail(504, timeout.what());
  } catch (const std::exception& error) {
    logger_->error("Deleting sandbox " + sandbox_id + " failed: " + error.what());
    return failure("Partial cleanup: sandbox: ", error);
  }
  if (relay_targets_ != nullptr) relay_targets_->forget(sandbox_id);
  if (egress_ != nullptr) egress_->forget(sandbox_id);  // its listener and grants go with it
  logger_->info("Deleted sandbox " + sandbox_id);
  if (removed) {
    events_->record(core::LifecycleEventKind::destroyed, sandbox_id, removed->user_id,
                    removed->thread_id);
  }
  return ok();
}

std::optional<Reply> ProvisionerService::list_running(std::vector<SandboxInfo>& running) {
  try {
    running = calls_.run([backend = backend_] { return backend->list_running(); },
                         settings_.backend_timeout_seconds, "Listing sandboxes");
  } catch (const NoCallSlot& busy) {
    return detail(503, busy.what());
  } catch (const BackendTimeout& timeout) {
    return detail(504, timeout.what());
  } catch (const std::exception& error) {
    return failure("Failed to list sandboxes: ", error);
  }
  return std::nullopt;
}

Reply ProvisionerService::ui_sandboxes() {
  std::vector<SandboxInfo> running;
  if (std::optional<Reply> failed = list_running(running)) return *failed;
  return {200, json_object([&](Writer& w) {
            w.Key("sandboxes");
            w.StartArray();
            for (const SandboxInfo& info : running) {
              if (info.sandbox_id.empty()) continue;
              w.StartObject();
              put(w, "sandbox_id", info.sandbox_id);
              put(w, "state", std::string("running"));
              put(w, "user_id", info.user_id);
              put(w, "thread_id", info.thread_id);
              w.Key("since");
              if (info.created_at > 0) {
                w.Double(info.created_at);
              } else {
                w.Null();
              }
              w.EndObject();
            }
            w.EndArray();
          })};
}

Reply ProvisionerService::ui_usage() {
  return {200, core::to_json(usage_.view())};
}

Reply ProvisionerService::ui_health() {
  std::vector<SandboxInfo> running;
  if (std::optional<Reply> failed = list_running(running)) return *failed;
  return {200, json_object([&](Writer& w) {
            put(w, "status", std::string("ok"));
            w.Key("running");
            w.Uint64(running.size());
          })};
}

Reply ProvisionerService::list() {
  std::vector<SandboxInfo> running;
  if (std::optional<Reply> failed = list_running(running)) return *failed;
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("sandboxes");
  w.StartArray();
  int count = 0;
  for (const SandboxInfo& info : running) {
    if (info.sandbox_id.empty() || info.sandbox_url.empty()) continue;
    const std::string one = sandbox_json(info);
    w.RawValue(one.c_str(), one.size(), rapidjson::kObjectType);
    ++count;
  }
  w.EndArray();
  w.Key("count");
  w.Int(count);
  w.EndObject();
  return {200, std::string(buffer.GetString(), buffer.GetSize())};
}

Reply ProvisionerService::egress(const std::string& sandbox_id, EgressCall call,
                                 std::string_view body) {
  if (egress_host_ == nullptr) {
    return detail(404,
                  "This provisioner runs no egress proxy: its backend's network mode is not "
                  "allowlist");
  }
  if (!is_valid_sandbox_id(sandbox_id) || !egress_host_->proxy().is_attached(sandbox_id)) {
    return detail(404, "Sandbox '" + sandbox_id + "' has no egress proxy here");
  }
  try {
    switch (call) {
      case EgressCall::view:
        return {200, door::egress_view(*egress_host_, sandbox_id)};
      case EgressCall::events:
        return {200, door::egress_events(*egress_host_, sandbox_id)};
      case EgressCall::deny_pending:
        return {200, door::egress_deny_pending(*egress_host_, sandbox_id)};
      case EgressCall::decide:
        return {200, door::egress_decide(*egress_host_, sandbox_id, std::string(body))};
    }
  } catch (const core::ServiceError& error) {
    return detail(door::http_status(error.kind()), error.what());
  }
  return detail(404, "Not Found");
}

}  // namespace sandboxd::provisioner

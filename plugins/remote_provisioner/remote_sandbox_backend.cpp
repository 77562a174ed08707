// remote_provisioner:RemoteSandboxBackend — sandboxes run by the DeerFlow provisioner service
// (design §10). Every call is one HTTP request with its own libcurl handle.
//
// Lock story: `probe_mutex_` (the probe lock) guards the capability state: `version_`,
// `known_` and `next_probe_at_`. It is held across the capabilities GET (up to 5 s), so
// refresh_capabilities_if_stale() and mount_contract_snapshot() may block. `version_` and
// `known_` are atomics written only under the lock, so the cached accessors read them without
// it and never block. `usage_unsupported_until_` (an atomic, no lock) is the one other shared
// figure: when the provisioner cannot report usage, usage() asks again only after a minute.
// The HTTP helpers keep no state.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "provisioner_answers.hpp"
#include "provisioner_support.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/http.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/sdk.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::remote_provisioner {
namespace {

constexpr double kCapabilitiesTimeout = 5.0;
constexpr double kListTimeout = 10.0;
constexpr double kCreateTimeout = 30.0;
constexpr double kDestroyTimeout = 15.0;
constexpr double kGetTimeout = 10.0;
constexpr double kKnownProbeInterval = 30.0;
constexpr double kUnavailableProbeInterval = 1.0;
// The operator page's sampler asks each sandbox every few seconds, one after another: a slow
// provisioner must not hold a sweep for long.
constexpr double kUsageTimeout = 5.0;
constexpr double kUsageUnsupportedRetry = 60.0;

}  // namespace

class RemoteSandboxBackend final : public SandboxBackend,
                                   public MountContractNegotiation,
                                   public RemoteSandboxEgress,
                                   public SandboxUsage,
                                   public WritableLayerUsage {
 public:
  explicit RemoteSandboxBackend(const PluginContext& context)
      : logger_(context.logger),
        clock_(context.clock),
        ambient_user_id_(context.ambient_user_id),
        user_should_see_legacy_skills_(context.user_should_see_legacy_skills) {
    PluginConfig options = context.options();
    auto url = options.optional_string("provisioner_url");
    if (!url || url->empty()) {
      options.reject("provisioner_url", "is required (the provisioner service's base URL)");
    }
    base_url_ = *url;
    while (!base_url_.empty() && base_url_.back() == '/') base_url_.pop_back();
    if (base_url_.empty()) options.reject("provisioner_url", "must not be just '/'");
    if (!http::is_http_url(base_url_)) {
      options.reject("provisioner_url",
                     "must be an http:// or https:// URL, got '" + redacted_url(base_url_) + "'");
    }
    api_key_ = options.get_string("provisioner_api_key", "");
    // The key goes into a request header line: a CR, LF or other control character would let
    // it end the header and inject others (the value itself is never shown).
    for (const char c : api_key_) {
      if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
        options.reject("provisioner_api_key",
                       "contains a control character (CR, LF, tab or similar); the value is not "
                       "shown");
      }
    }
    for (const auto& key : options.unread_keys()) {
      logger_->warning("Unknown remote provisioner option " + key + " ignored");
    }
  }

  // ── egress decisions, at the provisioner that runs the sandbox's egress proxy ──
  Answer egress_call(const std::string& sandbox_id, const std::string& action,
                     const std::string& json_body) override {
    static const std::set<std::string> kActions = {"", "events", "deny-pending", "decide"};
    if (kActions.count(action) == 0) throw std::invalid_argument("no egress action " + action);
    const std::string url =
        sandbox_url_for(sandbox_id) + "/egress" + (action.empty() ? "" : "/" + action);
    HttpResponse response;
    try {
      response = http_request(action.empty() ? "GET" : "POST", url, api_key_, kGetTimeout,
                              action.empty() ? "" : (json_body.empty() ? "{}" : json_body));
    } catch (const TransportError& error) {
      throw std::runtime_error("Provisioner egress call failed for " + sandbox_id + ": " +
                               error.what());
    }
    return {static_cast<int>(response.status), response.body};
  }

  // ── what a sandbox uses, as the provisioner's backend counts it ──
  Reading usage(const SandboxInfo& info) override { return read_usage_answer(usage_answer(info)); }

  // What it wrote outside its mounts (the engine's SizeRw, from the same route), so the
  // gateway's disk_limit bounds a remote sandbox's layer as it does a local one's. nullopt when
  // the provisioner cannot tell (a provisioner without the route, or an engine that does not
  // size layers).
  std::optional<std::uint64_t> writable_layer_bytes(const SandboxInfo& info) override {
    std::string body;
    try {
      body = usage_answer(info);
    } catch (const UsageUnsupported&) {
      return std::nullopt;
    }
    return read_writable_layer_bytes(body);
  }

  // ── capability negotiation (§10.2) ──

  bool requires_create_validation() const override { return true; }
  MountModeKind mount_mode_kind() const override { return MountModeKind::contract_negotiated; }

  void refresh_capabilities_if_stale() override {
    MutexLock lock(probe_mutex_);
    if (clock_->monotonic_now() >= next_probe_at_) probe_locked();
  }

  MountContractSnapshot mount_contract_snapshot() override {
    MutexLock lock(probe_mutex_);
    return {version_.load(), known_.load()};
  }

  int cached_mount_contract_version() const override { return version_.load(); }
  bool cached_mount_contract_capability_known() const override { return known_.load(); }

  // ── lifecycle (§10.3–§10.5) ──

  SandboxInfo create(const CreateRequest& request) override {
    const std::string& id = request.sandbox_id;
    const int required = version_.load();
    const std::string user = effective_user(request.user_id);
    bool legacy_skills = false;
    if (user_should_see_legacy_skills_) legacy_skills = user_should_see_legacy_skills_(user);
    // Throws std::invalid_argument for an unsafe conversion mount: a caller bug, not a
    // provisioner failure, so it propagates as is.
    const std::vector<Mount> mounts =
        provisioner_extra_mounts_payload(request.extra_mounts, request.provision_lark_cli_runtime,
                                         request.provision_lark_cli_broker);

    rapidjson::StringBuffer buffer;
    rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
    writer.StartObject();
    write_json_member(writer, "sandbox_id", id);
    write_json_optional(writer, "thread_id", request.thread_id);
    write_json_member(writer, "user_id", user);
    if (required > 0) {
      writer.Key("required_mount_contract_version");
      writer.Int(required);
    }
    writer.Key("include_legacy_skills");
    writer.Bool(legacy_skills);
    writer.Key("provision_lark_cli_runtime");
    writer.Bool(request.provision_lark_cli_runtime);
    writer.Key("provision_lark_cli_broker");
    writer.Bool(request.provision_lark_cli_broker);
    if (!mounts.empty()) {
      writer.Key("extra_mounts");
      const std::string mounts_json = extra_mounts_to_json(mounts);
      writer.RawValue(mounts_json.c_str(), mounts_json.size(), rapidjson::kArrayType);
    }
    writer.EndObject();
    const std::string body(buffer.GetString(), buffer.GetSize());

    SandboxInfo info;
    int returned = 0;
    bool refused = false;  // a 409 naming the contract the provisioner serves
    try {
      const HttpResponse response =
          http_request("POST", base_url_ + "/api/sandboxes", api_key_, kCreateTimeout, body);
      if (std::optional<int> served = served_contract_of_refusal(response.status, response.body)) {
        // Nothing was created; the acquisition restarts under the contract the provisioner
        // serves. A refusal naming the very version we asked for makes no sense: a failure.
        if (*served == required) throw std::runtime_error(response.describe());
        returned = *served;
        refused = true;
      }
      if (!refused && response.status == 429) {
        // A ceiling on the provisioner's side (a cluster quota): the gateway's capacity
        // refusal, not a backend failure.
        throw BackendCapacityError("capacity: the provisioner refused sandbox " + id + ": " +
                                   response.describe());
      }
      if (!refused && !response.ok()) throw std::runtime_error(response.describe());
      if (!refused) {
        try {
          info = read_create_answer(id, response.body, clock_->wall_now());
        } catch (const AnswerNotAnObject& defect) {
          throw std::runtime_error(std::string(defect.what()) + ": " + response.describe());
        }
        returned = info.mount_contract_version;
      }
    } catch (const BackendCapacityError& refusal) {
      logger_->warning(refusal.what());
      throw;
    } catch (const std::exception& error) {
      logger_->error("Provisioner create failed for " + id + ": " + error.what());
      throw std::runtime_error(std::string("Provisioner create failed: ") + error.what());
    }
    if (returned != required) {
      {
        MutexLock lock(probe_mutex_);
        version_.store(returned);
        known_.store(true);
        next_probe_at_ = clock_->monotonic_now() + kKnownProbeInterval;
      }
      logger_->warning("Provisioner created sandbox " + id + " under mount contract " +
                       std::to_string(returned) + " instead of " + std::to_string(required));
      throw MountContractChangedError(required, returned);
    }
    logger_->info("Provisioner created sandbox " + id + ": sandbox_url=" + info.sandbox_url);
    return info;
  }

  void destroy(const SandboxInfo& info) override {
    try {
      const HttpResponse response =
          http_request("DELETE", sandbox_url_for(info.sandbox_id), api_key_, kDestroyTimeout);
      if (response.ok()) {
        logger_->info("Provisioner destroyed sandbox " + info.sandbox_id);
      } else {
        logger_->warning("Provisioner destroy returned " + std::to_string(response.status) + ": " +
                         response.text());
      }
    } catch (const std::exception& error) {
      logger_->warning("Provisioner destroy failed for " + info.sandbox_id + ": " + error.what());
    }
  }

  bool is_alive(const SandboxInfo& info) override {
    const std::string& id = info.sandbox_id;
    HttpResponse response;
    try {
      response = http_request("GET", sandbox_url_for(id), api_key_, kGetTimeout);
    } catch (const std::exception& error) {
      throw std::runtime_error("Provisioner health check failed for " + id + ": " + error.what());
    }
    if (response.status == 404) return false;
    if (!response.ok()) {
      throw std::runtime_error("Provisioner health check failed for " + id + ": " +
                               response.describe());
    }
    try {
      return read_running_status(response.body);
    } catch (const std::runtime_error& defect) {
      throw std::runtime_error("Provisioner health check failed for " + id + ": " + defect.what());
    }
  }

  std::optional<SandboxInfo> discover(const std::string& sandbox_id) override {
    HttpResponse response;
    try {
      response = http_request("GET", sandbox_url_for(sandbox_id), api_key_, kGetTimeout);
    } catch (const std::exception& error) {
      logger_->debug("Provisioner discover failed for " + sandbox_id + ": " + error.what());
      return std::nullopt;
    }
    if (response.status == 404) return std::nullopt;
    if (!response.ok()) {
      logger_->debug("Provisioner discover failed for " + sandbox_id + ": " + response.describe());
      return std::nullopt;
    }
    std::optional<SandboxInfo> info =
        read_discovered_sandbox(sandbox_id, response.body, clock_->wall_now());
    if (!info) {
      logger_->debug("Provisioner discover for " + sandbox_id +
                     ": response carries no usable URL or verified identity; ignored");
    }
    return info;
  }

  SandboxDiscoveryResult discover_for_reconciliation(const std::string& sandbox_id) override {
    HttpResponse response;
    try {
      response =
          http_request("GET", sandbox_url_for(sandbox_id) + "/instance", api_key_, kGetTimeout);
    } catch (const std::exception& error) {
      logger_->debug("Provisioner instance lookup failed for " + sandbox_id + ": " + error.what());
      return SandboxDiscoveryResult::unknown();
    }
    if (response.status != 200) return SandboxDiscoveryResult::unknown();
    return read_instance_answer(sandbox_id, response.body, clock_->wall_now());
  }

  std::vector<SandboxInfo> list_running() override {
    std::vector<SandboxInfo> out;
    HttpResponse response;
    try {
      response = http_request("GET", base_url_ + "/api/sandboxes", api_key_, kListTimeout);
    } catch (const std::exception& error) {
      logger_->warning(std::string("Provisioner list_running failed: ") + error.what());
      return out;
    }
    std::optional<SandboxListing> listing;
    if (response.ok()) listing = read_list_answer(response.body, clock_->wall_now());
    if (!listing) {
      logger_->warning("Provisioner list_running: unexpected response " + response.describe());
      return out;
    }
    for (const std::string& entry : listing->skipped) {
      logger_->warning("Provisioner list_running: skipping malformed entry " + entry);
    }
    out = std::move(listing->sandboxes);
    logger_->info("Provisioner list_running: " + std::to_string(out.size()) + " sandbox(es) found");
    return out;
  }

 private:
  // The provisioner cannot report usage (its backend cannot: 501; or it has no such route).
  struct UsageUnsupported : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  // GET /api/sandboxes/{id}/usage's body (200). Throws UsageUnsupported (then the route is
  // not asked again for a minute), or std::runtime_error for any other failure.
  std::string usage_answer(const SandboxInfo& info) {
    if (clock_->monotonic_now() < usage_unsupported_until_.load()) {
      throw UsageUnsupported("the provisioner's backend reports no usage");
    }
    HttpResponse response;
    try {
      response =
          http_request("GET", sandbox_url_for(info.sandbox_id) + "/usage", api_key_, kUsageTimeout);
    } catch (const TransportError& error) {
      throw std::runtime_error("Provisioner usage call failed for " + info.sandbox_id + ": " +
                               error.what());
    }
    // 501: its backend cannot tell; no such route: a provisioner without usage (DeerFlow's).
    if (response.status == 501 || is_unknown_route_answer(response.status, response.body)) {
      usage_unsupported_until_.store(clock_->monotonic_now() + kUsageUnsupportedRetry);
      throw UsageUnsupported(response.status == 501 ? "the provisioner's backend reports no usage"
                                                    : "the provisioner has no usage route");
    }
    if (!response.ok()) {
      throw std::runtime_error("Provisioner usage of " + info.sandbox_id + " answered HTTP " +
                               std::to_string(response.status));
    }
    return response.body;
  }

  std::string sandbox_url_for(const std::string& sandbox_id) const {
    return base_url_ + "/api/sandboxes/" + sandbox_id;
  }

  std::string effective_user(const std::optional<std::string>& explicit_user) const {
    if (explicit_user && !explicit_user->empty()) return *explicit_user;
    if (ambient_user_id_) {
      std::string ambient = ambient_user_id_();
      if (!ambient.empty()) return ambient;
    }
    return "default";
  }

  // One GET /api/capabilities; never throws.
  void probe_locked() REQUIRES(probe_mutex_) {
    const double now = clock_->monotonic_now();
    std::string problem;
    try {
      const HttpResponse response =
          http_request("GET", base_url_ + "/api/capabilities", api_key_, kCapabilitiesTimeout);
      if (response.status == 404) {
        set_known_locked(0, now);
        logger_->debug("Provisioner has no capabilities endpoint; legacy mount contract 0");
        return;
      }
      if (!response.ok()) {
        problem = response.describe();
      } else {
        set_known_locked(read_capabilities_answer(response.body), now);  // throws a defect
        return;
      }
    } catch (const std::exception& error) {
      problem = error.what();
    }
    known_.store(false);
    next_probe_at_ = now + kUnavailableProbeInterval;
    logger_->warning("Provisioner capability probe failed (keeping mount contract " +
                     std::to_string(version_.load()) + ", unknown): " + problem);
  }

  void set_known_locked(int version, double now) REQUIRES(probe_mutex_) {
    version_.store(version);
    known_.store(true);
    next_probe_at_ = now + kKnownProbeInterval;
  }

  std::shared_ptr<Logger> logger_;
  std::shared_ptr<Clock> clock_;
  std::function<std::string()> ambient_user_id_;
  std::function<bool(const std::string&)> user_should_see_legacy_skills_;
  std::string base_url_;
  std::string api_key_;  // never logged

  // Lock story (design §10.2): probe_mutex_ is the capability-probe lock. It is held across the
  // whole probe (one HTTP GET of up to 5 s) by refresh and by mount_contract_snapshot, so a
  // snapshot blocks while a probe runs; it guards next_probe_at_ and every write of version_
  // and known_. The cached accessors read the two atomics without it and never block.
  Mutex probe_mutex_;
  std::atomic<int> version_{0};
  std::atomic<bool> known_{false};
  double next_probe_at_ GUARDED_BY(probe_mutex_) = 0.0;  // 0 = stale
  // Monotonic seconds; read and written by any sampler thread without a lock (a late write
  // only moves the next question by a sweep).
  std::atomic<double> usage_unsupported_until_{0.0};
};

SANDBOXD_EXPORT_BACKEND(RemoteSandboxBackend, "sandboxes run by the DeerFlow provisioner service")

}  // namespace sandboxd::remote_provisioner

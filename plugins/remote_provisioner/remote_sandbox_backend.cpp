// remote_provisioner:RemoteSandboxBackend — sandboxes run by the DeerFlow provisioner service
// (SPEC §10). Every call is one HTTP request with its own libcurl handle.
//
// Lock story: `probe_mutex_` (the probe lock) guards the capability state: `version_`,
// `known_` and `next_probe_at_`. It is held across the capabilities GET (up to 5 s), so
// refresh_capabilities_if_stale() and mount_contract_snapshot() may block. `version_` and
// `known_` are atomics written only under the lock, so the cached accessors read them without
// it and never block. Nothing else is shared; the HTTP helpers keep no state.
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "provisioner_support.hpp"
#include "sandboxd/http.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/sdk.hpp"

namespace sandboxd::remote_provisioner {
namespace {

constexpr double kCapabilitiesTimeout = 5.0;
constexpr double kListTimeout = 10.0;
constexpr double kCreateTimeout = 30.0;
constexpr double kDestroyTimeout = 15.0;
constexpr double kGetTimeout = 10.0;
constexpr double kKnownProbeInterval = 30.0;
constexpr double kUnavailableProbeInterval = 1.0;

std::optional<std::string> string_member(const rapidjson::Value& object, const char* name) {
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsString()) return std::nullopt;
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

std::optional<std::string> non_empty_string_member(const rapidjson::Value& object,
                                                   const char* name) {
  auto value = string_member(object, name);
  if (!value || value->empty()) return std::nullopt;
  return value;
}

// mount_contract_version as an int: missing or null → 0; anything else not an int → nullopt.
std::optional<int> contract_version_member(const rapidjson::Value& object) {
  auto it = object.FindMember("mount_contract_version");
  if (it == object.MemberEnd() || it->value.IsNull()) return 0;
  if (it->value.IsInt()) return it->value.GetInt();
  return std::nullopt;
}

// sandbox_url as the service returned it, if it is a URL we may request: a provisioner (or
// whatever answers in its place) must not point the provider at file:///dev/zero or similar.
std::optional<std::string> sandbox_url_member(const rapidjson::Value& object) {
  auto url = non_empty_string_member(object, "sandbox_url");
  if (!url || !http::is_http_url(*url)) return std::nullopt;
  return url;
}

bool parse_object(const std::string& body, rapidjson::Document& doc) {
  return parse_json(doc, body) && doc.IsObject();
}

// The version in a create refused with 409 {"mount_contract_version": N} (SPEC §10.3's proposed
// refusal of a contract the provisioner does not serve); nothing for any other answer.
std::optional<int> served_contract_of_refusal(const HttpResponse& response) {
  if (response.status != 409) return std::nullopt;
  rapidjson::Document doc;
  if (!parse_object(response.body, doc) || !doc.HasMember("mount_contract_version") ||
      !doc["mount_contract_version"].IsInt()) {
    return std::nullopt;
  }
  return doc["mount_contract_version"].GetInt();
}

}  // namespace

class RemoteSandboxBackend final : public SandboxBackend {
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

  // ── capability negotiation (§10.2) ──

  bool requires_create_validation() const override { return true; }
  MountModeKind mount_mode_kind() const override { return MountModeKind::contract_negotiated; }

  void refresh_capabilities_if_stale() override {
    std::lock_guard lock(probe_mutex_);
    if (clock_->monotonic_now() >= next_probe_at_) probe_locked();
  }

  MountContractSnapshot mount_contract_snapshot() override {
    std::lock_guard lock(probe_mutex_);
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
    writer.Key("sandbox_id");
    writer.String(id.c_str(), static_cast<rapidjson::SizeType>(id.size()));
    writer.Key("thread_id");
    if (request.thread_id) {
      writer.String(request.thread_id->c_str(),
                    static_cast<rapidjson::SizeType>(request.thread_id->size()));
    } else {
      writer.Null();
    }
    writer.Key("user_id");
    writer.String(user.c_str(), static_cast<rapidjson::SizeType>(user.size()));
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
      if (std::optional<int> served = served_contract_of_refusal(response)) {
        // Nothing was created; the acquisition restarts under the contract the provisioner
        // serves. A refusal naming the very version we asked for makes no sense: a failure.
        if (*served == required) throw std::runtime_error(response.describe());
        returned = *served;
        refused = true;
      }
      if (!refused && !response.ok()) throw std::runtime_error(response.describe());
      rapidjson::Document doc;
      if (!refused) {
        if (!parse_object(response.body, doc)) {
          throw std::runtime_error("response is not a JSON object: " + response.describe());
        }
        auto url = non_empty_string_member(doc, "sandbox_url");
        if (!url) throw std::runtime_error("response has no sandbox_url");
        if (!http::is_http_url(*url)) {
          throw std::runtime_error("response has a sandbox_url that is not http:// or https://: '" +
                                   redacted_url(url->substr(0, 200)) + "'");
        }
        auto version = contract_version_member(doc);
        if (!version) throw std::runtime_error("response has a non-integer mount_contract_version");
        returned = *version;
        info.sandbox_id = id;
        info.sandbox_url = *url;
        info.created_at = clock_->wall_now();
        info.user_id = string_member(doc, "user_id");
        info.thread_id = string_member(doc, "thread_id");
        info.mount_contract_version = returned;
      }
    } catch (const std::exception& error) {
      logger_->error("Provisioner create failed for " + id + ": " + error.what());
      throw std::runtime_error(std::string("Provisioner create failed: ") + error.what());
    }
    if (returned != required) {
      {
        std::lock_guard lock(probe_mutex_);
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
    rapidjson::Document doc;
    if (!parse_object(response.body, doc)) {
      throw std::runtime_error("Provisioner health check failed for " + id +
                               ": response is not a JSON object");
    }
    return string_member(doc, "status") == std::optional<std::string>("Running");
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
    rapidjson::Document doc;
    if (!parse_object(response.body, doc)) {
      logger_->debug("Provisioner discover for " + sandbox_id + ": malformed response");
      return std::nullopt;
    }
    auto url = sandbox_url_member(doc);
    auto user = non_empty_string_member(doc, "user_id");
    auto thread = non_empty_string_member(doc, "thread_id");
    auto version = contract_version_member(doc);
    if (!url || !user || !thread || !version) {
      logger_->debug("Provisioner discover for " + sandbox_id +
                     ": response carries no verified identity; ignored");
      return std::nullopt;
    }
    SandboxInfo info;
    info.sandbox_id = sandbox_id;
    info.sandbox_url = *url;
    info.created_at = clock_->wall_now();
    info.user_id = user;
    info.thread_id = thread;
    info.mount_contract_version = *version;
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
    rapidjson::Document doc;
    if (!parse_object(response.body, doc)) return SandboxDiscoveryResult::unknown();
    auto namespace_it = doc.FindMember("backend_namespace");
    if (namespace_it == doc.MemberEnd() || !namespace_it->value.IsString()) {
      return SandboxDiscoveryResult::unknown();
    }
    const std::string backend_namespace = namespace_it->value.GetString();
    auto incarnation_it = doc.FindMember("incarnation_id");
    if (incarnation_it == doc.MemberEnd() || incarnation_it->value.IsNull()) {
      return SandboxDiscoveryResult::absent(backend_namespace);
    }
    if (!incarnation_it->value.IsString()) return SandboxDiscoveryResult::unknown();
    const std::string incarnation = incarnation_it->value.GetString();
    auto version = contract_version_member(doc);
    if (!version) return SandboxDiscoveryResult::unknown();
    std::optional<SandboxInfo> info;
    if (auto url = sandbox_url_member(doc)) {
      SandboxInfo found;
      found.sandbox_id = sandbox_id;
      found.sandbox_url = *url;
      found.created_at = clock_->wall_now();
      found.user_id = non_empty_string_member(doc, "user_id");
      found.thread_id = non_empty_string_member(doc, "thread_id");
      found.mount_contract_version = *version;
      info = std::move(found);
    }
    return SandboxDiscoveryResult::found(std::move(info), backend_namespace, incarnation);
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
    rapidjson::Document doc;
    if (!response.ok() || !parse_object(response.body, doc) || !doc.HasMember("sandboxes") ||
        !doc["sandboxes"].IsArray()) {
      logger_->warning("Provisioner list_running: unexpected response " + response.describe());
      return out;
    }
    const auto& entries = doc["sandboxes"];
    for (rapidjson::SizeType i = 0; i < entries.Size(); ++i) {
      const auto& entry = entries[i];
      std::optional<std::string> id;
      std::optional<std::string> url;
      if (entry.IsObject()) {
        id = non_empty_string_member(entry, "sandbox_id");
        url = sandbox_url_member(entry);
      }
      if (!id || !url) {
        logger_->warning("Provisioner list_running: skipping malformed entry " +
                         shown_value(entry));
        continue;
      }
      SandboxInfo info;
      info.sandbox_id = *id;
      info.sandbox_url = *url;
      auto created = entry.FindMember("created_at");
      info.created_at = created != entry.MemberEnd() && created->value.IsNumber() &&
                                created->value.GetDouble() > 0
                            ? created->value.GetDouble()
                            : clock_->wall_now();
      info.user_id = non_empty_string_member(entry, "user_id");
      info.thread_id = non_empty_string_member(entry, "thread_id");
      info.mount_contract_version = contract_version_member(entry).value_or(0);
      out.push_back(std::move(info));
    }
    logger_->info("Provisioner list_running: " + std::to_string(out.size()) + " sandbox(es) found");
    return out;
  }

 private:
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

  // Requires probe_mutex_. One GET /api/capabilities; never throws.
  void probe_locked() {
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
        rapidjson::Document doc;
        if (!parse_object(response.body, doc)) {
          problem = "response is not a JSON object";
        } else if (auto version = contract_version_member(doc); !version) {
          problem = "mount_contract_version is not an integer";
        } else {
          set_known_locked(*version, now);
          return;
        }
      }
    } catch (const std::exception& error) {
      problem = error.what();
    }
    known_.store(false);
    next_probe_at_ = now + kUnavailableProbeInterval;
    logger_->warning("Provisioner capability probe failed (keeping mount contract " +
                     std::to_string(version_.load()) + ", unknown): " + problem);
  }

  void set_known_locked(int version, double now) {
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

  // Lock story (SPEC §10.2): probe_mutex_ is the capability-probe lock. It is held across the
  // whole probe (one HTTP GET of up to 5 s) by refresh and by mount_contract_snapshot, so a
  // snapshot blocks while a probe runs; it guards next_probe_at_ and every write of version_
  // and known_. The cached accessors read the two atomics without it and never block.
  std::mutex probe_mutex_;
  std::atomic<int> version_{0};
  std::atomic<bool> known_{false};
  double next_probe_at_ = 0.0;  // guarded by probe_mutex_; 0 = stale
};

SANDBOXD_EXPORT_BACKEND(RemoteSandboxBackend, "sandboxes run by the DeerFlow provisioner service")

}  // namespace sandboxd::remote_provisioner

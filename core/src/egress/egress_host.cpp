// EgressHost and egress_settings_from (egress_host.hpp).
#include "sandboxd/core/egress_host.hpp"

#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>

#include "sandboxd/core/config.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/host_fs.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/plugin_config.hpp"

namespace sandboxd::core {

namespace {

constexpr const char* kGrantsFile = "egress-grants.json";

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw ConfigError(path + ": " + what);
}

}  // namespace

std::optional<EgressSettings> egress_settings_from(const std::string& backend_options_json,
                                                   const std::string& key_path) {
  rapidjson::Document doc;
  if (!parse_json(doc, backend_options_json) || !doc.IsObject()) return std::nullopt;
  const auto network = doc.FindMember("network");
  if (network == doc.MemberEnd() || !network->value.IsObject()) return std::nullopt;
  const rapidjson::Value& section = network->value;
  const std::string base = key_path + ".network";
  const auto mode = section.FindMember("mode");
  if (mode == section.MemberEnd() || !mode->value.IsString() ||
      std::string(mode->value.GetString()) != "allowlist") {
    return std::nullopt;
  }
  EgressSettings out;
  std::vector<std::string> domains;
  if (const auto list = section.FindMember("allow_domains");
      list != section.MemberEnd() && !list->value.IsNull()) {
    if (!list->value.IsArray()) bad(base + ".allow_domains", "expected a list of domain names");
    std::size_t index = 0;
    for (const auto& entry : list->value.GetArray()) {
      const std::string where = base + ".allow_domains[" + std::to_string(index++) + "]";
      if (!entry.IsString()) bad(where, "expected a domain name or *.suffix");
      try {
        egress::DomainAllowlist({entry.GetString()});
      } catch (const std::invalid_argument& e) {
        bad(where, e.what());
      }
      domains.emplace_back(entry.GetString());
    }
  }
  out.policy.allow = egress::DomainAllowlist(domains);
  if (const auto approval = section.FindMember("approval");
      approval != section.MemberEnd() && !approval->value.IsNull()) {
    const std::string text = approval->value.IsString() ? approval->value.GetString() : "";
    if (text != "deny" && text != "prompt") {
      bad(base + ".approval", "expected deny or prompt, got " + json_to_string(approval->value));
    }
    out.policy.prompt = text == "prompt";
  } else {
    out.policy.prompt = true;  // DeerFlow's default
  }
  if (const auto ttl = section.FindMember("temporary_grant_ttl");
      ttl != section.MemberEnd() && !ttl->value.IsNull()) {
    if (!ttl->value.IsNumber() || ttl->value.GetDouble() < 30 || ttl->value.GetDouble() > 3600) {
      bad(base + ".temporary_grant_ttl",
          "expected seconds from 30 to 3600, got " + json_to_string(ttl->value));
    }
    out.policy.temporary_grant_ttl = ttl->value.GetDouble();
  }
  if (const auto upstreams = section.FindMember("test_only_upstreams");
      upstreams != section.MemberEnd() && !upstreams->value.IsNull()) {
    if (!upstreams->value.IsObject()) {
      bad(base + ".test_only_upstreams", "expected {\"name\": \"127.0.0.x:PORT\"}");
    }
    for (const auto& entry : upstreams->value.GetObject()) {
      const std::string where = base + ".test_only_upstreams." + entry.name.GetString();
      const auto name = egress::normalize_domain(entry.name.GetString());
      const std::string target = entry.value.IsString() ? entry.value.GetString() : "";
      const std::size_t colon = target.rfind(':');
      boost::system::error_code ec;
      const auto address = boost::asio::ip::make_address(
          colon == std::string::npos ? "" : target.substr(0, colon), ec);
      int port = 0;
      try {
        port = colon == std::string::npos ? 0 : std::stoi(target.substr(colon + 1));
      } catch (const std::exception&) {
        port = 0;
      }
      // Test upstreams live on this host's loopback, never anywhere else.
      if (!name || ec || !address.is_loopback() || port < 1 || port > 65535) {
        bad(where, "expected a name and \"127.0.0.x:PORT\" (test upstreams are loopback only)");
      }
      out.test_only_upstreams[*name] =
          boost::asio::ip::tcp::endpoint(address, static_cast<unsigned short>(port));
    }
  }
  return out;
}

EgressHost::EgressHost(Provider& provider, EgressSettings settings, std::filesystem::path state_dir,
                       std::shared_ptr<Logger> logger, std::shared_ptr<Clock> clock)
    : provider_(provider),
      settings_(std::move(settings)),
      state_dir_(std::move(state_dir)),
      logger_(std::move(logger)) {
  std::shared_ptr<EgressNetwork> network = system_egress_network();
  if (!settings_.test_only_upstreams.empty()) {
    network = test_upstream_network(settings_.test_only_upstreams);
    logger_->warning(
        "egress: network.test_only_upstreams is set: names are resolved to loopback test "
        "upstreams instead of through DNS. FOR TESTS ONLY; never in a deployment");
  }
  proxy_ = std::make_unique<EgressProxy>(settings_.policy, network, EgressOptions{}, logger_,
                                         std::move(clock));
}

EgressHost::~EgressHost() {
  stop();
}

void EgressHost::start(std::chrono::milliseconds sync_interval) {
  proxy_->start();
  std::ifstream in(state_dir_ / kGrantsFile);
  if (in) {
    std::stringstream text;
    text << in.rdbuf();
    proxy_->restore_grants(text.str());
  }
  sync();
  sync_thread_ = std::thread([this, sync_interval] {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, sync_interval, [this] { return stopping_; })) {
      lock.unlock();
      try {
        sync();
      } catch (const std::exception& e) {
        logger_->warning(std::string("egress: sync pass failed: ") + e.what());
      }
      lock.lock();
    }
  });
  const auto entries = settings_.policy.allow.entries();
  std::string shown;
  for (const auto& entry : entries) shown += (shown.empty() ? "" : ", ") + entry;
  logger_->info("egress: allowlist mode: sandboxes reach only " +
                (shown.empty() ? std::string("(no name)") : shown) + " through the proxy at " +
                kEgressProxyHost + ":" + std::to_string(kEgressProxyPort) +
                " inside each sandbox; approval " + (settings_.policy.prompt ? "prompt" : "deny"));
}

void EgressHost::stop() {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (sync_thread_.joinable()) sync_thread_.join();
  proxy_->stop();
}

void EgressHost::attach_if_needed(const SandboxInfo& info) {
  if (info.network_policy != "allowlist") return;
  const auto attached = proxy_->attached();
  if (std::find(attached.begin(), attached.end(), info.sandbox_id) != attached.end()) return;
  const std::optional<SandboxEndpoint> endpoint = provider_.endpoint(info.sandbox_id);
  if (!endpoint || !endpoint->open_socket || endpoint->paused) return;  // the next pass
  try {
    proxy_->attach(info.sandbox_id, make_egress_listener(endpoint->open_socket));
  } catch (const std::exception& e) {
    logger_->error("egress: sandbox " + info.sandbox_id + " has no way out: " + e.what());
  }
}

void EgressHost::forget(const std::string& sandbox_id) {
  proxy_->detach(sandbox_id);
  save_grants();
}

void EgressHost::sync() {
  const RegistrySnapshot snapshot = provider_.export_registry();
  std::set<std::string> tracked;
  for (const TrackedSandbox& sandbox : snapshot.sandboxes) {
    tracked.insert(sandbox.info.sandbox_id);
    if (!sandbox.paused) attach_if_needed(sandbox.info);
  }
  bool dropped = false;
  for (const std::string& id : proxy_->attached()) {
    if (tracked.count(id) == 0) {
      proxy_->detach(id);
      dropped = true;
    }
  }
  if (dropped) save_grants();
}

void EgressHost::save_grants() {
  try {
    const host_fs::UniqueFd dir = host_fs::open_trusted_dir(state_dir_);
    host_fs::replace_file_at(dir.get(), kGrantsFile, proxy_->grants_json() + "\n", 0600,
                             state_dir_ / kGrantsFile);
  } catch (const std::exception& e) {
    logger_->warning(std::string("egress: cannot keep the grants: ") + e.what());
  }
}

}  // namespace sandboxd::core

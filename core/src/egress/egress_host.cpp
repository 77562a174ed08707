// EgressHost and egress_settings_from (egress_host.hpp).
#include "sandboxd/core/egress_host.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>

#include "sandboxd/core/random_hex.hpp"
#include "sandboxd/core/config.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/relay_tokens.hpp"
#include "sandboxd/core/socket_namespace.hpp"
#include "sandboxd/host_fs.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/plugin_config.hpp"

namespace sandboxd::core {

namespace {

constexpr const char* kGrantsFile = "egress-grants.json";

constexpr const char* kPlaceholdersFile = "egress-placeholders.json";
constexpr std::size_t kMaxSecretBytes = 4096;
constexpr std::size_t kMaxPemBytes = 64 * 1024;               // a CA certificate or its key
constexpr std::size_t kMaxRootsBytes = 1024 * 1024;           // upstream_ca_file, a bundle
constexpr std::size_t kMaxStateFileBytes = 16 * 1024 * 1024;  // the grants of 10,000 sandboxes fit

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw ConfigError(path + ": " + what);
}

bool is_env_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

bool is_header_name(const std::string& name) {
  static const std::string extra = "!#$%&'*+-.^_`|~";
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || extra.find(c) != std::string::npos;
  });
}

std::string lowercase(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

enum class Readers { anyone, only_us };

// What `file` (absolute; its last component never a link) holds, at most `limit` bytes (one
// more is an error); with Readers::only_us it must be a file of ours that nobody else can read.
// Errors name the file and what is wrong with it, never what it holds.
std::string read_config_file(const std::string& file, const std::string& where, std::size_t limit,
                             Readers readers) {
  const std::filesystem::path path(file);
  if (!path.is_absolute() || !path.has_filename()) {
    bad(where, "expected an absolute path to a file, got \"" + file + "\"");
  }
  try {
    const host_fs::UniqueFd dir = host_fs::open_trusted_dir(path.parent_path());
    const host_fs::UniqueFd in =
        host_fs::open_file(dir.get(), path.filename().string(), O_RDONLY, 0, path);
    const struct stat st = host_fs::stat_of(in.get(), path);
    if (readers == Readers::only_us && (st.st_uid != ::geteuid() || (st.st_mode & 077) != 0)) {
      bad(where, file +
                     " must belong to this process's user and be readable by nobody else (mode " +
                     host_fs::octal_mode(st.st_mode) + ", owner " +
                     host_fs::describe_uid(st.st_uid) + "); chmod 600 it");
    }
    std::string value = host_fs::read_fd(in.get(), limit + 1, path);
    if (value.size() > limit) {
      bad(where, file + " holds more than " + std::to_string(limit / 1024) + " KiB");
    }
    if (value.empty()) bad(where, file + " is empty");
    return value;
  } catch (const std::filesystem::filesystem_error& e) {
    bad(where, e.what());
  } catch (const host_fs::UnsafePathError& e) {
    bad(where, e.what());
  }
}

// The secret in `file`: a file of ours nobody else can read, one line of at most 4 KiB (a
// final newline dropped).
std::string read_secret_file(const std::string& file, const std::string& where) {
  std::string value = read_config_file(file, where, kMaxSecretBytes + 2, Readers::only_us);
  if (!value.empty() && value.back() == '\n') value.pop_back();
  if (!value.empty() && value.back() == '\r') value.pop_back();
  if (value.empty()) bad(where, file + " is empty");
  if (value.size() > kMaxSecretBytes) bad(where, file + " holds more than 4 KiB");
  if (value.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
    bad(where, file + " holds more than one line (a header value cannot)");
  }
  return value;
}

// `network.inject_tls_ca`: {"certificate_file", "key_file"}, the key ours and private.
TlsKeyPair read_interception_authority(const rapidjson::Value& section, const std::string& where) {
  if (!section.IsObject()) {
    bad(where, "expected {\"certificate_file\": PATH, \"key_file\": PATH}");
  }
  const auto path_of = [&](const char* key) {
    const auto it = section.FindMember(key);
    if (it == section.MemberEnd() || !it->value.IsString()) {
      bad(where + "." + key, "expected the absolute path of a PEM file");
    }
    return std::string(it->value.GetString());
  };
  TlsKeyPair authority;
  authority.certificate_pem = read_config_file(
      path_of("certificate_file"), where + ".certificate_file", kMaxPemBytes, Readers::anyone);
  authority.key_pem =
      read_config_file(path_of("key_file"), where + ".key_file", kMaxPemBytes, Readers::only_us);
  try {
    check_certificate_authority(authority);
  } catch (const std::invalid_argument& e) {
    bad(where, e.what());
  }
  return authority;
}

// One entry of `network.secrets`.
EgressSecret secret_from(const rapidjson::Value& entry, const std::string& where,
                         const egress::DomainAllowlist& allow, bool can_end_tls) {
  if (!entry.IsObject()) {
    bad(where, "expected {\"name\", \"secret_file\", \"inject\": {\"host\", \"header\"}}");
  }
  const auto text = [&](const rapidjson::Value& object, const char* key, const std::string& at,
                        bool required) -> std::string {
    const auto it = object.FindMember(key);
    if (it == object.MemberEnd() || it->value.IsNull()) {
      if (required) bad(at + "." + key, "is required");
      return "";
    }
    if (!it->value.IsString()) bad(at + "." + key, "expected a string");
    return it->value.GetString();
  };
  EgressSecret secret;
  secret.name = text(entry, "name", where, true);
  if (!is_env_name(secret.name)) {
    bad(where + ".name", "\"" + secret.name + "\" is not an environment variable name");
  }
  const auto inject = entry.FindMember("inject");
  if (inject == entry.MemberEnd() || !inject->value.IsObject()) {
    bad(where + ".inject", "expected {\"host\", \"header\", \"format\", \"scheme\"}");
  }
  const std::string at = where + ".inject";
  const std::string host = text(inject->value, "host", at, true);
  const auto domain = egress::normalize_domain(host);
  if (!domain || egress::is_ip_literal(host)) {
    bad(at + ".host", "\"" + host + "\" is not a host name");
  }
  if (!allow.allows(*domain)) {
    bad(at + ".host", *domain + " is not in allow_domains: the secret could never be sent");
  }
  secret.domain = *domain;
  secret.header = text(inject->value, "header", at, true);
  const std::string header = lowercase(secret.header);
  if (!is_header_name(secret.header) || header == "host" || header == "content-length" ||
      header == "transfer-encoding" || header == "connection" || header.rfind("proxy-", 0) == 0) {
    bad(at + ".header", "\"" + secret.header + "\" is not a header a secret can go into");
  }
  if (const std::string format = text(inject->value, "format", at, false); !format.empty()) {
    const std::size_t first = format.find("{}");
    if (first == std::string::npos || format.find("{}", first + 2) != std::string::npos ||
        format.find_first_of("\r\n") != std::string::npos) {
      bad(at + ".format",
          "expected one line with one {} where the secret goes, got \"" + format + "\"");
    }
    secret.format = format;
  }
  const std::string scheme = text(inject->value, "scheme", at, false);
  if (!scheme.empty() && scheme != "http" && scheme != "https") {
    bad(at + ".scheme", "expected http or https, got \"" + scheme + "\"");
  }
  secret.https = scheme != "http";
  if (secret.https && !can_end_tls) {
    // The proxy can change only requests it can read: an https one only when it ends the
    // sandbox's TLS itself, with a CA the image trusts.
    bad(at + ".scheme",
        (scheme.empty() ? std::string("not given (an https destination)") : "\"https\"") +
            ": the proxy can put a secret only into requests it can read; for an https "
            "destination it must end the sandbox's TLS with a CA the image trusts: give "
            "network.inject_tls_ca. Declare scheme: http for a plain-HTTP destination, or keep "
            "this secret out of sandboxd");
  }
  secret.value = read_secret_file(text(entry, "secret_file", where, true), where + ".secret_file");
  return secret;
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
  if (const auto ca = section.FindMember("inject_tls_ca");
      ca != section.MemberEnd() && !ca->value.IsNull()) {
    out.policy.interception_authority =
        read_interception_authority(ca->value, base + ".inject_tls_ca");
  }
  if (const auto roots = section.FindMember("upstream_ca_file");
      roots != section.MemberEnd() && !roots->value.IsNull()) {
    const std::string where = base + ".upstream_ca_file";
    if (!roots->value.IsString()) bad(where, "expected the absolute path of a PEM file");
    out.policy.upstream_roots_pem =
        read_config_file(roots->value.GetString(), where, kMaxRootsBytes, Readers::anyone);
    if (certificate_subject(out.policy.upstream_roots_pem) == "(not a certificate)") {
      bad(where, std::string(roots->value.GetString()) + " holds no PEM certificate");
    }
  }
  if (const auto secrets = section.FindMember("secrets");
      secrets != section.MemberEnd() && !secrets->value.IsNull()) {
    if (!secrets->value.IsArray()) bad(base + ".secrets", "expected a list");
    std::set<std::string> names;
    std::size_t index = 0;
    for (const auto& entry : secrets->value.GetArray()) {
      const std::string where = base + ".secrets[" + std::to_string(index++) + "]";
      EgressSecret secret = secret_from(entry, where, out.policy.allow,
                                        out.policy.interception_authority.has_value());
      if (!names.insert(secret.name).second) {
        bad(where + ".name", secret.name + " is declared twice");
      }
      out.policy.secrets.push_back(std::move(secret));
    }
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

void assign_secret_placeholders(EgressSettings& settings, const std::filesystem::path& state_dir) {
  if (settings.policy.secrets.empty()) return;
  const std::filesystem::path shown = state_dir / kPlaceholdersFile;
  const host_fs::UniqueFd dir = host_fs::open_trusted_dir(state_dir);
  rapidjson::Document kept;
  kept.SetObject();
  try {
    const std::string text =
        host_fs::read_file_at(dir.get(), kPlaceholdersFile, kMaxStateFileBytes, shown);
    if (!parse_json(kept, text) || !kept.IsObject()) {
      throw ConfigError(shown.string() +
                        " is not a JSON object; delete it and new placeholders "
                        "are made (sandboxes made before hold the old ones)");
    }
  } catch (const std::filesystem::filesystem_error& e) {
    if (e.code() != std::errc::no_such_file_or_directory) throw;
  }
  bool added = false;
  for (EgressSecret& secret : settings.policy.secrets) {
    const auto it = kept.FindMember(secret.name.c_str());
    if (it != kept.MemberEnd() && it->value.IsString()) {
      secret.placeholder = it->value.GetString();
      continue;
    }
    secret.placeholder = "sandboxd-placeholder-" + random_hex(16, "a secret placeholder");
    kept.AddMember(rapidjson::Value(secret.name.c_str(), kept.GetAllocator()),
                   rapidjson::Value(secret.placeholder.c_str(), kept.GetAllocator()),
                   kept.GetAllocator());
    added = true;
  }
  if (added)
    host_fs::replace_file_at(dir.get(), kPlaceholdersFile, json_to_string(kept), 0600, shown);
}

std::string with_secret_placeholders(const std::string& backend_options_json,
                                     const EgressSettings& settings, const std::string& key_path) {
  if (settings.policy.secrets.empty()) return backend_options_json;
  rapidjson::Document doc;
  if (!parse_json(doc, backend_options_json) || !doc.IsObject()) return backend_options_json;
  auto& alloc = doc.GetAllocator();
  auto environment = doc.FindMember("environment");
  if (environment == doc.MemberEnd() || environment->value.IsNull()) {
    doc.RemoveMember("environment");
    doc.AddMember("environment", rapidjson::Value(rapidjson::kObjectType), alloc);
    environment = doc.FindMember("environment");
  }
  if (!environment->value.IsObject()) return backend_options_json;  // the backend names it
  for (const EgressSecret& secret : settings.policy.secrets) {
    if (environment->value.HasMember(secret.name.c_str())) {
      throw ConfigError(key_path + ".environment." + secret.name +
                        ": also declared in network.secrets; the sandbox gets the placeholder "
                        "there, so give it one or the other");
    }
    environment->value.AddMember(rapidjson::Value(secret.name.c_str(), alloc),
                                 rapidjson::Value(secret.placeholder.c_str(), alloc), alloc);
  }
  return json_to_string(doc);
}

EgressSandboxes provider_egress_sandboxes(Provider& provider) {
  EgressSandboxes sandboxes;
  sandboxes.tracked = [&provider] {
    std::vector<EgressSandboxes::Tracked> tracked;
    for (TrackedSandbox& sandbox : provider.export_registry().sandboxes) {
      tracked.push_back({std::move(sandbox.info), sandbox.state == SandboxState::paused});
    }
    return tracked;
  };
  sandboxes.endpoint = [&provider](const std::string& id) { return provider.endpoint(id); };
  return sandboxes;
}

EgressHost::EgressHost(EgressSandboxes sandboxes, EgressSettings settings,
                       std::filesystem::path state_dir, std::shared_ptr<Logger> logger,
                       std::shared_ptr<Clock> clock)
    : sandboxes_(std::move(sandboxes)),
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
  try {
    const host_fs::UniqueFd dir = host_fs::open_trusted_dir(state_dir_);
    proxy_->restore_grants(host_fs::read_file_at(dir.get(), kGrantsFile, kMaxStateFileBytes,
                                                 state_dir_ / kGrantsFile));
  } catch (const std::filesystem::filesystem_error& e) {
    if (e.code() != std::errc::no_such_file_or_directory) {
      logger_->warning(std::string("egress: the grants of the last run are lost: ") + e.what());
    }
  }
  prune();
  sync();
  sync_thread_ = std::thread([this, sync_interval] {
    while (true) {
      {
        MutexLock lock(mutex_);
        if (lock.wait_for(wake_, sync_interval, [this]() REQUIRES(mutex_) { return stopping_; })) {
          return;
        }
      }
      try {
        sync();
      } catch (const std::exception& e) {
        logger_->warning(std::string("egress: sync pass failed: ") + e.what());
      }
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
    MutexLock lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  wake_.notify_all();
  if (sync_thread_.joinable()) sync_thread_.join();
  proxy_->stop();
}

void EgressHost::attach_if_needed(const SandboxInfo& info) {
  if (info.network_policy != "allowlist" || proxy_->is_attached(info.sandbox_id)) return;
  const std::optional<SandboxEndpoint> endpoint = sandboxes_.endpoint(info.sandbox_id);
  if (!endpoint || !endpoint->open_socket || endpoint->paused) return;  // the next pass
  try {
    proxy_->attach(info.sandbox_id, make_egress_listener(endpoint->open_socket),
                   incarnation_of(info));
  } catch (const std::exception& e) {
    logger_->error("egress: sandbox " + info.sandbox_id + " has no way out: " + e.what());
  }
}

void EgressHost::keep_listener(const SandboxInfo& info) {
  const std::optional<net::NamespaceId> attached = proxy_->attached_namespace(info.sandbox_id);
  if (!attached) return;  // the kernel would not say: nothing to compare
  const std::optional<SandboxEndpoint> endpoint = sandboxes_.endpoint(info.sandbox_id);
  if (!endpoint || !endpoint->open_socket || endpoint->paused) return;
  std::optional<net::NamespaceId> now;
  try {
    const host_fs::UniqueFd probe(endpoint->open_socket());
    if (probe) now = net::socket_namespace(probe.get());
  } catch (const std::exception& e) {
    logger_->debug("egress: sandbox " + info.sandbox_id + "'s namespace not read: " + e.what());
    return;
  }
  if (!now || *now == *attached) return;
  // The sandbox's namespace was made anew (its container restarted): its listener follows it,
  // and the old one closes, so nothing holds the old namespace.
  try {
    proxy_->attach(info.sandbox_id, make_egress_listener(endpoint->open_socket),
                   incarnation_of(info));
    logger_->info("egress: sandbox " + info.sandbox_id +
                  " has a new network namespace (restarted); its proxy listener was made again "
                  "there");
  } catch (const std::exception& e) {
    logger_->error("egress: sandbox " + info.sandbox_id + " has no way out: " + e.what());
  }
}

void EgressHost::prune() {
  std::map<std::string, std::string> instances;  // tracked id → its instance
  for (const EgressSandboxes::Tracked& sandbox : sandboxes_.tracked()) {
    instances[sandbox.info.sandbox_id] = incarnation_of(sandbox.info);
  }
  proxy_->retain_decisions([&instances](const std::string& id, const std::string& incarnation) {
    const auto it = instances.find(id);
    return it != instances.end() &&
           (incarnation.empty() || it->second.empty() || incarnation == it->second);
  });
  save_grants();
}

void EgressHost::forget(const std::string& sandbox_id) {
  proxy_->detach(sandbox_id);
  save_grants();
}

void EgressHost::sync() {
  std::set<std::string> tracked;
  for (const EgressSandboxes::Tracked& sandbox : sandboxes_.tracked()) {
    tracked.insert(sandbox.info.sandbox_id);
    if (sandbox.paused || sandbox.info.network_policy != "allowlist") continue;
    if (proxy_->is_attached(sandbox.info.sandbox_id)) {
      keep_listener(sandbox.info);
    } else {
      attach_if_needed(sandbox.info);
    }
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
  MutexLock saving(save_mutex_);
  try {
    const host_fs::UniqueFd dir = host_fs::open_trusted_dir(state_dir_);
    host_fs::replace_file_at(dir.get(), kGrantsFile, proxy_->grants_json() + "\n", 0600,
                             state_dir_ / kGrantsFile);
  } catch (const std::exception& e) {
    logger_->warning(std::string("egress: cannot keep the grants: ") + e.what());
  }
}

}  // namespace sandboxd::core

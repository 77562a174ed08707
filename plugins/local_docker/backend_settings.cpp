#include "backend_settings.hpp"

#include <fcntl.h>
#include <rapidjson/document.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <optional>
#include <sandboxd/errors.hpp>
#include <sandboxd/host_fs.hpp>
#include <sandboxd/json.hpp>
#include <sandboxd/plugin_config.hpp>
#include <sandboxd/sandbox_capabilities.hpp>
#include <stdexcept>
#include <thread>

#include "docker_support.hpp"
#include "host_mounts.hpp"

namespace sandboxd::local_docker {
namespace {

constexpr const char* kDefaultImage =
    "enterprise-public-cn-beijing.cr.volces.com/vefaas-public/all-in-one-sandbox:latest";
constexpr const char* kDefaultPrefix = "deer-flow-sandbox";
constexpr const char* kLogPrefix = "local_docker: ";
// DeerFlow's hardening defaults for the local Docker path.
constexpr const char* kDefaultMemory = "2g";
constexpr double kDefaultCpus = 2.0;
constexpr long long kDefaultPidsLimit = 512;
// A seccomp profile is a JSON document of some kilobytes; Docker's own is 20 KB.
constexpr std::size_t kMaxSeccompProfileBytes = 1u << 20;

std::optional<std::string> env_value(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || trimmed(value).empty()) return std::nullopt;
  return trimmed(value);
}

std::string environment_source(const char* name) {
  return std::string("environment variable ") + name;
}

// "0", "false", "no", "off": DeerFlow's way to switch off a flag that defaults to on.
bool env_flag_disabled(const std::string& value) {
  std::string lower;
  for (char c : value) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "0" || lower == "false" || lower == "no" || lower == "off";
}

// The option `key`, else DeerFlow's variable `env`: its text and where it came from.
struct Sourced {
  std::optional<std::string> text;  // unset: neither
  std::string source;
};

// Reads a file a profile or secret lives in: regular, no link followed in its last
// component, at most `limit` bytes.
std::string read_small_file(const std::string& path, std::size_t limit) {
  host_fs::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  std::string text;
  char chunk[8192];
  ssize_t got;
  while ((got = ::read(fd.get(), chunk, sizeof chunk)) > 0) {
    text.append(chunk, static_cast<std::size_t>(got));
    if (text.size() > limit) {
      throw std::runtime_error(path + " is larger than " + std::to_string(limit) + " bytes");
    }
  }
  if (got < 0) throw std::runtime_error("cannot read " + path + ": " + std::strerror(errno));
  return text;
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ",") + item;
  return out.empty() ? "(none)" : out;
}

// DeerFlow's `sandbox.network` object (`at` names it in errors).
NetworkPolicy read_network_policy(const rapidjson::Value& object, const std::string& at,
                                  Logger& logger) {
  NetworkPolicy policy;
  const auto fail = [&](const std::string& key, const std::string& why) {
    throw PluginConfigError(at + "." + key, why);
  };
  const auto string_of = [&](const char* key) -> std::optional<std::string> {
    const auto it = object.FindMember(key);
    if (it == object.MemberEnd() || it->value.IsNull()) return std::nullopt;
    if (!it->value.IsString()) fail(key, "expected a string");
    return trimmed(it->value.GetString());
  };
  const auto bool_of = [&](const char* key, bool fallback) {
    const auto it = object.FindMember(key);
    if (it == object.MemberEnd() || it->value.IsNull()) return fallback;
    if (!it->value.IsBool()) fail(key, "expected true or false");
    return it->value.GetBool();
  };
  if (auto mode = string_of("mode")) {
    if (*mode != "open" && *mode != "isolated" && *mode != "allowlist") {
      fail("mode", "\"" + *mode + "\" is not a network mode (open, isolated or allowlist)");
    }
    policy.mode = *mode;
  }
  policy.publish = bool_of("publish", true);
  policy.isolate = bool_of("isolate_sandboxes", true);
  if (const auto it = object.FindMember("allow_domains");
      it != object.MemberEnd() && !it->value.IsNull()) {
    if (!it->value.IsArray()) fail("allow_domains", "expected a list of domain names");
    for (const auto& item : it->value.GetArray()) {
      if (!item.IsString()) fail("allow_domains", "expected a list of domain names");
      policy.allow_domains.emplace_back(item.GetString());
    }
  }
  if (auto approval = string_of("approval")) {
    if (*approval != "deny" && *approval != "prompt") {
      fail("approval", "\"" + *approval + "\" is not deny or prompt");
    }
    policy.approval = *approval;
  }
  if (const auto it = object.FindMember("temporary_grant_ttl");
      it != object.MemberEnd() && !it->value.IsNull()) {
    if (!it->value.IsInt() || it->value.GetInt() < 30 || it->value.GetInt() > 3600) {
      fail("temporary_grant_ttl", "expected a number of seconds from 30 to 3600");
    }
    policy.temporary_grant_ttl = it->value.GetInt();
  }
  if (const auto it = object.FindMember("test_only_upstreams");
      it != object.MemberEnd() && !it->value.IsNull()) {
    policy.test_only_upstreams = true;
    logger.warning(std::string(kLogPrefix) + at +
                   ".test_only_upstreams is set: FOR TESTS ONLY, allowed names resolve to the "
                   "loopback upstreams it lists; never in a deployment");
  }
  if (const auto it = object.FindMember("secrets");
      it != object.MemberEnd() && it->value.IsArray()) {
    for (const auto& entry : it->value.GetArray()) {
      if (!entry.IsObject()) continue;
      const auto text = [](const rapidjson::Value& object, const char* key) {
        const auto found = object.FindMember(key);
        return found != object.MemberEnd() && found->value.IsString()
                   ? std::string(found->value.GetString())
                   : std::string("?");
      };
      const auto inject = entry.FindMember("inject");
      const bool has_inject = inject != entry.MemberEnd() && inject->value.IsObject();
      const bool plain = has_inject && text(inject->value, "scheme") == "http";
      policy.secrets_shown.push_back(text(entry, "name") + " → " +
                                     (has_inject ? text(inject->value, "header") : "?") + " to " +
                                     (plain ? "http://" : "https://") +
                                     (has_inject ? text(inject->value, "host") : "?"));
    }
  }
  if (const auto it = object.FindMember("inject_tls_ca");
      it != object.MemberEnd() && it->value.IsObject()) {
    const auto file = it->value.FindMember("certificate_file");
    policy.tls_ca_shown = file != it->value.MemberEnd() && file->value.IsString()
                              ? std::string(file->value.GetString())
                              : std::string("?");
  }
  if (string_of("proxy_image")) {
    logger.info(std::string(kLogPrefix) + at +
                ".proxy_image is not used: sandboxd is its own egress proxy, no sidecar runs");
  }
  for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
    const std::string key = it->name.GetString();
    if (key != "mode" && key != "publish" && key != "isolate_sandboxes" && key != "allow_domains" &&
        key != "approval" && key != "temporary_grant_ttl" && key != "proxy_image" &&
        key != "engine_network" && key != "test_only_upstreams" && key != "secrets" &&
        key != "inject_tls_ca" && key != "upstream_ca_file") {
      logger.warning(std::string(kLogPrefix) + "ignoring unknown option " + at + "." + key);
    }
  }
  return policy;
}

}  // namespace

std::string refused_network(const std::string& network, const std::string& shown) {
  std::string target = trimmed(network);
  // Docker's long syntax: "name=host" attaches exactly as "host" does.
  if (target.rfind("name=", 0) == 0) target = trimmed(target.substr(5));
  const std::string quoted = shown + "='" + network + "'";
  if (target == "host" || target.rfind("container:", 0) == 0) {
    const std::string kind = target == "host" ? "host" : "container";
    return quoted + " resolves to the '" + kind +
           "' network, which would void the sandbox port bind (Docker drops -p/--publish in "
           "host mode and shares the network namespace for container:<name>). Use a dedicated "
           "egress-controlled bridge network instead.";
  }
  if (target == "none") {
    return quoted +
           " resolves to the 'none' network, which leaves the container loopback-only, so the "
           "published sandbox API port cannot receive traffic (readiness would time out and "
           "every acquisition would fail). Use a dedicated egress-controlled bridge network "
           "instead.";
  }
  return "";
}

Settings read_settings(const PluginContext& context, Logger& logger) {
  PluginConfig options = context.options();
  Settings s;
  const auto shown = [&](const std::string& value, const std::string& source) {
    s.effective.emplace_back(value, source);
  };
  // The option `key` (a string or a number), else DeerFlow's variable `env`.
  const auto option_or_env = [&](const char* key, const char* env) -> Sourced {
    if (const rapidjson::Value* raw = options.raw(key); raw && !raw->IsNull()) {
      if (raw->IsString()) return {trimmed(raw->GetString()), options.path_of(key)};
      if (raw->IsNumber()) return {json_to_string(*raw), options.path_of(key)};
      options.fail(key, "a string or a number", *raw);
    }
    if (auto value = env_value(env)) return {value, environment_source(env)};
    return {std::nullopt, "default"};
  };
  // A bad value from the environment is refused naming the variable; from the file, the key.
  const auto reject = [&](const char* key, const Sourced& from, const std::string& why) {
    if (from.source.rfind("environment variable ", 0) == 0) {
      throw PluginConfigError(from.source.substr(21), "\"" + *from.text + "\": " + why);
    }
    options.reject(key, "\"" + *from.text + "\": " + why);
  };

  // socket: the option, else DOCKER_HOST, else the default path.
  std::string socket_spec;
  if (auto socket = options.optional_string("socket"); socket && !trimmed(*socket).empty()) {
    socket_spec = *socket;
    s.socket_source = options.path_of("socket");
  } else if (auto host = env_value("DOCKER_HOST")) {
    socket_spec = *host;
    s.socket_source = environment_source("DOCKER_HOST");
  } else {
    socket_spec = "unix:///var/run/docker.sock";
    s.socket_source = "the default";
  }
  try {
    s.endpoint = EngineEndpoint::parse(socket_spec);
  } catch (const std::invalid_argument& e) {
    if (s.socket_source == environment_source("DOCKER_HOST")) {
      throw PluginConfigError("DOCKER_HOST", e.what());
    }
    options.reject("socket", e.what());
  }

  s.image = trimmed(options.get_string("image", ""));
  if (s.image.empty()) s.image = kDefaultImage;

  s.prefix = trimmed(options.get_string("container_prefix", ""));
  if (s.prefix.empty()) s.prefix = kDefaultPrefix;
  if (!is_valid_container_name(s.prefix)) {
    options.reject("container_prefix",
                   "\"" + s.prefix +
                       "\" is not usable in a container name (letters, digits, '_', '.', '-'; "
                       "starting with a letter or digit)");
  }

  const long long port = options.get_integer("port", 0);
  if (port < 0 || port > 65535) options.reject("port", "must be between 0 and 65535");
  s.base_port = static_cast<int>(port);

  s.mounts = options.get_mounts("mounts");
  for (std::size_t i = 0; i < s.mounts.size(); ++i) {
    if (s.mounts[i].container_path.front() != '/') {
      options.reject("mounts[" + std::to_string(i) + "].container_path",
                     "must be an absolute path inside the container");
    }
  }

  s.environment = options.get_string_map("environment");
  for (const auto& [key, value] : s.environment) {
    (void)value;
    if (key.empty() || key.find('=') != std::string::npos) {
      options.reject("environment." + key, "variable names must be non-empty and contain no '='");
    }
  }

  // ── limits: the option, else DeerFlow's variable, else DeerFlow's default ──
  const Sourced memory = option_or_env("memory", "DEER_FLOW_SANDBOX_MEMORY");
  try {
    s.memory_bytes = parse_memory_bytes(memory.text.value_or(kDefaultMemory));
  } catch (const std::invalid_argument& e) {
    reject("memory", memory, e.what());
  }
  shown("memory " + (s.memory_bytes > 0 ? memory.text.value_or(kDefaultMemory) : "no limit"),
        memory.source);

  const Sourced cpus = option_or_env("cpus", "DEER_FLOW_SANDBOX_CPUS");
  s.cpus = kDefaultCpus;
  if (cpus.text) {
    char* end = nullptr;
    s.cpus = std::strtod(cpus.text->c_str(), &end);
    if (end == cpus.text->c_str() || *end != '\0' || !(s.cpus >= 0)) {
      reject("cpus", cpus, "expected a number of CPUs >= 0 (0: no limit)");
    }
  } else {
    // The engine refuses more CPUs than the host has; the default must work on small hosts.
    const unsigned host_cpus = std::thread::hardware_concurrency();
    if (host_cpus > 0 && s.cpus > host_cpus) s.cpus = host_cpus;
  }
  shown("cpus " + (s.cpus > 0 ? json_to_string(rapidjson::Value(s.cpus)) : "no limit"),
        cpus.source);

  const Sourced pids = option_or_env("pids_limit", "DEER_FLOW_SANDBOX_PIDS_LIMIT");
  s.pids_limit = kDefaultPidsLimit;
  if (pids.text) {
    char* end = nullptr;
    s.pids_limit = std::strtoll(pids.text->c_str(), &end, 10);
    if (end == pids.text->c_str() || *end != '\0' || s.pids_limit < -1) {
      reject("pids_limit", pids, "expected a whole number of processes >= -1 (0 or -1: no limit)");
    }
  }
  shown("pids_limit " + (s.pids_limit > 0 ? std::to_string(s.pids_limit) : "no limit"),
        pids.source);

  s.stop_timeout_seconds = options.get_integer("stop_timeout_seconds", 10);
  if (s.stop_timeout_seconds < 0 || s.stop_timeout_seconds > 3600) {
    options.reject("stop_timeout_seconds", "must be between 0 and 3600");
  }

  // ── privileges ──
  // No privilege gain through setuid binaries; every capability dropped but the few an image's
  // init hands over to its user with (DeerFlow's compatibility set), unless the image needs
  // none (image_startup_caps false); the engine's default seccomp profile unless one is given.
  const bool no_new_privileges = options.get_bool("no_new_privileges", true);
  if (no_new_privileges) s.security_opt.push_back("no-new-privileges");
  const Sourced seccomp = option_or_env("seccomp_profile", "DEER_FLOW_SANDBOX_SECCOMP_PROFILE");
  if (seccomp.text) {
    std::string profile;
    try {
      profile = read_small_file(*seccomp.text, kMaxSeccompProfileBytes);
    } catch (const std::exception& e) {
      reject("seccomp_profile", seccomp, e.what());
    }
    rapidjson::Document doc;
    doc.Parse(profile.c_str(), profile.size());
    if (!doc.IsObject()) reject("seccomp_profile", seccomp, "is not a JSON seccomp profile");
    s.security_opt.push_back("seccomp=" + profile);
  }
  shown(seccomp.text ? "seccomp profile " + *seccomp.text : "seccomp: the engine's default profile",
        seccomp.source);
  for (const std::string& opt : options.get_string_list("security_opt")) {
    if (opt == "no-new-privileges" && no_new_privileges) continue;
    s.security_opt.push_back(opt);
  }
  // ── the kernel a sandbox meets: the engine's OCI runtime (runc, or runsc: gVisor) ──
  s.runtime = trimmed(options.get_string("runtime", ""));
  if (!s.runtime.empty() &&
      s.runtime.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") !=
          std::string::npos) {
    options.reject("runtime", "must be an OCI runtime's name as the engine declares it (runsc, runc, "
                              "kata…), got \"" + s.runtime + "\"");
  }
  shown(s.runtime.empty()
            ? std::string("runtime: the engine's default (runc here: every sandbox shares the "
                          "host's kernel)")
            : "runtime " + s.runtime +
                  " (checked against the engine's runtimes before the first sandbox, and read back "
                  "from every container: one made with another is removed)",
        options.has("runtime") ? options.path_of("runtime") : "default");
  shown(std::string("no-new-privileges ") + (no_new_privileges ? "on" : "off"),
        options.has("no_new_privileges") ? options.path_of("no_new_privileges") : "default");

  s.cap_drop = options.has("cap_drop") ? options.get_string_list("cap_drop")
                                       : std::vector<std::string>{"ALL"};
  bool startup_caps = true;
  std::string caps_source = "default";
  if (options.has("image_startup_caps")) {
    startup_caps = options.get_bool("image_startup_caps", true);
    caps_source = options.path_of("image_startup_caps");
  } else if (auto flag = env_value("DEER_FLOW_SANDBOX_IMAGE_STARTUP_CAPS")) {
    startup_caps = !env_flag_disabled(*flag);
    caps_source = environment_source("DEER_FLOW_SANDBOX_IMAGE_STARTUP_CAPS");
  }
  if (options.has("cap_add")) {
    s.cap_add = options.get_string_list("cap_add");
    caps_source = options.path_of("cap_add");
  } else if (startup_caps) {
    s.cap_add.assign(std::begin(kDefaultSandboxCapabilities),
                     std::end(kDefaultSandboxCapabilities));
  }
  shown("cap_drop " + joined(s.cap_drop),
        options.has("cap_drop") ? options.path_of("cap_drop") : "default");
  shown("cap_add " + joined(s.cap_add), caps_source);

  const Sourced user = option_or_env("user", "DEER_FLOW_SANDBOX_CONTAINER_USER");
  s.user = user.text.value_or("");
  shown("user " + (s.user.empty() ? std::string("(the image's)") : s.user), user.source);

  // DeerFlow's `sandbox.network` (an object: the policy), or the engine network to join (a
  // string, DEER_FLOW_SANDBOX_NETWORK as its fallback).
  std::string policy_source = "default";
  Sourced engine_network;
  if (const rapidjson::Value* raw = options.raw("network"); raw && raw->IsObject()) {
    policy_source = options.path_of("network");
    s.policy = read_network_policy(*raw, options.path_of("network"), logger);
    if (const auto it = raw->FindMember("engine_network");
        it != raw->MemberEnd() && !it->value.IsNull()) {
      if (!it->value.IsString()) {
        options.fail("network.engine_network", "a network name", it->value);
      }
      engine_network = {trimmed(it->value.GetString()), options.path_of("network.engine_network")};
    }
  } else {
    engine_network = option_or_env("network", "DEER_FLOW_SANDBOX_NETWORK");
  }
  if (!engine_network.text) {
    if (auto value = env_value("DEER_FLOW_SANDBOX_NETWORK")) {
      engine_network = {value, environment_source("DEER_FLOW_SANDBOX_NETWORK")};
    }
  }
  if (engine_network.text && !engine_network.text->empty()) {
    const bool from_env = engine_network.source.rfind("environment variable ", 0) == 0;
    const std::string where = from_env ? engine_network.source.substr(21) : engine_network.source;
    const std::string why = refused_network(*engine_network.text, where);
    if (!why.empty()) throw PluginConfigError(where, why);
    s.network = *engine_network.text;
    s.own_network = false;
  } else if (s.policy.isolate) {
    s.network = s.prefix + "-sandboxes";
  } else {
    s.own_network = false;  // isolation off: the engine's default bridge, DeerFlow's way
  }
  if (s.policy.mode == "open") {
    shown(
        "network mode open: " +
            std::string(s.policy.isolate ? "each sandbox's port isolated on bridge network "
                                         : "sandboxes share bridge network ") +
            (s.network.empty() ? std::string("(the engine's default)") : s.network) +
            (s.policy.isolate ? " (kernel bridge port isolation, kept for each sandbox's life: "
                                "no sandbox reaches another)"
                              : " (isolate_sandboxes false: sandboxes CAN reach each other)") +
            (s.policy.publish ? ", API published on a host loopback port" : ", API not published"),
        policy_source);
  } else if (s.policy.mode == "allowlist") {
    shown(
        "network mode allowlist: no network (NetworkMode none); egress only through the "
        "host's proxy at " +
            std::string(kEgressProxyUrl) +
            " inside the sandbox (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY), to the names the host "
            "allows; the API is reached only through the host's relay",
        policy_source);
    std::string names;
    for (const auto& name : s.policy.allow_domains) names += (names.empty() ? "" : " ") + name;
    shown("egress allowed to: " + (names.empty() ? std::string("(no name)") : names) +
              "; approval " + s.policy.approval +
              (s.policy.approval == "prompt"
                   ? ", temporary grants " + std::to_string(s.policy.temporary_grant_ttl) + " s"
                   : std::string()),
          policy_source);
    if (!s.policy.secrets_shown.empty()) {
      std::string secrets;
      for (const auto& shown_secret : s.policy.secrets_shown) {
        secrets += (secrets.empty() ? "" : ", ") + shown_secret;
      }
      shown(
          "secrets the sandbox never holds (a placeholder in its environment, the secret put "
          "in by serve's proxy): " +
              secrets,
          policy_source);
    }
    if (!s.policy.tls_ca_shown.empty()) {
      shown(
          "TLS to the https destinations of secrets is ended by the host's proxy, with "
          "certificates signed by the CA in " +
              s.policy.tls_ca_shown +
              " (inject_tls_ca): the sandbox's image must trust that CA; every other tunnel "
              "stays end to end",
          policy_source);
    }
    if (s.policy.test_only_upstreams) {
      shown(
          "WARNING network.test_only_upstreams is set: FOR TESTS ONLY (names resolve to "
          "loopback test upstreams); never in a deployment",
          policy_source);
    }
  } else {
    shown("network mode " + s.policy.mode +
              ": no network (NetworkMode none); the API is reached only through the host's "
              "relay, in the sandbox's own network namespace",
          policy_source);
  }

  s.init = options.get_bool("init", true);

  s.sandbox_host = trimmed(options.get_string("sandbox_host", ""));
  if (s.sandbox_host.empty()) s.sandbox_host = env_value("DEER_FLOW_SANDBOX_HOST").value_or("");
  if (s.sandbox_host.empty()) s.sandbox_host = "localhost";

  std::optional<std::string> bind_host = options.optional_string("bind_host");
  if (!bind_host || trimmed(*bind_host).empty()) {
    bind_host = env_value("DEER_FLOW_SANDBOX_BIND_HOST");
  }
  std::string bind_reason;
  s.bind_host = resolve_bind_host(bind_host, s.sandbox_host, &bind_reason);
  // Only a sandbox with a published port is published anywhere: saying a bind address for one
  // reached only through the relay would tell the operator something untrue.
  if (!s.policy.namespaced()) shown("published on " + s.bind_host, bind_reason);

  s.request_timeout_seconds = options.get_number("request_timeout_seconds", 30.0);
  if (!(s.request_timeout_seconds > 0)) options.reject("request_timeout_seconds", "must be > 0");
  s.pull_timeout_seconds = options.get_number("pull_timeout_seconds", 600.0);
  if (!(s.pull_timeout_seconds > 0)) options.reject("pull_timeout_seconds", "must be > 0");

  // ── pre-started slots ──
  const long long warm_slots = options.get_integer("warm_slots", 0);
  if (warm_slots < 0 || warm_slots > 64) options.reject("warm_slots", "must be between 0 and 64");
  s.warm_slots = static_cast<std::size_t>(warm_slots);
  // Normal once, here: every later path and mount under it starts from it.
  if (auto dir = options.optional_string("slots_dir"); dir && !trimmed(*dir).empty()) {
    if (!std::filesystem::path(trimmed(*dir)).is_absolute()) {
      options.reject("slots_dir", "must be an absolute path");
    }
    s.slots_dir = normal_absolute(trimmed(*dir));
  } else if (!context.base_dir.empty()) {
    s.slots_dir =
        normal_absolute(std::filesystem::absolute(context.base_dir) / "local_docker-slots");
  } else if (s.warm_slots > 0) {
    options.reject("slots_dir", "is needed with warm_slots when the host has no base directory");
  }
  // The per-conversation mount points slots are made for, before any conversation taught them.
  if (const rapidjson::Value* list = options.raw("slot_mounts")) {
    if (!list->IsArray())
      options.fail("slot_mounts", "an array of {container_path, read_only}", *list);
    for (rapidjson::SizeType i = 0; i < list->Size(); ++i) {
      const std::string key = "slot_mounts[" + std::to_string(i) + "]";
      const rapidjson::Value& item = (*list)[i];
      const auto path = item.IsObject() ? item.FindMember("container_path") : item.MemberEnd();
      if (!item.IsObject() || path == item.MemberEnd() || !path->value.IsString() ||
          path->value.GetStringLength() == 0 || path->value.GetString()[0] != '/') {
        options.fail(key, "an object whose container_path is an absolute path", item);
      }
      Mount mount;
      mount.container_path = path->value.GetString();
      if (const auto ro = item.FindMember("read_only"); ro != item.MemberEnd()) {
        if (!ro->value.IsBool()) options.fail(key + ".read_only", "a boolean", ro->value);
        mount.read_only = ro->value.GetBool();
      }
      s.slot_mounts.push_back(std::move(mount));
    }
  }
  s.slot_ready_timeout_seconds = options.get_number("slot_ready_timeout_seconds", 60.0);
  if (!(s.slot_ready_timeout_seconds > 0)) {
    options.reject("slot_ready_timeout_seconds", "must be > 0");
  }
  s.slot_sweep_seconds = options.get_number("slot_sweep_seconds", 60.0);
  if (!(s.slot_sweep_seconds >= 1)) options.reject("slot_sweep_seconds", "must be >= 1");

  for (const std::string& key : options.unread_keys()) {
    logger.warning(std::string(kLogPrefix) + "ignoring unknown option " + key);
  }
  logger.debug(std::string(kLogPrefix) + bind_reason);
  std::string effective;
  for (const auto& [value, source] : s.effective) {
    effective += (effective.empty() ? "" : ", ") + value;
  }
  logger.info(
      std::string(kLogPrefix) + "engine " + s.endpoint.display + " (from " + s.socket_source +
      "), image " + s.image + ", container prefix " + s.prefix + ", host port " +
      (s.base_port > 0 ? "from " + std::to_string(s.base_port) : "chosen by the engine") +
      ", sandbox host " + s.sandbox_host + ", mounts: " + render_mounts(s.mounts) +
      ", environment: " + (s.environment.empty() ? "none" : redacted_environment(s.environment)) +
      "; " + effective);
  return s;
}

}  // namespace sandboxd::local_docker

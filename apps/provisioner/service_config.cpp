#include "service_config.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "sandboxd/json.hpp"
#include "sandboxd/plugin_config.hpp"
#include "sandboxd/types.hpp"

namespace sandboxd::provisioner {
namespace {

constexpr std::size_t kMaxConfigFileBytes = 1024 * 1024;
constexpr const char* kDefaultHostBaseDir = "/.deer-flow";

std::string to_json(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string read_config_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw ServiceConfigError(path + ": cannot read the config file: " + std::strerror(errno));
  }
  std::string text;
  char chunk[8192];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxConfigFileBytes) {
      throw ServiceConfigError(path + ": the config file is larger than 1 MiB");
    }
  }
  return text;
}

// A whole number from an environment variable, in [low, high].
int env_integer(const std::string& name, const std::string& text, long low, long high) {
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < low || value > high) {
    throw ServiceConfigError(name + "='" + text.substr(0, 40) + "': expected a whole number from " +
                             std::to_string(low) + " to " + std::to_string(high));
  }
  return static_cast<int>(value);
}

void require_absolute(const std::string& path, const std::string& where) {
  if (path.empty() || path.front() != '/') {
    throw ServiceConfigError(where + ": expected an absolute path, got '" + path + "'");
  }
}

// A string setting: the file's value, else the environment's, else the fallback; `source`
// says which one won.
std::string layered_string(const PluginConfig& file, const std::string& key,
                           const EnvironmentLookup& env, const std::string& env_name,
                           const std::string& fallback, std::string* source = nullptr) {
  if (auto value = file.optional_string(key)) {
    if (source) *source = file.path_of(key);
    return *value;
  }
  if (auto value = env(env_name); value && !value->empty()) {
    if (source) *source = env_name;
    return *value;
  }
  if (source) *source = "the default";
  return fallback;
}

void check_contract_version(int version, const std::string& where) {
  if (version != 0 && version != kSandboxMountContractVersion) {
    throw ServiceConfigError(where + ": expected 0 (legacy) or " +
                             std::to_string(kSandboxMountContractVersion) + ", got " +
                             std::to_string(version));
  }
}

}  // namespace

EnvironmentLookup process_environment() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* value = std::getenv(name.c_str());
    if (!value) return std::nullopt;
    return std::string(value);
  };
}

void parse_listen(const std::string& text, const std::string& where, std::string& host, int& port) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    throw ServiceConfigError(where + ": expected HOST:PORT (for example 127.0.0.1:8002), got '" +
                             text + "'");
  }
  std::string parsed_host = text.substr(0, colon);
  if (parsed_host == "localhost") parsed_host = "127.0.0.1";
  const std::string port_text = text.substr(colon + 1);
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || errno == ERANGE || value < 0 || value > 65535) {
    throw ServiceConfigError(where + ": port '" + port_text + "' of '" + text +
                             "' is not a number from 0 to 65535");
  }
  host = parsed_host;
  port = static_cast<int>(value);
}

ServiceConfig load_service_config(const ServiceFlags& flags, const EnvironmentLookup& env) {
  ServiceConfig config;
  std::string section_json = "{}";
  std::string key_path = "provisioner";
  if (flags.config_file) {
    config.source_file = *flags.config_file;
    const std::string text = read_config_file(*flags.config_file);
    rapidjson::Document doc;
    if (json_nesting_exceeded_at(text) || !parse_json(doc, text)) {
      throw ServiceConfigError(*flags.config_file + ": not valid JSON (or nested deeper than " +
                               std::to_string(kMaxJsonNesting) + " levels)");
    }
    if (!doc.IsObject() || !doc.HasMember("provisioner") || !doc["provisioner"].IsObject()) {
      throw ServiceConfigError(*flags.config_file +
                               ": expected an object with a \"provisioner\" object in it");
    }
    section_json = to_json(doc["provisioner"]);
    key_path = *flags.config_file + ": provisioner";
  }
  try {
    const PluginConfig file(section_json, key_path);

    const std::string listen =
        flags.listen ? *flags.listen : file.get_string("listen", "127.0.0.1:8002");
    parse_listen(listen, flags.listen ? "--listen" : file.path_of("listen"), config.listen_host,
                 config.listen_port);

    config.api_key =
        layered_string(file, "api_key", env, "PROVISIONER_API_KEY", "", &config.api_key_source);
    if (config.api_key.find_first_of("\r\n") != std::string::npos) {
      throw ServiceConfigError(config.api_key_source +
                               ": the API key contains a line break (value not shown)");
    }

    std::string base_source;
    config.roots.host_base_dir = layered_string(
        file, "host_base_dir", env, "DEER_FLOW_HOST_BASE_DIR", kDefaultHostBaseDir, &base_source);
    require_absolute(config.roots.host_base_dir, base_source);
    std::string threads_source;
    config.roots.threads_host_path =
        layered_string(file, "threads_host_path", env, "THREADS_HOST_PATH",
                       config.roots.host_base_dir + "/threads", &threads_source);
    require_absolute(config.roots.threads_host_path, threads_source);
    std::string layout_source;
    const std::string layout = layered_string(
        file, "user_data_layout", env, "SANDBOXD_USER_DATA_LAYOUT", "per_user", &layout_source);
    if (layout == "legacy") {
      config.roots.user_data_layout = UserDataLayout::legacy;
    } else if (layout == "per_user") {
      config.roots.user_data_layout = UserDataLayout::per_user;
      if (threads_source != "the default") {
        config.notes.push_back(threads_source +
                               " is used only with user_data_layout \"legacy\" (every user of "
                               "a thread id shares its user data); ignored: user data is "
                               "{host_base_dir}/users/{user}/threads/{thread}/user-data");
      }
    } else {
      throw ServiceConfigError(layout_source + ": expected \"per_user\" or \"legacy\", got '" +
                               layout.substr(0, 40) + "'");
    }

    if (auto port = file.optional_integer("container_port")) {
      if (*port < 1 || *port > 65535) {
        file.reject("container_port",
                    "expected a whole number from 1 to 65535, got " + std::to_string(*port));
      }
      config.container_port = static_cast<int>(*port);
    } else if (auto text = env("SANDBOX_CONTAINER_PORT"); text && !text->empty()) {
      config.container_port = env_integer("SANDBOX_CONTAINER_PORT", *text, 1, 65535);
    }
    if (config.container_port != kSandboxContainerPort) {
      throw ServiceConfigError(
          (file.has("container_port") ? file.path_of("container_port")
                                      : std::string("SANDBOX_CONTAINER_PORT")) +
          ": " + std::to_string(config.container_port) + " is not supported: sandboxd backends " +
          "publish the sandbox API on container port " + std::to_string(kSandboxContainerPort));
    }

    if (flags.mount_contract_version) {
      config.mount_contract_version = *flags.mount_contract_version;
      check_contract_version(config.mount_contract_version, "--mount-contract-version");
    } else if (auto version = file.optional_integer("mount_contract_version")) {
      config.mount_contract_version = static_cast<int>(*version);
      check_contract_version(config.mount_contract_version, file.path_of("mount_contract_version"));
    } else {
      config.mount_contract_version = kSandboxMountContractVersion;
    }

    config.backend_timeout_seconds = file.get_number("backend_timeout_seconds", 120.0);
    if (!(config.backend_timeout_seconds >= 1.0 && config.backend_timeout_seconds <= 3600.0)) {
      std::ostringstream shown;
      shown << config.backend_timeout_seconds;
      file.reject("backend_timeout_seconds", "expected seconds from 1 to 3600, got " + shown.str());
    }
    const long long max_bytes = file.get_integer("max_request_bytes", 1024 * 1024);
    if (max_bytes < 1024 || max_bytes > 64LL * 1024 * 1024) {
      file.reject("max_request_bytes",
                  "expected bytes from 1024 to 67108864, got " + std::to_string(max_bytes));
    }
    config.max_request_bytes = static_cast<std::size_t>(max_bytes);
    const long long workers = file.get_integer("worker_threads", 16);
    if (workers < 1 || workers > 1024) {
      file.reject("worker_threads", "expected 1 to 1024, got " + std::to_string(workers));
    }
    config.worker_threads = static_cast<int>(workers);
    const long long connections = file.get_integer("max_connections", 1024);
    if (connections < 1 || connections > 1'000'000) {
      file.reject("max_connections", "expected 1 to 1000000, got " + std::to_string(connections));
    }
    config.max_connections = static_cast<int>(connections);
    config.shutdown_grace_seconds = file.get_number("shutdown_grace_seconds", 10.0);
    if (!(config.shutdown_grace_seconds >= 0.0 && config.shutdown_grace_seconds <= 3600.0)) {
      std::ostringstream shown;
      shown << config.shutdown_grace_seconds;
      file.reject("shutdown_grace_seconds", "expected seconds from 0 to 3600, got " + shown.str());
    }
    config.plugin_dirs = file.get_string_list("plugin_dirs");

    // The relay, started when the backend makes sandboxes no host address reaches.
    if (auto relay_listen = file.optional_string("relay_listen")) {
      parse_listen(*relay_listen, file.path_of("relay_listen"), config.relay_host,
                   config.relay_port);
      config.relay_port_given = true;
    } else {
      config.relay_host = config.listen_host;
    }
    config.relay_advertised_host = file.get_string("relay_advertised_host", "");
    if (config.relay_advertised_host.find_first_of("/ \t\r\n") != std::string::npos) {
      file.reject("relay_advertised_host",
                  "expected a host name or address, got '" + config.relay_advertised_host + "'");
    }
    config.relay_state_dir =
        file.get_string("relay_state_dir", config.roots.host_base_dir + "/.sandboxd-relay");
    require_absolute(config.relay_state_dir, file.path_of("relay_state_dir"));

    std::string image_source;
    const std::string image =
        layered_string(file, "image", env, "SANDBOX_IMAGE", "", &image_source);

    rapidjson::Document backend;
    if (const rapidjson::Value* section = file.raw("backend")) {
      if (!section->IsObject()) file.fail("backend", "an object with a \"use\" string", *section);
      backend.CopyFrom(*section, backend.GetAllocator());
      auto use = backend.FindMember("use");
      if (use == backend.MemberEnd() || !use->value.IsString() ||
          use->value.GetStringLength() == 0) {
        throw PluginConfigError(file.path_of("backend.use"),
                                "is required: a \"module:Class\" "
                                "string such as " +
                                    std::string(kDefaultBackendUse));
      }
      config.backend_use = use->value.GetString();
    } else {
      backend.SetObject();
      backend.AddMember("use", rapidjson::Value(kDefaultBackendUse, backend.GetAllocator()),
                        backend.GetAllocator());
    }
    if (!image.empty() && !backend.HasMember("image")) {
      backend.AddMember("image", rapidjson::Value(image.c_str(), backend.GetAllocator()),
                        backend.GetAllocator());
    }
    config.backend_json = to_json(backend);
    config.backend_key_path = file.path_of("backend");
    for (const std::string& key : file.unread_keys()) {
      config.notes.push_back(key + " is not a setting of sandboxd-provisioner; ignored");
    }
  } catch (const PluginConfigError& error) {
    throw ServiceConfigError(error.what());
  }
  return config;
}

}  // namespace sandboxd::provisioner

// Loading and validating the `sandbox` section (design §11, §7.6; design "Configuration").
//
// Every error is one sentence of the form "{file}: {key path}: expected {what}, got {value}" so
// an operator knows which line of which file to fix. Secrets never appear in errors or warnings:
// a bad value under a secret-named key is described by its type only, and `$NAME` warnings name
// the variable, never a value.
#include "sandboxd/core/config.hpp"

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "deerflow_yaml.hpp"
#include "sandbox_options.hpp"
#include "sandboxd/lease_rules.hpp"
#include "sandboxd/plugin_config.hpp"

namespace sandboxd::core {

namespace {

using rapidjson::Document;
using rapidjson::Value;
using Allocator = Document::AllocatorType;

// DeerFlow's flat `sandbox` keys that belong to a backend.
constexpr const char* kFlatBackendKeys[] = {
    "provisioner_url", "provisioner_api_key", "image",           "port",
    "mounts",          "environment",         "container_prefix"};
// Keys of DeerFlow's `sandbox:` section that concern its other providers, its own process or
// the Python provider that talks to serve (sandboxd_*), not a sandbox this core runs: read
// quietly from a DeerFlow config.yaml, named in one note.
constexpr const char* kDeerFlowOnlySandboxKeys[] = {"allow_host_bash", "base_url",
                                                    "auto_start",      "sandboxd_socket",
                                                    "sandboxd_url",    "sandboxd_token_env"};
// DeerFlow's own sandbox settings that its tools apply with every provider (output truncation,
// the bash timeout) and BoxLite's reclaim check: DeerFlow reads them, a sandbox does not. Known
// in either format, so its shipped config.example.yaml loads without a warning (issue 32 C).
constexpr const char* kDeerFlowToolKeys[] = {"bash_output_max_chars", "read_file_output_max_chars",
                                             "ls_output_max_chars", "bash_command_timeout",
                                             "health_check_skip_seconds"};
// The provider sandboxd stands in for, and sandboxd's own provider for DeerFlow: a `use:`
// naming one of them is a note; any other DeerFlow provider is a warning saying what sandboxd
// runs instead.
constexpr const char* kProvidersSandboxdServes[] = {"AioSandboxProvider", "SandboxdProvider"};
std::string shortest(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%g", value);
  return buffer;
}

bool is_flat_backend_key(std::string_view key) {
  return std::find(std::begin(kFlatBackendKeys), std::end(kFlatBackendKeys), key) !=
         std::end(kFlatBackendKeys);
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string name_of(const Value& name) {
  return std::string(name.GetString(), name.GetStringLength());
}

std::string json_quote(const std::string& text) {
  Value v(rapidjson::StringRef(text.data(), text.size()));
  return json_to_string(v);
}

// A bad value as shown in an error: compact JSON, shortened; a secret shows only its type.
std::string describe(const Value& value, const std::string& key_path) {
  const std::string shown = shown_value(value, key_path);
  // A redacted value still says what it was, so the operator knows what to fix.
  if (shown == "(value redacted)") return std::string(json_type_name(value)) + " " + shown;
  return shown;
}

// A JSON object member, with null read as absent ("key": null means "use the default").
const Value* member(const Value& object, const char* key) {
  auto it = object.FindMember(key);
  if (it == object.MemberEnd() || it->value.IsNull()) return nullptr;
  return &it->value;
}

class Parser {
 public:
  Parser(std::string source_name, std::filesystem::path relative_base)
      : source_(source_name.empty() ? std::string("<config>") : std::move(source_name)),
        relative_base_(std::move(relative_base)) {}

  // The document came from DeerFlow's config.yaml: errors name the line of their key.
  void from_deerflow_yaml(const DeerFlowYaml& yaml) { yaml_ = &yaml; }

  SandboxConfig parse(const std::string& text, const std::string& source_file) {
    config_.source_file = source_file;
    Document doc;
    parse_json(text, doc);
    if (!doc.IsObject()) {
      error("expected a JSON object at the top level, got " + describe(doc, ""));
    }
    reject_duplicate_keys(doc, "");

    const Value* sandbox = member(doc, "sandbox");
    if (sandbox == nullptr) {
      error("sandbox: missing required section \"sandbox\" (expected an object)");
    }
    if (!sandbox->IsObject()) fail("sandbox", "an object", *sandbox);
    reject_duplicate_keys(*sandbox, "sandbox");

    read_skills(doc);
    read_backend(*sandbox);
    read_provider_use(*sandbox);
    read_ownership(*sandbox, doc);
    read_scalars(*sandbox);
    read_plugin_dirs(*sandbox);
    warn_unknown_keys(*sandbox);
    return std::move(config_);
  }

 private:
  [[noreturn]] void error(const std::string& message) const {
    if (yaml_ != nullptr) {
      // "sandbox.replicas: expected …": the longest key path the message starts with.
      std::string path = message.substr(0, message.find(": "));
      while (!path.empty()) {
        if (auto line = yaml_->lines.find(path); line != yaml_->lines.end()) {
          throw ConfigError(source_ + ":" + std::to_string(line->second) + ": " + message);
        }
        const std::size_t cut = path.find_last_of(".[");
        path = cut == std::string::npos ? "" : path.substr(0, cut);
      }
    }
    throw ConfigError(source_ + ": " + message);
  }
  [[noreturn]] void fail(const std::string& key_path, const std::string& expected,
                         const Value& got) const {
    error(key_path + ": expected " + expected + ", got " + describe(got, key_path));
  }

  void parse_json(const std::string& text, Document& doc) const {
    std::size_t skip = 0;
    if (text.size() >= 3 && text.compare(0, 3, "\xEF\xBB\xBF") == 0) skip = 3;  // UTF-8 BOM
    const std::string_view body = std::string_view(text).substr(skip);
    std::size_t offset = 0;
    std::string reason;
    if (auto too_deep = json_nesting_exceeded_at(body)) {
      offset = skip + *too_deep;
      reason = "nested deeper than " + std::to_string(kMaxJsonNesting) + " levels";
    } else if (sandboxd::parse_json<rapidjson::kParseValidateEncodingFlag>(doc, body)) {
      return;
    } else {
      offset = std::min(text.size(), skip + doc.GetErrorOffset());
      reason = rapidjson::GetParseError_En(doc.GetParseError());
    }
    std::size_t line = 1;
    std::size_t line_start = 0;
    for (std::size_t i = 0; i < offset; ++i) {
      if (text[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    const std::size_t column = offset - line_start + 1;
    error("malformed JSON at line " + std::to_string(line) + ", column " + std::to_string(column) +
          ": " + reason);
  }

  // RapidJSON keeps duplicate members and lookups see the first: refuse the silent pick.
  void reject_duplicate_keys(const Value& object, const std::string& path) const {
    std::set<std::string> seen;
    for (auto it = object.MemberBegin(); it != object.MemberEnd(); ++it) {
      const std::string key = name_of(it->name);
      if (!seen.insert(key).second) {
        error((path.empty() ? key : path + "." + key) +
              ": key given more than once (expected each key once)");
      }
    }
  }

  std::string required_use(const Value& section, const std::string& path) const {
    auto it = section.FindMember("use");
    if (it == section.MemberEnd() || it->value.IsNull()) {
      error(path + ".use: required key missing (expected a \"module:Class\" string such as \"" +
            kLocalDockerUse + "\")");
    }
    if (!it->value.IsString() || it->value.GetStringLength() == 0) {
      fail(path + ".use", "a non-empty \"module:Class\" string", it->value);
    }
    return name_of(it->value);
  }

  // `$NAME` → value of the environment variable NAME. Unset, it is an error, as DeerFlow
  // raises: an empty API key would start a gateway DeerFlow itself refuses to start.
  void resolve_variable(Value& value, const std::string& path, Allocator& alloc) {
    const std::string text = name_of(value);
    const std::string name = text.substr(1);
    const char* found = name.empty() ? nullptr : std::getenv(name.c_str());
    if (found == nullptr) error(path + ": " + unset_variable_message(name));
    value.SetString(found, static_cast<rapidjson::SizeType>(std::strlen(found)), alloc);
  }

  static bool is_variable_reference(const Value& value) {
    return value.IsString() && value.GetStringLength() > 0 && value.GetString()[0] == '$';
  }

  // Applies `$NAME` substitution to `value`, which sits at `path` under member name `key`:
  // every value of an `environment` object (non-strings stringified) and every string under a
  // key whose name ends in `api_key`, at any depth.
  void substitute(Value& value, const std::string& path, const std::string& key, Allocator& alloc) {
    if (key == "environment" && value.IsObject()) {
      for (auto it = value.MemberBegin(); it != value.MemberEnd(); ++it) {
        const std::string item_path = path + "." + name_of(it->name);
        if (is_variable_reference(it->value)) {
          resolve_variable(it->value, item_path, alloc);
        } else if (it->value.IsNumber() || it->value.IsBool()) {
          const std::string text = json_to_string(it->value);
          it->value.SetString(text.data(), static_cast<rapidjson::SizeType>(text.size()), alloc);
        }
      }
      return;
    }
    std::string normalised = lower(key);
    std::replace(normalised.begin(), normalised.end(), '-', '_');
    if (ends_with(normalised, "api_key") && is_variable_reference(value)) {
      resolve_variable(value, path, alloc);
      return;
    }
    if (value.IsObject()) {
      for (auto it = value.MemberBegin(); it != value.MemberEnd(); ++it) {
        const std::string name = name_of(it->name);
        substitute(it->value, path + "." + name, name, alloc);
      }
    } else if (value.IsArray()) {
      for (rapidjson::SizeType i = 0; i < value.Size(); ++i) {
        substitute(value[i], path + "[" + std::to_string(i) + "]", "", alloc);
      }
    }
  }

  // A copy of `section` with `use` set to `use` as its first member and `drop` left out.
  static void rebuild_with_use(const Value& section, const std::string& use, const char* drop,
                               Document& out) {
    out.SetObject();
    Allocator& alloc = out.GetAllocator();
    out.AddMember("use", Value(use.c_str(), alloc), alloc);
    for (auto it = section.MemberBegin(); it != section.MemberEnd(); ++it) {
      const std::string key = name_of(it->name);
      if (key == "use" || (drop != nullptr && key == drop)) continue;
      out.AddMember(Value(key.c_str(), alloc), Value(it->value, alloc), alloc);
    }
  }

  void read_skills(const Value& root) {
    const Value* skills = member(root, "skills");
    if (skills == nullptr) return;
    if (!skills->IsObject()) fail("skills", "an object", *skills);
    const Value* path = member(*skills, "container_path");
    if (path == nullptr) return;
    if (!path->IsString() || path->GetStringLength() == 0 || path->GetString()[0] != '/') {
      fail("skills.container_path", "an absolute container path string", *path);
    }
    config_.skills_container_path = name_of(*path);
  }

  void read_provider_use(const Value& sandbox) {
    const Value* use = member(sandbox, "use");
    if (use == nullptr) return;
    if (!use->IsString()) fail("sandbox.use", "a string", *use);
    const std::string provider = name_of(*use);
    const std::string class_name = provider.substr(provider.find(':') + 1);
    bool served = false;
    for (const char* name : kProvidersSandboxdServes) served = served || class_name == name;
    if (served) {
      config_.mapping_notes.push_back("sandbox.use " + json_quote(provider) +
                                      " → ignored: the sandboxd core is the provider");
      return;
    }
    config_.warnings.push_back(
        "sandbox.use " + json_quote(provider) + " names DeerFlow's " + class_name +
        ", which sandboxd does not run; sandboxd runs every sandbox through sandbox.backend "
        "instead: " +
        config_.backend.use +
        (config_.backend.use == kLocalDockerUse ? " (containers on the local engine)" : ""));
  }

  void read_backend(const Value& sandbox) {
    config_.backend.key_path = "sandbox.backend";
    Document options;
    Allocator& alloc = options.GetAllocator();
    const Value* backend = member(sandbox, "backend");
    if (backend != nullptr) {
      if (!backend->IsObject()) fail("sandbox.backend", "an object with a \"use\" key", *backend);
      reject_duplicate_keys(*backend, "sandbox.backend");
      for (const char* flat : kFlatBackendKeys) {
        if (member(sandbox, flat) != nullptr) {
          const std::string flat_path = std::string("sandbox.") + flat;
          error(flat_path + ": given both as a DeerFlow flat key and through the sandbox.backend " +
                "section; set it once, as sandbox.backend." + flat +
                " (a key given both ways is an error)");
        }
      }
      config_.backend.use = required_use(*backend, "sandbox.backend");
      options.CopyFrom(*backend, alloc);
      if (std::string note = merge_network_policy(sandbox, options, alloc); !note.empty()) {
        config_.mapping_notes.push_back(std::move(note));
      }
      substitute(options, "sandbox.backend", "", alloc);
      config_.backend.options_json = json_to_string(options);
      return;
    }

    // DeerFlow's flat shape: move each key into the backend section.
    const Value* url = member(sandbox, "provisioner_url");
    if (url != nullptr && !url->IsString()) fail("sandbox.provisioner_url", "a string", *url);
    const bool remote = url != nullptr && url->GetStringLength() > 0;
    config_.backend.use = remote ? kRemoteProvisionerUse : kLocalDockerUse;

    options.SetObject();
    options.AddMember("use", Value(config_.backend.use.c_str(), alloc), alloc);
    std::vector<std::string> moved_notes;
    for (auto it = sandbox.MemberBegin(); it != sandbox.MemberEnd(); ++it) {
      const std::string key = name_of(it->name);
      if (!is_flat_backend_key(key) || it->value.IsNull()) continue;
      Value copy(it->value, alloc);
      substitute(copy, "sandbox." + key, key, alloc);
      options.AddMember(Value(key.c_str(), alloc), copy, alloc);
      moved_notes.push_back("sandbox." + key + " → sandbox.backend." + key);
    }
    if (std::string note = merge_network_policy(sandbox, options, alloc); !note.empty()) {
      substitute(options["network"], "sandbox.network", "network", alloc);
      moved_notes.push_back(std::move(note));
    }
    if (moved_notes.empty()) {
      config_.backend.options_json = "{}";
      config_.mapping_notes.push_back(std::string("no sandbox.backend section → ") +
                                      "sandbox.backend.use " + json_quote(kLocalDockerUse) +
                                      " with default options");
      return;
    }
    if (remote) {
      config_.mapping_notes.push_back(std::string("sandbox.provisioner_url is set → ") +
                                      "sandbox.backend.use " + json_quote(kRemoteProvisionerUse));
    } else {
      config_.mapping_notes.push_back(std::string("sandbox.provisioner_url is not set → ") +
                                      "sandbox.backend.use " + json_quote(kLocalDockerUse));
    }
    for (auto& note : moved_notes) config_.mapping_notes.push_back(std::move(note));
    config_.backend.options_json = json_to_string(options);
  }

  // DeerFlow's `sandbox.network` (its network modes) is a policy the backend enforces: it
  // joins the backend's options, in either shape, once. The note it leaves, or "".
  std::string merge_network_policy(const Value& sandbox, Value& options, Allocator& alloc) {
    const Value* network = member(sandbox, "network");
    if (network == nullptr || network->IsNull()) return "";
    if (options.HasMember("network")) {
      error(
          "sandbox.network: given both at the sandbox level and as sandbox.backend.network; "
          "set it once (a key given both ways is an error)");
    }
    options.AddMember("network", Value(*network, alloc), alloc);
    return "sandbox.network → sandbox.backend.network";
  }

  std::string use_for_ownership_type(const Value& type) const {
    const std::string path = "sandbox.ownership.type";
    if (!type.IsString()) fail(path, "a string (\"memory\", \"sqlite\" or \"redis\")", type);
    const std::string name = name_of(type);
    if (name == "memory") return kMemoryOwnershipUse;
    if (name == "sqlite") return kSqliteOwnershipUse;
    if (name == "redis") return kRedisOwnershipUse;
    error(path + ": Unknown sandbox ownership type: '" + name +
          "' (expected \"memory\", \"sqlite\" or \"redis\")");
  }

  // design §7.6: without an ownership section DeerFlow picks its redis store when the stream
  // bridge is redis (with the bridge's URL) or either redis URL variable is set (the store then
  // reads it itself). The reason, for the mapping note; nothing when no redis is implied.
  std::optional<std::string> redis_inference(const Value& root, std::optional<std::string>& url) {
    const Value* bridge = member(root, "stream_bridge");
    if (bridge != nullptr && bridge->IsObject()) {
      const Value* type = member(*bridge, "type");
      if (type != nullptr && type->IsString() && name_of(*type) == "redis") {
        if (const Value* bridge_url = member(*bridge, "redis_url");
            bridge_url != nullptr && bridge_url->IsString() && bridge_url->GetStringLength()) {
          url = name_of(*bridge_url);
        }
        return std::string("stream_bridge.type is \"redis\"") +
               (url ? " (url from stream_bridge.redis_url)" : "");
      }
    }
    for (const char* variable :
         {"DEER_FLOW_SANDBOX_OWNERSHIP_REDIS_URL", "DEER_FLOW_STREAM_BRIDGE_REDIS_URL"}) {
      const char* value = std::getenv(variable);
      if (value != nullptr && *value != '\0') {
        return std::string("environment variable ") + variable + " is set";
      }
    }
    return std::nullopt;
  }

  void read_ownership(const Value& sandbox, const Value& root) {
    config_.ownership.key_path = "sandbox.ownership";
    const Value* section = member(sandbox, "ownership");
    if (section == nullptr) {
      std::optional<std::string> url;
      if (const auto reason = redis_inference(root, url)) {
        config_.ownership.use = kRedisOwnershipUse;
        Document options;
        options.SetObject();
        auto& alloc = options.GetAllocator();
        options.AddMember("use", Value(kRedisOwnershipUse, alloc), alloc);
        if (url) options.AddMember("url", Value(url->c_str(), alloc), alloc);
        config_.ownership.options_json = json_to_string(options);
        config_.mapping_notes.push_back("no sandbox.ownership section and " + *reason + " → " +
                                        "sandbox.ownership.use " + json_quote(kRedisOwnershipUse));
        return;
      }
      config_.ownership.use = kMemoryOwnershipUse;
      config_.ownership.options_json = "{}";
      config_.mapping_notes.push_back(std::string("no sandbox.ownership section → ") +
                                      "sandbox.ownership.use " + json_quote(kMemoryOwnershipUse));
      return;
    }
    if (!section->IsObject()) fail("sandbox.ownership", "an object", *section);
    reject_duplicate_keys(*section, "sandbox.ownership");

    std::optional<std::string> use;
    if (const Value* v = member(*section, "use")) {
      if (!v->IsString() || v->GetStringLength() == 0) {
        fail("sandbox.ownership.use", "a non-empty \"module:Class\" string", *v);
      }
      use = name_of(*v);
    }
    const Value* type = member(*section, "type");
    std::optional<std::string> type_use;
    if (type != nullptr) type_use = use_for_ownership_type(*type);
    if (use && type_use && *use != *type_use) {
      error("sandbox.ownership.use and sandbox.ownership.type disagree: use " + json_quote(*use) +
            " but type " + json_quote(name_of(*type)) + " means " + json_quote(*type_use) +
            " (expected one of them, or both naming the same store)");
    }

    Document options;
    if (use) {
      config_.ownership.use = *use;
      rebuild_with_use(*section, *use, type_use ? "type" : nullptr, options);
    } else if (type_use) {
      config_.ownership.use = *type_use;
      rebuild_with_use(*section, *type_use, "type", options);
    } else {
      config_.ownership.use = kMemoryOwnershipUse;
      rebuild_with_use(*section, kMemoryOwnershipUse, nullptr, options);
      config_.mapping_notes.push_back(std::string("sandbox.ownership has no use or type → ") +
                                      "sandbox.ownership.use " + json_quote(kMemoryOwnershipUse));
    }
    if (type_use) {
      config_.mapping_notes.push_back("sandbox.ownership.type " + json_quote(name_of(*type)) +
                                      " → sandbox.ownership.use " + json_quote(*type_use));
    }

    if (const Value* v = member(*section, "renewal_interval_seconds")) {
      if (!v->IsNumber() || !(v->GetDouble() > 0.0) ||
          v->GetDouble() > lease_rules::kMaxRenewalIntervalSeconds) {
        fail("sandbox.ownership.renewal_interval_seconds", "a number > 0 and <= 86400 (a day)", *v);
      }
      config_.renewal_interval_seconds = v->GetDouble();
    }
    if (const Value* v = member(*section, "ttl_multiplier")) {
      if (!v->IsNumber() || !(v->GetDouble() >= 2.0)) {
        fail("sandbox.ownership.ttl_multiplier", "a number >= 2", *v);
      }
      config_.ttl_multiplier = v->GetDouble();
    }

    substitute(options, "sandbox.ownership", "", options.GetAllocator());
    config_.ownership.options_json = json_to_string(options);
  }

  // Every option of the table (sandbox_options.hpp), then what one option says of another.
  void read_scalars(const Value& sandbox) {
    for (const SandboxOption& option : sandbox_options()) {
      const Value* v = member(sandbox, option.key);
      if (v == nullptr) continue;
      if (!read_sandbox_option(option, *v, config_)) {
        fail(std::string("sandbox.") + option.key, option.expected, *v);
      }
    }
    for (const SandboxOption& option : sandbox_options()) {
      if (option.applies_only_with && member(sandbox, option.key) != nullptr &&
          config_.overflow_policy != *option.applies_only_with) {
        config_.warnings.push_back(std::string("sandbox.") + option.key +
                                   " applies only with overflow_policy \"" +
                                   to_string(*option.applies_only_with) + "\" (ignored)");
      }
    }
    if (config_.pause_after_seconds > 0 && config_.idle_timeout > 0 &&
        config_.pause_after_seconds >= config_.idle_timeout) {
      config_.warnings.push_back(
          "sandbox.pause_after_seconds (" + shortest(config_.pause_after_seconds) +
          ") is not below sandbox.idle_timeout (" + std::to_string(config_.idle_timeout) +
          "): released sandboxes are reaped before they would be paused");
    }
  }

  void read_plugin_dirs(const Value& sandbox) {
    const Value* dirs = member(sandbox, "plugin_dirs");
    if (dirs == nullptr) return;
    if (!dirs->IsArray()) fail("sandbox.plugin_dirs", "an array of directory strings", *dirs);
    for (rapidjson::SizeType i = 0; i < dirs->Size(); ++i) {
      const Value& item = (*dirs)[i];
      if (!item.IsString() || item.GetStringLength() == 0) {
        fail("sandbox.plugin_dirs[" + std::to_string(i) + "]", "a non-empty directory string",
             item);
      }
      std::filesystem::path dir(name_of(item));
      if (dir.is_relative()) dir = (relative_base_ / dir).lexically_normal();
      config_.plugin_dirs.push_back(dir.string());
    }
  }

  void warn_unknown_keys(const Value& sandbox) {
    std::string deerflow_only;
    for (auto it = sandbox.MemberBegin(); it != sandbox.MemberEnd(); ++it) {
      const std::string key = name_of(it->name);
      if (is_known_sandbox_key(key) || is_flat_backend_key(key)) continue;
      if (std::find(std::begin(kDeerFlowToolKeys), std::end(kDeerFlowToolKeys), key) !=
          std::end(kDeerFlowToolKeys)) {
        deerflow_only += (deerflow_only.empty() ? "" : ", ") + key;
        continue;
      }
      if (yaml_ != nullptr &&
          std::find(std::begin(kDeerFlowOnlySandboxKeys), std::end(kDeerFlowOnlySandboxKeys),
                    key) != std::end(kDeerFlowOnlySandboxKeys)) {
        deerflow_only += (deerflow_only.empty() ? "" : ", ") + key;
        continue;
      }
      config_.warnings.push_back("unknown key sandbox." + key + " (ignored)");
    }
    if (!deerflow_only.empty()) {
      config_.mapping_notes.push_back("sandbox." + deerflow_only +
                                      " → ignored: DeerFlow's own settings, not a sandbox's");
    }
  }

  std::string source_;
  std::filesystem::path relative_base_;
  const DeerFlowYaml* yaml_ = nullptr;
  SandboxConfig config_;
};

std::filesystem::path absolute_or_cwd(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path base =
      dir.empty() ? std::filesystem::current_path(ec) : std::filesystem::path(dir);
  if (ec) return std::filesystem::path(dir);
  base = std::filesystem::absolute(base, ec);
  return base.lexically_normal();
}

}  // namespace

namespace {

// DeerFlow's config.yaml: its sandbox sections as the JSON document the parser validates, the
// line of every key kept for errors (here and in a plugin's complaint, with_source_line).
SandboxConfig parse_deerflow_yaml(const std::string& text, const std::string& source,
                                  const std::filesystem::path& relative_base) {
  const DeerFlowYaml yaml = read_deerflow_yaml(text, source);
  Parser parser(source, relative_base);
  parser.from_deerflow_yaml(yaml);
  SandboxConfig config = parser.parse(yaml.json, source);
  std::string note =
      "read as DeerFlow's config.yaml: its sandbox:, skills: and stream_bridge: sections";
  if (!yaml.other_sections.empty()) {
    note += " (" + std::to_string(yaml.other_sections.size()) +
            " other top-level sections left to DeerFlow)";
  }
  config.mapping_notes.insert(config.mapping_notes.begin(), note);
  config.warnings.insert(config.warnings.begin(), yaml.warnings.begin(), yaml.warnings.end());
  config.source_lines = yaml.lines;
  for (const auto& [key_path, line] : yaml.lines) {
    for (const char* flat : kFlatBackendKeys) {
      const std::string key = std::string("sandbox.") + flat;
      if (key_path.compare(0, key.size(), key) == 0 &&
          (key_path.size() == key.size() || key_path[key.size()] == '.' ||
           key_path[key.size()] == '[')) {
        config.source_lines.emplace("sandbox.backend." + key_path.substr(8), line);
      }
    }
  }
  return config;
}

}  // namespace

SandboxConfig parse_config(const std::string& text, const std::string& source_name,
                           const std::string& relative_base_dir) {
  // Text has no name to sniff beyond its extension: "x.yaml" is YAML, anything else JSON.
  if (has_yaml_extension(source_name)) {
    return parse_deerflow_yaml(text, source_name, absolute_or_cwd(relative_base_dir));
  }
  Parser parser(source_name, absolute_or_cwd(relative_base_dir));
  return parser.parse(text, source_name);
}

SandboxConfig load_config_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    throw ConfigError(path + ": cannot open config file: " + std::strerror(err));
  }
  std::string text;
  char buffer[8192];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) text.append(buffer, n);
  const bool failed = std::ferror(file) != 0;
  const int err = errno;
  std::fclose(file);
  if (failed) throw ConfigError(path + ": cannot read config file: " + std::strerror(err));

  const std::filesystem::path dir =
      absolute_or_cwd(std::filesystem::path(path).parent_path().string());
  if (looks_like_yaml(path, text)) return parse_deerflow_yaml(text, path, dir);
  Parser parser(path, dir);
  return parser.parse(text, path);
}

std::string with_source_line(const SandboxConfig& config, const std::string& message) {
  if (config.source_lines.empty() || config.source_file.empty()) return message;
  const std::string prefix = config.source_file + ": ";
  if (message.compare(0, prefix.size(), prefix) != 0) return message;
  const std::string rest = message.substr(prefix.size());
  std::string path = rest.substr(0, rest.find(": "));
  while (!path.empty()) {
    if (auto line = config.source_lines.find(path); line != config.source_lines.end()) {
      return config.source_file + ":" + std::to_string(line->second) + ": " + rest;
    }
    const std::size_t cut = path.find_last_of(".[");
    path = cut == std::string::npos ? "" : path.substr(0, cut);
  }
  return message;
}

}  // namespace sandboxd::core

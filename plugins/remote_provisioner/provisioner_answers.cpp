#include "provisioner_answers.hpp"

#include <rapidjson/document.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>

#include "sandboxd/http.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/plugin_config.hpp"
#include "sandboxd/redact.hpp"

namespace sandboxd::remote_provisioner {
namespace {

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

// request_headers: what every request to the sandbox must carry (a relay's token).
// From a service we do not control: at most kMaxRequestHeaders, names HTTP tokens, values
// without line breaks, each bounded; anything else and the member is refused whole.
constexpr std::size_t kMaxRequestHeaders = 16;
constexpr std::size_t kMaxRequestHeaderBytes = 4096;

std::map<std::string, std::string> request_headers_member(const rapidjson::Value& object) {
  std::map<std::string, std::string> out;
  auto it = object.FindMember("request_headers");
  if (it == object.MemberEnd() || it->value.IsNull()) return out;
  const auto refused = [](const std::string& why) {
    return std::runtime_error("response has request_headers that " + why);
  };
  if (!it->value.IsObject()) throw refused("are not an object");
  if (it->value.MemberCount() > kMaxRequestHeaders) {
    throw refused("name more than " + std::to_string(kMaxRequestHeaders) + " headers");
  }
  for (const auto& header : it->value.GetObject()) {
    const std::string name(header.name.GetString(), header.name.GetStringLength());
    const bool token = !name.empty() && name.size() <= 256 &&
                       name.find_first_not_of(
                           "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                           "0123456789!#$%&'*+-.^_`|~") == std::string::npos;
    if (!token) throw refused("name a header that is not an HTTP token");
    if (!header.value.IsString() || header.value.GetStringLength() > kMaxRequestHeaderBytes) {
      throw refused("give " + name + " a value that is not a bounded string");
    }
    std::string value(header.value.GetString(), header.value.GetStringLength());
    if (value.find_first_of(std::string("\r\n\0", 3)) != std::string::npos) {
      throw refused("give " + name + " a value with a line break");
    }
    out.emplace(name, std::move(value));
  }
  return out;
}

bool parse_object(const std::string& body, rapidjson::Document& doc) {
  return parse_json(doc, body) && doc.IsObject();
}

SandboxInfo sandbox_info(const std::string& sandbox_id, std::string url, double created_at,
                         std::optional<std::string> user_id, std::optional<std::string> thread_id,
                         int mount_contract_version) {
  SandboxInfo info;
  info.sandbox_id = sandbox_id;
  info.sandbox_url = std::move(url);
  info.created_at = created_at;
  info.user_id = std::move(user_id);
  info.thread_id = std::move(thread_id);
  info.mount_contract_version = mount_contract_version;
  return info;
}

}  // namespace

int read_capabilities_answer(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_object(body, doc)) throw AnswerNotAnObject();
  const std::optional<int> version = contract_version_member(doc);
  if (!version) throw std::runtime_error("mount_contract_version is not an integer");
  return *version;
}

std::optional<int> served_contract_of_refusal(long status, const std::string& body) {
  if (status != 409) return std::nullopt;
  rapidjson::Document doc;
  if (!parse_object(body, doc)) return std::nullopt;
  auto version = doc.FindMember("mount_contract_version");
  if (version == doc.MemberEnd() || !version->value.IsInt()) return std::nullopt;
  return version->value.GetInt();
}

SandboxInfo read_create_answer(const std::string& sandbox_id, const std::string& body, double now) {
  rapidjson::Document doc;
  if (!parse_object(body, doc)) throw AnswerNotAnObject();
  auto url = non_empty_string_member(doc, "sandbox_url");
  if (!url) throw std::runtime_error("response has no sandbox_url");
  if (!http::is_http_url(*url)) {
    throw std::runtime_error("response has a sandbox_url that is not http:// or https://: '" +
                             redacted_url(url->substr(0, 200)) + "'");
  }
  auto version = contract_version_member(doc);
  if (!version) throw std::runtime_error("response has a non-integer mount_contract_version");
  SandboxInfo info = sandbox_info(sandbox_id, *url, now, string_member(doc, "user_id"),
                                  string_member(doc, "thread_id"), *version);
  info.request_headers = request_headers_member(doc);
  return info;
}

bool read_running_status(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_object(body, doc)) throw AnswerNotAnObject();
  return string_member(doc, "status") == std::optional<std::string>("Running");
}

std::optional<SandboxInfo> read_discovered_sandbox(const std::string& sandbox_id,
                                                   const std::string& body, double now) {
  rapidjson::Document doc;
  if (!parse_object(body, doc)) return std::nullopt;
  auto url = sandbox_url_member(doc);
  auto user = non_empty_string_member(doc, "user_id");
  auto thread = non_empty_string_member(doc, "thread_id");
  auto version = contract_version_member(doc);
  if (!url || !user || !thread || !version) return std::nullopt;
  SandboxInfo info = sandbox_info(sandbox_id, *url, now, user, thread, *version);
  try {
    info.request_headers = request_headers_member(doc);
  } catch (const std::runtime_error&) {
    return std::nullopt;
  }
  return info;
}

SandboxDiscoveryResult read_instance_answer(const std::string& sandbox_id, const std::string& body,
                                            double now) {
  rapidjson::Document doc;
  if (!parse_object(body, doc)) return SandboxDiscoveryResult::unknown();
  auto backend_namespace = string_member(doc, "backend_namespace");
  if (!backend_namespace) return SandboxDiscoveryResult::unknown();
  auto incarnation = doc.FindMember("incarnation_id");
  if (incarnation == doc.MemberEnd() || incarnation->value.IsNull()) {
    return SandboxDiscoveryResult::absent(*backend_namespace);
  }
  if (!incarnation->value.IsString()) return SandboxDiscoveryResult::unknown();
  const std::string incarnation_id(incarnation->value.GetString(),
                                   incarnation->value.GetStringLength());
  auto version = contract_version_member(doc);
  if (!version) return SandboxDiscoveryResult::unknown();
  std::optional<SandboxInfo> info;
  if (auto url = sandbox_url_member(doc)) {
    info = sandbox_info(sandbox_id, *url, now, non_empty_string_member(doc, "user_id"),
                        non_empty_string_member(doc, "thread_id"), *version);
    try {
      info->request_headers = request_headers_member(doc);
    } catch (const std::runtime_error&) {
      return SandboxDiscoveryResult::unknown();
    }
  }
  return SandboxDiscoveryResult::found(std::move(info), *backend_namespace, incarnation_id);
}

std::optional<SandboxListing> read_list_answer(const std::string& body, double now) {
  rapidjson::Document doc;
  if (!parse_object(body, doc)) return std::nullopt;
  auto entries = doc.FindMember("sandboxes");
  if (entries == doc.MemberEnd() || !entries->value.IsArray()) return std::nullopt;
  SandboxListing listing;
  for (const auto& entry : entries->value.GetArray()) {
    std::optional<std::string> id;
    std::optional<std::string> url;
    if (entry.IsObject()) {
      id = non_empty_string_member(entry, "sandbox_id");
      url = sandbox_url_member(entry);
    }
    if (!id || !url) {
      listing.skipped.push_back(shown_value(entry));
      continue;
    }
    auto created = entry.FindMember("created_at");
    const double created_at =
        created != entry.MemberEnd() && created->value.IsNumber() && created->value.GetDouble() > 0
            ? created->value.GetDouble()
            : now;
    SandboxInfo info = sandbox_info(
        *id, *url, created_at, non_empty_string_member(entry, "user_id"),
        non_empty_string_member(entry, "thread_id"), contract_version_member(entry).value_or(0));
    try {
      info.request_headers = request_headers_member(entry);
    } catch (const std::runtime_error&) {
      listing.skipped.push_back(shown_value(entry));
      continue;
    }
    listing.sandboxes.push_back(std::move(info));
  }
  return listing;
}

bool is_unknown_route_answer(long status, const std::string& body) {
  if (status != 404) return false;
  rapidjson::Document doc;
  return parse_object(body, doc) && string_member(doc, "detail") == "Not Found";
}

SandboxUsage::Reading read_usage_answer(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_object(body, doc)) throw AnswerNotAnObject();
  const auto member = [&doc](const char* name) -> const rapidjson::Value* {
    const auto found = doc.FindMember(name);
    return found == doc.MemberEnd() || found->value.IsNull() ? nullptr : &found->value;
  };
  const auto seconds = [&member](const char* name) -> std::optional<double> {
    const rapidjson::Value* value = member(name);
    if (value == nullptr) return std::nullopt;
    if (!value->IsNumber() || !std::isfinite(value->GetDouble()) || value->GetDouble() < 0) {
      throw std::runtime_error(std::string(name) + " is not a number of seconds >= 0");
    }
    return value->GetDouble();
  };
  const auto count = [&member](const char* name) -> std::optional<std::uint64_t> {
    const rapidjson::Value* value = member(name);
    if (value == nullptr) return std::nullopt;
    if (!value->IsUint64())
      throw std::runtime_error(std::string(name) + " is not a whole number >= 0");
    return value->GetUint64();
  };
  SandboxUsage::Reading reading;
  reading.cpu_seconds = seconds("cpu_seconds");
  reading.host_cpu_seconds = seconds("host_cpu_seconds");
  if (const rapidjson::Value* cpus = member("online_cpus")) {
    if (!cpus->IsInt() || cpus->GetInt() < 0) {
      throw std::runtime_error("online_cpus is not a whole number >= 0");
    }
    reading.online_cpus = cpus->GetInt();
  }
  reading.memory_bytes = count("memory_bytes");
  reading.memory_limit_bytes = count("memory_limit_bytes");
  reading.pids = count("pids");
  return reading;
}

std::optional<std::uint64_t> read_writable_layer_bytes(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_object(body, doc)) throw AnswerNotAnObject();
  const auto found = doc.FindMember("writable_layer_bytes");
  if (found == doc.MemberEnd() || found->value.IsNull()) return std::nullopt;
  if (!found->value.IsUint64()) {
    throw std::runtime_error("writable_layer_bytes is not a whole number >= 0");
  }
  return found->value.GetUint64();
}

}  // namespace sandboxd::remote_provisioner

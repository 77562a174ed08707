#include "provisioner_support.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <mutex>
#include <set>

#include "sandboxd/readiness.hpp"

namespace sandboxd::remote_provisioner {
namespace {

// A host path split into its root ("", "/", "\", "\\" or "C:\") and its segments.
struct HostPath {
  bool windows = false;
  std::string root;
  std::vector<std::string> segments;

  char separator() const { return windows ? '\\' : '/'; }
  std::string str() const {
    std::string out = root;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      if (i > 0) out += separator();
      out += segments[i];
    }
    return out;
  }
};

bool is_windows_style(const std::string& path) {
  if (path.size() >= 3 && std::isalpha(static_cast<unsigned char>(path[0])) && path[1] == ':' &&
      (path[2] == '\\' || path[2] == '/')) {
    return true;
  }
  return path.find('\\') != std::string::npos;  // covers a leading "\\" too
}

HostPath parse_host_path(const std::string& raw) {
  HostPath out;
  out.windows = is_windows_style(raw);
  std::string path = raw;
  if (out.windows) std::replace(path.begin(), path.end(), '/', '\\');
  const char sep = out.separator();
  std::size_t pos = 0;
  if (out.windows) {
    if (path.rfind("\\\\", 0) == 0) {
      out.root = "\\\\";
      pos = 2;
    } else if (path.size() >= 3 && path[1] == ':' && path[2] == '\\') {
      out.root = path.substr(0, 3);
      pos = 3;
    } else if (!path.empty() && path[0] == '\\') {
      out.root = "\\";
      pos = 1;
    }
  } else if (!path.empty() && path[0] == '/') {
    out.root = "/";
    pos = 1;
  }
  while (pos <= path.size()) {
    std::size_t next = path.find(sep, pos);
    if (next == std::string::npos) next = path.size();
    std::string segment = path.substr(pos, next - pos);
    if (!segment.empty() && segment != ".") out.segments.push_back(std::move(segment));
    pos = next + 1;
  }
  return out;
}

}  // namespace

std::string HttpResponse::text() const {
  std::string out = body;
  while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
  if (out.size() > 500) out = out.substr(0, 500) + "...";
  return out;
}

std::string HttpResponse::describe() const {
  const std::string trimmed = text();
  return "HTTP " + std::to_string(status) + (trimmed.empty() ? "" : " " + trimmed);
}

HttpResponse http_request(const std::string& method, const std::string& url,
                          const std::string& api_key, double timeout_seconds,
                          const std::string& json_body) {
  http::Request request;
  request.method = method;
  request.url = url;
  request.json_body = json_body;
  request.timeout_seconds = timeout_seconds;
  request.use_environment_proxy = trust_env(url);
  if (!api_key.empty()) request.headers.push_back("X-API-Key: " + api_key);
  try {
    http::Response answer = http::perform(request);
    HttpResponse response;
    response.status = answer.status;
    response.body = std::move(answer.body);
    return response;
  } catch (const http::TransportError& e) {
    throw TransportError(method + " " + url + ": " + e.what());
  }
}

const std::vector<std::string>& forwarded_container_paths() {
  static const std::vector<std::string> paths(kProvisionerExtraMountPaths.begin(),
                                              kProvisionerExtraMountPaths.end());
  return paths;
}

std::vector<Mount> provisioner_extra_mounts_payload(const std::vector<Mount>& mounts,
                                                    bool provision_lark_cli_runtime,
                                                    bool provision_lark_cli_broker) {
  const auto& allowed = forwarded_container_paths();
  const Mount* uploads = nullptr;
  for (const Mount& mount : mounts) {
    if (mount.container_path == kUploadsContainerPath) {
      uploads = &mount;
      break;
    }
  }
  std::vector<Mount> payload;
  std::set<std::string> seen;
  for (const Mount& mount : mounts) {
    if (std::find(allowed.begin(), allowed.end(), mount.container_path) == allowed.end()) continue;
    if (mount.container_path == kLarkCliRuntimeContainerPath &&
        (provision_lark_cli_runtime || provision_lark_cli_broker)) {
      continue;
    }
    if (!seen.insert(mount.container_path).second) continue;
    if (mount.container_path == kUploadConversionsContainerPath) {
      if (!mount.read_only) {
        throw std::invalid_argument("Upload conversion mount must be read-only: " +
                                    mount.host_path);
      }
      if (uploads == nullptr) {
        throw std::invalid_argument("Upload conversion mount requires an uploads mount at " +
                                    std::string(kUploadsContainerPath));
      }
      const std::string expected =
          host_path_join(host_path_parent(uploads->host_path), ".upload-conversions");
      if (normalize_host_path(mount.host_path) != expected) {
        throw std::invalid_argument("Upload conversion mount " + mount.host_path +
                                    " does not belong to the uploads mount (expected " + expected +
                                    ")");
      }
    }
    payload.push_back(mount);
  }
  return payload;
}

std::string extra_mounts_to_json(const std::vector<Mount>& payload) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  writer.StartArray();
  for (const Mount& mount : payload) {
    writer.StartObject();
    writer.Key("host_path");
    writer.String(mount.host_path.c_str(),
                  static_cast<rapidjson::SizeType>(mount.host_path.size()));
    writer.Key("container_path");
    writer.String(mount.container_path.c_str(),
                  static_cast<rapidjson::SizeType>(mount.container_path.size()));
    writer.Key("read_only");
    writer.Bool(mount.read_only);
    writer.EndObject();
  }
  writer.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}

std::string normalize_host_path(const std::string& path) {
  return parse_host_path(path).str();
}

std::string host_path_parent(const std::string& path) {
  HostPath parsed = parse_host_path(path);
  if (!parsed.segments.empty()) parsed.segments.pop_back();
  return parsed.str();
}

std::string host_path_join(const std::string& base, const std::string& name) {
  HostPath parsed = parse_host_path(base);
  parsed.segments.push_back(name);
  return parsed.str();
}

}  // namespace sandboxd::remote_provisioner

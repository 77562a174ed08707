#include "provisioner_support.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <memory>
#include <mutex>
#include <set>

#include "sandboxd/host_path.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/readiness.hpp"

namespace sandboxd::remote_provisioner {

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
    throw TransportError(method + " " + redacted_url(url) + ": " + e.what());
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
          join_host_path(host_path_parent(uploads->host_path), {".upload-conversions"});
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
    write_json_member(writer, "host_path", mount.host_path);
    write_json_member(writer, "container_path", mount.container_path);
    writer.Key("read_only");
    writer.Bool(mount.read_only);
    writer.EndObject();
  }
  writer.EndArray();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace sandboxd::remote_provisioner

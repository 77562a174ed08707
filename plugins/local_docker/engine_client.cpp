#include "engine_client.hpp"

#include <rapidjson/document.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sandboxd/http.hpp>
#include <sandboxd/json.hpp>

namespace sandboxd::local_docker {
namespace {

std::string format_seconds(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", seconds);
  return buffer;
}

}  // namespace

std::string HttpResponse::message() const {
  rapidjson::Document doc;
  if (parse_json(doc, body) && doc.IsObject()) {
    auto it = doc.FindMember("message");
    if (it != doc.MemberEnd() && it->value.IsString()) return it->value.GetString();
  }
  std::string text = body;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  if (text.empty()) return "HTTP " + std::to_string(status) + " with an empty body";
  if (text.size() > 2000) text = text.substr(0, 2000) + "...";
  return text;
}

EngineClient::EngineClient(EngineEndpoint endpoint) : endpoint_(std::move(endpoint)) {}

HttpResponse EngineClient::raw_call(const std::string& method, const std::string& path,
                                    double timeout_seconds, const std::string& body,
                                    const BodySink& sink) {
  if (!endpoint_.unix_socket.empty()) {
    struct stat st {};
    if (::stat(endpoint_.unix_socket.c_str(), &st) != 0) {
      const int error = errno;
      throw EngineUnreachableError(
          "Container engine socket " + endpoint_.unix_socket +
          (error == ENOENT ? " does not exist" : std::string(": ") + std::strerror(error)) +
          ": is the Docker daemon (or `podman system service`) running? Set the backend's "
          "`socket` option or DOCKER_HOST to the engine's socket");
    }
    if (!S_ISSOCK(st.st_mode)) {
      throw EngineUnreachableError("Container engine socket " + endpoint_.unix_socket +
                                   " exists but is not a unix socket");
    }
  }

  http::Request request;
  request.method = method;
  request.url = endpoint_.base_url + path;
  request.json_body = body;
  request.timeout_seconds = timeout_seconds;
  request.connect_timeout_seconds = 5.0;
  request.unix_socket = endpoint_.unix_socket;  // the engine is never reached through a proxy
  if (sink) request.body_sink = sink;
  try {
    http::Response answer = http::perform(request);
    HttpResponse response;
    response.status = answer.status;
    response.body = std::move(answer.body);
    response.headers = std::move(answer.headers);
    return response;
  } catch (const http::TransportError& e) {
    if (e.timed_out()) {
      throw EngineTimeoutError("Timed out after " + format_seconds(timeout_seconds) +
                               "s waiting for the container engine at " + endpoint_.display + " (" +
                               method + " " + path + ")");
    }
    throw EngineUnreachableError("Cannot talk to the container engine at " + endpoint_.display +
                                 " (" + method + " " + path + "): " + e.what());
  }
}

std::string EngineClient::api_version() {
  MutexLock lock(version_mutex_);
  if (version_) return *version_;
  EngineApiRange engine;
  const HttpResponse ping = raw_call("GET", "/_ping", 10.0);
  if (ping.ok()) {
    if (auto it = ping.headers.find("api-version"); it != ping.headers.end()) {
      engine.max = parse_api_version(it->second);
    }
  }
  // /_ping names only the newest version the engine speaks. Its oldest matters only when that
  // newest is above ours (an engine newer than this plugin may have dropped the versions we
  // speak), so /version, slow on podman (~3 s), is asked only then or when the header is absent.
  if (!engine.max || *engine.max > kMaxApiVersion) {
    const HttpResponse response = raw_call("GET", "/version", 30.0);
    if (!response.ok()) {
      throw EngineUnreachableError("The container engine at " + endpoint_.display +
                                   " answered GET /version with HTTP " +
                                   std::to_string(response.status) + ": " + response.message());
    }
    rapidjson::Document doc;
    if (parse_json(doc, response.body) && doc.IsObject()) {
      if (doc.HasMember("ApiVersion") && doc["ApiVersion"].IsString()) {
        engine.max = parse_api_version(doc["ApiVersion"].GetString());
      }
      if (doc.HasMember("MinAPIVersion") && doc["MinAPIVersion"].IsString()) {
        engine.min = parse_api_version(doc["MinAPIVersion"].GetString());
      }
    }
  }
  if (!engine.max) {
    throw EngineUnreachableError("The container engine at " + endpoint_.display +
                                 " reported no API version (GET /_ping, GET /version)");
  }
  const auto chosen = negotiate_api_version(engine, {kMinApiVersion, kMaxApiVersion});
  if (!chosen) {
    throw EngineUnreachableError("The container engine at " + endpoint_.display +
                                 " and this plugin share no API version: " +
                                 describe_api_mismatch(engine, {kMinApiVersion, kMaxApiVersion}));
  }
  version_ = format_api_version(*chosen);
  return *version_;
}

HttpResponse EngineClient::call(const std::string& method, const std::string& path,
                                double timeout_seconds, const std::string& body,
                                const BodySink& sink) {
  const std::string version = api_version();
  return raw_call(method, "/v" + version + path, timeout_seconds, body, sink);
}

}  // namespace sandboxd::local_docker

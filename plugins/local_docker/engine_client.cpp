#include "engine_client.hpp"

#include <curl/curl.h>
#include <rapidjson/document.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

namespace sandboxd::local_docker {
namespace {

void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

struct CurlDeleter {
  void operator()(CURL* handle) const { curl_easy_cleanup(handle); }
};
struct SlistDeleter {
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

struct WriteTarget {
  std::string* body;
  const BodySink* sink;
};

size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* headers = static_cast<std::map<std::string, std::string>*>(user);
  const size_t bytes = size * count;
  std::string line(data, bytes);
  const std::size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string value = line.substr(colon + 1);
    const std::size_t first = value.find_first_not_of(" \t");
    const std::size_t last = value.find_last_not_of(" \t\r\n");
    value = first == std::string::npos ? std::string() : value.substr(first, last - first + 1);
    (*headers)[name] = value;
  }
  return bytes;
}

size_t on_write(char* data, size_t size, size_t count, void* user) {
  auto* target = static_cast<WriteTarget*>(user);
  const size_t bytes = size * count;
  if (target->sink != nullptr && *target->sink) {
    (*target->sink)(std::string_view(data, bytes));
  } else {
    target->body->append(data, bytes);
  }
  return bytes;
}

long to_millis(double seconds) {
  if (!(seconds > 0)) return 1;
  return static_cast<long>(std::ceil(seconds * 1000.0));
}

std::string format_seconds(double seconds) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1f", seconds);
  return buffer;
}

}  // namespace

std::string HttpResponse::message() const {
  rapidjson::Document doc;
  doc.Parse(body.c_str(), body.size());
  if (!doc.HasParseError() && doc.IsObject()) {
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

EngineClient::EngineClient(EngineEndpoint endpoint) : endpoint_(std::move(endpoint)) {
  global_init_once();
}

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

  std::unique_ptr<CURL, CurlDeleter> handle(curl_easy_init());
  if (!handle) throw EngineUnreachableError("libcurl could not create a request handle");
  CURL* curl = handle.get();

  const std::string url = endpoint_.base_url + path;
  std::string response_body;
  std::map<std::string, std::string> response_headers;
  WriteTarget target{&response_body, &sink};
  char error_buffer[CURL_ERROR_SIZE] = {0};

  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  if (!endpoint_.unix_socket.empty()) {
    curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, endpoint_.unix_socket.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");  // the engine is never reached through a proxy
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // required for timeouts in threaded programs
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, to_millis(timeout_seconds));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, std::min(to_millis(timeout_seconds), 5000L));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_write);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &target);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &response_headers);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);

  curl_slist* raw_headers = curl_slist_append(nullptr, "Expect:");
  if (!body.empty()) raw_headers = curl_slist_append(raw_headers, "Content-Type: application/json");
  std::unique_ptr<curl_slist, SlistDeleter> headers(raw_headers);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());

  if (method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
    if (!body.empty()) {
      curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.c_str());
      curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
    }
  }

  const CURLcode code = curl_easy_perform(curl);
  if (code == CURLE_OPERATION_TIMEDOUT) {
    throw EngineTimeoutError("Timed out after " + format_seconds(timeout_seconds) +
                             "s waiting for the container engine at " + endpoint_.display + " (" +
                             method + " " + path + ")");
  }
  if (code != CURLE_OK) {
    const std::string detail = error_buffer[0] != 0 ? error_buffer : curl_easy_strerror(code);
    throw EngineUnreachableError("Cannot talk to the container engine at " + endpoint_.display +
                                 " (" + method + " " + path + "): " + detail);
  }
  HttpResponse response;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  response.body = std::move(response_body);
  response.headers = std::move(response_headers);
  return response;
}

std::string EngineClient::api_version() {
  std::lock_guard lock(version_mutex_);
  if (version_) return *version_;
  std::optional<std::pair<int, int>> server;
  const HttpResponse ping = raw_call("GET", "/_ping", 10.0);
  if (ping.ok()) {
    if (auto it = ping.headers.find("api-version"); it != ping.headers.end()) {
      server = parse_api_version(it->second);
    }
  }
  if (!server) {
    const HttpResponse response = raw_call("GET", "/version", 30.0);
    if (!response.ok()) {
      throw EngineUnreachableError("The container engine at " + endpoint_.display +
                                   " answered GET /version with HTTP " +
                                   std::to_string(response.status) + ": " + response.message());
    }
    rapidjson::Document doc;
    doc.Parse(response.body.c_str(), response.body.size());
    if (!doc.HasParseError() && doc.IsObject() && doc.HasMember("ApiVersion") &&
        doc["ApiVersion"].IsString()) {
      server = parse_api_version(doc["ApiVersion"].GetString());
    }
  }
  if (!server) {
    throw EngineUnreachableError("The container engine at " + endpoint_.display +
                                 " reported no API version (GET /_ping, GET /version)");
  }
  if (*server < kMinApiVersion) {
    throw EngineUnreachableError(
        "The container engine at " + endpoint_.display + " speaks API " +
        std::to_string(server->first) + "." + std::to_string(server->second) + "; need at least " +
        std::to_string(kMinApiVersion.first) + "." + std::to_string(kMinApiVersion.second));
  }
  const std::pair<int, int> chosen = std::min(*server, kMaxApiVersion);
  version_ = std::to_string(chosen.first) + "." + std::to_string(chosen.second);
  return *version_;
}

HttpResponse EngineClient::call(const std::string& method, const std::string& path,
                                double timeout_seconds, const std::string& body,
                                const BodySink& sink) {
  const std::string version = api_version();
  return raw_call(method, "/v" + version + path, timeout_seconds, body, sink);
}

}  // namespace sandboxd::local_docker

// One HTTP request with libcurl, for plugins that talk HTTP (the engine API, a provisioner, a
// sandbox's readiness endpoint). Header-only; link sandboxd::readiness (it brings libcurl).
//
// Thread safety: every call creates and cleans up its own CURL easy handle, so calls run in
// parallel without shared libcurl state.
//
// What an answer can cost is bounded: only http:// and https:// URLs are requested (a
// provisioner-supplied sandbox URL of file:///dev/zero is refused before libcurl sees it), a
// buffered body stops at Request::max_body_bytes, the headers at kMaxHeaderBytes, and the whole
// request at its timeout. A streamed body (body_sink) is the sink's to bound.
#pragma once

#include <curl/curl.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxd/redact.hpp"

namespace sandboxd::http {

inline constexpr std::size_t kDefaultMaxBodyBytes = 32u << 20;  // an engine listing 10,000 ≈ 15 MiB
inline constexpr std::size_t kMaxHeaderBytes = 1u << 20;

struct Request {
  std::string method = "GET";
  std::string url;
  std::string json_body;                 // sent as application/json when non-empty
  std::vector<std::string> headers;      // extra "Name: value" lines (never logged by this code)
  double timeout_seconds = 10.0;         // whole request
  double connect_timeout_seconds = 0.0;  // 0: same as timeout_seconds
  std::string unix_socket;               // talk HTTP over this socket instead of TCP
  bool use_environment_proxy = false;    // decide with sandboxd::trust_env for sandbox URLs
  // Receives the body piece by piece (streamed answers); Response::body then stays empty. An
  // exception it throws ends the transfer and is rethrown by perform().
  std::function<void(std::string_view chunk)> body_sink;
  // A buffered body longer than this ends the request with TransportError (too_large()).
  std::size_t max_body_bytes = kDefaultMaxBodyBytes;
  // TLS for https:// URLs (a cluster's API server): the CA to trust instead of the system's, as
  // a file or PEM text; a client certificate and key, each as a file or PEM text. Verification
  // is skipped only when insecure_skip_tls_verify says so (a config that asked for it).
  std::string ca_file, ca_pem;
  std::string client_cert_file, client_cert_pem, client_key_file, client_key_pem;
  bool insecure_skip_tls_verify = false;
  // Makes the socket the request connects (and libcurl closes): a socket made in another
  // network namespace reaches the URL's address there. Unset: libcurl makes its own.
  std::function<int()> open_socket;
};

struct Response {
  long status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // names lower-cased; last value wins

  bool ok() const { return status >= 200 && status < 300; }
};

// No usable HTTP answer arrived: refused, reset, name not resolved, the timeout passed (in
// which case the request may still be in flight at the server), the answer was larger than
// allowed, or the URL was not http(s) and nothing was sent.
class TransportError : public std::runtime_error {
 public:
  TransportError(const std::string& what, bool timed_out, bool too_large = false)
      : std::runtime_error(what), timed_out_(timed_out), too_large_(too_large) {}
  bool timed_out() const { return timed_out_; }
  bool too_large() const { return too_large_; }

 private:
  bool timed_out_;
  bool too_large_;
};

// True for "http://…" and "https://…" (scheme case-insensitive), the only URLs perform() requests.
inline bool is_http_url(std::string_view url) {
  const auto has_scheme = [&](std::string_view scheme) {
    if (url.size() <= scheme.size()) return false;
    for (std::size_t i = 0; i < scheme.size(); ++i) {
      if (std::tolower(static_cast<unsigned char>(url[i])) != scheme[i]) return false;
    }
    return true;
  };
  return has_scheme("http://") || has_scheme("https://");
}

namespace detail {

inline void global_init_once() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

inline long to_millis(double seconds) {
  if (!(seconds > 0)) return 1;
  return static_cast<long>(std::ceil(seconds * 1000.0));
}

// What the libcurl callbacks write into. Returning fewer bytes than offered aborts the
// transfer (CURLE_WRITE_ERROR); the reason is kept here, since nothing may throw through C.
struct Sinks {
  std::string* body;
  const std::function<void(std::string_view)>* stream;
  std::map<std::string, std::string>* headers;
  std::size_t max_body_bytes = kDefaultMaxBodyBytes;
  std::size_t header_bytes = 0;
  bool body_too_large = false;
  bool headers_too_large = false;
  std::exception_ptr stream_error;
};

inline size_t on_body(char* data, size_t size, size_t count, void* user) {
  auto* sinks = static_cast<Sinks*>(user);
  const size_t bytes = size * count;
  if (*sinks->stream) {
    try {
      (*sinks->stream)(std::string_view(data, bytes));
    } catch (...) {
      sinks->stream_error = std::current_exception();
      return 0;
    }
  } else {
    if (bytes > sinks->max_body_bytes - sinks->body->size()) {
      sinks->body_too_large = true;
      return 0;
    }
    sinks->body->append(data, bytes);
  }
  return bytes;
}

// CURLOPT_OPENSOCKETFUNCTION: the request's own socket maker; CURL_SOCKET_BAD when it throws.
inline curl_socket_t on_open_socket(void* user, curlsocktype purpose, curl_sockaddr*) {
  if (purpose != CURLSOCKTYPE_IPCXN) return CURL_SOCKET_BAD;
  const auto* make = static_cast<const std::function<int()>*>(user);
  try {
    const int fd = (*make)();
    return fd >= 0 ? fd : CURL_SOCKET_BAD;
  } catch (...) {
    return CURL_SOCKET_BAD;
  }
}

inline size_t on_header(char* data, size_t size, size_t count, void* user) {
  auto* sinks = static_cast<Sinks*>(user);
  const size_t bytes = size * count;
  sinks->header_bytes += bytes;
  if (sinks->header_bytes > kMaxHeaderBytes) {
    sinks->headers_too_large = true;
    return 0;
  }
  const std::string line(data, bytes);
  const std::size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string value = line.substr(colon + 1);
    const std::size_t first = value.find_first_not_of(" \t");
    const std::size_t last = value.find_last_not_of(" \t\r\n");
    value = first == std::string::npos ? std::string() : value.substr(first, last - first + 1);
    (*sinks->headers)[name] = value;
  }
  return bytes;
}

}  // namespace detail

// Performs `request`. HTTP error statuses are returned; a missing answer throws TransportError.
inline Response perform(const Request& request) {
  if (!is_http_url(request.url)) {
    throw TransportError("refused to request " + redacted_url(request.url) +
                             ": only http:// and https:// URLs are allowed",
                         false);
  }
  detail::global_init_once();
  std::unique_ptr<CURL, void (*)(CURL*)> handle(curl_easy_init(), curl_easy_cleanup);
  if (!handle) throw TransportError("libcurl could not create a request handle", false);
  CURL* curl = handle.get();

  Response response;
  detail::Sinks sinks{&response.body, &request.body_sink, &response.headers};
  sinks.max_body_bytes = request.max_body_bytes;
  char error_buffer[CURL_ERROR_SIZE] = {0};
  const double connect_timeout =
      request.connect_timeout_seconds > 0
          ? std::min(request.connect_timeout_seconds, request.timeout_seconds)
          : request.timeout_seconds;
  curl_easy_setopt(curl, CURLOPT_URL, request.url.c_str());
  if (!request.unix_socket.empty()) {
    curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, request.unix_socket.c_str());
  }
#if LIBCURL_VERSION_NUM >= 0x075500  // 7.85: the string form; the bitmask is deprecated there
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#else
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS, CURLPROTO_HTTP | CURLPROTO_HTTPS);
  curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS, CURLPROTO_HTTP | CURLPROTO_HTTPS);
#endif
  if (!request.use_environment_proxy) curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);  // required for timeouts in threaded programs
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, detail::to_millis(request.timeout_seconds));
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, detail::to_millis(connect_timeout));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, detail::on_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &sinks);
  curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, detail::on_header);
  curl_easy_setopt(curl, CURLOPT_HEADERDATA, &sinks);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error_buffer);
  if (request.open_socket) {
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETFUNCTION, detail::on_open_socket);
    curl_easy_setopt(curl, CURLOPT_OPENSOCKETDATA, &request.open_socket);
  }

  // Blobs are copied by libcurl (CURL_BLOB_COPY), so these may go out of scope after setopt.
  const auto set_blob = [&](CURLoption option, const std::string& pem) {
    curl_blob blob{const_cast<char*>(pem.data()), pem.size(), CURL_BLOB_COPY};
    curl_easy_setopt(curl, option, &blob);
  };
  if (!request.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, request.ca_file.c_str());
  if (!request.ca_pem.empty()) set_blob(CURLOPT_CAINFO_BLOB, request.ca_pem);
  if (!request.client_cert_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, request.client_cert_file.c_str());
  }
  if (!request.client_cert_pem.empty()) set_blob(CURLOPT_SSLCERT_BLOB, request.client_cert_pem);
  if (!request.client_key_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLKEY, request.client_key_file.c_str());
  }
  if (!request.client_key_pem.empty()) set_blob(CURLOPT_SSLKEY_BLOB, request.client_key_pem);
  if (request.insecure_skip_tls_verify) {
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 0L);
    curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 0L);
  }

  curl_slist* raw_headers = curl_slist_append(nullptr, "Expect:");
  if (!request.json_body.empty()) {
    raw_headers = curl_slist_append(raw_headers, "Content-Type: application/json");
  }
  for (const auto& header : request.headers) {
    raw_headers = curl_slist_append(raw_headers, header.c_str());
  }
  std::unique_ptr<curl_slist, void (*)(curl_slist*)> headers(raw_headers, curl_slist_free_all);
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers.get());

  const auto send_body = [&] {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, request.json_body.c_str());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE,
                     static_cast<curl_off_t>(request.json_body.size()));
  };
  if (request.method == "GET") {
    curl_easy_setopt(curl, CURLOPT_HTTPGET, 1L);
  } else if (request.method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    send_body();
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, request.method.c_str());
    if (!request.json_body.empty()) send_body();
  }

  const CURLcode code = curl_easy_perform(curl);
  if (sinks.stream_error) std::rethrow_exception(sinks.stream_error);
  if (sinks.body_too_large) {
    throw TransportError("the answer's body exceeded " + std::to_string(request.max_body_bytes) +
                             " bytes; the transfer was cut off",
                         false, true);
  }
  if (sinks.headers_too_large) {
    throw TransportError("the answer's headers exceeded " + std::to_string(kMaxHeaderBytes) +
                             " bytes; the transfer was cut off",
                         false, true);
  }
  if (code != CURLE_OK) {
    const std::string detail = error_buffer[0] != 0 ? error_buffer : curl_easy_strerror(code);
    throw TransportError(detail, code == CURLE_OPERATION_TIMEDOUT);
  }
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &response.status);
  return response;
}

}  // namespace sandboxd::http

// Sandbox readiness probing (design §5.17): a sandbox is ready when GET {url}/v1/sandbox answers
// 200. Header-only; a plugin that includes it links libcurl (CURL::libcurl).
//
// Unlike the reference's fixed one-second sleep, the poller probes at once and then backs off
// from a few milliseconds to about half a second, so a sandbox that is ready in 300 ms is
// handed out in about 300 ms, while a slow one does not get hammered.
#pragma once

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "sandboxd/http.hpp"

namespace sandboxd {

namespace readiness_detail {

inline std::string url_hostname(const std::string& url) {
  std::size_t start = url.find("://");
  start = start == std::string::npos ? 0 : start + 3;
  const std::size_t end = url.find_first_of("/?#", start);
  std::string authority =
      url.substr(start, end == std::string::npos ? std::string::npos : end - start);
  const std::size_t at = authority.rfind('@');
  if (at != std::string::npos) authority = authority.substr(at + 1);
  if (!authority.empty() && authority.front() == '[') {
    const std::size_t close = authority.find(']');
    return close == std::string::npos ? "" : authority.substr(1, close - 1);
  }
  const std::size_t colon = authority.rfind(':');
  if (colon != std::string::npos) authority = authority.substr(0, colon);
  return authority;
}

inline bool ipv4_is_local(std::uint32_t a) {
  const auto in = [a](std::uint32_t net, int bits) {
    const std::uint32_t mask = bits == 0 ? 0 : ~std::uint32_t{0} << (32 - bits);
    return (a & mask) == (net & mask);
  };
  return in(0x7f000000, 8) ||   // 127.0.0.0/8 loopback
         in(0x0a000000, 8) ||   // 10.0.0.0/8
         in(0xac100000, 12) ||  // 172.16.0.0/12
         in(0xc0a80000, 16) ||  // 192.168.0.0/16
         in(0xa9fe0000, 16) ||  // 169.254.0.0/16 link-local
         in(0x00000000, 8);     // 0.0.0.0/8 ("this network")
}

inline bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace readiness_detail

// design §5.17 proxy rule: whether an HTTP client for `url` may use the environment's proxies.
// Local, loopback, private, link-local and single-label (cluster-internal) hosts never do.
inline bool trust_env(const std::string& url) {
  using namespace readiness_detail;
  std::string host = url_hostname(url);
  for (char& c : host) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  while (!host.empty() && host.back() == '.') host.pop_back();
  if (host.empty()) return true;
  if (host == "localhost" || ends_with(host, ".localhost") || ends_with(host, ".docker.internal") ||
      ends_with(host, ".containers.internal")) {
    return false;
  }
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) return !ipv4_is_local(ntohl(v4.s_addr));
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    const unsigned char* b = v6.s6_addr;
    if (IN6_IS_ADDR_LOOPBACK(&v6) || IN6_IS_ADDR_UNSPECIFIED(&v6)) return false;
    if ((b[0] & 0xfe) == 0xfc) return false;                  // fc00::/7 unique local
    if (b[0] == 0xfe && (b[1] & 0xc0) == 0x80) return false;  // fe80::/10 link-local
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {
      const std::uint32_t a = (std::uint32_t{b[12]} << 24) | (std::uint32_t{b[13]} << 16) |
                              (std::uint32_t{b[14]} << 8) | std::uint32_t{b[15]};
      return !ipv4_is_local(a);
    }
    return true;
  }
  return host.find('.') != std::string::npos;
}

inline constexpr std::size_t kReadinessMaxBodyBytes = 64u << 10;

struct ReadinessBackoff {
  double first_delay_seconds = 0.005;
  double max_delay_seconds = 0.5;
  double factor = 2.0;
};

// How a probe reaches a sandbox beyond its URL: the headers its requests carry (a relay's
// token) and, for a sandbox in a network namespace of its own, the socket maker that reaches
// its URL's address there (NamespacedSandboxes::open_socket).
struct SandboxRoute {
  std::map<std::string, std::string> headers;
  std::function<int()> open_socket;
};

// One GET {sandbox_url}/v1/sandbox with a total timeout; true iff HTTP 200. Transport errors
// are "not ready". Environment proxies are used only where trust_env(url) allows (never through
// a namespace socket).
inline bool probe_sandbox_ready_once(const std::string& sandbox_url, double timeout_seconds,
                                     const SandboxRoute& route = {}) {
  http::Request request;
  request.url = sandbox_url + "/v1/sandbox";
  request.timeout_seconds = timeout_seconds;
  request.use_environment_proxy = !route.open_socket && trust_env(sandbox_url);
  for (const auto& [name, value] : route.headers) request.headers.push_back(name + ": " + value);
  request.open_socket = route.open_socket;
  // The sandbox serves agent-controlled code: its answer is read only this far, and a larger
  // one counts as not ready (the sandbox API's status body is a few hundred bytes).
  request.max_body_bytes = kReadinessMaxBodyBytes;
  try {
    return http::perform(request).status == 200;
  } catch (const http::TransportError&) {
    return false;
  }
}

// Polls until ready or `timeout_seconds` pass. Each probe is bounded by min(5 s, time left).
// `should_stop` (optional) ends the wait early, e.g. on shutdown.
inline bool wait_for_sandbox_ready(const std::string& sandbox_url, double timeout_seconds,
                                   ReadinessBackoff backoff = {},
                                   const std::function<bool()>& should_stop = {},
                                   const SandboxRoute& route = {}) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  double delay = backoff.first_delay_seconds;
  while (true) {
    const double remaining = std::chrono::duration<double>(deadline - clock::now()).count();
    if (remaining <= 0) return false;
    if (probe_sandbox_ready_once(sandbox_url, std::min(5.0, remaining), route)) return true;
    if (should_stop && should_stop()) return false;
    const double left = std::chrono::duration<double>(deadline - clock::now()).count();
    if (left <= 0) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(delay, left)));
    delay = std::min(delay * backoff.factor, backoff.max_delay_seconds);
  }
}

}  // namespace sandboxd

// Sandbox readiness probing (SPEC §5.17): a sandbox is ready when GET {url}/v1/sandbox answers
// 200. Header-only; a plugin that includes it links libcurl (CURL::libcurl).
//
// Unlike the reference's fixed one-second sleep, the poller probes at once and then backs off
// from a few milliseconds to about half a second, so a sandbox that is ready in 300 ms is
// handed out in about 300 ms, while a slow one does not get hammered.
#pragma once

#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <string>
#include <thread>

namespace sandboxd {

struct ReadinessBackoff {
  double first_delay_seconds = 0.005;
  double max_delay_seconds = 0.5;
  double factor = 2.0;
};

// One GET {sandbox_url}/v1/sandbox with a total timeout; true iff HTTP 200. Transport errors
// are "not ready". Proxies from the environment are never used: sandboxes are local or
// cluster-internal, and an operator's HTTP proxy must not see their traffic.
inline bool probe_sandbox_ready_once(const std::string& sandbox_url, double timeout_seconds) {
  CURL* curl = curl_easy_init();
  if (curl == nullptr) return false;
  const std::string url = sandbox_url + "/v1/sandbox";
  const long timeout_ms = std::max(1L, static_cast<long>(timeout_seconds * 1000.0));
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION,
                   +[](char*, size_t size, size_t count, void*) -> size_t { return size * count; });
  long status = 0;
  const bool ok = curl_easy_perform(curl) == CURLE_OK &&
                  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK &&
                  status == 200;
  curl_easy_cleanup(curl);
  return ok;
}

// Polls until ready or `timeout_seconds` pass. Each probe is bounded by min(5 s, time left).
// `should_stop` (optional) ends the wait early, e.g. on shutdown.
inline bool wait_for_sandbox_ready(const std::string& sandbox_url, double timeout_seconds,
                                   ReadinessBackoff backoff = {},
                                   const std::function<bool()>& should_stop = {}) {
  using clock = std::chrono::steady_clock;
  const auto deadline = clock::now() + std::chrono::duration_cast<clock::duration>(
                                           std::chrono::duration<double>(timeout_seconds));
  double delay = backoff.first_delay_seconds;
  while (true) {
    const double remaining = std::chrono::duration<double>(deadline - clock::now()).count();
    if (remaining <= 0) return false;
    if (probe_sandbox_ready_once(sandbox_url, std::min(5.0, remaining))) return true;
    if (should_stop && should_stop()) return false;
    const double left = std::chrono::duration<double>(deadline - clock::now()).count();
    if (left <= 0) return false;
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(delay, left)));
    delay = std::min(delay * backoff.factor, backoff.max_delay_seconds);
  }
}

}  // namespace sandboxd

// The test engine asked directly over its socket (not through the plugin under test): which
// containers of a name prefix exist. For the engine-labelled tests that check "nothing left".
#pragma once

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::testing {

// $SANDBOXD_TEST_DOCKER_SOCKET (set by scripts/test_engine.sh env), or "" outside a test run.
inline std::string socket_path() {
  const char* socket = std::getenv("SANDBOXD_TEST_DOCKER_SOCKET");
  return socket ? socket : "";
}

inline size_t append_body(char* data, size_t size, size_t count, void* target) {
  static_cast<std::string*>(target)->append(data, size * count);
  return size * count;
}

// Names of the containers whose name starts with `prefix` (running ones, or all with
// `include_stopped`), asked of the engine directly rather than through the plugin under test.
inline std::vector<std::string> engine_containers(const std::string& prefix,
                                                  bool include_stopped = false) {
  CURL* curl = curl_easy_init();
  std::string body;
  const std::string url =
      std::string("http://d/containers/json") + (include_stopped ? "?all=1" : "");
  curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path().c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  EXPECT_EQ(code, CURLE_OK) << curl_easy_strerror(code);
  rapidjson::Document listing;
  listing.Parse(body.c_str());
  std::vector<std::string> names;
  if (!listing.IsArray()) {
    ADD_FAILURE() << "engine listing is not an array: " << body;
    return names;
  }
  for (const auto& container : listing.GetArray()) {
    for (const auto& name : container["Names"].GetArray()) {
      std::string text = name.GetString();
      if (!text.empty() && text[0] == '/') text.erase(0, 1);
      if (text.rfind(prefix + "-", 0) == 0) names.push_back(text);
    }
  }
  return names;
}

// A stopped container is removed by the engine shortly after the stop (auto-remove), so
// "nothing left behind" waits, bounded, for that removal before it looks.
inline std::vector<std::string> containers_left_after_removal(const std::string& prefix) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::vector<std::string> left = engine_containers(prefix, true);
  while (!left.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = engine_containers(prefix, true);
  }
  return left;
}

}  // namespace sandboxd::testing

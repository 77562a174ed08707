// The test engine asked directly over its socket (not through the plugin under test): which
// containers of a name prefix exist. For the engine-labelled tests that check "nothing left".
#pragma once

#include <curl/curl.h>
#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

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
// One GET to the test engine; the answer's body ("" on a transport error, which fails the test).
inline std::string engine_get(const std::string& path) {
  CURL* curl = curl_easy_init();
  std::string body;
  const std::string url = "http://d" + path;
  curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path().c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  const CURLcode code = curl_easy_perform(curl);
  curl_easy_cleanup(curl);
  EXPECT_EQ(code, CURLE_OK) << curl_easy_strerror(code);
  return body;
}

inline std::vector<std::string> engine_containers(const std::string& prefix,
                                                  bool include_stopped = false) {
  const std::string body =
      engine_get(std::string("/containers/json") + (include_stopped ? "?all=1" : ""));
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

// The engine's own word on a container's state ("running", "paused", …; "" when it has none),
// asked directly rather than through the plugin under test.
inline std::string engine_container_status(const std::string& name) {
  rapidjson::Document doc;
  doc.Parse(engine_get("/containers/" + name + "/json").c_str());
  if (!doc.IsObject() || !doc.HasMember("State") || !doc["State"].IsObject() ||
      !doc["State"].HasMember("Status") || !doc["State"]["Status"].IsString()) {
    return "";
  }
  return doc["State"]["Status"].GetString();
}

// One POST with a JSON body to the test engine; the answer's body ("" on a transport error).
inline std::string engine_post(const std::string& path, const std::string& json_body) {
  CURL* curl = curl_easy_init();
  std::string body;
  const std::string url = "http://d" + path;
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/json");
  curl_easy_setopt(curl, CURLOPT_UNIX_SOCKET_PATH, socket_path().c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, json_body.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, 30L);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  const CURLcode code = curl_easy_perform(curl);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  EXPECT_EQ(code, CURLE_OK) << curl_easy_strerror(code);
  return body;
}

// Runs `sh -c script` in a running container through the engine's exec API (both engines
// answer /exec/{id}/start with the multiplexed stream when nobody asks for an upgrade) and
// returns what it wrote on stdout and stderr, frame headers removed.
inline std::string engine_exec(const std::string& container, const std::string& script) {
  rapidjson::Document command;
  command.SetObject();
  auto& alloc = command.GetAllocator();
  rapidjson::Value cmd(rapidjson::kArrayType);
  cmd.PushBack("sh", alloc).PushBack("-c", alloc);
  cmd.PushBack(rapidjson::Value(script.c_str(), alloc), alloc);
  command.AddMember("Cmd", cmd, alloc);
  command.AddMember("AttachStdout", true, alloc);
  command.AddMember("AttachStderr", true, alloc);
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  command.Accept(writer);
  rapidjson::Document created;
  const std::string answer = engine_post("/containers/" + container + "/exec", buffer.GetString());
  created.Parse(answer.c_str());
  if (!created.IsObject() || !created.HasMember("Id")) {
    ADD_FAILURE() << "exec create failed: " << answer;
    return "";
  }
  const std::string raw = engine_post(std::string("/exec/") + created["Id"].GetString() + "/start",
                                      R"({"Detach": false, "Tty": false})");
  std::string out;
  for (std::size_t at = 0; at + 8 <= raw.size();) {
    const std::size_t size = (static_cast<unsigned char>(raw[at + 4]) << 24) |
                             (static_cast<unsigned char>(raw[at + 5]) << 16) |
                             (static_cast<unsigned char>(raw[at + 6]) << 8) |
                             static_cast<unsigned char>(raw[at + 7]);
    out += raw.substr(at + 8, size);
    at += 8 + size;
  }
  return out;
}

}  // namespace sandboxd::testing

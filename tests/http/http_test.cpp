// The SDK's outside-input helpers against real servers on 127.0.0.1 (cpp-httplib): what an
// HTTP answer may cost (body and header caps, http/https only, a throwing sink), the readiness
// probe's cap on what agent code serves, JSON nesting limits, and URL/secret redaction
// (issue 13 A.4, A.7).
#include "sandboxd/http.hpp"

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "sandboxd/json.hpp"
#include "sandboxd/readiness.hpp"
#include "sandboxd/redact.hpp"

namespace {

namespace http = sandboxd::http;

class Server {
 public:
  Server() {
    server_.Get("/small", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"ok":true})", "application/json");
    });
    server_.Get("/endless", [](const httplib::Request&, httplib::Response& res) {
      res.set_chunked_content_provider("text/plain", [](size_t, httplib::DataSink& sink) {
        const std::string block(64 * 1024, 'z');
        return sink.write(block.data(), block.size());
      });
    });
    server_.Get("/v1/sandbox", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(sandbox_body_bytes_, 'x'), "application/json");
    });
    server_.Get("/many-headers", [](const httplib::Request&, httplib::Response& res) {
      for (int i = 0; i < 20000; ++i) {
        res.set_header("X-Filler-" + std::to_string(i), std::string(64, 'h'));
      }
      res.set_content("{}", "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~Server() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path = "") const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }
  void set_sandbox_body_bytes(std::size_t bytes) { sandbox_body_bytes_ = bytes; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::size_t sandbox_body_bytes_ = 100;
};

http::Request get(const std::string& url) {
  http::Request request;
  request.url = url;
  request.timeout_seconds = 10;
  return request;
}

TEST(HttpBounds, ASmallAnswerIsReadWhole) {
  Server server;
  const http::Response response = http::perform(get(server.url("/small")));
  EXPECT_EQ(response.status, 200);
  EXPECT_EQ(response.body, R"({"ok":true})");
}

TEST(HttpBounds, AnEndlessBodyStopsAtTheCap) {
  Server server;
  http::Request request = get(server.url("/endless"));
  request.max_body_bytes = 1 << 20;
  try {
    http::perform(request);
    FAIL() << "expected TransportError";
  } catch (const http::TransportError& error) {
    EXPECT_TRUE(error.too_large());
    EXPECT_FALSE(error.timed_out());
    EXPECT_STREQ(error.what(),
                 "the answer's body exceeded 1048576 bytes; the transfer was cut off");
  }
}

TEST(HttpBounds, TheDefaultCapAppliesWithoutAsking) {
  Server server;
  try {
    http::perform(get(server.url("/endless")));
    FAIL() << "expected TransportError";
  } catch (const http::TransportError& error) {
    EXPECT_TRUE(error.too_large()) << error.what();
  }
}

TEST(HttpBounds, HeadersBeyondTheCapAreCutOff) {
  Server server;
  try {
    http::perform(get(server.url("/many-headers")));
    FAIL() << "expected TransportError";
  } catch (const http::TransportError& error) {
    // libcurl 7.83+ has its own 300 KB limit and usually answers first; ours is the backstop
    // for older ones. Either way the request ends with a TransportError, not a growing map.
    const std::string what = error.what();
    EXPECT_TRUE(what.find("headers exceeded") != std::string::npos ||
                what.find("Too large response headers") != std::string::npos)
        << what;
  }
}

TEST(HttpBounds, OnlyHttpAndHttpsAreRequested) {
  for (const std::string url : {"file:///dev/zero", "FILE:///etc/passwd", "gopher://127.0.0.1/",
                                "dict://127.0.0.1:1/", "ftp://127.0.0.1/", "/v1/sandbox", ""}) {
    try {
      http::perform(get(url));
      FAIL() << url << " was requested";
    } catch (const http::TransportError& error) {
      EXPECT_EQ(std::string(error.what()),
                "refused to request " + url + ": only http:// and https:// URLs are allowed");
    }
  }
  EXPECT_TRUE(http::is_http_url("HTTP://127.0.0.1"));
  EXPECT_TRUE(http::is_http_url("https://example.test/x"));
  EXPECT_FALSE(http::is_http_url("http://"));
  EXPECT_FALSE(http::is_http_url("httpx://a"));
}

TEST(HttpBounds, ARefusedUrlNeverShowsItsCredentials) {
  try {
    http::perform(get("ftp://admin:hunter2@127.0.0.1/"));
    FAIL();
  } catch (const http::TransportError& error) {
    EXPECT_EQ(std::string(error.what()).find("hunter2"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("ftp://<redacted>@127.0.0.1/"), std::string::npos);
  }
}

TEST(HttpBounds, AThrowingSinkEndsTheTransferAndItsErrorArrives) {
  Server server;
  http::Request request = get(server.url("/endless"));
  int chunks = 0;
  request.body_sink = [&chunks](std::string_view) {
    if (++chunks == 3) throw std::invalid_argument("sink had enough");
  };
  EXPECT_THROW(
      {
        try {
          http::perform(request);
        } catch (const std::invalid_argument& error) {
          EXPECT_STREQ(error.what(), "sink had enough");
          throw;
        }
      },
      std::invalid_argument);
  EXPECT_EQ(chunks, 3);
}

TEST(ReadinessBounds, TheProbeReadsAtMostItsCapOfWhatTheSandboxServes) {
  Server server;
  server.set_sandbox_body_bytes(1000);
  EXPECT_TRUE(sandboxd::probe_sandbox_ready_once(server.url(), 5.0));
  server.set_sandbox_body_bytes(sandboxd::kReadinessMaxBodyBytes + 1);
  EXPECT_FALSE(sandboxd::probe_sandbox_ready_once(server.url(), 5.0));
}

TEST(JsonBounds, AMillionOpenBracketsAreRefusedWithoutRecursing) {
  rapidjson::Document doc;
  EXPECT_FALSE(sandboxd::parse_json(doc, std::string(1000000, '[')));
  EXPECT_FALSE(sandboxd::parse_json(doc, std::string(1000000, '{')));
  EXPECT_EQ(sandboxd::json_nesting_exceeded_at(std::string(100, '[')),
            std::optional<std::size_t>(sandboxd::kMaxJsonNesting));
}

TEST(JsonBounds, NestingUpToTheLimitParsesAndBracketsInStringsDoNotCount) {
  const auto nested = [](std::size_t depth) {
    return std::string(depth, '[') + std::string(depth, ']');
  };
  rapidjson::Document doc;
  EXPECT_TRUE(sandboxd::parse_json(doc, nested(sandboxd::kMaxJsonNesting)));
  EXPECT_FALSE(sandboxd::parse_json(doc, nested(sandboxd::kMaxJsonNesting + 1)));
  const std::string in_string = "{\"a\":\"" + std::string(1000, '[') + "\\\"[[\"}";
  ASSERT_TRUE(sandboxd::parse_json(doc, in_string));
  EXPECT_EQ(doc["a"].GetStringLength(), 1003u);
  EXPECT_FALSE(sandboxd::parse_json(doc, "{\"truncated\":"));
}

TEST(Redaction, UrlCredentialsAreReplaced) {
  EXPECT_EQ(sandboxd::redacted_url("http://user:pw@host:1/p?q=a@b"),
            "http://<redacted>@host:1/p?q=a@b");
  EXPECT_EQ(sandboxd::redacted_url("https://token@host/"), "https://<redacted>@host/");
  EXPECT_EQ(sandboxd::redacted_url("http://host/a@b"), "http://host/a@b");
  EXPECT_EQ(sandboxd::redacted_url("not a url"), "not a url");
  EXPECT_EQ(sandboxd::redacted_url("redis://:p@ss@h:6379/0"), "redis://<redacted>@h:6379/0");
}

TEST(Redaction, SecretKeyPaths) {
  for (const char* path :
       {"sandbox.backend.provisioner_api_key", "sandbox.backend.environment.HOME", "x.environment",
        "a.Client-Secret", "a.tokens[2]", "password"}) {
    EXPECT_TRUE(sandboxd::is_secret_key_path(path)) << path;
  }
  for (const char* path : {"sandbox.backend.image", "sandbox.backend.mounts[0].host_path",
                           "sandbox.environments_note", ""}) {
    EXPECT_FALSE(sandboxd::is_secret_key_path(path)) << path;
  }
}

}  // namespace

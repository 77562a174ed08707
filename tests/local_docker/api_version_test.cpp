// API version negotiation against a real HTTP server on 127.0.0.1 playing an engine's
// /_ping and /version (cpp-httplib): which version is chosen, when /version is asked, and the
// message when engine and plugin share no version.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "engine_client.hpp"

namespace sandboxd::local_docker {
namespace {

class FakeEngine {
 public:
  // ping_version: the API-Version header of /_ping ("" = none); version_body: /version's JSON.
  FakeEngine(std::string ping_version, std::string version_body)
      : ping_version_(std::move(ping_version)), version_body_(std::move(version_body)) {
    server_.Get("/_ping", [this](const httplib::Request&, httplib::Response& res) {
      if (!ping_version_.empty()) res.set_header("Api-Version", ping_version_);
      res.set_content("OK", "text/plain");
    });
    server_.Get("/version", [this](const httplib::Request&, httplib::Response& res) {
      ++version_calls;
      res.set_content(version_body_, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeEngine() {
    server_.stop();
    thread_.join();
  }
  EngineClient client() const {
    return EngineClient(EngineEndpoint::parse("tcp://127.0.0.1:" + std::to_string(port_)));
  }

  std::atomic<int> version_calls{0};

 private:
  std::string ping_version_;
  std::string version_body_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

TEST(LocalDockerApiVersion, AnEngineNoNewerThanUsIsSpokenAtItsOwnVersionWithoutAskingVersion) {
  FakeEngine engine("1.41", R"({"ApiVersion": "1.41", "MinAPIVersion": "1.12"})");
  EXPECT_EQ(engine.client().api_version(), "1.41");
  EXPECT_EQ(engine.version_calls.load(), 0) << "/version is slow on podman: not asked";
}

TEST(LocalDockerApiVersion, ANewerEngineIsSpokenAtOurNewestWhenItStillAcceptsIt) {
  FakeEngine engine("1.52", R"({"ApiVersion": "1.52", "MinAPIVersion": "1.44"})");  // Docker 29
  EXPECT_EQ(engine.client().api_version(), format_api_version(kMaxApiVersion));
  EXPECT_EQ(engine.version_calls.load(), 1);
}

TEST(LocalDockerApiVersion, NoOverlapIsRefusedNamingBothRanges) {
  FakeEngine engine("1.60", R"({"ApiVersion": "1.60", "MinAPIVersion": "1.50"})");
  try {
    engine.client().api_version();
    FAIL() << "negotiated with an engine that no longer speaks our versions";
  } catch (const EngineUnreachableError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("share no API version: the engine speaks API 1.50 to 1.60, this "
                           "plugin 1.30 to " +
                           format_api_version(kMaxApiVersion)),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("upgrade sandboxd"), std::string::npos) << message;
  }
}

TEST(LocalDockerApiVersion, WithoutAPingHeaderVersionDecides) {
  FakeEngine engine("", R"({"ApiVersion": "1.25"})");
  try {
    engine.client().api_version();
    FAIL() << "negotiated below our minimum";
  } catch (const EngineUnreachableError& e) {
    EXPECT_NE(std::string(e.what()).find("the engine is too old"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sandboxd::local_docker

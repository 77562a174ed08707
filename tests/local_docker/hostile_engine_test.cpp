// local_docker:LocalContainerBackend against an engine that misbehaves: a real HTTP server on
// 127.0.0.1 (cpp-httplib) speaking just enough of the Engine API, scripted to time out, fail
// half-way, or answer garbage, huge and deeply nested bodies. Each test names what it tried and
// asserts what a user sees and that nothing is left behind on the engine (issue 13 A.4, A.6).
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/sdk.hpp"
#include "test_support.hpp"

namespace {

using sandboxd::CreateRequest;
using sandboxd::SandboxBackend;
using sandboxd::testing::CapturingLogger;

constexpr const char* kUse = "local_docker:LocalContainerBackend";
constexpr const char* kContainerId = "c0ffee0123456789";

// Lock story: `mutex_` guards `routes_` and `seen_`; handlers run on httplib's worker threads.
class HostileEngine {
 public:
  using Handler = std::function<void(httplib::Response&)>;

  HostileEngine() {
    server_.set_payload_max_length(1 << 20);
    const auto dispatch = [this](const httplib::Request& req, httplib::Response& res) {
      std::string path = req.path;
      // Calls carry the negotiated version ("/v1.41/containers/…"); routes are written without.
      if (path.rfind("/v1.", 0) == 0) path = path.substr(path.find('/', 1));
      const std::string route = req.method + " " + path;
      Handler handler;
      {
        std::lock_guard lock(mutex_);
        seen_.push_back(route);
        if (auto it = routes_.find(route); it != routes_.end()) handler = it->second;
      }
      if (handler) {
        handler(res);
      } else {
        res.status = 404;
        res.set_content(R"({"message":"no such route in the test engine"})", "application/json");
      }
    };
    server_.Get(".*", dispatch);
    server_.Post(".*", dispatch);
    server_.Delete(".*", dispatch);
    on("GET /_ping", [](httplib::Response& res) {
      res.set_header("Api-Version", "1.41");
      res.set_content("OK", "text/plain");
    });
    on("POST /containers/create", json(201, std::string(R"({"Id":")") + kContainerId + "\"}"));
    on(std::string("DELETE /containers/") + kContainerId, json(204, ""));
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~HostileEngine() {
    release_.store(true);
    server_.stop();
    thread_.join();
  }

  void on(const std::string& route, Handler handler) {
    std::lock_guard lock(mutex_);
    routes_[route] = std::move(handler);
  }
  static Handler json(int status, std::string body) {
    return [status, body](httplib::Response& res) {
      res.status = status;
      res.set_content(body, "application/json");
    };
  }
  // Answers only after `seconds` (or when the engine is torn down).
  Handler slow(double seconds, Handler then) {
    return [this, seconds, then](httplib::Response& res) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
      while (!release_.load() && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      then(res);
    };
  }
  // A 200 whose body never ends.
  static Handler endless(char fill) {
    return [fill](httplib::Response& res) {
      res.set_chunked_content_provider("application/json", [fill](size_t, httplib::DataSink& sink) {
        const std::string block(64 * 1024, fill);
        return sink.write(block.data(), block.size());
      });
    };
  }

  int count(const std::string& route) const {
    std::lock_guard lock(mutex_);
    int n = 0;
    for (const auto& seen : seen_) n += seen == route ? 1 : 0;
    return n;
  }
  std::string socket() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> release_{false};
  mutable std::mutex mutex_;
  std::map<std::string, Handler> routes_;
  std::vector<std::string> seen_;
};

class HostileEngineTest : public ::testing::Test {
 protected:
  std::shared_ptr<SandboxBackend> backend() {
    sandboxd::PluginContext context;
    context.config_json = "{\"socket\":\"" + engine_.socket() +
                          "\",\"image\":\"sandboxd-test:1\",\"container_prefix\":\"hostile\","
                          "\"request_timeout_seconds\":0.5,"
                          // An engine that plays faults has no containers to isolate.
                          "\"network\":{\"isolate_sandboxes\":false}}";
    context.config_key_path = "sandbox.backend";
    context.logger = logger_;
    context.clock = std::make_shared<sandboxd::testing::ManualClock>(100.0);
    sandboxd::core::PluginLoader loader({SANDBOXD_TEST_PLUGIN_DIR});
    return loader.load_backend(kUse, context, "hostile engine test");
  }
  std::string create_error() {
    CreateRequest request;
    request.sandbox_id = "hostile01";
    // Held outside the try: the exception's type lives in the plugin, which must stay loaded
    // until the handler has read it (a temporary backend unloads it during unwinding).
    const std::shared_ptr<SandboxBackend> loaded = backend();
    try {
      loaded->create(request);
    } catch (const std::exception& error) {
      return error.what();
    }
    return "";
  }
  const std::string kRemove = std::string("DELETE /containers/") + kContainerId;
  const std::string kStart = std::string("POST /containers/") + kContainerId + "/start";
  const std::string kInspect = std::string("GET /containers/") + kContainerId + "/json";

  HostileEngine engine_;
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
};

TEST_F(HostileEngineTest, AStartThatTimesOutRemovesTheCreatedContainer) {
  engine_.on(kStart, engine_.slow(5.0, HostileEngine::json(204, "")));
  const std::string error = create_error();
  std::printf(
      "tried: /start answering after 5 s with a 0.5 s request timeout\n"
      "  error: %s\n  removals sent: %d\n",
      error.c_str(), engine_.count(kRemove));
  EXPECT_NE(error.find("Timed out after 0.5s"), std::string::npos) << error;
  EXPECT_EQ(engine_.count(kRemove), 1);
}

TEST_F(HostileEngineTest, AnInspectThatFailsAfterStartRemovesTheContainer) {
  engine_.on(kStart, HostileEngine::json(204, ""));
  engine_.on(kInspect, HostileEngine::json(500, R"({"message":"inspect exploded"})"));
  const std::string error = create_error();
  std::printf("tried: inspect answering 500 after a good start\n  error: %s\n", error.c_str());
  EXPECT_NE(error.find("inspect exploded"), std::string::npos) << error;
  EXPECT_EQ(engine_.count(kRemove), 1);
}

TEST_F(HostileEngineTest, AContainerThatExitsRightAfterStartIsRemoved) {
  engine_.on(kStart, HostileEngine::json(204, ""));
  engine_.on(kInspect, HostileEngine::json(200, std::string(R"({"Id":")") + kContainerId +
                                                    R"(","State":{"Status":"exited",)"
                                                    R"("Running":false}})"));
  const std::string error = create_error();
  EXPECT_NE(error.find("exited right after it started (state exited)"), std::string::npos) << error;
  EXPECT_EQ(engine_.count(kRemove), 1);
}

TEST_F(HostileEngineTest, ACreateAnswerNestedAMillionDeepIsRefusedNotACrash) {
  engine_.on("POST /containers/create", HostileEngine::json(201, std::string(1000000, '[')));
  const std::string error = create_error();
  EXPECT_EQ(error,
            "Failed to start sandbox container: the engine's create answer carried no container "
            "id");
  EXPECT_EQ(engine_.count(kRemove), 0);  // no id, nothing to remove
}

// list_running reports failure as an empty list and a warning (the backend contract).
TEST_F(HostileEngineTest, AContainerListNestedAMillionDeepIsAClearWarning) {
  engine_.on("GET /containers/json", HostileEngine::json(200, std::string(1000000, '[')));
  EXPECT_TRUE(backend()->list_running().empty());
  EXPECT_TRUE(logger_->contains(sandboxd::LogLevel::warning,
                                "the engine's container list could not be read"));
}

TEST_F(HostileEngineTest, AnEndlessContainerListIsCutOffAtTheBodyCap) {
  engine_.on("GET /containers/json", HostileEngine::endless(' '));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(backend()->list_running().empty());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("tried: an endless /containers/json body\n  cut off after %.2f s\n", seconds);
  EXPECT_TRUE(
      logger_->contains(sandboxd::LogLevel::warning, "the answer's body exceeded 33554432 bytes"));
}

TEST_F(HostileEngineTest, GarbageAndWrongTypesInInspectAreNotAlive) {
  for (const std::string& body :
       {std::string("not json"), std::string(R"({"State":"running"})"), std::string(R"([1,2,3])"),
        std::string(R"({"State":{"Running":1}})"), std::string(R"({"Id":)")}) {
    engine_.on("GET /containers/hostile-hostile01/json", HostileEngine::json(200, body));
    sandboxd::SandboxInfo info;
    info.sandbox_id = "hostile01";
    info.container_name = "hostile-hostile01";
    bool alive = true;
    const std::shared_ptr<SandboxBackend> loaded = backend();  // loaded while the handler runs
    try {
      alive = loaded->is_alive(info);
    } catch (const std::exception&) {
      alive = false;
    }
    EXPECT_FALSE(alive) << body;
  }
}

}  // namespace

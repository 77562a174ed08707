// local_docker's Engine API layer (engine_api.hpp), each operation against an HTTP server on
// 127.0.0.1 (cpp-httplib) that answers what Docker 20.10 and podman 4.3 answered when these
// calls were made to them on this machine kind (recorded 2026-12-05 with curl on the engines
// scripts/test_engine.sh starts). Every test runs once per engine's recording.
#include "engine_api.hpp"

#include <gtest/gtest.h>
#include <httplib.h>
#include <rapidjson/document.h>

#include <chrono>
#include <map>
#include <string>
#include <thread>

namespace sandboxd::local_docker {
namespace {

struct Recorded {
  int status;
  std::string body;
};

// One engine's answers, by "METHOD path" (path without the /v1.41 prefix or the query).
struct Recording {
  std::string engine;
  std::map<std::string, Recorded> answers;
};

const std::string kId = "3f0c6b1e8d2a4f5b9c7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b";

Recording docker_recording() {
  return {
      "docker",
      {{"POST /containers/create", {201, R"({"Id":")" + kId + R"(","Warnings":[]})"}},
       {"POST /containers/" + kId + "/start", {304, ""}},
       {"POST /containers/gone/start", {404, R"({"message":"No such container: gone"})"}},
       {"DELETE /containers/gone", {404, R"({"message":"No such container: gone"})"}},
       {"GET /containers/gone/json", {404, R"({"message":"No such container: gone"})"}},
       // Recorded 2026-12-06 (Docker 20.10, cgroup v1; its total_inactive_file set to 4096 so
       // that the page cache subtraction shows).
       {"GET /containers/" + kId + "/stats",
        {200,
         R"({"read":"2026-12-06T06:31:41.832693156Z","pids_stats":{"current":2},"cpu_stats":{"cpu_usage":{"total_usage":61311464,"usage_in_kernelmode":30000000,"usage_in_usermode":20000000},"system_cpu_usage":30964720000000,"online_cpus":2,"throttling_data":{"periods":0,"throttled_periods":0,"throttled_time":0}},"memory_stats":{"usage":806912,"max_usage":3964928,"stats":{"cache":86016,"rss":110592,"total_inactive_file":4096,"total_rss":110592},"limit":268435456}})"}},
       {"GET /containers/gone/stats", {404, R"({"message":"No such container: gone"})"}},
       {"POST /containers/" + kId + "/rename",
        {400, R"({"message":"Renaming a container with the same name as its current name"})"}},
       {"POST /networks/create",
        {201,
         R"({"Id":"9a6192bef37a5493c5b6e0ea66f822c9e2d37a0922ed2a9aab4eee9c0767dc04","Warning":""})"}},
       {"GET /networks/sbxrec-net",
        {200,
         R"({"Name":"sbxrec-net","Id":"9a6192bef37a5493c5b6e0ea66f822c9e2d37a0922ed2a9aab4eee9c0767dc04","Created":"2026-12-05T03:29:38.540135158Z","Scope":"local","Driver":"bridge","EnableIPv6":false,"IPAM":{"Driver":"default","Options":null,"Config":[{"Subnet":"172.18.0.0/16","Gateway":"172.18.0.1"}]},"Internal":false,"Attachable":false,"Ingress":false,"ConfigFrom":{"Network":""},"ConfigOnly":false,"Containers":{},"Options":{},"Labels":{"sandboxd.managed-by":"sandboxd"}})"}},
       {"GET /networks/nope-net", {404, R"({"message":"network nope-net not found"})"}},
       {"DELETE /networks/sbxrec-net", {204, ""}},
       {"DELETE /networks/nope-net", {404, R"({"message":"network nope-net not found"})"}},
       {"GET /networks",
        {200,
         R"([{"Name":"sbxrec-net","Id":"9a6192bef37a5493c5b6e0ea66f822c9e2d37a0922ed2a9aab4eee9c0767dc04","Driver":"bridge","Internal":false,"Options":{},"Labels":{"sandboxd.managed-by":"sandboxd"}}])"}},
       {"GET /containers/" + kId + "/json", {200, R"({"Id":")" + kId + R"(","Name":"/sbxrec-c","State":{"Status":"running","Running":true,"Paused":false,"Pid":6137},"Config":{"Labels":{}},"HostConfig":{"NetworkMode":"none"},"NetworkSettings":{"Networks":{"none":{}},"Ports":{}}})"}}}};
}

Recording podman_recording() {
  return {"podman",
          {{"POST /containers/create", {201, R"({"Id":")" + kId + R"(","Warnings":[]})"}},
           {"POST /containers/" + kId + "/start", {304, ""}},
           {"POST /containers/gone/start",
            {404,
             R"({"cause":"no such container","message":"no container with name or ID \"gone\" found: no such container","response":404})"}},
           // Recorded 2026-12-06 (podman 4.3.1: no page cache figures; a missing container is a
           // 404 with no body).
           {"GET /containers/" + kId + "/stats",
            {200,
             R"({"read":"2026-12-06T06:31:42.415331497Z","pids_stats":{"current":2},"cpu_stats":{"cpu_usage":{"total_usage":66605089,"usage_in_kernelmode":40000000,"usage_in_usermode":26605089},"system_cpu_usage":24933185294773,"online_cpus":2,"cpu":0,"throttling_data":{"periods":0,"throttled_periods":0,"throttled_time":0}},"memory_stats":{"usage":913408,"limit":268435456}})"}},
           {"GET /containers/gone/stats", {404, ""}},
           {"DELETE /containers/gone",
            {404,
             R"({"cause":"no such container","message":"no container with name or ID \"gone\" found: no such container","response":404})"}},
           {"GET /containers/gone/json",
            {404,
             R"({"cause":"no such container","message":"no container with name or ID \"gone\" found: no such container","response":404})"}},
           {"POST /containers/" + kId + "/rename", {204, ""}},
           {"POST /networks/create",
            {201,
             R"({"Id":"f6bb4b94d5364b37f4ff7fe81c063b425f0fec3dd1378288c2e23cd26dff704b","Warning":"\"isolate: true\" is not a recognized option"})"}},
           {"GET /networks/sbxrec-net",
            {200,
             R"({"Name":"sbxrec-net","Id":"f6bb4b94d5364b37f4ff7fe81c063b425f0fec3dd1378288c2e23cd26dff704b","Created":"2026-12-05T03:24:31.091260296Z","Scope":"local","Driver":"bridge","EnableIPv6":false,"IPAM":{"Driver":"default","Options":{"driver":"host-local"},"Config":[{"Subnet":"10.89.0.0/24","Gateway":"10.89.0.1"}]},"Internal":false,"Attachable":false,"Ingress":false,"ConfigFrom":{"Network":""},"ConfigOnly":false,"Containers":{},"Options":{},"Labels":{"sandboxd.managed-by":"sandboxd"}})"}},
           {"GET /networks/nope-net",
            {404,
             R"({"cause":"network not found","message":"unable to find network with name or ID nope-net: network not found","response":404})"}},
           {"DELETE /networks/sbxrec-net", {204, ""}},
           {"DELETE /networks/nope-net",
            {404, R"({"cause":"network not found","message":"network not found","response":404})"}},
           {"GET /networks",
            {200,
             R"([{"Name":"sbxrec-net","Id":"f6bb4b94d5364b37f4ff7fe81c063b425f0fec3dd1378288c2e23cd26dff704b","Driver":"bridge","Internal":false,"Options":{},"Labels":{"sandboxd.managed-by":"sandboxd"}}])"}},
           {"GET /containers/" + kId + "/json", {200, R"({"Id":")" + kId + R"(","Name":"sbxrec-c","State":{"Status":"running","Running":true,"Paused":false,"Pid":6291},"Config":{"Labels":{}},"HostConfig":{"NetworkMode":"none"},"NetworkSettings":{"Networks":{},"Ports":{}}})"}}}};
}

// An engine that answers from a recording; every request it saw is kept (method, path, body).
class RecordedEngine {
 public:
  explicit RecordedEngine(Recording recording) : recording_(std::move(recording)) {
    server_.Get("/_ping", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Api-Version", "1.41");
      res.set_content("OK", "text/plain");
    });
    const auto answer = [this](const httplib::Request& req, httplib::Response& res) {
      std::string path = req.path;
      if (path.rfind("/v1.41", 0) == 0) path = path.substr(6);
      {
        std::lock_guard lock(mutex_);
        seen.push_back(req.method + " " + req.target + " " + req.body);
      }
      const auto it = recording_.answers.find(req.method + " " + path);
      if (it == recording_.answers.end()) {
        res.status = 599;
        res.set_content("not recorded: " + req.method + " " + path, "text/plain");
        return;
      }
      res.status = it->second.status;
      if (!it->second.body.empty()) res.set_content(it->second.body, "application/json");
    };
    server_.Get(".*", answer);
    server_.Post(".*", answer);
    server_.Delete(".*", answer);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    client_ = std::make_unique<EngineClient>(
        EngineEndpoint::parse("tcp://127.0.0.1:" + std::to_string(port_)));
  }
  ~RecordedEngine() {
    server_.stop();
    thread_.join();
  }
  EngineClient& client() { return *client_; }
  std::string last() {
    std::lock_guard lock(mutex_);
    return seen.empty() ? "" : seen.back();
  }

 private:
  Recording recording_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::unique_ptr<EngineClient> client_;
  std::mutex mutex_;
  std::vector<std::string> seen;
};

class EngineApiTest : public ::testing::TestWithParam<Recording (*)()> {
 protected:
  EngineApiTest() : engine_(GetParam()()), api_(engine_.client(), 5.0) {}
  RecordedEngine engine_;
  EngineApi api_;
};

TEST_P(EngineApiTest, CreateSendsTheTypedBodyAndReadsTheId) {
  ContainerCreateBody body;
  body.image = "localhost/sandboxd-test-sandbox:latest";
  body.user = "1000:1000";
  body.env = {"A=1"};
  body.labels = {{"sandboxd.sandbox-id", "abc"}};
  body.exposed_port = "8080/tcp";
  body.publish_host_ip = "127.0.0.1";
  body.network_mode = "none";
  body.publish = false;
  body.cap_drop = {"ALL"};
  body.cap_add = {"CHOWN"};
  body.pids_limit = 512;
  body.mounts = {{"/host/a", "/mnt/a", true, ""}, {"/slots/0", "/mnt/b", false, "rslave"}};
  const EngineApi::Created created = api_.create_container("sbx-abc", body);
  EXPECT_EQ(created.outcome.status, 201);
  EXPECT_EQ(created.id, kId);
  rapidjson::Document sent;
  const std::string request = engine_.last();
  sent.Parse(request.substr(request.find(' ', request.find(' ') + 1) + 1).c_str());
  ASSERT_TRUE(sent.IsObject()) << request;
  EXPECT_STREQ(sent["User"].GetString(), "1000:1000");
  EXPECT_STREQ(sent["HostConfig"]["NetworkMode"].GetString(), "none");
  EXPECT_FALSE(sent["HostConfig"].HasMember("PortBindings")) << "publish false binds no port";
  EXPECT_EQ(sent["HostConfig"]["PidsLimit"].GetInt64(), 512);
  EXPECT_STREQ(sent["HostConfig"]["Mounts"][1]["BindOptions"]["Propagation"].GetString(), "rslave");
  EXPECT_FALSE(sent["HostConfig"]["Mounts"][0].HasMember("BindOptions"));
  EXPECT_NE(request.find("name=sbx-abc"), std::string::npos) << request;
}

TEST_P(EngineApiTest, StartTwiceIsAlreadyRunningAndAMissingContainerIsNeither) {
  const EngineApi::Started again = api_.start_container(kId);
  EXPECT_TRUE(again.already_running);
  EXPECT_TRUE(again.ok());
  const EngineApi::Started missing = api_.start_container("gone");
  EXPECT_FALSE(missing.ok());
  EXPECT_EQ(missing.outcome.status, 404);
  EXPECT_FALSE(missing.outcome.message.empty());
}

TEST_P(EngineApiTest, RemovingAndInspectingWhatIsGone) {
  const EngineApi::Removed removed = api_.remove_container("gone");
  EXPECT_TRUE(removed.gone);
  EXPECT_TRUE(removed.ok());
  EXPECT_FALSE(api_.inspect_container("gone", 5.0).has_value());
  const auto running = api_.inspect_container(kId, 5.0);
  ASSERT_TRUE(running.has_value());
  EXPECT_TRUE(running->running);
  EXPECT_GT(api_.container_pid(kId, 5.0), 0);
  EXPECT_EQ(api_.container_pid("gone", 5.0), 0);
}

// One reading of a running container's use, as both engines answer it.
TEST_P(EngineApiTest, OneShotStatsAreReadAsBothEnginesGiveThem) {
  const auto reading = api_.container_stats(kId, 5.0);
  ASSERT_TRUE(reading.has_value());
  EXPECT_NE(engine_.last().find("/stats?stream=false&one-shot=true"), std::string::npos)
      << engine_.last();
  ASSERT_TRUE(reading->cpu_seconds && reading->host_cpu_seconds);
  EXPECT_EQ(reading->online_cpus, 2);
  EXPECT_EQ(reading->pids, 2u);
  EXPECT_EQ(reading->memory_limit_bytes, 268435456u);
  if (GetParam()().engine == "docker") {
    EXPECT_DOUBLE_EQ(*reading->cpu_seconds, 0.061311464);
    EXPECT_DOUBLE_EQ(*reading->host_cpu_seconds, 30964.72);
    EXPECT_EQ(reading->memory_bytes, 806912u - 4096u) << "the page cache it can drop counted";
  } else {
    EXPECT_DOUBLE_EQ(*reading->cpu_seconds, 0.066605089);
    EXPECT_EQ(reading->memory_bytes, 913408u);
  }
  EXPECT_FALSE(api_.container_stats("gone", 5.0).has_value());
}

TEST(EngineStatsAnswer, MissingOrMistypedFiguresStayEmptyAndGarbageThrows) {
  const SandboxUsage::Reading sparse =
      parse_container_stats(R"({"memory_stats":{"usage":-5,"limit":"lots"},"pids_stats":{}})");
  EXPECT_FALSE(sparse.cpu_seconds || sparse.host_cpu_seconds || sparse.online_cpus ||
               sparse.memory_bytes || sparse.memory_limit_bytes || sparse.pids);
  // cgroup v2 names the page cache inactive_file; more of it than the usage never wraps.
  const SandboxUsage::Reading v2 = parse_container_stats(
      R"({"memory_stats":{"usage":100,"stats":{"inactive_file":500}},"cpu_stats":{"online_cpus":0}})");
  EXPECT_EQ(v2.memory_bytes, 100u);
  EXPECT_FALSE(v2.online_cpus);
  EXPECT_THROW(parse_container_stats("[]"), std::runtime_error);
  EXPECT_THROW(parse_container_stats("<html>"), std::runtime_error);
}

TEST_P(EngineApiTest, NetworksAreCreatedReadListedAndRemoved) {
  NetworkCreateBody body;
  body.name = "sbxrec-net";
  body.labels = {{"sandboxd.managed-by", "sandboxd"}};
  const EngineApi::NetworkCreated created = api_.create_network(body);
  EXPECT_EQ(created.outcome.status, 201);
  EXPECT_EQ(created.id.size(), 64u);
  const auto network = api_.inspect_network("sbxrec-net");
  ASSERT_TRUE(network.has_value());
  EXPECT_EQ(network->name, "sbxrec-net");
  EXPECT_FALSE(network->internal);
  EXPECT_EQ(network->labels.at("sandboxd.managed-by"), "sandboxd");
  EXPECT_FALSE(api_.inspect_network("nope-net").has_value());
  const auto listed = api_.list_networks("sandboxd.managed-by");
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0].id, created.id);
  EXPECT_TRUE(api_.remove_network("sbxrec-net").ok());
  const EngineApi::Removed again = api_.remove_network("nope-net");
  EXPECT_TRUE(again.gone);
}

TEST_P(EngineApiTest, RenameAnswersAreReturnedAsTheEngineGaveThem) {
  // Docker refuses a rename to the current name (400); podman accepts it (204).
  const Outcome renamed = api_.rename_container(kId, "sbxrec-c");
  if (GetParam() == &docker_recording) {
    EXPECT_EQ(renamed.status, 400);
    EXPECT_NE(renamed.message.find("same name"), std::string::npos) << renamed.message;
  } else {
    EXPECT_TRUE(renamed.ok());
  }
}

std::string engine_name(const ::testing::TestParamInfo<Recording (*)()>& info) {
  return info.param().engine;
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineApiTest,
                         ::testing::Values(&docker_recording, &podman_recording), engine_name);

TEST(EngineApiAnswers, ReadersTolerateAnyBody) {
  EXPECT_FALSE(parse_network_answer("garbage").has_value());
  EXPECT_FALSE(parse_network_answer("{}").has_value());
  EXPECT_THROW(parse_network_listing("{}"), std::runtime_error);
  EXPECT_EQ(parse_container_pid(R"({"State":{"Pid":-3}})"), 0);
  EXPECT_EQ(parse_container_pid("[]"), 0);
}

}  // namespace
}  // namespace sandboxd::local_docker

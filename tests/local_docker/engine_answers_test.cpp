// What the plugin reads from engine answers (engine_answers.hpp): shapes Docker 20.10 and
// podman 4.3 send, and bodies no engine should send, which must read as "absent" or a clear
// error rather than a wrong sandbox.
#include "engine_answers.hpp"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace sandboxd::local_docker {
namespace {

TEST(EngineAnswers, AnInspectAnswerGivesStatePortAndLabels) {
  const auto state = parse_inspect_answer(R"({
    "Id": "abc123", "Name": "/sbx-1", "Created": "2026-12-03T10:00:00.5Z",
    "State": {"Status": "running", "Running": true},
    "Config": {"Labels": {"sandboxd.user-id": "alice", "other": 7}},
    "NetworkSettings": {"Ports": {"8080/tcp": [{"HostIp": "127.0.0.1", "HostPort": "49153"}]}}})");
  ASSERT_TRUE(state);
  EXPECT_EQ(state->id, "abc123");
  EXPECT_EQ(state->name, "sbx-1");
  EXPECT_TRUE(state->running);
  EXPECT_EQ(state->status, "running");
  EXPECT_EQ(state->host_port, 49153);
  EXPECT_GT(state->created_at, 0.0);
  EXPECT_EQ(state->labels.size(), 1u) << "a label that is not a string is dropped";
  EXPECT_EQ(state->labels.at("sandboxd.user-id"), "alice");
}

TEST(EngineAnswers, APausedContainerIsReadAsPausedOnBothEnginesAnswers) {
  // Docker keeps Running true while paused; podman's compatible answer says false.
  const auto docker = parse_inspect_answer(
      R"({"Id": "d", "State": {"Status": "paused", "Running": true, "Paused": true}})");
  const auto podman = parse_inspect_answer(
      R"({"Id": "p", "State": {"Status": "paused", "Running": false, "Paused": true}})");
  const auto running = parse_inspect_answer(
      R"({"Id": "r", "State": {"Status": "running", "Running": true, "Paused": false}})");
  ASSERT_TRUE(docker && podman && running);
  EXPECT_TRUE(docker->paused);
  EXPECT_TRUE(podman->paused);
  EXPECT_FALSE(running->paused);
  EXPECT_FALSE(parse_inspect_answer(R"({"Id": "x", "State": {"Paused": "yes"}})")->paused);
}

TEST(EngineAnswers, AnInspectAnswerOfTheWrongShapeIsAbsentOrUnpublished) {
  for (const char* body :
       {"", "[]", "null", "{}", R"({"Id": 5})", "{\"Id\":\"x\"", R"({"Id": ""})"}) {
    EXPECT_FALSE(parse_inspect_answer(body)) << body;
  }
  // Wrong types everywhere but the id: a container we know nothing about, not a crash.
  const auto odd = parse_inspect_answer(R"({"Id": "x", "State": "running", "Config": [],
    "NetworkSettings": {"Ports": {"8080/tcp": [{"HostPort": "99999"}, {"HostPort": "-1"},
    {"HostPort": 8080}, "x"]}}})");
  ASSERT_TRUE(odd);
  EXPECT_FALSE(odd->running);
  EXPECT_EQ(odd->host_port, 0) << "no valid port among 99999, -1, a number and a string";
}

TEST(EngineAnswers, AListingKeepsOnlyRunningContainersOfOurPrefix) {
  const auto running = parse_running_listing(R"([
    {"Id": "a", "Names": ["/sbx-one"], "State": "running", "Created": 1764756000,
     "Ports": [{"PrivatePort": 8080, "PublicPort": 40001, "Type": "tcp"}]},
    {"Id": "b", "Names": ["/sbx-two"], "State": "exited"},
    {"Id": "c", "Names": ["/sbxother-three"], "State": "running"},
    {"Id": "d", "Names": ["/web/sbx-link", "/sbx-four"], "Created": "2026-12-03T10:00:00Z",
     "Ports": [{"PrivatePort": 8080, "PublicPort": 40004, "Type": "udp"}]},
    {"Names": ["/sbx-noid"]}, "garbage", {"Id": "e", "Names": ["/sbx-"]}])",
                                             "sbx-");
  ASSERT_EQ(running.size(), 2u);
  EXPECT_EQ(running[0].name, "sbx-one");
  EXPECT_EQ(running[0].host_port, 40001);
  EXPECT_DOUBLE_EQ(running[0].created_at, 1764756000);
  EXPECT_EQ(running[1].name, "sbx-four") << "a link alias is not the name";
  EXPECT_EQ(running[1].host_port, 0) << "a udp mapping is not the sandbox's port";
  EXPECT_GT(running[1].created_at, 0.0);
}

// The slots' sweep lists containers in every state (a dead gateway's slot may have
// exited), with their labels, still only those of our prefix.
TEST(EngineAnswers, AFullListingKeepsEveryStateWithLabels) {
  const auto listed = parse_listing(R"([
    {"Id": "a", "Names": ["/sbx-slot-1"], "State": "running", "Labels": {"owner": "t1"}},
    {"Id": "b", "Names": ["/sbx-slot-2"], "State": "exited", "Labels": {"owner": "t2"}},
    {"Id": "c", "Names": ["/other-slot-3"], "State": "exited"}])",
                                    "sbx-");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_TRUE(listed[0].running);
  EXPECT_FALSE(listed[1].running);
  EXPECT_EQ(listed[1].status, "exited");
  EXPECT_EQ(listed[1].labels.at("owner"), "t2");
}

// A paused container is alive, so reconciliation and `list` must see it; a
// listing that dropped it left a paused orphan nobody would ever adopt or reap.
TEST(EngineAnswers, AListingKeepsPausedContainersAndSaysSo) {
  const auto listed = parse_running_listing(R"([
    {"Id": "a", "Names": ["/sbx-frozen"], "State": "paused"},
    {"Id": "b", "Names": ["/sbx-live"], "State": "running"},
    {"Id": "c", "Names": ["/sbx-made"], "State": "created"}])",
                                            "sbx-");
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].name, "sbx-frozen");
  EXPECT_TRUE(listed[0].running);
  EXPECT_TRUE(listed[0].paused);
  EXPECT_FALSE(listed[1].paused);
}

TEST(EngineAnswers, AListingThatIsNotAnArrayIsAnError) {
  for (const char* body : {"", "{}", "{\"message\":\"boom\"}", "[", "null"}) {
    EXPECT_THROW(parse_running_listing(body, "sbx-"), std::runtime_error) << body;
  }
}

TEST(EngineAnswers, ACreateAnswersIdAndPullProgressLines) {
  EXPECT_EQ(created_container_id(R"({"Id": "f00d", "Warnings": []})"), "f00d");
  EXPECT_EQ(created_container_id(R"({"Id": 1})"), "");
  EXPECT_EQ(created_container_id("not json"), "");

  EXPECT_FALSE(parse_pull_progress_line("  \r"));
  EXPECT_FALSE(parse_pull_progress_line("{\"status\":"));
  const auto step = parse_pull_progress_line(R"({"status": "Downloading", "id": "l1"})");
  ASSERT_TRUE(step);
  EXPECT_EQ(step->status, "Downloading");
  EXPECT_EQ(step->layer, "l1");
  EXPECT_EQ(step->error, "");
  const auto failed = parse_pull_progress_line(R"({"errorDetail": {"message": "denied"}})");
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->error, "denied");
}

TEST(EngineAnswers, PortTextIsDigitsUpTo65535) {
  EXPECT_EQ(parse_port_text("8080"), 8080);
  EXPECT_EQ(parse_port_text("65535"), 65535);
  for (const char* text : {"", "65536", "-1", " 80", "80 ", "123456", "0x50"}) {
    EXPECT_EQ(parse_port_text(text), 0) << text;
  }
}

}  // namespace
}  // namespace sandboxd::local_docker

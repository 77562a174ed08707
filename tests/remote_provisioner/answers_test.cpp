// What the plugin reads from the provisioner's answers (provisioner_answers.hpp), including
// bodies a broken or hostile service might send: each reads as absent, unknown or a named
// defect, and no URL other than http(s) ever becomes a sandbox URL.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <stdexcept>
#include <string>

#include "provisioner_answers.hpp"

namespace sandboxd::remote_provisioner {
namespace {

std::string defect_of(const std::function<void()>& read) {
  try {
    read();
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ProvisionerAnswers, CapabilitiesGiveTheContractOrANamedDefect) {
  EXPECT_EQ(read_capabilities_answer(R"({"mount_contract_version": 2})"), 2);
  EXPECT_EQ(read_capabilities_answer(R"({"mount_contract_version": null})"), 0);
  EXPECT_EQ(read_capabilities_answer("{}"), 0);
  EXPECT_EQ(defect_of([] { read_capabilities_answer("[2]"); }), "response is not a JSON object");
  EXPECT_EQ(defect_of([] { read_capabilities_answer(R"({"mount_contract_version": "2"})"); }),
            "mount_contract_version is not an integer");
  EXPECT_EQ(defect_of([] { read_capabilities_answer(R"({"mount_contract_version": 2.5})"); }),
            "mount_contract_version is not an integer");
}

TEST(ProvisionerAnswers, OnlyA409NamingAnIntegerIsAContractRefusal) {
  EXPECT_EQ(served_contract_of_refusal(409, R"({"mount_contract_version": 1})"), 1);
  EXPECT_FALSE(served_contract_of_refusal(400, R"({"mount_contract_version": 1})"));
  EXPECT_FALSE(served_contract_of_refusal(409, R"({"detail": "exists for another user"})"));
  EXPECT_FALSE(served_contract_of_refusal(409, R"({"mount_contract_version": "1"})"));
  EXPECT_FALSE(served_contract_of_refusal(409, "not json"));
}

TEST(ProvisionerAnswers, ACreateAnswerNamesWhatIsMissingOrWrong) {
  const SandboxInfo info = read_create_answer(
      "s1",
      R"({"sandbox_url": "http://127.0.0.1:9/", "user_id": "alice", "thread_id": "t",
          "mount_contract_version": 2})",
      42.0);
  EXPECT_EQ(info.sandbox_id, "s1");
  EXPECT_EQ(info.sandbox_url, "http://127.0.0.1:9/");
  EXPECT_EQ(info.user_id, "alice");
  EXPECT_EQ(info.mount_contract_version, 2);
  EXPECT_DOUBLE_EQ(info.created_at, 42.0);

  EXPECT_THROW(read_create_answer("s", "garbage", 0), AnswerNotAnObject);
  EXPECT_EQ(defect_of([] { read_create_answer("s", R"({"sandbox_url": ""})", 0); }),
            "response has no sandbox_url");
  EXPECT_EQ(defect_of([] {
              read_create_answer("s", R"({"sandbox_url": "file://u:secret@h/dev/zero"})", 0);
            }),
            "response has a sandbox_url that is not http:// or https://: "
            "'file://<redacted>@h/dev/zero'")
      << "the URL's password is redacted";
  EXPECT_EQ(defect_of([] {
              read_create_answer(
                  "s", R"({"sandbox_url": "http://h/", "mount_contract_version": true})", 0);
            }),
            "response has a non-integer mount_contract_version");
}

// A relay's sandbox comes with the headers every request must carry. From a service
// we do not control they are bounded and must be well-formed, or the answer is refused.
TEST(ProvisionerAnswers, RequestHeadersAreKeptAndABadSetIsRefusedWhole) {
  const std::string head =
      R"({"sandbox_url": "http://127.0.0.1:9/s/s1", "mount_contract_version": 2,
                               "user_id": "alice", "thread_id": "t", )";
  const SandboxInfo info = read_create_answer(
      "s1", head + R"("request_headers": {"X-Sandboxd-Relay-Token": "tok"}})", 0);
  EXPECT_EQ(info.request_headers,
            (std::map<std::string, std::string>{{"X-Sandboxd-Relay-Token", "tok"}}));
  EXPECT_TRUE(
      read_create_answer("s1", head + R"("request_headers": null})", 0).request_headers.empty());
  EXPECT_EQ(defect_of([&] { read_create_answer("s1", head + R"("request_headers": "x"})", 0); }),
            "response has request_headers that are not an object");
  EXPECT_EQ(defect_of([&] {
              read_create_answer("s1", head + R"("request_headers": {"Bad Name": "v"}})", 0);
            }),
            "response has request_headers that name a header that is not an HTTP token");
  EXPECT_EQ(defect_of([&] {
              read_create_answer("s1", head + R"("request_headers": {"X-A": "v\r\nX-B: w"}})", 0);
            }),
            "response has request_headers that give X-A a value with a line break");
  EXPECT_EQ(
      defect_of([&] { read_create_answer("s1", head + R"("request_headers": {"X-A": 7}})", 0); }),
      "response has request_headers that give X-A a value that is not a bounded string");
  std::string many = head + R"("request_headers": {)";
  for (int i = 0; i < 17; ++i)
    many += (i ? "," : "") + std::string("\"X-") + std::to_string(i) + "\": \"v\"";
  EXPECT_EQ(defect_of([&] { read_create_answer("s1", many + "}}", 0); }),
            "response has request_headers that name more than 16 headers");
  // Discovery and the instance lookup keep them too.
  const auto found = read_discovered_sandbox(
      "s1", head + R"("request_headers": {"X-Sandboxd-Relay-Token": "tok"}})", 0);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->request_headers.at("X-Sandboxd-Relay-Token"), "tok");
  EXPECT_FALSE(read_discovered_sandbox("s1", head + R"("request_headers": [1]})", 0).has_value());
}

TEST(ProvisionerAnswers, DiscoveryNeedsAUsableUrlAndAVerifiedIdentity) {
  const std::string full =
      R"({"sandbox_url": "https://h/", "user_id": "u", "thread_id": "t", "status": "Running"})";
  const auto found = read_discovered_sandbox("s", full, 1.0);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->thread_id, "t");
  EXPECT_TRUE(read_running_status(full));
  EXPECT_FALSE(read_running_status(R"({"status": "Pending"})"));
  EXPECT_THROW(read_running_status("[]"), AnswerNotAnObject);
  for (const char* body : {R"({"sandbox_url": "https://h/", "user_id": "u"})",
                           R"({"sandbox_url": "ftp://h/", "user_id": "u", "thread_id": "t"})",
                           R"({"sandbox_url": "https://h/", "user_id": "", "thread_id": "t"})",
                           R"({"sandbox_url": "https://h/", "user_id": "u", "thread_id": "t",
            "mount_contract_version": "2"})",
                           "[]", ""}) {
    EXPECT_FALSE(read_discovered_sandbox("s", body, 1.0)) << body;
  }
}

TEST(ProvisionerAnswers, AnInstanceAnswerIsFoundAbsentOrUnknown) {
  using Status = SandboxDiscoveryResult::Status;
  const auto found =
      read_instance_answer("s", R"({"backend_namespace": "k8s:ns", "incarnation_id": "pod-1",
               "sandbox_url": "http://h/", "mount_contract_version": 2})",
                           1.0);
  EXPECT_EQ(found.status, Status::found);
  ASSERT_TRUE(found.info);
  EXPECT_EQ(found.incarnation_id, "pod-1");
  const auto not_ready = read_instance_answer(
      "s", R"({"backend_namespace": "k8s:ns", "incarnation_id": "pod-1"})", 1.0);
  EXPECT_EQ(not_ready.status, Status::found);
  EXPECT_FALSE(not_ready.info) << "a running pod without a URL is found, with no info";
  EXPECT_EQ(
      read_instance_answer("s", R"({"backend_namespace": "n", "incarnation_id": null})", 1).status,
      Status::absent);
  for (const char* body : {R"({"incarnation_id": "p"})", R"({"backend_namespace": 1})",
                           R"({"backend_namespace": "n", "incarnation_id": 7})",
                           R"({"backend_namespace": "n", "incarnation_id": "p",
                               "mount_contract_version": []})",
                           "null", "{"}) {
    EXPECT_EQ(read_instance_answer("s", body, 1).status, Status::unknown) << body;
  }
}

TEST(ProvisionerAnswers, AListingSkipsAndShowsEntriesWithoutIdOrUsableUrl) {
  const auto listing = read_list_answer(
      R"json({"sandboxes": [
        {"sandbox_id": "a", "sandbox_url": "http://h/a", "created_at": 5},
        {"sandbox_id": "b", "sandbox_url": "javascript:alert(1)"},
        {"sandbox_url": "http://h/c"}, 7,
        {"sandbox_id": "d", "sandbox_url": "http://h/d", "created_at": -1,
         "mount_contract_version": "x"}], "count": 5})json",
      99.0);
  ASSERT_TRUE(listing);
  ASSERT_EQ(listing->sandboxes.size(), 2u);
  EXPECT_DOUBLE_EQ(listing->sandboxes[0].created_at, 5.0);
  EXPECT_DOUBLE_EQ(listing->sandboxes[1].created_at, 99.0) << "a negative time is not a time";
  EXPECT_EQ(listing->sandboxes[1].mount_contract_version, 0);
  EXPECT_EQ(listing->skipped.size(), 3u);
  for (const char* body : {"[]", R"({"sandboxes": {}})", "{}", ""}) {
    EXPECT_FALSE(read_list_answer(body, 0)) << body;
  }
}

TEST(ProvisionerAnswers, AnUnknownRouteIsFastApisNotFoundAndNotAMissingSandbox) {
  EXPECT_TRUE(is_unknown_route_answer(404, R"({"detail": "Not Found"})"));
  EXPECT_FALSE(is_unknown_route_answer(404, R"({"detail": "Sandbox 'sb-1' not found"})"));
  EXPECT_FALSE(is_unknown_route_answer(405, R"({"detail": "Not Found"})"));
  EXPECT_FALSE(is_unknown_route_answer(404, "Not Found"));
}

TEST(ProvisionerAnswers, AUsageAnswerKeepsWhatItGivesAndRefusesWhatNoFigureCanBe) {
  const SandboxUsage::Reading full = read_usage_answer(
      R"({"cpu_seconds": 1.5, "host_cpu_seconds": 9000.25, "online_cpus": 2,
          "memory_bytes": 1048576, "memory_limit_bytes": 2097152, "pids": 3})");
  EXPECT_EQ(full.cpu_seconds, 1.5);
  EXPECT_EQ(full.host_cpu_seconds, 9000.25);
  EXPECT_EQ(full.online_cpus, 2);
  EXPECT_EQ(full.memory_bytes, 1048576u);
  EXPECT_EQ(full.memory_limit_bytes, 2097152u);
  EXPECT_EQ(full.pids, 3u);

  const SandboxUsage::Reading partial = read_usage_answer(R"({"memory_bytes": 5, "pids": null})");
  EXPECT_EQ(partial.memory_bytes, 5u);
  EXPECT_FALSE(partial.pids);
  EXPECT_FALSE(partial.cpu_seconds);

  EXPECT_THROW(read_usage_answer("[]"), AnswerNotAnObject);
  for (const char* bad :
       {R"({"cpu_seconds": -1})", R"({"cpu_seconds": "1"})", R"({"memory_bytes": 1.5})",
        R"({"pids": -2})", R"({"online_cpus": 1e30})"}) {
    EXPECT_THROW(read_usage_answer(bad), std::runtime_error) << bad;
  }
}

}  // namespace
}  // namespace sandboxd::remote_provisioner

// What the kubernetes backend POSTs (plugins/kubernetes/kube_objects.hpp), checked field by
// field without a server: a pod secure by default with its identity and mounts, a service and
// a network policy owned by the pod, each labelled as DeerFlow's.
#include "kube_objects.hpp"

#include <gtest/gtest.h>
#include <rapidjson/document.h>
#include <rapidjson/pointer.h>

#include <stdexcept>
#include <string>

namespace sandboxd::kubernetes {
namespace {

rapidjson::Document parse(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  EXPECT_FALSE(doc.HasParseError()) << json;
  return doc;
}

// The string at a JSON pointer ("/metadata/name"), "" when absent.
std::string at(const rapidjson::Document& doc, const char* pointer) {
  const rapidjson::Value* value = rapidjson::Pointer(pointer).Get(doc);
  return value && value->IsString() ? value->GetString() : "";
}

const rapidjson::Value& value_at(const rapidjson::Document& doc, const char* pointer) {
  const rapidjson::Value* value = rapidjson::Pointer(pointer).Get(doc);
  if (value == nullptr) throw std::runtime_error(std::string("no ") + pointer);
  return *value;
}

ObjectSettings settings() {
  ObjectSettings s;
  s.image = "sandbox:test";
  s.port = 8080;
  s.environment = {{"TZ", "UTC"}};
  s.host_base_dir = "/srv/deer-flow";
  return s;
}

CreateRequest request() {
  CreateRequest r;
  r.sandbox_id = "abc123";
  r.user_id = "alice";
  r.thread_id = "t-1";
  Mount data;
  data.host_path = "/srv/deer-flow/users/alice/threads/t-1/user-data";
  data.container_path = "/mnt/user-data";
  Mount skills;
  skills.host_path = "/srv/deer-flow/skills";
  skills.container_path = "/mnt/skills";
  skills.read_only = true;
  r.extra_mounts = {data, skills};
  return r;
}

void expect_deerflow_labels(const rapidjson::Document& doc, const std::string& policy) {
  EXPECT_EQ(at(doc, "/metadata/labels/app"), "deer-flow-sandbox");
  EXPECT_EQ(at(doc, "/metadata/labels/sandbox-id"), "abc123");
  EXPECT_EQ(at(doc, "/metadata/labels/sandboxd.io~1managed-by"), "sandboxd");
  EXPECT_EQ(at(doc, "/metadata/labels/sandboxd.io~1mount-contract-version"),
            std::to_string(kSandboxMountContractVersion));
  EXPECT_EQ(at(doc, "/metadata/labels/sandboxd.io~1network-policy"), policy);
}

TEST(KubeObjectsTest, APodIsSecureByDefaultAndCarriesItsConversation) {
  const auto pod = parse(pod_object(settings(), request()));
  EXPECT_EQ(at(pod, "/kind"), "Pod");
  EXPECT_EQ(at(pod, "/metadata/name"), "sandbox-abc123");
  expect_deerflow_labels(pod, "open");
  EXPECT_EQ(at(pod, "/metadata/annotations/sandboxd.io~1user-id"), "alice");
  EXPECT_EQ(at(pod, "/metadata/annotations/sandboxd.io~1thread-id"), "t-1");
  EXPECT_FALSE(value_at(pod, "/spec/automountServiceAccountToken").GetBool());
  EXPECT_EQ(at(pod, "/spec/securityContext/seccompProfile/type"), "RuntimeDefault");
  EXPECT_EQ(value_at(pod, "/spec/terminationGracePeriodSeconds").GetInt64(), 5);
  EXPECT_EQ(rapidjson::Pointer("/spec/runtimeClassName").Get(pod), nullptr);
  EXPECT_EQ(rapidjson::Pointer("/spec/activeDeadlineSeconds").Get(pod), nullptr);
  EXPECT_EQ(at(pod, "/spec/containers/0/image"), "sandbox:test");
  EXPECT_EQ(value_at(pod, "/spec/containers/0/ports/0/containerPort").GetInt(), 8080);
  EXPECT_EQ(at(pod, "/spec/containers/0/env/0/name"), "TZ");
  EXPECT_EQ(at(pod, "/spec/containers/0/resources/limits/memory"), "1Gi");
  EXPECT_FALSE(
      value_at(pod, "/spec/containers/0/securityContext/allowPrivilegeEscalation").GetBool());
  EXPECT_EQ(at(pod, "/spec/containers/0/securityContext/capabilities/drop/0"), "ALL");
  EXPECT_TRUE(value_at(pod, "/spec/containers/0/securityContext/capabilities/add").IsArray());
}

TEST(KubeObjectsTest, HostPathMountsAreOneVolumeEachWithTheirReadOnlyFlag) {
  const auto pod = parse(pod_object(settings(), request()));
  EXPECT_EQ(at(pod, "/spec/containers/0/volumeMounts/0/name"), "m0");
  EXPECT_EQ(at(pod, "/spec/containers/0/volumeMounts/0/mountPath"), "/mnt/user-data");
  EXPECT_FALSE(value_at(pod, "/spec/containers/0/volumeMounts/0/readOnly").GetBool());
  EXPECT_TRUE(value_at(pod, "/spec/containers/0/volumeMounts/1/readOnly").GetBool());
  EXPECT_EQ(at(pod, "/spec/volumes/1/hostPath/path"), "/srv/deer-flow/skills");
  EXPECT_EQ(at(pod, "/spec/volumes/1/hostPath/type"), "DirectoryOrCreate");
  EXPECT_EQ(value_at(pod, "/spec/volumes").Size(), 2u);
}

TEST(KubeObjectsTest, PvcMountsAreSubPathsOfOneClaimAndNothingOutsideTheBase) {
  ObjectSettings s = settings();
  s.volumes = "pvc";
  s.pvc_name = "deer-flow-data";
  s.runtime_class = "gvisor";
  s.active_deadline = 86400;
  const auto pod = parse(pod_object(s, request()));
  EXPECT_EQ(at(pod, "/spec/runtimeClassName"), "gvisor");
  EXPECT_EQ(value_at(pod, "/spec/activeDeadlineSeconds").GetInt64(), 86400);
  EXPECT_EQ(at(pod, "/spec/containers/0/volumeMounts/0/subPath"),
            "users/alice/threads/t-1/user-data");
  EXPECT_EQ(at(pod, "/spec/containers/0/volumeMounts/1/subPath"), "skills");
  EXPECT_EQ(value_at(pod, "/spec/volumes").Size(), 1u);
  EXPECT_EQ(at(pod, "/spec/volumes/0/persistentVolumeClaim/claimName"), "deer-flow-data");

  for (const std::string outside : {"/srv/other", "/srv/deer-flow/../etc", "/srv/deer-flow"}) {
    CreateRequest r = request();
    r.extra_mounts[0].host_path = outside;
    try {
      pod_object(s, r);
      ADD_FAILURE() << outside << " was given a subPath";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(outside), std::string::npos) << e.what();
    }
  }
}

TEST(KubeObjectsTest, AServiceSelectsItsPodAndIsOwnedByItOnceItsUidIsKnown) {
  ObjectSettings s = settings();
  auto service = parse(service_object(s, "abc123", "uid-1"));
  EXPECT_EQ(at(service, "/kind"), "Service");
  EXPECT_EQ(at(service, "/metadata/name"), "sandbox-abc123-svc");
  expect_deerflow_labels(service, "open");
  EXPECT_EQ(at(service, "/spec/type"), "NodePort");
  EXPECT_EQ(at(service, "/spec/selector/sandbox-id"), "abc123");
  EXPECT_EQ(value_at(service, "/spec/ports/0/targetPort").GetInt(), 8080);
  EXPECT_EQ(at(service, "/metadata/ownerReferences/0/kind"), "Pod");
  EXPECT_EQ(at(service, "/metadata/ownerReferences/0/name"), "sandbox-abc123");
  EXPECT_EQ(at(service, "/metadata/ownerReferences/0/uid"), "uid-1");

  s.url_mode = "cluster_dns";
  service = parse(service_object(s, "abc123", ""));
  EXPECT_EQ(at(service, "/spec/type"), "ClusterIP");
  EXPECT_EQ(rapidjson::Pointer("/metadata/ownerReferences").Get(service), nullptr);
}

TEST(KubeObjectsTest, AnIsolatedSandboxsPolicyAdmitsOnlyRelaysToItsPortAndNoEgress) {
  ObjectSettings s = settings();
  s.network_mode = "isolated";
  const auto policy = parse(network_policy_object(s, "abc123", "uid-1"));
  EXPECT_EQ(at(policy, "/apiVersion"), "networking.k8s.io/v1");
  EXPECT_EQ(at(policy, "/kind"), "NetworkPolicy");
  EXPECT_EQ(at(policy, "/metadata/name"), "sandbox-abc123-netpol");
  expect_deerflow_labels(policy, "isolated");
  EXPECT_EQ(at(policy, "/metadata/ownerReferences/0/uid"), "uid-1");
  EXPECT_EQ(at(policy, "/spec/podSelector/matchLabels/sandbox-id"), "abc123");
  EXPECT_EQ(at(policy, "/spec/policyTypes/0"), "Ingress");
  EXPECT_EQ(at(policy, "/spec/policyTypes/1"), "Egress");
  EXPECT_EQ(value_at(policy, "/spec/ingress").Size(), 1u);
  EXPECT_EQ(value_at(policy, "/spec/ingress/0/from").Size(), 1u);
  EXPECT_EQ(at(policy, "/spec/ingress/0/from/0/podSelector/matchLabels/sandboxd.io~1role"),
            "relay");
  EXPECT_EQ(value_at(policy, "/spec/ingress/0/ports/0/port").GetInt(), 8080);
  EXPECT_TRUE(value_at(policy, "/spec/egress").IsArray());
  EXPECT_EQ(value_at(policy, "/spec/egress").Size(), 0u) << "nothing may leave the sandbox";
}

TEST(KubeObjectsTest, NamesFollowDeerFlowsProvisioner) {
  EXPECT_EQ(pod_name_of("x1"), "sandbox-x1");
  EXPECT_EQ(service_name_of("x1"), "sandbox-x1-svc");
  EXPECT_EQ(policy_name_of("x1"), "sandbox-x1-netpol");
}

}  // namespace
}  // namespace sandboxd::kubernetes

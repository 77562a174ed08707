// What the kubernetes backend asks the API server to make (beside its
// api_request): a sandbox's Pod, its Service and, in network mode isolated, its NetworkPolicy,
// each as the JSON document POSTed, built from typed settings alone, so each is tested
// without a server (tests/kubernetes/kube_objects_test.cpp). Named and labelled as DeerFlow's
// provisioner does (`sandbox-{id}`, `sandbox-{id}-svc`, app=deer-flow-sandbox,
// sandbox-id={id}); our identity rides in annotations (label values cannot hold every user id).
#pragma once

#include <map>
#include <string>

#include "sandboxd/types.hpp"

namespace sandboxd::kubernetes {

inline constexpr const char* kAppLabel = "app";
inline constexpr const char* kAppValue = "deer-flow-sandbox";
inline constexpr const char* kSandboxIdLabel = "sandbox-id";
inline constexpr const char* kManagedByLabel = "sandboxd.io/managed-by";
// The mount contract a pod was made under, as local_docker labels its
// containers: a provisioner over this backend answers it, and refuses to reuse a pod made
// under another. A pod without it (DeerFlow's provisioner made it) is contract 0.
inline constexpr const char* kContractLabel = "sandboxd.io/mount-contract-version";
// The network policy a pod was made under: "open" or "isolated". A pod without it
// was made open (DeerFlow's default).
inline constexpr const char* kNetworkPolicyLabel = "sandboxd.io/network-policy";
// Pods that may reach an isolated sandbox (the provisioner's, a gateway's): this label.
inline constexpr const char* kRelayRoleLabel = "sandboxd.io/role";
inline constexpr const char* kRelayRoleValue = "relay";
inline constexpr const char* kUserAnnotation = "sandboxd.io/user-id";
inline constexpr const char* kThreadAnnotation = "sandboxd.io/thread-id";

// The backend's options that shape the objects (kubernetes_backend.cpp reads and checks them).
struct ObjectSettings {
  std::string image;
  int port = 8080;
  std::string url_mode = "node_port";  // node_port: a NodePort Service, else ClusterIP
  std::string volumes = "host_path";   // host_path (one node) | pvc
  std::string pvc_name;                // volumes pvc: the claim holding host_base_dir's tree
  std::string host_base_dir;           // volumes pvc: what a mount's subPath is relative to
  std::map<std::string, std::string> environment;  // values never logged
  std::string cpu_request = "100m", memory_request = "256Mi", cpu_limit = "1", memory_limit = "1Gi";
  std::string runtime_class;          // "": the cluster's default
  long long active_deadline = 0;      // seconds; 0: none
  long long termination_grace = 5;    // seconds from SIGTERM to SIGKILL
  std::string network_mode = "open";  // open | isolated (a label on every object)
};

std::string pod_name_of(const std::string& sandbox_id);      // sandbox-{id}
std::string service_name_of(const std::string& sandbox_id);  // sandbox-{id}-svc
std::string policy_name_of(const std::string& sandbox_id);   // sandbox-{id}-netpol

// The sandbox's Pod, secure by default: no service-account token, no privilege escalation,
// capabilities dropped to local_docker's list, seccomp RuntimeDefault; the request's mounts as
// hostPath volumes (DirectoryOrCreate) or as subPaths of one PVC. Throws std::invalid_argument
// naming a pvc mount source that is not strictly below host_base_dir.
std::string pod_object(const ObjectSettings& settings, const CreateRequest& request);
// The sandbox's Service (NodePort under url_mode node_port, else ClusterIP), selecting its pod
// by label, owned by the pod once its uid is known ("" leaves it unowned), so the cluster
// collects it with the pod.
std::string service_object(const ObjectSettings& settings, const std::string& sandbox_id,
                           const std::string& pod_uid);
// Network mode isolated: ingress to the sandbox's port only from pods labelled as a relay, no
// egress at all; owned by the pod like the Service.
std::string network_policy_object(const ObjectSettings& settings, const std::string& sandbox_id,
                                  const std::string& pod_uid);

// A host path under host_base_dir as a subPath of the PVC (DeerFlow's PVC layout). Throws
// std::invalid_argument when it is not below it, or is host_base_dir itself (subPath "."
// would mount the whole claim: every user's data).
std::string sub_path_of(const std::string& host_base_dir, const std::string& host_path);

}  // namespace sandboxd::kubernetes

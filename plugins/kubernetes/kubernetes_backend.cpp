// kubernetes:KubernetesBackend — one Pod per sandbox on a Kubernetes cluster, and a Service when
// the sandbox URL needs one, through about ten core/v1 endpoints with libcurl and RapidJSON
//. Named and labelled as DeerFlow's provisioner does, so its pods are found as the
// same sandboxes; the objects themselves (pod, service, network policy) are built from typed
// settings in kube_objects.hpp, and this file keeps the policy: when to make, take over, wait
// for, replace or delete them.
//
//   "backend": {
//     "use": "kubernetes:KubernetesBackend",
//     "kubeconfig": "~/.kube/config",        // else $KUBECONFIG, else in-cluster
//     "kubeconfig_context": "…",             // default: the kubeconfig's current context
//     "namespace": "sandboxes",              // default: the context's or service account's
//     "image": "…",                          // default: DeerFlow's all-in-one image
//     "url_mode": "node_port",               // node_port | cluster_dns | pod_ip
//     "node_host": "10.0.0.5",               // node_port: where the gateway reaches a node
//     "port": 8080,
//     "volumes": "host_path",                // host_path (one node) | pvc
//     "pvc_name": "deer-flow-data",          // pvc: the claim holding base_dir's tree
//     "environment": {"KEY": "value"},       // values are never logged
//     "cpu_request": "100m", "memory_request": "256Mi", "cpu_limit": "1", "memory_limit": "1Gi",
//     "runtime_class_name": "gvisor", "active_deadline_seconds": 86400,
//     "termination_grace_seconds": 5,        // SIGTERM to SIGKILL when a sandbox is deleted
//     "ready_timeout_seconds": 120, "request_timeout_seconds": 15, "list_page_size": 500
//   }
//
// Secure by default: no privilege escalation, capabilities dropped to local_docker's list,
// seccomp RuntimeDefault, no service-account token in the pod.
//
// Lock story: nothing is shared between calls but the settings, read-only after construction,
// and watch_refused_, an atomic flag set once the API server refuses a watch; every request has
// its own libcurl handle.
#include <rapidjson/document.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "kube_credentials.hpp"
#include "kube_objects.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/errors.hpp"
#include "sandboxd/http.hpp"
#include "sandboxd/sdk.hpp"

namespace sandboxd::kubernetes {
namespace {

constexpr const char* kDefaultImage =
    "enterprise-public-cn-beijing.cr.volces.com/vefaas-public/all-in-one-sandbox:latest";
// Waiting reasons that will not resolve by waiting: the create fails at once, naming it.
constexpr const char* kHopelessReasons[] = {"ImagePullBackOff",           "ErrImagePull",
                                            "CrashLoopBackOff",           "InvalidImageName",
                                            "CreateContainerConfigError", "CreateContainerError"};
constexpr int kMaxListPages = 1000;                    // 500,000 pods: a bound, not a expectation
constexpr std::size_t kMaxWatchEventBytes = 4u << 20;  // one pod's event is a few KB

const rapidjson::Value* member(const rapidjson::Value& object, const char* key) {
  if (!object.IsObject()) return nullptr;
  const auto it = object.FindMember(key);
  return it == object.MemberEnd() ? nullptr : &it->value;
}

std::string string_at(const rapidjson::Value& object, std::initializer_list<const char*> path) {
  const rapidjson::Value* at = &object;
  for (const char* key : path) {
    at = member(*at, key);
    if (!at) return "";
  }
  return at->IsString() ? at->GetString() : "";
}

struct Answer {
  long status = 0;
  std::string body;
  rapidjson::Document doc;
  bool ok() const { return status >= 200 && status < 300; }
  // The API's Status message ("pods \"x\" is forbidden: exceeded quota…") or the raw body.
  std::string message() const {
    const std::string message = string_at(doc, {"message"});
    return message.empty() ? body.substr(0, 300) : message;
  }
  std::string reason() const { return string_at(doc, {"reason"}); }
};

double parse_timestamp(const std::string& text) {  // 2026-12-04T12:00:00Z
  std::tm tm{};
  if (!strptime(text.c_str(), "%Y-%m-%dT%H:%M:%SZ", &tm)) return 0.0;
  return static_cast<double>(timegm(&tm));
}

}  // namespace

class KubernetesBackend final : public SandboxBackend, public SandboxNetworkPolicy {
 public:
  explicit KubernetesBackend(const PluginContext& context) : logger_(context.logger) {
    PluginConfig options = context.options();
    const auto kubeconfig_key = options.optional_string("kubeconfig");
    const auto context_name = options.optional_string("kubeconfig_context");
    std::string kubeconfig = kubeconfig_key.value_or("");
    if (kubeconfig.empty()) {
      if (const char* env = std::getenv("KUBECONFIG"); env && *env) kubeconfig = env;
    }
    if (!kubeconfig.empty() && kubeconfig.front() == '~') {
      if (const char* home = std::getenv("HOME")) kubeconfig = home + kubeconfig.substr(1);
    }
    try {
      credentials_ = kubeconfig.empty()
                         ? in_cluster_credentials("/var/run/secrets/kubernetes.io/serviceaccount")
                         : kubeconfig_credentials(kubeconfig, context_name);
    } catch (const std::runtime_error& e) {
      options.reject("kubeconfig", e.what());  // the message names the file or what is missing
    }
    if (credentials_.insecure_skip_tls_verify) {
      logger_->warning("kubernetes: " + credentials_.source +
                       " asks for insecure-skip-tls-verify; the API server's certificate is NOT "
                       "verified");
    }
    namespace_ =
        options.get_string("namespace", credentials_.namespace_.empty() ? std::string("default")
                                                                        : credentials_.namespace_);
    objects_.image = options.get_string("image", kDefaultImage);
    objects_.url_mode = options.get_string("url_mode", "node_port");
    if (objects_.url_mode != "node_port" && objects_.url_mode != "cluster_dns" &&
        objects_.url_mode != "pod_ip") {
      options.reject("url_mode",
                     "must be node_port, cluster_dns or pod_ip, got '" + objects_.url_mode + "'");
    }
    node_host_ = options.get_string("node_host", "");
    if (objects_.url_mode == "node_port" && node_host_.empty()) {
      options.reject("node_host",
                     "is required with url_mode node_port (where the gateway reaches a node)");
    }
    objects_.port = static_cast<int>(options.get_integer("port", 8080));
    if (objects_.port < 1 || objects_.port > 65535) options.reject("port", "must be in 1..65535");
    objects_.volumes = options.get_string("volumes", "host_path");
    if (objects_.volumes != "host_path" && objects_.volumes != "pvc") {
      options.reject("volumes", "must be host_path or pvc, got '" + objects_.volumes + "'");
    }
    objects_.pvc_name = options.get_string("pvc_name", "");
    if (objects_.volumes == "pvc" && objects_.pvc_name.empty())
      options.reject("pvc_name", "is required with volumes pvc");
    objects_.host_base_dir = options.get_string("host_base_dir", context.base_dir);
    objects_.environment = options.get_string_map("environment");
    objects_.cpu_request = options.get_string("cpu_request", "100m");
    objects_.memory_request = options.get_string("memory_request", "256Mi");
    objects_.cpu_limit = options.get_string("cpu_limit", "1");
    objects_.memory_limit = options.get_string("memory_limit", "1Gi");
    // `runtime` is the key every backend spells the sandbox's runtime with (local_docker's is
    // an engine runtime, here a RuntimeClass); `runtime_class_name` is Kubernetes' own word.
    if (options.has("runtime") && options.has("runtime_class_name")) {
      options.reject("runtime", "and runtime_class_name name one thing: give one of them");
    }
    objects_.runtime_class = options.has("runtime") ? options.get_string("runtime", "")
                                                    : options.get_string("runtime_class_name", "");
    objects_.active_deadline = options.get_integer("active_deadline_seconds", 0);
    objects_.termination_grace = options.get_integer("termination_grace_seconds", 5);
    if (objects_.termination_grace < 0 || objects_.termination_grace > 3600) {
      options.reject("termination_grace_seconds", "must be in 0..3600 seconds");
    }
    ready_timeout_ = options.get_number("ready_timeout_seconds", 120);
    request_timeout_ = options.get_number("request_timeout_seconds", 15);
    list_page_size_ = static_cast<int>(options.get_integer("list_page_size", 500));
    // A page must fit the SDK's 32 MiB bound on an answer: a real pod, managedFields and all,
    // runs to some 15 KB, so 1,000 of them stay under half of it.
    if (list_page_size_ < 1 || list_page_size_ > 1000) {
      options.reject("list_page_size", "must be in 1..1000");
    }
    if (!(request_timeout_ > 0 && request_timeout_ <= 300)) {
      options.reject("request_timeout_seconds", "must be in (0, 300] seconds");
    }
    read_network(options);
    for (const auto& key : options.unread_keys()) {
      logger_->warning("kubernetes: unknown option " + key + " ignored");
    }
    logger_->info("kubernetes: " + credentials_.source + ", server " +
                  redacted_url(credentials_.server) + ", namespace " + namespace_ + ", url_mode " +
                  objects_.url_mode + ", network mode " + objects_.network_mode +
                  (objects_.network_mode == "isolated"
                       ? " (a NetworkPolicy per sandbox: ingress only from pods labelled " +
                             std::string(kRelayRoleLabel) + "=" + kRelayRoleValue +
                             ", no egress; enforced only where the cluster's CNI enforces "
                             "NetworkPolicies)"
                       : std::string()));
  }

  // SandboxNetworkPolicy: no sandbox here is namespaced (its Service is its address, and the
  // policy says who may use it), so the host needs nothing of its own to enforce it.
  std::string configured_network_policy() const override { return objects_.network_mode; }
  std::string network_preflight() override { return ""; }

  SandboxInfo create(const CreateRequest& request) override {
    const std::string& id = request.sandbox_id;
    const std::string pod_name = pod_name_of(id);
    const Answer made = make_pod(request, pod_name);
    const std::string uid = string_at(made.doc, {"metadata", "uid"});
    try {
      if (objects_.network_mode == "isolated") ensure_network_policy(id, pod_name, uid);
      std::optional<int> node_port;
      if (objects_.url_mode != "pod_ip") node_port = ensure_service(id, pod_name, uid);
      const rapidjson::Document ready = wait_until_ready(pod_name);
      SandboxInfo info;
      info.sandbox_id = id;
      info.sandbox_url = url_for(id, ready, node_port);
      info.container_name = pod_name;
      info.container_id = uid;
      info.created_at = parse_timestamp(string_at(ready, {"metadata", "creationTimestamp"}));
      info.user_id = request.user_id;
      info.thread_id = request.thread_id;
      info.mount_contract_version = contract_of(ready);  // ours, or the pod taken over
      info.network_policy = policy_of(ready);
      logger_->info("kubernetes: pod " + pod_name + " ready at " + info.sandbox_url);
      return info;
    } catch (...) {
      delete_quietly(pod_name, id);  // nothing is left behind by a failed create
      throw;
    }
  }

  void destroy(const SandboxInfo& info) override {
    const std::string pod_name = pod_name_of(info.sandbox_id);
    delete_pod(pod_name);
    // Ours is collected with its pod (ownerReference); one DeerFlow's provisioner made is not.
    const Answer service = call("DELETE", services_path() + "/" + pod_name + "-svc");
    if (!service.ok() && service.status != 404)
      fail("delete service " + pod_name + "-svc", service);
    if (objects_.network_mode == "isolated") {
      const Answer policy = call("DELETE", network_policies_path() + "/" + pod_name + "-netpol");
      if (!policy.ok() && policy.status != 404) {
        fail("delete network policy " + pod_name + "-netpol", policy);
      }
    }
    logger_->info("kubernetes: deleted pod " + pod_name);
  }

  bool is_alive(const SandboxInfo& info) override {
    const Answer pod = call("GET", pods_path() + "/sandbox-" + info.sandbox_id);
    if (pod.status == 404) return false;
    if (!pod.ok()) fail("read pod sandbox-" + info.sandbox_id, pod);
    return !terminating(pod.doc) && !finished(pod.doc);
  }

  std::optional<SandboxInfo> discover(const std::string& sandbox_id) override {
    const std::string pod_name = pod_name_of(sandbox_id);
    Answer pod;
    try {
      pod = call("GET", pods_path() + "/" + pod_name);
    } catch (const std::exception& e) {
      logger_->debug("kubernetes: discover " + sandbox_id + ": " + e.what());
      return std::nullopt;
    }
    if (!pod.ok() || !is_ready(pod.doc) || terminating(pod.doc)) return std::nullopt;
    std::optional<int> node_port;
    if (objects_.url_mode != "pod_ip") {
      const Answer service = call("GET", services_path() + "/" + pod_name + "-svc");
      if (!service.ok()) return std::nullopt;
      node_port = node_port_of(service.doc);
    }
    return info_of(pod.doc, node_port);
  }

  std::vector<SandboxInfo> list_running() override {
    std::vector<SandboxInfo> out;
    std::map<std::string, int> node_ports;  // service name → nodePort
    if (objects_.url_mode == "node_port") {
      for_each_listed(services_path(), [&](const rapidjson::Value& service) {
        if (auto port = node_port_of(service)) {
          node_ports[string_at(service, {"metadata", "name"})] = *port;
        }
      });
    }
    for_each_listed(pods_path(), [&](const rapidjson::Value& pod) {
      if (string_at(pod, {"status", "phase"}) != "Running" || terminating(pod)) return;
      const std::string name = string_at(pod, {"metadata", "name"});
      std::optional<int> node_port;
      if (auto it = node_ports.find(name + "-svc"); it != node_ports.end()) node_port = it->second;
      if (objects_.url_mode == "node_port" && !node_port) return;  // no way in yet
      if (auto info = info_of(pod, node_port)) out.push_back(std::move(*info));
    });
    return out;
  }

 private:
  std::string pods_path() const { return "/api/v1/namespaces/" + namespace_ + "/pods"; }
  std::string services_path() const { return "/api/v1/namespaces/" + namespace_ + "/services"; }
  std::string network_policies_path() const {
    return "/apis/networking.k8s.io/v1/namespaces/" + namespace_ + "/networkpolicies";
  }

  // DeerFlow's `sandbox.network`, as local_docker reads it: an object whose mode is
  // open or isolated; allowlist is refused (the egress proxy serves local_docker only); the other
  // keys of DeerFlow's section are accepted (they belong to allowlist mode or to DeerFlow's proxy).
  void read_network(PluginConfig& options) {
    const rapidjson::Value* network = options.raw("network");
    if (network == nullptr || network->IsNull()) return;
    if (!network->IsObject()) {
      options.fail("network",
                   "an object such as {\"mode\": \"isolated\"} (an engine network "
                   "name is not a Kubernetes setting)",
                   *network);
    }
    for (const auto& entry : network->GetObject()) {
      const std::string key(entry.name.GetString(), entry.name.GetStringLength());
      if (key == "mode") {
        if (!entry.value.IsString()) options.fail("network.mode", "a string", entry.value);
        objects_.network_mode = entry.value.GetString();
      } else if (key != "allow_domains" && key != "approval" && key != "temporary_grant_ttl" &&
                 key != "proxy_image") {
        logger_->warning("kubernetes: unknown option network." + key + " ignored");
      }
    }
    if (objects_.network_mode == "allowlist") {
      options.reject("network.mode",
                     "allowlist is not offered by the kubernetes backend (its egress proxy "
                     "runs in sandboxctl serve beside local_docker); use open or isolated");
    }
    if (objects_.network_mode != "open" && objects_.network_mode != "isolated") {
      options.reject("network.mode",
                     "must be open or isolated, got '" + objects_.network_mode + "'");
    }
  }

  // network mode isolated: the sandbox's NetworkPolicy, owned by its pod like its Service (so
  // the cluster collects it with the pod): ingress to its port only from pods labelled as a
  // relay (the provisioner, a gateway), and no egress at all.
  void ensure_network_policy(const std::string& id, const std::string& pod_name,
                             const std::string& pod_uid) {
    const std::string body = network_policy_object(objects_, id, pod_uid);
    const std::string path = network_policies_path() + "/" + pod_name + "-netpol";
    Answer made = call("POST", network_policies_path(), body);
    if (made.status == 409) {
      // Left by an earlier pod of this id (the collector has not come by): made anew for this
      // one, so it goes with this pod and says what this configuration says.
      const Answer removed = call("DELETE", path);
      if (!removed.ok() && removed.status != 404) {
        fail("replace network policy " + pod_name + "-netpol", removed);
      }
      made = call("POST", network_policies_path(), body);
    }
    if (!made.ok()) fail("create network policy " + pod_name + "-netpol", made);
  }

  static std::string policy_of(const rapidjson::Value& pod) {
    const std::string label = string_at(pod, {"metadata", "labels", kNetworkPolicyLabel});
    return label.empty() ? std::string("open") : label;
  }

  // A request to the API server at `path`, with our credentials, bounded by
  // request_timeout_seconds (a watch widens the bound).
  http::Request api_request(const std::string& method, const std::string& path) const {
    http::Request request;
    request.method = method;
    request.url = credentials_.server + path;
    request.timeout_seconds = request_timeout_;
    request.headers.push_back("Accept: application/json");
    credentials_.apply_to(request);
    return request;
  }

  Answer call(const std::string& method, const std::string& path, const std::string& body = "") {
    http::Request request = api_request(method, path);
    request.json_body = body;
    Answer answer;
    try {
      http::Response response = http::perform(request);
      answer.status = response.status;
      answer.body = std::move(response.body);
    } catch (const http::TransportError& e) {
      throw std::runtime_error("kubernetes: " + method + " " + path + " at " +
                               redacted_url(credentials_.server) + " failed: " + e.what());
    }
    answer.doc.Parse(answer.body.c_str());
    if (answer.status == 401) {
      throw std::runtime_error("kubernetes: the API server refused our credentials (401) from " +
                               credentials_.source + "; is the token expired?");
    }
    return answer;
  }

  [[noreturn]] void fail(const std::string& what, const Answer& answer) const {
    throw std::runtime_error(
        "kubernetes: could not " + what + ": HTTP " + std::to_string(answer.status) +
        (answer.reason().empty() ? "" : " " + answer.reason()) + ": " + answer.message());
  }

  // POSTs the pod. A pod already under its name is taken when it names the same conversation
  // and lives. One terminating (a destroy moments ago: the cluster keeps the name until the
  // kubelet has stopped the pod) or finished (activeDeadlineSeconds, an eviction: the cluster
  // keeps a finished pod until someone deletes it)
  // is waited out, deleted first if it is not yet, and the pod made anew: taken, the sandbox
  // would die under its user. The wait is bounded by ready_timeout_seconds.
  Answer make_pod(const CreateRequest& request, const std::string& pod_name) {
    const std::string spec = pod_object(objects_, request);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(ready_timeout_);
    auto delay = std::chrono::milliseconds(100);
    bool told = false;
    while (true) {
      Answer made = call("POST", pods_path(), spec);
      if (made.status == 403 && made.message().find("exceeded quota") != std::string::npos) {
        throw BackendCapacityError("capacity (quota): the cluster refused pod " + pod_name + ": " +
                                   made.message());
      }
      if (made.status != 409) {
        if (!made.ok()) fail("create pod " + pod_name, made);
        return made;
      }
      Answer existing = call("GET", pods_path() + "/" + pod_name);
      if (existing.status != 404) {  // 404: gone between the two calls; create again
        if (!existing.ok()) fail("read the existing pod " + pod_name, existing);
        check_identity(existing.doc, request);
        const std::string phase = string_at(existing.doc, {"status", "phase"});
        const bool done = finished(existing.doc);
        if (!terminating(existing.doc) && !done) return existing;
        if (!terminating(existing.doc)) delete_pod(pod_name);
        if (!told) {
          told = true;
          logger_->info("kubernetes: pod " + pod_name +
                        (done ? " has finished (phase " + phase + ") and is being deleted"
                              : std::string(" is terminating")) +
                        "; waiting up to " + std::to_string(static_cast<int>(ready_timeout_)) +
                        "s for the cluster to free its name, then making the sandbox again");
        }
      }
      if (std::chrono::steady_clock::now() + delay > deadline) {
        throw std::runtime_error("kubernetes: pod " + pod_name +
                                 " of an earlier sandbox still held its name after " +
                                 std::to_string(static_cast<int>(ready_timeout_)) +
                                 "s (ready_timeout_seconds); the sandbox was not made");
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::milliseconds(1000));
    }
  }

  void delete_pod(const std::string& pod_name) {
    const Answer pod =
        call("DELETE", pods_path() + "/" + pod_name,
             R"({"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"})");
    if (!pod.ok() && pod.status != 404) fail("delete pod " + pod_name, pod);
  }

  // Marked for deletion: the pod may still run and even read Ready, but it is on its way out.
  static bool terminating(const rapidjson::Value& pod) {
    return !string_at(pod, {"metadata", "deletionTimestamp"}).empty();
  }

  // Its containers are done for good (activeDeadlineSeconds, an eviction); the cluster keeps it.
  static bool finished(const rapidjson::Value& pod) {
    const std::string phase = string_at(pod, {"status", "phase"});
    return phase == "Failed" || phase == "Succeeded";
  }

  void delete_quietly(const std::string& pod_name, const std::string& id) {
    try {
      SandboxInfo info;
      info.sandbox_id = id;
      destroy(info);
    } catch (const std::exception& e) {
      logger_->warning("kubernetes: pod " + pod_name +
                       " of a failed create could not be deleted: " + e.what());
    }
  }

  // A pod already there for this id is ours only if it names the same conversation; one made by
  // DeerFlow's provisioner carries no identity and is taken as the same sandbox.
  void check_identity(const rapidjson::Value& pod, const CreateRequest& request) const {
    const rapidjson::Value* metadata = member(pod, "metadata");
    const rapidjson::Value* annotations = metadata ? member(*metadata, "annotations") : nullptr;
    const auto annotated = [&](const char* key) -> std::optional<std::string> {
      if (!annotations) return std::nullopt;
      const rapidjson::Value* v = member(*annotations, key);
      return v && v->IsString() ? std::optional<std::string>(v->GetString()) : std::nullopt;
    };
    const auto user = annotated(kUserAnnotation), thread = annotated(kThreadAnnotation);
    if ((user && user != request.user_id) || (thread && thread != request.thread_id)) {
      throw SandboxIdentityCollisionError(
          "kubernetes: pod sandbox-" + request.sandbox_id +
          " exists for another conversation (its annotations name a different user or thread); "
          "not taking it over");
    }
  }

  std::optional<int> ensure_service(const std::string& id, const std::string& pod_name,
                                    const std::string& pod_uid) {
    const std::string body = service_object(objects_, id, pod_uid);
    const std::string service_path = services_path() + "/" + pod_name + "-svc";
    Answer service = call("POST", services_path(), body);
    if (service.status == 409) {
      service = call("GET", service_path);
      // Owned by another pod (a gateway died between its two deletes; the collector has not
      // come by): replaced, or it would be collected under this sandbox. One with no owner,
      // as DeerFlow's provisioner makes them, selects this pod by its label and is kept.
      if (service.ok() && !pod_uid.empty() && owned_by_another(service.doc, pod_uid)) {
        const Answer removed = call("DELETE", service_path);
        if (!removed.ok() && removed.status != 404) {
          fail("replace service " + pod_name + "-svc owned by another pod", removed);
        }
        service = call("POST", services_path(), body);
      }
    }
    if (!service.ok()) fail("create service " + pod_name + "-svc", service);
    return node_port_of(service.doc);
  }

  static bool owned_by_another(const rapidjson::Value& object, const std::string& uid) {
    const rapidjson::Value* metadata = member(object, "metadata");
    const rapidjson::Value* owners = metadata ? member(*metadata, "ownerReferences") : nullptr;
    if (!owners || !owners->IsArray() || owners->Empty()) return false;
    for (const auto& owner : owners->GetArray()) {
      if (string_at(owner, {"uid"}) == uid) return false;
    }
    return true;
  }

  static std::optional<int> node_port_of(const rapidjson::Value& service) {
    const rapidjson::Value* spec = member(service, "spec");
    const rapidjson::Value* ports = spec ? member(*spec, "ports") : nullptr;
    if (!ports || !ports->IsArray() || ports->Empty()) return std::nullopt;
    const rapidjson::Value* port = member((*ports)[0], "nodePort");
    return port && port->IsInt() ? std::optional<int>(port->GetInt()) : std::nullopt;
  }

  static bool is_ready(const rapidjson::Value& pod) {
    const rapidjson::Value* status = member(pod, "status");
    const rapidjson::Value* conditions = status ? member(*status, "conditions") : nullptr;
    if (!conditions || !conditions->IsArray()) return false;
    for (const auto& condition : conditions->GetArray()) {
      if (string_at(condition, {"type"}) == "Ready")
        return string_at(condition, {"status"}) == "True";
    }
    return false;
  }

  // Why a pod will not become ready by waiting, or "".
  static std::string hopeless(const rapidjson::Value& pod) {
    const rapidjson::Value* status = member(pod, "status");
    if (!status) return "";
    if (const rapidjson::Value* conditions = member(*status, "conditions");
        conditions && conditions->IsArray()) {
      for (const auto& c : conditions->GetArray()) {
        if (string_at(c, {"type"}) == "PodScheduled" &&
            string_at(c, {"reason"}) == "Unschedulable") {
          return "Unschedulable: " + string_at(c, {"message"});
        }
      }
    }
    if (const rapidjson::Value* statuses = member(*status, "containerStatuses");
        statuses && statuses->IsArray()) {
      for (const auto& s : statuses->GetArray()) {
        const std::string reason = string_at(s, {"state", "waiting", "reason"});
        for (const char* bad : kHopelessReasons) {
          if (reason == bad) return reason + ": " + string_at(s, {"state", "waiting", "message"});
        }
      }
    }
    if (terminating(pod)) return "the pod is being deleted";
    return finished(pod) ? "the pod's phase is " + string_at(pod, {"status", "phase"}) : "";
  }

  // Until the pod is Ready: one read, then a watch on it from that read's resourceVersion, so
  // readiness is seen the moment the kubelet reports it rather than at the next poll. A watch
  // that ends (its timeout, a dropped connection, 410 Expired) is followed by another read and
  // watch; where the API server refuses watches (a Role without the watch verb), reads back
  // off from 100 ms to 1 s instead. Bounded by ready_timeout_seconds.
  rapidjson::Document wait_until_ready(const std::string& pod_name) {
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(ready_timeout_));
    auto delay = std::chrono::milliseconds(100);
    while (true) {
      Answer pod = call("GET", pods_path() + "/" + pod_name);
      if (!pod.ok()) fail("read pod " + pod_name, pod);
      if (is_ready(pod.doc)) return std::move(pod.doc);
      if (const std::string why = hopeless(pod.doc); !why.empty()) {
        throw std::runtime_error("kubernetes: pod " + pod_name + " cannot start: " + why);
      }
      if (std::chrono::steady_clock::now() + delay > deadline) {
        throw std::runtime_error("kubernetes: pod " + pod_name + " was not Ready within " +
                                 std::to_string(static_cast<int>(ready_timeout_)) + "s (phase " +
                                 string_at(pod.doc, {"status", "phase"}) + ")");
      }
      if (!watch_refused_.load()) {
        const std::string version = string_at(pod.doc, {"metadata", "resourceVersion"});
        if (auto ready = watch_until_ready(pod_name, version, deadline)) return std::move(*ready);
      }
      std::this_thread::sleep_for(delay);
      delay = std::min(delay * 2, std::chrono::milliseconds(1000));
    }
  }

  // Watches pod `pod_name` from `version` until it is Ready (its object), cannot start or is
  // deleted (thrown), or the watch ends first (nullopt: read it again).
  std::optional<rapidjson::Document> watch_until_ready(
      const std::string& pod_name, const std::string& version,
      std::chrono::steady_clock::time_point deadline) {
    struct Stop {};  // ends the transfer from inside the body sink
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left < 1) return std::nullopt;
    http::Request request = api_request(
        "GET", pods_path() + "?fieldSelector=metadata.name%3D" + pod_name +
                   "&resourceVersion=" + version +
                   "&timeoutSeconds=" + std::to_string(static_cast<long>(left)) + "&watch=true");
    request.timeout_seconds = left + request_timeout_;  // the server ends it first
    request.connect_timeout_seconds = request_timeout_;
    std::optional<rapidjson::Document> ready;
    std::string pending;
    request.body_sink = [&](std::string_view chunk) {
      pending.append(chunk);
      if (pending.size() > kMaxWatchEventBytes) {
        throw std::runtime_error("kubernetes: a watch event on pod " + pod_name + " exceeded " +
                                 std::to_string(kMaxWatchEventBytes) + " bytes");
      }
      for (std::size_t end; (end = pending.find('\n')) != std::string::npos;) {
        rapidjson::Document event;
        event.Parse(pending.data(), end);
        pending.erase(0, end + 1);
        const std::string type = string_at(event, {"type"});
        const rapidjson::Value* object = member(event, "object");
        if (type == "ERROR") throw Stop{};  // 410 Expired and the like: read and watch again
        if (!object || !object->IsObject()) continue;
        if (type == "DELETED") {
          throw std::runtime_error("kubernetes: pod " + pod_name +
                                   " was deleted while it was starting");
        }
        if (is_ready(*object)) {
          ready.emplace();
          ready->CopyFrom(*object, ready->GetAllocator());
          throw Stop{};
        }
        if (const std::string why = hopeless(*object); !why.empty()) {
          throw std::runtime_error("kubernetes: pod " + pod_name + " cannot start: " + why);
        }
      }
    };
    http::Response response;
    try {
      response = http::perform(request);
    } catch (const Stop&) {
      return ready;
    } catch (const http::TransportError& e) {
      logger_->debug("kubernetes: watch on pod " + pod_name + " ended: " + e.what());
      return std::nullopt;
    }
    if (response.status == 403 || response.status == 404 || response.status == 405) {
      if (!watch_refused_.exchange(true)) {
        logger_->info("kubernetes: the API server refused a watch on pods (HTTP " +
                      std::to_string(response.status) +
                      "; the Role needs the watch verb): polling pods for readiness instead");
      }
    }
    return std::nullopt;
  }

  std::string url_for(const std::string& id, const rapidjson::Value& pod,
                      const std::optional<int>& node_port) const {
    if (objects_.url_mode == "pod_ip") {
      return "http://" + string_at(pod, {"status", "podIP"}) + ":" + std::to_string(objects_.port);
    }
    if (objects_.url_mode == "cluster_dns") {
      return "http://sandbox-" + id + "-svc." + namespace_ +
             ".svc.cluster.local:" + std::to_string(objects_.port);
    }
    if (!node_port)
      throw std::runtime_error("kubernetes: service sandbox-" + id + "-svc has no nodePort");
    return "http://" + node_host_ + ":" + std::to_string(*node_port);
  }

  std::optional<SandboxInfo> info_of(const rapidjson::Value& pod,
                                     const std::optional<int>& node_port) const {
    const rapidjson::Value* meta = member(pod, "metadata");
    const rapidjson::Value* labels = meta ? member(*meta, "labels") : nullptr;
    const rapidjson::Value* id = labels ? member(*labels, kSandboxIdLabel) : nullptr;
    if (!id || !id->IsString()) return std::nullopt;
    SandboxInfo info;
    info.sandbox_id = id->GetString();
    try {
      info.sandbox_url = url_for(info.sandbox_id, pod, node_port);
    } catch (const std::runtime_error&) {
      return std::nullopt;
    }
    info.container_name = string_at(pod, {"metadata", "name"});
    info.container_id = string_at(pod, {"metadata", "uid"});
    info.created_at = parse_timestamp(string_at(pod, {"metadata", "creationTimestamp"}));
    const std::string user = string_at(pod, {"metadata", "annotations", kUserAnnotation});
    const std::string thread = string_at(pod, {"metadata", "annotations", kThreadAnnotation});
    if (!user.empty()) info.user_id = user;
    if (!thread.empty()) info.thread_id = thread;
    info.mount_contract_version = contract_of(pod);
    info.network_policy = policy_of(pod);
    return info;
  }

  static int contract_of(const rapidjson::Value& pod) {
    const std::string label = string_at(pod, {"metadata", "labels", kContractLabel});
    if (label.empty() || label.size() > 3 ||
        label.find_first_not_of("0123456789") != std::string::npos) {
      return 0;
    }
    return std::stoi(label);
  }

  // One labelled list, paged with limit/continue; never one GET per sandbox.
  template <class Visit>
  void for_each_listed(const std::string& path, Visit visit) {
    std::string next;
    for (int page = 0; page < kMaxListPages; ++page) {
      std::string query = "?labelSelector=" + std::string(kAppLabel) + "%3D" + kAppValue +
                          "&limit=" + std::to_string(list_page_size_);
      if (!next.empty()) query += "&continue=" + next;
      const Answer listed = call("GET", path + query);
      if (!listed.ok()) fail("list " + path, listed);
      const rapidjson::Value* items = member(listed.doc, "items");
      if (items && items->IsArray()) {
        for (const auto& item : items->GetArray()) visit(item);
      }
      next = string_at(listed.doc, {"metadata", "continue"});
      if (next.empty()) return;
      std::string escaped;
      for (const char c : next) {
        if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') {
          escaped += c;
        } else {
          char hex[4];
          std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
          escaped += hex;
        }
      }
      next = escaped;
    }
    throw std::runtime_error("kubernetes: listing " + path + " did not end within " +
                             std::to_string(kMaxListPages) + " pages");
  }

  std::shared_ptr<Logger> logger_;
  KubeCredentials credentials_;
  ObjectSettings objects_;  // what the pod, service and policy are made of (kube_objects.hpp)
  std::string namespace_, node_host_;
  int list_page_size_ = 500;
  std::atomic<bool> watch_refused_{false};  // the API server refused a watch: poll instead
  double ready_timeout_ = 120, request_timeout_ = 15;
};

SANDBOXD_EXPORT_BACKEND(KubernetesBackend,
                        "one Pod (and Service) per sandbox on a Kubernetes cluster")

}  // namespace sandboxd::kubernetes

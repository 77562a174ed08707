#include "kube_objects.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <filesystem>
#include <stdexcept>

#include "sandboxd/sandbox_capabilities.hpp"

namespace sandboxd::kubernetes {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void labels(Writer& w, const ObjectSettings& settings, const std::string& id) {
  w.Key("labels");
  w.StartObject();
  w.Key(kAppLabel), w.String(kAppValue);
  w.Key(kSandboxIdLabel), w.String(id.c_str());  // a validated id: a valid label value
  w.Key(kManagedByLabel), w.String("sandboxd");
  w.Key(kContractLabel), w.String(std::to_string(kSandboxMountContractVersion).c_str());
  w.Key(kNetworkPolicyLabel), w.String(settings.network_mode.c_str());
  w.EndObject();
}

// An object the sandbox's pod owns, begun: its `apiVersion`, `kind` and `metadata` (its name,
// the sandbox's labels and, once the pod's uid is known, the pod as its owner). The caller
// writes the `spec` and ends the object.
void begin_owned_object(Writer& w, const ObjectSettings& settings, const char* api_version,
                        const char* kind, const std::string& id, const std::string& name,
                        const std::string& pod_uid) {
  w.StartObject();
  w.Key("apiVersion"), w.String(api_version), w.Key("kind"), w.String(kind);
  w.Key("metadata");
  w.StartObject();
  w.Key("name"), w.String(name.c_str());
  labels(w, settings, id);
  if (!pod_uid.empty()) {
    w.Key("ownerReferences");
    w.StartArray();
    w.StartObject();
    w.Key("apiVersion"), w.String("v1"), w.Key("kind"), w.String("Pod");
    w.Key("name"), w.String(pod_name_of(id).c_str()), w.Key("uid"), w.String(pod_uid.c_str());
    w.EndObject();
    w.EndArray();
  }
  w.EndObject();
}

void match_sandbox(Writer& w, const std::string& id) {
  w.StartObject();
  w.Key(kSandboxIdLabel), w.String(id.c_str());
  w.EndObject();
}

}  // namespace

std::string pod_name_of(const std::string& sandbox_id) {
  return "sandbox-" + sandbox_id;
}

std::string service_name_of(const std::string& sandbox_id) {
  return pod_name_of(sandbox_id) + "-svc";
}

std::string policy_name_of(const std::string& sandbox_id) {
  return pod_name_of(sandbox_id) + "-netpol";
}

std::string sub_path_of(const std::string& host_base_dir, const std::string& host_path) {
  const std::filesystem::path base = std::filesystem::path(host_base_dir).lexically_normal();
  const std::filesystem::path relative =
      std::filesystem::path(host_path).lexically_normal().lexically_relative(base);
  if (relative.empty() || relative.native().rfind("..", 0) == 0) {
    throw std::invalid_argument("kubernetes: mount source " + host_path + " is not under " +
                                host_base_dir + ", so it has no place on the PVC");
  }
  if (relative == ".") {
    throw std::invalid_argument("kubernetes: mount source " + host_path + " is " + host_base_dir +
                                " itself; a sandbox mount must be a directory below it");
  }
  return relative.string();
}

std::string pod_object(const ObjectSettings& settings, const CreateRequest& request) {
  const std::string& id = request.sandbox_id;
  const bool pvc = settings.volumes == "pvc";
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("apiVersion"), w.String("v1"), w.Key("kind"), w.String("Pod");
  w.Key("metadata");
  w.StartObject();
  w.Key("name"), w.String(pod_name_of(id).c_str());
  labels(w, settings, id);
  w.Key("annotations");
  w.StartObject();
  if (request.user_id) w.Key(kUserAnnotation), w.String(request.user_id->c_str());
  if (request.thread_id) w.Key(kThreadAnnotation), w.String(request.thread_id->c_str());
  w.EndObject();
  w.EndObject();
  w.Key("spec");
  w.StartObject();
  w.Key("automountServiceAccountToken"), w.Bool(false);
  w.Key("restartPolicy"), w.String("Always");
  w.Key("terminationGracePeriodSeconds"), w.Int64(settings.termination_grace);
  if (!settings.runtime_class.empty()) {
    w.Key("runtimeClassName"), w.String(settings.runtime_class.c_str());
  }
  if (settings.active_deadline > 0) {
    w.Key("activeDeadlineSeconds"), w.Int64(settings.active_deadline);
  }
  w.Key("securityContext");
  w.StartObject();
  w.Key("seccompProfile");
  w.StartObject();
  w.Key("type"), w.String("RuntimeDefault");
  w.EndObject();
  w.EndObject();
  w.Key("containers");
  w.StartArray();
  w.StartObject();
  w.Key("name"), w.String("sandbox"), w.Key("image"), w.String(settings.image.c_str());
  w.Key("ports");
  w.StartArray();
  w.StartObject();
  w.Key("name"), w.String("http"), w.Key("containerPort"), w.Int(settings.port);
  w.EndObject();
  w.EndArray();
  w.Key("env");
  w.StartArray();
  for (const auto& [name, value] : settings.environment) {
    w.StartObject();
    w.Key("name"), w.String(name.c_str()), w.Key("value"), w.String(value.c_str());
    w.EndObject();
  }
  w.EndArray();
  w.Key("resources");
  w.StartObject();
  w.Key("requests");
  w.StartObject();
  w.Key("cpu"), w.String(settings.cpu_request.c_str());
  w.Key("memory"), w.String(settings.memory_request.c_str());
  w.EndObject();
  w.Key("limits");
  w.StartObject();
  w.Key("cpu"), w.String(settings.cpu_limit.c_str());
  w.Key("memory"), w.String(settings.memory_limit.c_str());
  w.EndObject();
  w.EndObject();
  w.Key("securityContext");
  w.StartObject();
  w.Key("allowPrivilegeEscalation"), w.Bool(false);
  w.Key("capabilities");
  w.StartObject();
  w.Key("drop");
  w.StartArray();
  w.String("ALL");
  w.EndArray();
  w.Key("add");
  w.StartArray();
  for (const char* capability : kDefaultSandboxCapabilities) w.String(capability);
  w.EndArray();
  w.EndObject();
  w.EndObject();
  w.Key("volumeMounts");
  w.StartArray();
  for (std::size_t i = 0; i < request.extra_mounts.size(); ++i) {
    const Mount& mount = request.extra_mounts[i];
    w.StartObject();
    w.Key("name"), w.String(pvc ? "data" : ("m" + std::to_string(i)).c_str());
    w.Key("mountPath"), w.String(mount.container_path.c_str());
    w.Key("readOnly"), w.Bool(mount.read_only);
    if (pvc) {
      w.Key("subPath"), w.String(sub_path_of(settings.host_base_dir, mount.host_path).c_str());
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.Key("volumes");
  w.StartArray();
  if (pvc && !request.extra_mounts.empty()) {
    w.StartObject();
    w.Key("name"), w.String("data");
    w.Key("persistentVolumeClaim");
    w.StartObject();
    w.Key("claimName"), w.String(settings.pvc_name.c_str());
    w.EndObject();
    w.EndObject();
  } else if (!pvc) {
    for (std::size_t i = 0; i < request.extra_mounts.size(); ++i) {
      w.StartObject();
      w.Key("name"), w.String(("m" + std::to_string(i)).c_str());
      w.Key("hostPath");
      w.StartObject();
      w.Key("path"), w.String(request.extra_mounts[i].host_path.c_str());
      w.Key("type"), w.String("DirectoryOrCreate");
      w.EndObject();
      w.EndObject();
    }
  }
  w.EndArray();
  w.EndObject();
  w.EndObject();
  return buffer.GetString();
}

std::string service_object(const ObjectSettings& settings, const std::string& sandbox_id,
                           const std::string& pod_uid) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  begin_owned_object(w, settings, "v1", "Service", sandbox_id, service_name_of(sandbox_id),
                     pod_uid);
  w.Key("spec");
  w.StartObject();
  w.Key("type"), w.String(settings.url_mode == "node_port" ? "NodePort" : "ClusterIP");
  w.Key("selector");
  match_sandbox(w, sandbox_id);
  w.Key("ports");
  w.StartArray();
  w.StartObject();
  w.Key("name"), w.String("http");
  w.Key("port"), w.Int(settings.port), w.Key("targetPort"), w.Int(settings.port);
  w.EndObject();
  w.EndArray();
  w.EndObject();
  w.EndObject();
  return buffer.GetString();
}

std::string network_policy_object(const ObjectSettings& settings, const std::string& sandbox_id,
                                  const std::string& pod_uid) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  begin_owned_object(w, settings, "networking.k8s.io/v1", "NetworkPolicy", sandbox_id,
                     policy_name_of(sandbox_id), pod_uid);
  w.Key("spec");
  w.StartObject();
  w.Key("podSelector");
  w.StartObject();
  w.Key("matchLabels");
  match_sandbox(w, sandbox_id);
  w.EndObject();
  w.Key("policyTypes");
  w.StartArray();
  w.String("Ingress"), w.String("Egress");
  w.EndArray();
  w.Key("ingress");
  w.StartArray();
  w.StartObject();
  w.Key("from");
  w.StartArray();
  w.StartObject();
  w.Key("podSelector");
  w.StartObject();
  w.Key("matchLabels");
  w.StartObject();
  w.Key(kRelayRoleLabel), w.String(kRelayRoleValue);
  w.EndObject();
  w.EndObject();
  w.EndObject();
  w.EndArray();
  w.Key("ports");
  w.StartArray();
  w.StartObject();
  w.Key("protocol"), w.String("TCP"), w.Key("port"), w.Int(settings.port);
  w.EndObject();
  w.EndArray();
  w.EndObject();
  w.EndArray();
  w.Key("egress");
  w.StartArray();  // none: nothing leaves the sandbox
  w.EndArray();
  w.EndObject();
  w.EndObject();
  return buffer.GetString();
}

}  // namespace sandboxd::kubernetes

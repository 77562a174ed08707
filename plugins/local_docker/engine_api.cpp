#include "engine_api.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <sandboxd/json.hpp>
#include <stdexcept>

#include "docker_support.hpp"

namespace sandboxd::local_docker {
namespace {

using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

void strings(Writer& w, const char* key, const std::vector<std::string>& items) {
  w.Key(key);
  w.StartArray();
  for (const auto& item : items) write_json_string(w, item);
  w.EndArray();
}

void string_map(Writer& w, const char* key, const std::map<std::string, std::string>& items) {
  w.Key(key);
  w.StartObject();
  for (const auto& [name, value] : items) {
    write_json_string(w, name);
    write_json_string(w, value);
  }
  w.EndObject();
}

std::string string_of(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject()) return "";
  const auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsString()) return "";
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

std::map<std::string, std::string> strings_of(const rapidjson::Value& object, const char* name) {
  std::map<std::string, std::string> out;
  if (!object.IsObject()) return out;
  const auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsObject()) return out;
  for (auto m = it->value.MemberBegin(); m != it->value.MemberEnd(); ++m) {
    if (m->value.IsString()) out[m->name.GetString()] = m->value.GetString();
  }
  return out;
}

std::optional<NetworkState> network_of(const rapidjson::Value& value) {
  if (!value.IsObject()) return std::nullopt;
  NetworkState out;
  out.id = string_of(value, "Id");
  if (out.id.empty()) out.id = string_of(value, "ID");
  out.name = string_of(value, "Name");
  if (out.id.empty() && out.name.empty()) return std::nullopt;
  const auto internal = value.FindMember("Internal");
  out.internal =
      internal != value.MemberEnd() && internal->value.IsBool() && internal->value.GetBool();
  out.labels = strings_of(value, "Labels");
  out.options = strings_of(value, "Options");
  out.created_at = parse_docker_timestamp(string_of(value, "Created"));
  const auto containers = value.FindMember("Containers");
  if (containers != value.MemberEnd() && containers->value.IsObject()) {
    for (const auto& container : containers->value.GetObject()) {
      out.containers.emplace_back(container.name.GetString(), container.name.GetStringLength());
    }
  }
  // Docker names its bridge in this option (or "br-{id[:12]}"); podman 4.3's compatible API
  // answers the same option.
  if (auto it = out.options.find("com.docker.network.bridge.name"); it != out.options.end()) {
    out.bridge = it->second;
  }
  return out;
}

}  // namespace

std::string to_json(const ContainerCreateBody& body) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("Image");
  write_json_string(w, body.image);
  if (!body.user.empty()) {
    w.Key("User");
    write_json_string(w, body.user);
  }
  strings(w, "Env", body.env);
  string_map(w, "Labels", body.labels);
  if (!body.exposed_port.empty()) {
    w.Key("ExposedPorts");
    w.StartObject();
    w.Key(body.exposed_port.c_str());
    w.StartObject();
    w.EndObject();
    w.EndObject();
  }
  w.Key("HostConfig");
  w.StartObject();
  if (body.publish && !body.exposed_port.empty()) {
    w.Key("PortBindings");
    w.StartObject();
    w.Key(body.exposed_port.c_str());
    w.StartArray();
    w.StartObject();
    w.Key("HostIp");
    write_json_string(w, body.publish_host_ip);
    w.Key("HostPort");
    write_json_string(
        w, body.publish_host_port > 0 ? std::to_string(body.publish_host_port) : std::string());
    w.EndObject();
    w.EndArray();
    w.EndObject();
  }
  w.Key("AutoRemove");
  w.Bool(body.auto_remove);
  if (!body.network_mode.empty()) {
    w.Key("NetworkMode");
    write_json_string(w, body.network_mode);
  }
  if (!body.security_opt.empty()) strings(w, "SecurityOpt", body.security_opt);
  if (!body.cap_drop.empty()) strings(w, "CapDrop", body.cap_drop);
  if (!body.cap_add.empty()) strings(w, "CapAdd", body.cap_add);
  w.Key("Init");
  w.Bool(body.init);
  if (!body.runtime.empty()) {
    w.Key("Runtime");
    write_json_string(w, body.runtime);
  }
  if (body.memory_bytes > 0) {
    w.Key("Memory");
    w.Int64(body.memory_bytes);
  }
  if (body.nano_cpus > 0) {
    w.Key("NanoCpus");
    w.Int64(body.nano_cpus);
  }
  if (body.pids_limit > 0) {
    w.Key("PidsLimit");
    w.Int64(body.pids_limit);
  }
  w.Key("Mounts");
  w.StartArray();
  for (const BindMount& m : body.mounts) {
    w.StartObject();
    if (!m.propagation.empty()) {
      w.Key("BindOptions");
      w.StartObject();
      w.Key("Propagation");
      write_json_string(w, m.propagation);
      w.EndObject();
    }
    w.Key("Type");
    w.String("bind");
    w.Key("Source");
    write_json_string(w, m.source);
    w.Key("Target");
    write_json_string(w, m.target);
    w.Key("ReadOnly");
    w.Bool(m.read_only);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();  // HostConfig
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

Outcome EngineApi::outcome_of(const HttpResponse& response) const {
  Outcome out;
  out.status = response.status;
  if (!response.ok()) out.message = response.message();
  return out;
}

EngineApi::Created EngineApi::create_container(const std::string& name,
                                               const ContainerCreateBody& body) {
  const HttpResponse r =
      client_.call("POST", "/containers/create?name=" + url_encode(name), timeout_, to_json(body));
  Created out;
  out.outcome = outcome_of(r);
  if (r.status == 201) out.id = created_container_id(r.body);
  return out;
}

EngineApi::Started EngineApi::start_container(const std::string& id) {
  const HttpResponse r = client_.call("POST", "/containers/" + url_encode(id) + "/start", timeout_);
  Started out;
  out.outcome = outcome_of(r);
  out.already_running = r.status == 304;
  return out;
}

Outcome EngineApi::stop_container(const std::string& id, long long grace_seconds,
                                  double extra_seconds) {
  return outcome_of(client_.call(
      "POST", "/containers/" + url_encode(id) + "/stop?t=" + std::to_string(grace_seconds),
      static_cast<double>(grace_seconds) + extra_seconds));
}

EngineApi::Removed EngineApi::remove_container(const std::string& id) {
  const HttpResponse r =
      client_.call("DELETE", "/containers/" + url_encode(id) + "?force=true&v=true", timeout_);
  Removed out;
  out.outcome = outcome_of(r);
  out.gone = r.status == 404 || (!r.ok() && is_no_such_container(r.status, r.message(), id));
  return out;
}

std::optional<ContainerState> EngineApi::inspect_container(const std::string& id_or_name,
                                                           double timeout_seconds) {
  const HttpResponse r =
      client_.call("GET", "/containers/" + url_encode(id_or_name) + "/json", timeout_seconds);
  if (r.status == 200) {
    std::optional<ContainerState> state = parse_inspect_answer(r.body);
    if (!state) {
      throw std::runtime_error("Failed to inspect container " + id_or_name +
                               ": the engine's answer could not be read");
    }
    return state;
  }
  if (is_no_such_container(r.status, r.message(), id_or_name)) return std::nullopt;
  throw std::runtime_error("Failed to inspect container " + id_or_name + ": " +
                           trimmed(r.message()));
}

int EngineApi::container_pid(const std::string& id_or_name, double timeout_seconds) {
  const HttpResponse r =
      client_.call("GET", "/containers/" + url_encode(id_or_name) + "/json", timeout_seconds);
  if (r.status != 200) return 0;
  return parse_container_pid(r.body);
}

std::optional<std::uint64_t> EngineApi::container_writable_bytes(const std::string& id_or_name,
                                                                 double timeout_seconds) {
  const HttpResponse r = client_.call(
      "GET", "/containers/" + url_encode(id_or_name) + "/json?size=true", timeout_seconds);
  if (r.status != 200) {
    throw std::runtime_error("the engine's size of container " + id_or_name + ": " +
                             outcome_of(r).message);
  }
  return parse_writable_bytes(r.body);
}

std::optional<SandboxUsage::Reading> EngineApi::container_stats(const std::string& id_or_name,
                                                                double timeout_seconds) {
  const HttpResponse r = client_.call(
      "GET", "/containers/" + url_encode(id_or_name) + "/stats?stream=false&one-shot=true",
      timeout_seconds);
  if (r.status == 404) return std::nullopt;
  if (r.status != 200) {
    throw std::runtime_error("the engine's stats of container " + id_or_name + ": " +
                             outcome_of(r).message);
  }
  return parse_container_stats(r.body);
}

Outcome EngineApi::list_containers(const std::string& filter_key, const std::string& filter_value,
                                   bool all, double timeout_seconds, std::string* body) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key(filter_key.c_str());
  w.StartArray();
  write_json_string(w, filter_value);
  w.EndArray();
  w.EndObject();
  HttpResponse r = client_.call(
      "GET",
      std::string("/containers/json?") + (all ? "all=true&" : "") +
          "filters=" + url_encode(std::string_view(buffer.GetString(), buffer.GetSize())),
      timeout_seconds);
  if (body != nullptr) *body = std::move(r.body);
  return outcome_of(r);
}

Outcome EngineApi::pause_container(const std::string& id, double timeout_seconds) {
  return outcome_of(
      client_.call("POST", "/containers/" + url_encode(id) + "/pause", timeout_seconds));
}

Outcome EngineApi::unpause_container(const std::string& id, double timeout_seconds) {
  return outcome_of(
      client_.call("POST", "/containers/" + url_encode(id) + "/unpause", timeout_seconds));
}

Outcome EngineApi::rename_container(const std::string& id, const std::string& name) {
  return outcome_of(client_.call(
      "POST", "/containers/" + url_encode(id) + "/rename?name=" + url_encode(name), timeout_));
}

Outcome EngineApi::archive_head(const std::string& id, const std::string& path) {
  return outcome_of(client_.call(
      "GET", "/containers/" + url_encode(id) + "/archive?path=" + url_encode(path), timeout_));
}

HttpResponse EngineApi::pull_image(const std::string& repository, const std::string& tag,
                                   double timeout_seconds, const BodySink& sink) {
  return client_.call(
      "POST", "/images/create?fromImage=" + url_encode(repository) + "&tag=" + url_encode(tag),
      timeout_seconds, "", sink);
}

Outcome EngineApi::info(std::string* body) {
  HttpResponse r = client_.call("GET", "/info", timeout_);
  if (body != nullptr) *body = std::move(r.body);
  return outcome_of(r);
}

EngineApi::NetworkCreated EngineApi::create_network(const NetworkCreateBody& body) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("Name");
  write_json_string(w, body.name);
  w.Key("Driver");
  write_json_string(w, body.driver);
  w.Key("Internal");
  w.Bool(body.internal);
  w.Key("CheckDuplicate");
  w.Bool(true);
  string_map(w, "Labels", body.labels);
  string_map(w, "Options", body.options);
  w.EndObject();
  const HttpResponse r = client_.call("POST", "/networks/create", timeout_,
                                      std::string(buffer.GetString(), buffer.GetSize()));
  NetworkCreated out;
  out.outcome = outcome_of(r);
  if (r.status == 201 || r.status == 200) {
    rapidjson::Document doc;
    if (parse_json(doc, r.body)) {
      out.id = string_of(doc, "Id");
      if (out.id.empty()) out.id = string_of(doc, "ID");
    }
  }
  return out;
}

std::optional<NetworkState> EngineApi::inspect_network(const std::string& id_or_name) {
  const HttpResponse r = client_.call("GET", "/networks/" + url_encode(id_or_name), timeout_);
  if (r.status == 404) return std::nullopt;
  if (r.status != 200) {
    throw std::runtime_error("Failed to inspect network " + id_or_name + ": " +
                             trimmed(r.message()));
  }
  std::optional<NetworkState> state = parse_network_answer(r.body);
  if (!state) {
    throw std::runtime_error("Failed to inspect network " + id_or_name +
                             ": the engine's answer could not be read");
  }
  return state;
}

EngineApi::Removed EngineApi::remove_network(const std::string& id_or_name) {
  const HttpResponse r = client_.call("DELETE", "/networks/" + url_encode(id_or_name), timeout_);
  Removed out;
  out.outcome = outcome_of(r);
  out.gone = r.status == 404;
  return out;
}

std::vector<NetworkState> EngineApi::list_networks(const std::string& label) {
  const std::string filters = "{\"label\":[\"" + label + "\"]}";
  const HttpResponse r = client_.call("GET", "/networks?filters=" + url_encode(filters), timeout_);
  if (r.status != 200) {
    throw std::runtime_error("Failed to list networks: HTTP " + std::to_string(r.status) + ": " +
                             trimmed(r.message()));
  }
  return parse_network_listing(r.body);
}

std::optional<NetworkState> parse_network_answer(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_json(doc, body)) return std::nullopt;
  return network_of(doc);
}

std::vector<NetworkState> parse_network_listing(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_json(doc, body) || !doc.IsArray()) {
    throw std::runtime_error("the engine's network listing is not a JSON array");
  }
  std::vector<NetworkState> out;
  for (const auto& entry : doc.GetArray()) {
    if (auto network = network_of(entry)) out.push_back(std::move(*network));
  }
  return out;
}

std::optional<std::uint64_t> parse_writable_bytes(const std::string& inspect_body) {
  rapidjson::Document doc;
  if (!parse_json(doc, inspect_body) || !doc.IsObject()) return std::nullopt;
  const auto size = doc.FindMember("SizeRw");
  if (size == doc.MemberEnd() || !size->value.IsNumber()) return std::nullopt;
  const double bytes = size->value.GetDouble();
  if (!(bytes >= 0) || bytes > 1.8e19) return std::nullopt;
  return static_cast<std::uint64_t>(bytes);
}

int parse_container_pid(const std::string& inspect_body) {
  rapidjson::Document doc;
  if (!parse_json(doc, inspect_body) || !doc.IsObject()) return 0;
  const auto state = doc.FindMember("State");
  if (state == doc.MemberEnd() || !state->value.IsObject()) return 0;
  const auto pid = state->value.FindMember("Pid");
  if (pid == state->value.MemberEnd() || !pid->value.IsInt()) return 0;
  return pid->value.GetInt() > 0 ? pid->value.GetInt() : 0;
}

namespace {

const rapidjson::Value* member(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject()) return nullptr;
  const auto found = object.FindMember(name);
  return found == object.MemberEnd() ? nullptr : &found->value;
}

std::optional<std::uint64_t> unsigned_member(const rapidjson::Value* object, const char* name) {
  const rapidjson::Value* value = object ? member(*object, name) : nullptr;
  if (value == nullptr || !value->IsUint64()) return std::nullopt;
  return value->GetUint64();
}

}  // namespace

SandboxUsage::Reading parse_container_stats(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_json(doc, body) || !doc.IsObject()) {
    throw std::runtime_error("the engine's stats answer is not a JSON object");
  }
  SandboxUsage::Reading reading;
  const rapidjson::Value* cpu = member(doc, "cpu_stats");
  const rapidjson::Value* cpu_usage = cpu ? member(*cpu, "cpu_usage") : nullptr;
  constexpr double kNanoseconds = 1e9;
  if (const auto total = unsigned_member(cpu_usage, "total_usage")) {
    reading.cpu_seconds = static_cast<double>(*total) / kNanoseconds;
  }
  if (const auto system = unsigned_member(cpu, "system_cpu_usage")) {
    reading.host_cpu_seconds = static_cast<double>(*system) / kNanoseconds;
  }
  if (const auto cpus = unsigned_member(cpu, "online_cpus"); cpus && *cpus > 0 && *cpus < 65536) {
    reading.online_cpus = static_cast<int>(*cpus);
  }
  const rapidjson::Value* memory = member(doc, "memory_stats");
  if (const auto usage = unsigned_member(memory, "usage")) {
    const rapidjson::Value* stats = memory ? member(*memory, "stats") : nullptr;
    std::uint64_t inactive = 0;
    if (const auto v1 = unsigned_member(stats, "total_inactive_file")) {
      inactive = *v1;
    } else if (const auto v2 = unsigned_member(stats, "inactive_file")) {
      inactive = *v2;
    }
    reading.memory_bytes = inactive < *usage ? *usage - inactive : *usage;
  }
  reading.memory_limit_bytes = unsigned_member(memory, "limit");
  reading.pids = unsigned_member(member(doc, "pids_stats"), "current");
  return reading;
}

}  // namespace sandboxd::local_docker

#include "engine_answers.hpp"

#include <rapidjson/document.h>

#include <stdexcept>

#include "docker_support.hpp"
#include "sandboxd/json.hpp"

namespace sandboxd::local_docker {
namespace {

std::string string_member(const rapidjson::Value& object, const char* name) {
  if (!object.IsObject()) return "";
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsString()) return "";
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

std::map<std::string, std::string> string_map_member(const rapidjson::Value& object,
                                                     const char* name) {
  std::map<std::string, std::string> out;
  if (!object.IsObject()) return out;
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || !it->value.IsObject()) return out;
  for (auto m = it->value.MemberBegin(); m != it->value.MemberEnd(); ++m) {
    if (m->value.IsString()) {
      out[std::string(m->name.GetString(), m->name.GetStringLength())] =
          std::string(m->value.GetString(), m->value.GetStringLength());
    }
  }
  return out;
}

// The listing entry's name without the leading '/', skipping link aliases ("/a/b").
std::string listing_name(const rapidjson::Value& entry) {
  auto names = entry.FindMember("Names");
  if (names == entry.MemberEnd() || !names->value.IsArray()) return "";
  for (const auto& n : names->value.GetArray()) {
    if (!n.IsString()) continue;
    std::string candidate(n.GetString(), n.GetStringLength());
    if (!candidate.empty() && candidate.front() == '/') candidate.erase(0, 1);
    if (candidate.find('/') == std::string::npos) return candidate;
  }
  return "";
}

// The public port of 8080/tcp in a listing entry's Ports array; 0 when it is not published.
int listing_host_port(const rapidjson::Value& entry) {
  auto ports = entry.FindMember("Ports");
  if (ports == entry.MemberEnd() || !ports->value.IsArray()) return 0;
  for (const auto& port : ports->value.GetArray()) {
    if (!port.IsObject()) continue;
    auto private_port = port.FindMember("PrivatePort");
    if (private_port == port.MemberEnd() || !private_port->value.IsInt() ||
        private_port->value.GetInt() != 8080) {
      continue;
    }
    const std::string type = string_member(port, "Type");
    if (!type.empty() && type != "tcp") continue;
    auto public_port = port.FindMember("PublicPort");
    if (public_port != port.MemberEnd() && public_port->value.IsInt() &&
        public_port->value.GetInt() > 0 && public_port->value.GetInt() <= 65535) {
      return public_port->value.GetInt();
    }
  }
  return 0;
}

}  // namespace

int parse_port_text(const std::string& text) {
  if (text.empty() || text.size() > 5) return 0;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return 0;
    value = value * 10 + (c - '0');
  }
  return value <= 65535 ? value : 0;
}

std::optional<ContainerState> parse_inspect_answer(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_json(doc, body) || !doc.IsObject()) return std::nullopt;
  ContainerState state;
  state.id = string_member(doc, "Id");
  state.name = string_member(doc, "Name");
  if (!state.name.empty() && state.name.front() == '/') state.name.erase(0, 1);
  state.created_at = parse_docker_timestamp(string_member(doc, "Created"));
  if (auto s = doc.FindMember("State"); s != doc.MemberEnd() && s->value.IsObject()) {
    state.status = string_member(s->value, "Status");
    auto running = s->value.FindMember("Running");
    if (running != s->value.MemberEnd() && running->value.IsBool()) {
      state.running = running->value.GetBool();
    }
    auto paused = s->value.FindMember("Paused");
    if (paused != s->value.MemberEnd() && paused->value.IsBool()) {
      state.paused = paused->value.GetBool();
    }
  }
  if (auto config = doc.FindMember("Config");
      config != doc.MemberEnd() && config->value.IsObject()) {
    state.labels = string_map_member(config->value, "Labels");
  }
  if (auto ns = doc.FindMember("NetworkSettings"); ns != doc.MemberEnd() && ns->value.IsObject()) {
    auto ports = ns->value.FindMember("Ports");
    if (ports != ns->value.MemberEnd() && ports->value.IsObject()) {
      auto bindings = ports->value.FindMember(kContainerPort);
      if (bindings != ports->value.MemberEnd() && bindings->value.IsArray()) {
        for (const auto& binding : bindings->value.GetArray()) {
          const int port = parse_port_text(string_member(binding, "HostPort"));
          if (port > 0) {
            state.host_port = port;
            break;
          }
        }
      }
    }
  }
  if (state.id.empty()) return std::nullopt;
  return state;
}

std::vector<ContainerState> parse_listing(const std::string& body, const std::string& name_prefix) {
  rapidjson::Document doc;
  if (!parse_json(doc, body) || !doc.IsArray()) {
    throw std::runtime_error("the engine's container list could not be read");
  }
  std::vector<ContainerState> out;
  for (const auto& entry : doc.GetArray()) {
    if (!entry.IsObject()) continue;
    ContainerState state;
    state.id = string_member(entry, "Id");
    if (state.id.empty()) continue;
    state.name = listing_name(entry);
    if (state.name.size() <= name_prefix.size() || state.name.rfind(name_prefix, 0) != 0) continue;
    state.status = string_member(entry, "State");
    // A paused container is alive (frozen by /pause).
    state.running = state.status.empty() || state.status == "running" || state.status == "paused";
    state.paused = state.status == "paused";
    state.labels = string_map_member(entry, "Labels");
    if (auto created = entry.FindMember("Created"); created != entry.MemberEnd()) {
      if (created->value.IsNumber()) {
        state.created_at = created->value.GetDouble();
      } else if (created->value.IsString()) {
        state.created_at = parse_docker_timestamp(created->value.GetString());
      }
    }
    state.host_port = listing_host_port(entry);
    out.push_back(std::move(state));
  }
  return out;
}

std::vector<ContainerState> parse_running_listing(const std::string& body,
                                                  const std::string& name_prefix) {
  std::vector<ContainerState> out = parse_listing(body, name_prefix);
  // Paused ones stay: reconciliation and `list` see them, with their state said.
  std::erase_if(out, [](const ContainerState& state) { return !state.running; });
  return out;
}

std::string created_container_id(const std::string& body) {
  rapidjson::Document doc;
  if (!parse_json(doc, body) || !doc.IsObject()) return "";
  return string_member(doc, "Id");
}

std::optional<PullProgress> parse_pull_progress_line(const std::string& line) {
  if (line.find_first_not_of(" \r\t") == std::string::npos) return std::nullopt;
  rapidjson::Document doc;
  if (!parse_json(doc, line) || !doc.IsObject()) return std::nullopt;
  PullProgress progress;
  progress.error = string_member(doc, "error");
  if (progress.error.empty()) {
    if (auto detail = doc.FindMember("errorDetail"); detail != doc.MemberEnd()) {
      progress.error = string_member(detail->value, "message");
    }
  }
  progress.status = string_member(doc, "status");
  progress.layer = string_member(doc, "id");
  return progress;
}

}  // namespace sandboxd::local_docker

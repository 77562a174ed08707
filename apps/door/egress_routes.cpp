// The egress routes of both daemons (egress_routes.hpp).
#include "egress_routes.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "sandboxd/core/service_errors.hpp"
#include "sandboxd/json.hpp"

namespace sandboxd::door {

namespace core = sandboxd::core;
using core::ErrorKind;
using core::ServiceError;
using Writer = rapidjson::Writer<rapidjson::StringBuffer>;

namespace {

void write_request(Writer& w, const core::EgressRequest& request, bool full) {
  w.StartObject();
  sandboxd::write_json_member(w, "request_id", request.request_id);
  sandboxd::write_json_member(w, "host", request.domain);
  w.Key("port");
  w.Int(request.port);
  sandboxd::write_json_member(w, "method", request.method);
  if (full) {
    w.Key("first_seen");
    w.Double(request.first_seen);
    w.Key("last_seen");
    w.Double(request.last_seen);
    w.Key("count");
    w.Uint64(request.count);
    w.Key("surfaced");
    w.Bool(request.surfaced);
  }
  w.EndObject();
}

std::string ok(bool done) {
  return done ? "{\"ok\":true}" : "{\"ok\":false}";
}

}  // namespace

std::string egress_view(core::EgressHost& egress, const std::string& sandbox_id) {
  const core::EgressPolicy& policy = egress.proxy().policy();
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  sandboxd::write_json_member(w, "sandbox_id", sandbox_id);
  sandboxd::write_json_member(w, "mode", "allowlist");
  sandboxd::write_json_member(w, "approval", policy.prompt ? "prompt" : "deny");
  w.Key("temporary_grant_ttl");
  w.Double(policy.temporary_grant_ttl);
  w.Key("allow_domains");
  w.StartArray();
  for (const std::string& entry : policy.allow.entries()) w.String(entry.c_str());
  w.EndArray();
  w.Key("pending");
  w.StartArray();
  for (const auto& request : egress.proxy().pending(sandbox_id)) write_request(w, request, true);
  w.EndArray();
  w.Key("grants");
  w.StartArray();
  for (const auto& grant : egress.proxy().grants(sandbox_id)) {
    w.StartObject();
    sandboxd::write_json_member(w, "domain", grant.domain);
    w.Key("port");
    if (grant.port == 0) {
      w.Null();  // both ports: a decision on the name alone
    } else {
      w.Int(grant.port);
    }
    w.Key("expires");
    if (grant.expires == 0) {
      w.Null();  // for the sandbox's life
    } else {
      w.Double(grant.expires);
    }
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return buffer.GetString();
}

std::string egress_events(core::EgressHost& egress, const std::string& sandbox_id) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  w.Key("events");
  w.StartArray();
  for (const auto& request : egress.proxy().consume_events(sandbox_id)) {
    write_request(w, request, false);
  }
  w.EndArray();
  w.EndObject();
  return buffer.GetString();
}

std::string egress_deny_pending(core::EgressHost& egress, const std::string& sandbox_id) {
  egress.proxy().deny_pending(sandbox_id);
  return ok(true);
}

std::string egress_decide(core::EgressHost& egress, const std::string& sandbox_id,
                          const std::string& body) {
  rapidjson::Document doc;
  if (!sandboxd::parse_json(doc, body) || !doc.IsObject()) {
    throw ServiceError(ErrorKind::invalid_argument, "the request body is not a JSON object");
  }
  const auto text = [&](const char* key) -> std::string {
    const auto it = doc.FindMember(key);
    if (it == doc.MemberEnd() || it->value.IsNull()) return "";
    if (!it->value.IsString()) {
      throw ServiceError(ErrorKind::invalid_argument, std::string(key) + ": must be a string");
    }
    return it->value.GetString();
  };
  const std::string decision_text = text("decision");
  const auto decision = core::egress_decision_from(decision_text);
  if (!decision) {
    throw ServiceError(
        ErrorKind::invalid_argument,
        "decision: expected deny, allow_temporary or allow_sandbox, got '" + decision_text + "'");
  }
  const std::string request_id = text("request_id");
  const std::string domain = text("domain");
  if (request_id.empty() == domain.empty()) {
    throw ServiceError(ErrorKind::invalid_argument,
                       "give one of request_id (a pending request) or domain");
  }
  bool done = true;
  if (!request_id.empty()) {
    done = egress.proxy().decide_request(sandbox_id, request_id, *decision);
  } else {
    try {
      egress.proxy().decide(sandbox_id, domain, *decision);
    } catch (const std::invalid_argument& e) {
      throw ServiceError(ErrorKind::invalid_argument, std::string("domain: ") + e.what());
    }
  }
  if (done) egress.save_grants();
  return ok(done);
}

}  // namespace sandboxd::door

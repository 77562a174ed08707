#include "create_request.hpp"

#include <rapidjson/document.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include "sandboxd/json.hpp"

namespace sandboxd::provisioner {
namespace {

bool matches_id_pattern(std::string_view id, std::size_t max_length) {
  if (id.empty() || id.size() > max_length) return false;
  for (char c : id) {
    const bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

const rapidjson::Value* member(const rapidjson::Value& object, const char* name) {
  auto it = object.FindMember(name);
  if (it == object.MemberEnd() || it->value.IsNull()) return nullptr;
  return &it->value;
}

std::string string_field(const rapidjson::Value& value, const std::string& field) {
  if (!value.IsString()) throw SchemaViolation(field, "str type expected", "type_error.str");
  return std::string(value.GetString(), value.GetStringLength());
}

bool bool_field(const rapidjson::Value& object, const char* name) {
  const rapidjson::Value* value = member(object, name);
  if (!value) return false;
  if (!value->IsBool())
    throw SchemaViolation(name, "value could not be parsed to a boolean", "type_error.bool");
  return value->GetBool();
}

Mount mount_field(const rapidjson::Value& item, std::size_t index) {
  const std::string at = "extra_mounts." + std::to_string(index);
  if (!item.IsObject()) throw SchemaViolation(at, "value is not a valid dict", "type_error.dict");
  Mount mount;
  const rapidjson::Value* host = member(item, "host_path");
  if (!host) throw SchemaViolation(at + ".host_path", "field required", "value_error.missing");
  mount.host_path = string_field(*host, at + ".host_path");
  const rapidjson::Value* container = member(item, "container_path");
  if (!container) {
    throw SchemaViolation(at + ".container_path", "field required", "value_error.missing");
  }
  mount.container_path = string_field(*container, at + ".container_path");
  if (const rapidjson::Value* read_only = member(item, "read_only")) {
    if (!read_only->IsBool()) {
      throw SchemaViolation(at + ".read_only", "value could not be parsed to a boolean",
                            "type_error.bool");
    }
    mount.read_only = read_only->GetBool();
  }
  return mount;
}

}  // namespace

bool is_valid_sandbox_id(std::string_view id) {
  return matches_id_pattern(id, 64);
}
bool is_valid_thread_id(std::string_view id) {
  return matches_id_pattern(id, 64);
}
bool is_valid_user_id(std::string_view id) {
  return matches_id_pattern(id, 128);
}

CreateBody parse_create_body(std::string_view body) {
  rapidjson::Document doc;
  if (!parse_json(doc, body)) {
    throw SchemaViolation("",
                          "the body is not valid JSON (or is nested deeper than " +
                              std::to_string(kMaxJsonNesting) + " levels)",
                          "value_error.jsondecode");
  }
  if (!doc.IsObject()) throw SchemaViolation("", "value is not a valid dict", "type_error.dict");

  CreateBody out;
  const rapidjson::Value* sandbox_id = member(doc, "sandbox_id");
  if (!sandbox_id) throw SchemaViolation("sandbox_id", "field required", "value_error.missing");
  out.sandbox_id = string_field(*sandbox_id, "sandbox_id");
  if (!is_valid_sandbox_id(out.sandbox_id)) {
    throw SchemaViolation("sandbox_id", "string does not match regex \"^[A-Za-z0-9_-]{1,64}$\"",
                          "value_error.str.regex");
  }
  if (const rapidjson::Value* thread_id = member(doc, "thread_id")) {
    out.thread_id = string_field(*thread_id, "thread_id");
    if (!is_valid_thread_id(out.thread_id)) {
      throw SchemaViolation("thread_id", "string does not match regex \"^[A-Za-z0-9_-]{1,64}$\"",
                            "value_error.str.regex");
    }
  } else {
    out.thread_id = out.sandbox_id;
  }
  if (const rapidjson::Value* user_id = member(doc, "user_id")) {
    out.user_id = string_field(*user_id, "user_id");
    if (!is_valid_user_id(out.user_id)) {
      throw SchemaViolation("user_id", "string does not match regex \"^[A-Za-z0-9_-]{1,128}$\"",
                            "value_error.str.regex");
    }
  }
  if (const rapidjson::Value* mounts = member(doc, "extra_mounts")) {
    if (!mounts->IsArray()) {
      throw SchemaViolation("extra_mounts", "value is not a valid list", "type_error.list");
    }
    std::size_t index = 0;
    for (const auto& item : mounts->GetArray())
      out.extra_mounts.push_back(mount_field(item, index++));
  }
  out.include_legacy_skills = bool_field(doc, "include_legacy_skills");
  out.provision_lark_cli_runtime = bool_field(doc, "provision_lark_cli_runtime");
  out.provision_lark_cli_broker = bool_field(doc, "provision_lark_cli_broker");
  if (const rapidjson::Value* version = member(doc, "required_mount_contract_version")) {
    if (!version->IsInt()) {
      throw SchemaViolation("required_mount_contract_version", "value is not a valid integer",
                            "type_error.integer");
    }
    out.required_mount_contract_version = version->GetInt();
  }
  return out;
}

std::string schema_violation_json(const SchemaViolation& violation) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  w.Key("detail");
  w.StartArray();
  w.StartObject();
  w.Key("loc");
  w.StartArray();
  w.String("body");
  std::string_view rest = violation.field();
  while (!rest.empty()) {
    const auto dot = rest.find('.');
    const std::string_view part = rest.substr(0, dot);
    const bool numeric = !part.empty() && part.find_first_not_of("0123456789") == part.npos;
    if (numeric) {
      w.Int(std::stoi(std::string(part)));
    } else {
      write_json_string(w, part);
    }
    if (dot == rest.npos) break;
    rest.remove_prefix(dot + 1);
  }
  w.EndArray();
  w.Key("msg");
  w.String(violation.what());
  w.Key("type");
  w.String(violation.type().c_str());
  w.EndObject();
  w.EndArray();
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace sandboxd::provisioner

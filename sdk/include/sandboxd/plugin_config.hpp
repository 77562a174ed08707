// Typed, checked access to a plugin's own configuration section. Every error names the full
// key path (for example "sandbox.ownership.path"), the expected type and the bad value, so an
// operator knows which line of which file to fix.
#pragma once

#include <rapidjson/document.h>
#include <rapidjson/error/en.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "sandboxd/errors.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/redact.hpp"
#include "sandboxd/types.hpp"

namespace sandboxd {

// Renders a JSON value compactly, for error messages.
inline std::string json_to_string(const rapidjson::Value& value) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> writer(buffer);
  value.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

inline const char* json_type_name(const rapidjson::Value& value) {
  if (value.IsNull()) return "null";
  if (value.IsBool()) return "a boolean";
  if (value.IsNumber()) return "a number";
  if (value.IsString()) return "a string";
  if (value.IsArray()) return "an array";
  return "an object";
}

inline constexpr std::size_t kMaxShownValueChars = 200;

// A value as an error message or log line may show it: compact JSON cut at
// kMaxShownValueChars, or "(value redacted)" when `key_path` names a secret or sits under an
// `environment` object (is_secret_key_path). An empty key path is never secret.
inline std::string shown_value(const rapidjson::Value& value, std::string_view key_path = {}) {
  if (!key_path.empty() && is_secret_key_path(key_path) && !value.IsNull()) {
    return "(value redacted)";
  }
  std::string text = json_to_string(value);
  if (text.size() > kMaxShownValueChars) text = text.substr(0, kMaxShownValueChars) + "...";
  return text;
}

// Not thread-safe: build one while constructing a plugin, read what you need, drop it.
class PluginConfig {
 public:
  // json_text is the plugin's section as a JSON object; key_path names where it sits.
  PluginConfig(const std::string& json_text, std::string key_path)
      : key_path_(std::move(key_path)) {
    if (json_nesting_exceeded_at(json_text)) {
      throw PluginConfigError(key_path_, "malformed JSON: nested deeper than " +
                                             std::to_string(kMaxJsonNesting) + " levels");
    }
    if (!parse_json(document_, json_text)) {
      throw PluginConfigError(
          key_path_,
          std::string("malformed JSON: ") + rapidjson::GetParseError_En(document_.GetParseError()));
    }
    if (!document_.IsObject()) {
      throw PluginConfigError(key_path_, std::string("expected an object, got ") +
                                             json_type_name(document_) + " " +
                                             json_to_string(document_));
    }
  }

  const std::string& key_path() const { return key_path_; }
  std::string path_of(const std::string& key) const { return key_path_ + "." + key; }

  bool has(const std::string& key) const { return find(key) != nullptr; }

  // Null counts as absent everywhere below, so "key": null means "use the default".
  std::optional<std::string> optional_string(const std::string& key) const {
    const rapidjson::Value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->IsString()) fail(key, "a string", *v);
    return std::string(v->GetString(), v->GetStringLength());
  }
  std::string get_string(const std::string& key, const std::string& fallback) const {
    return optional_string(key).value_or(fallback);
  }

  std::optional<double> optional_number(const std::string& key) const {
    const rapidjson::Value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->IsNumber()) fail(key, "a number", *v);
    return v->GetDouble();
  }
  double get_number(const std::string& key, double fallback) const {
    return optional_number(key).value_or(fallback);
  }

  std::optional<long long> optional_integer(const std::string& key) const {
    const rapidjson::Value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (v->IsInt64()) return v->GetInt64();
    if (v->IsDouble() && std::floor(v->GetDouble()) == v->GetDouble() &&
        std::fabs(v->GetDouble()) < 9e15) {
      return static_cast<long long>(v->GetDouble());
    }
    fail(key, "an integer", *v);
  }
  long long get_integer(const std::string& key, long long fallback) const {
    return optional_integer(key).value_or(fallback);
  }

  std::optional<bool> optional_bool(const std::string& key) const {
    const rapidjson::Value* v = find(key);
    if (v == nullptr) return std::nullopt;
    if (!v->IsBool()) fail(key, "a boolean", *v);
    return v->GetBool();
  }
  bool get_bool(const std::string& key, bool fallback) const {
    return optional_bool(key).value_or(fallback);
  }

  std::vector<std::string> get_string_list(const std::string& key) const {
    std::vector<std::string> out;
    const rapidjson::Value* v = find(key);
    if (v == nullptr) return out;
    if (!v->IsArray()) fail(key, "an array of strings", *v);
    for (rapidjson::SizeType i = 0; i < v->Size(); ++i) {
      const rapidjson::Value& item = (*v)[i];
      if (!item.IsString()) fail(key + "[" + std::to_string(i) + "]", "a string", item);
      out.emplace_back(item.GetString(), item.GetStringLength());
    }
    return out;
  }

  // An object of string values (numbers and booleans are stringified, as DeerFlow does).
  std::map<std::string, std::string> get_string_map(const std::string& key) const {
    std::map<std::string, std::string> out;
    const rapidjson::Value* v = find(key);
    if (v == nullptr) return out;
    if (!v->IsObject()) fail(key, "an object of strings", *v);
    for (auto it = v->MemberBegin(); it != v->MemberEnd(); ++it) {
      std::string name(it->name.GetString(), it->name.GetStringLength());
      const rapidjson::Value& item = it->value;
      if (item.IsString()) {
        out[name] = std::string(item.GetString(), item.GetStringLength());
      } else if (item.IsNumber() || item.IsBool()) {
        out[name] = json_to_string(item);
      } else {
        fail(key + "." + name, "a string", item);
      }
    }
    return out;
  }

  // A list of {host_path, container_path, read_only=false} objects.
  std::vector<Mount> get_mounts(const std::string& key) const {
    std::vector<Mount> out;
    const rapidjson::Value* v = find(key);
    if (v == nullptr) return out;
    if (!v->IsArray()) fail(key, "an array of mounts", *v);
    for (rapidjson::SizeType i = 0; i < v->Size(); ++i) {
      const std::string item_key = key + "[" + std::to_string(i) + "]";
      const rapidjson::Value& item = (*v)[i];
      if (!item.IsObject()) fail(item_key, "an object with host_path and container_path", item);
      Mount mount;
      mount.host_path = required_member_string(item, item_key, "host_path");
      mount.container_path = required_member_string(item, item_key, "container_path");
      if (item.HasMember("read_only") && !item["read_only"].IsNull()) {
        if (!item["read_only"].IsBool())
          fail(item_key + ".read_only", "a boolean", item["read_only"]);
        mount.read_only = item["read_only"].GetBool();
      }
      out.push_back(std::move(mount));
    }
    return out;
  }

  // Raw access for shapes the helpers above do not cover.
  const rapidjson::Value* raw(const std::string& key) const { return find(key); }

  // Keys present in the section that nothing has read yet ("use" excepted): call after reading
  // everything and warn about them, so a typo does not pass silently.
  std::vector<std::string> unread_keys() const {
    std::vector<std::string> out;
    for (auto it = document_.MemberBegin(); it != document_.MemberEnd(); ++it) {
      std::string name(it->name.GetString(), it->name.GetStringLength());
      if (name != "use" && read_.count(name) == 0) out.push_back(path_of(name));
    }
    return out;
  }

  // The bad value is shown shortened, and not at all under a secret-named key or an
  // `environment` object (a mistyped API key must not reach error output).
  [[noreturn]] void fail(const std::string& key, const std::string& expected,
                         const rapidjson::Value& got) const {
    const std::string path = path_of(key);
    throw PluginConfigError(path, "expected " + expected + ", got " + json_type_name(got) + " " +
                                      shown_value(got, path));
  }
  [[noreturn]] void reject(const std::string& key, const std::string& problem) const {
    throw PluginConfigError(path_of(key), problem);
  }

 private:
  const rapidjson::Value* find(const std::string& key) const {
    read_.insert(key);
    auto it = document_.FindMember(key.c_str());
    if (it == document_.MemberEnd() || it->value.IsNull()) return nullptr;
    return &it->value;
  }

  std::string required_member_string(const rapidjson::Value& item, const std::string& item_key,
                                     const char* member) const {
    auto it = item.FindMember(member);
    if (it == item.MemberEnd() || !it->value.IsString() || it->value.GetStringLength() == 0) {
      if (it == item.MemberEnd()) {
        throw PluginConfigError(key_path_ + "." + item_key + "." + member, "is required");
      }
      fail(item_key + "." + member, "a non-empty string", it->value);
    }
    return std::string(it->value.GetString(), it->value.GetStringLength());
  }

  rapidjson::Document document_;
  std::string key_path_;
  mutable std::set<std::string> read_;
};

}  // namespace sandboxd

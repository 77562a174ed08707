// render_redacted: the resolved settings as pretty JSON, what `sandboxctl check-config` prints.
// Secrets are replaced by "<redacted>" at any depth of the plugin options: every value under an
// `environment` object, every value under a secret-named key (is_secret_key_name), and the
// user-info part of any URL ("redis://user:pw@host" → "redis://<redacted>@host").
#include <rapidjson/document.h>
#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <string>

#include "sandbox_options.hpp"
#include "sandboxd/core/config.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/redact.hpp"

namespace sandboxd::core {

namespace {

using rapidjson::Document;
using rapidjson::Value;
using Allocator = Document::AllocatorType;

constexpr const char* kRedacted = "<redacted>";

Value string_value(const std::string& text, Allocator& alloc) {
  return Value(text.data(), static_cast<rapidjson::SizeType>(text.size()), alloc);
}

void redact(Value& value, Allocator& alloc) {
  if (value.IsObject()) {
    for (auto it = value.MemberBegin(); it != value.MemberEnd(); ++it) {
      const std::string key(it->name.GetString(), it->name.GetStringLength());
      if (is_secret_key_name(key)) {
        it->value.SetString(kRedacted, alloc);
      } else if (key == "environment") {
        if (it->value.IsObject()) {
          for (auto env = it->value.MemberBegin(); env != it->value.MemberEnd(); ++env) {
            env->value.SetString(kRedacted, alloc);
          }
        } else if (!it->value.IsNull()) {
          it->value.SetString(kRedacted, alloc);
        }
      } else {
        redact(it->value, alloc);
      }
    }
  } else if (value.IsArray()) {
    for (rapidjson::SizeType i = 0; i < value.Size(); ++i) redact(value[i], alloc);
  } else if (value.IsString()) {
    std::string text(value.GetString(), value.GetStringLength());
    if (strip_url_userinfo(text)) value = string_value(text, alloc);
  }
}

Value plugin_section(const PluginSection& section, Allocator& alloc) {
  Value out(rapidjson::kObjectType);
  out.AddMember("use", string_value(section.use, alloc), alloc);
  out.AddMember("key_path", string_value(section.key_path, alloc), alloc);
  Document options(&alloc);
  const std::string text = section.options_json.empty() ? "{}" : section.options_json;
  if (!parse_json(options, text)) {
    out.AddMember("options", Value("<redacted: options are not valid JSON>", alloc), alloc);
  } else {
    redact(options, alloc);
    out.AddMember("options", Value(options, alloc), alloc);
  }
  return out;
}

Value string_array(const std::vector<std::string>& items, Allocator& alloc) {
  Value out(rapidjson::kArrayType);
  for (const auto& item : items) out.PushBack(string_value(item, alloc), alloc);
  return out;
}

}  // namespace

std::string render_redacted(const SandboxConfig& config) {
  Document doc;
  doc.SetObject();
  Allocator& alloc = doc.GetAllocator();
  doc.AddMember("source_file", string_value(config.source_file, alloc), alloc);
  doc.AddMember("backend", plugin_section(config.backend, alloc), alloc);
  doc.AddMember("ownership", plugin_section(config.ownership, alloc), alloc);
  for (const SandboxOption& option : sandbox_options()) {
    doc.AddMember(rapidjson::StringRef(option.key), rendered_sandbox_option(option, config, alloc),
                  alloc);
  }
  doc.AddMember("plugin_dirs", string_array(config.plugin_dirs, alloc), alloc);
  doc.AddMember("skills_container_path", string_value(config.skills_container_path, alloc), alloc);
  doc.AddMember("renewal_interval_seconds", config.renewal_interval_seconds, alloc);
  doc.AddMember("ttl_multiplier", config.ttl_multiplier, alloc);
  doc.AddMember("ttl_seconds", config.ttl_seconds(), alloc);
  doc.AddMember("mapping_notes", string_array(config.mapping_notes, alloc), alloc);
  doc.AddMember("warnings", string_array(config.warnings, alloc), alloc);

  rapidjson::StringBuffer buffer;
  rapidjson::PrettyWriter<rapidjson::StringBuffer> writer(buffer);
  writer.SetIndent(' ', 2);
  doc.Accept(writer);
  return std::string(buffer.GetString(), buffer.GetSize());
}

}  // namespace sandboxd::core

#include "deerflow_yaml.hpp"

#include <rapidjson/document.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <regex>
#include <string_view>

#include "sandboxd/core/config.hpp"
#include "sandboxd/plugin_config.hpp"

namespace sandboxd::core {
namespace {

using rapidjson::Document;
using rapidjson::Value;
using Allocator = Document::AllocatorType;

// The top-level sections the sandbox config reads (config.cpp: read_skills, redis_inference).
constexpr const char* kSandboxSections[] = {"sandbox", "skills", "stream_bridge"};
// Deeper than any DeerFlow config; a guard against a hostile file, not a style rule.
constexpr int kMaxDepth = 64;

bool is_one_of(const std::string& text, std::initializer_list<const char*> words) {
  for (const char* word : words) {
    if (text == word) return true;
  }
  return false;
}

class Converter {
 public:
  explicit Converter(std::string source) : source_(std::move(source)) {}

  DeerFlowYaml convert(const std::string& text) {
    YAML::Node root;
    try {
      root = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError(source_ + ": malformed YAML at line " + std::to_string(e.mark.line + 1) +
                        ", column " + std::to_string(e.mark.column + 1) + ": " + e.msg);
    }
    if (!root.IsMap()) {
      throw ConfigError(source_ +
                        ": expected a YAML mapping at the top level (DeerFlow's config.yaml), "
                        "got " +
                        kind_of(root));
    }
    Document out;
    out.SetObject();
    Allocator& alloc = out.GetAllocator();
    for (auto it = root.begin(); it != root.end(); ++it) {
      const std::string key = key_text(it->first, "");
      bool wanted = false;
      for (const char* section : kSandboxSections) wanted = wanted || key == section;
      if (!wanted) {
        result_.other_sections.push_back(key);
        continue;
      }
      result_.lines[key] = it->first.Mark().line + 1;
      Value value = to_json(it->second, key, alloc, 1);
      out.AddMember(Value(key.c_str(), alloc), value, alloc);
    }
    result_.json = json_to_string(out);
    return std::move(result_);
  }

 private:
  [[noreturn]] void fail_at(const YAML::Node& node, const std::string& path,
                            const std::string& what) const {
    throw ConfigError(source_ + ":" + std::to_string(node.Mark().line + 1) + ": " + path + ": " +
                      what);
  }

  static std::string kind_of(const YAML::Node& node) {
    switch (node.Type()) {
      case YAML::NodeType::Map:
        return "a mapping";
      case YAML::NodeType::Sequence:
        return "a list";
      case YAML::NodeType::Scalar:
        return "a scalar";
      default:
        return "nothing";
    }
  }

  std::string key_text(const YAML::Node& key, const std::string& parent) const {
    if (!key.IsScalar()) {
      fail_at(key, parent.empty() ? "(top level)" : parent,
              "expected a plain key, got " + kind_of(key) + " as a key");
    }
    return key.Scalar();
  }

  Value to_json(const YAML::Node& node, const std::string& path, Allocator& alloc, int depth) {
    if (depth > kMaxDepth) {
      fail_at(node, path, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    }
    switch (node.Type()) {
      case YAML::NodeType::Map: {
        Value object(rapidjson::kObjectType);
        for (auto it = node.begin(); it != node.end(); ++it) {
          const std::string key = key_text(it->first, path);
          const std::string child = path + "." + key;
          result_.lines.emplace(child, it->first.Mark().line + 1);
          Value value = to_json(it->second, child, alloc, depth + 1);
          object.AddMember(Value(key.c_str(), alloc), value, alloc);
        }
        return object;
      }
      case YAML::NodeType::Sequence: {
        Value array(rapidjson::kArrayType);
        std::size_t index = 0;
        for (const YAML::Node& item : node) {
          const std::string child = path + "[" + std::to_string(index++) + "]";
          result_.lines.emplace(child, item.Mark().line + 1);
          array.PushBack(to_json(item, child, alloc, depth + 1), alloc);
        }
        return array;
      }
      case YAML::NodeType::Scalar:
        return scalar(node, path, alloc);
      default:
        return Value(rapidjson::kNullType);
    }
  }

  // PyYAML's safe_load types (YAML 1.1 core resolvers) for plain scalars; quoted ones are text.
  Value scalar(const YAML::Node& node, const std::string& path, Allocator& alloc) {
    const std::string& text = node.Scalar();
    const bool plain = node.Tag() == "?";
    if (plain) {
      if (is_one_of(text, {"~", "null", "Null", "NULL", ""})) return Value(rapidjson::kNullType);
      if (is_one_of(text, {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON"})) {
        return Value(true);
      }
      if (is_one_of(text, {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF"})) {
        return Value(false);
      }
      static const std::regex integer("[-+]?(0|[1-9][0-9_]*)");
      // The last two alternatives are YAML 1.1's infinities and NaN: numbers JSON cannot carry.
      static const std::regex floating(
          "[-+]?([0-9][0-9_]*)?\\.[0-9_]*([eE][-+][0-9]+)?|([-+]?\\.(inf|Inf|INF)|\\.(nan|NaN|NAN)"
          ")");
      std::string digits;
      for (char c : text) {
        if (c != '_') digits += c;
      }
      const bool is_integer = std::regex_match(text, integer);
      if (is_integer) {
        errno = 0;
        const long long number = std::strtoll(digits.c_str(), nullptr, 10);
        if (errno == 0) return Value(static_cast<int64_t>(number));
      }
      std::smatch parts;
      if (is_integer || std::regex_match(text, parts, floating)) {
        if (!is_integer && parts[3].matched) {
          fail_at(node, path, "expected a finite number, got " + text);
        }
        return Value(std::strtod(digits.c_str(), nullptr));
      }
    }
    if (!text.empty() && text[0] == '$') return variable(node, path, text.substr(1), alloc);
    return Value(text.c_str(), static_cast<rapidjson::SizeType>(text.size()), alloc);
  }

  Value variable(const YAML::Node& node, const std::string& path, const std::string& name,
                 Allocator& alloc) {
    const char* found = name.empty() ? nullptr : std::getenv(name.c_str());
    if (found == nullptr) fail_at(node, path, unset_variable_message(name));
    return Value(found, alloc);
  }

  std::string source_;
  DeerFlowYaml result_;
};

}  // namespace

namespace {

bool ends_with(const std::string& path, std::string_view suffix) {
  return path.size() >= suffix.size() &&
         std::string_view(path).substr(path.size() - suffix.size()) == suffix;
}

}  // namespace

std::string unset_variable_message(const std::string& name) {
  return "environment variable " + (name.empty() ? std::string("(no name after $)") : name) +
         " is not set; DeerFlow refuses such a file too: set it, or write the value itself";
}

bool has_yaml_extension(const std::string& path) {
  return ends_with(path, ".yaml") || ends_with(path, ".yml");
}

bool looks_like_yaml(const std::string& path, const std::string& text) {
  if (has_yaml_extension(path)) return true;
  if (ends_with(path, ".json")) return false;
  std::size_t at = 0;
  if (text.compare(0, 3, "\xEF\xBB\xBF") == 0) at = 3;  // UTF-8 BOM
  while (at < text.size()) {
    const char c = text[at];
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      ++at;
    } else if (c == '#') {
      at = text.find('\n', at);
      if (at == std::string::npos) return false;
    } else {
      return c != '{';
    }
  }
  return false;
}

DeerFlowYaml read_deerflow_yaml(const std::string& text, const std::string& source) {
  return Converter(source).convert(text);
}

}  // namespace sandboxd::core

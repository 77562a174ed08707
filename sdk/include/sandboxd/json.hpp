// Parsing JSON that came from outside (an engine, a provisioner, a config file, a client) so
// that no input can exhaust the stack: RapidJSON's default parser recurses once per nesting
// level (a body of 1,000,000 '[' crashes the process), and so do its writer and its deep copy.
// parse_json parses iteratively and refuses documents nested deeper than kMaxJsonNesting, which
// keeps every later walk of the document shallow. Header-only.
#pragma once

#include <rapidjson/document.h>

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace sandboxd {

// Far beyond any document we read (an engine's inspect answer nests about 6 deep).
inline constexpr std::size_t kMaxJsonNesting = 64;

// The offset of the first '[' or '{' (outside strings) that opens level limit + 1, if any.
inline std::optional<std::size_t> json_nesting_exceeded_at(std::string_view text,
                                                           std::size_t limit = kMaxJsonNesting) {
  std::size_t depth = 0;
  bool in_string = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > limit) return i;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

// Parses `text` into `doc` (iteratively, with `ExtraFlags` added). False when the text is not
// JSON or nests deeper than kMaxJsonNesting; `doc` is then null or holds the parse error.
template <unsigned ExtraFlags = rapidjson::kParseDefaultFlags>
inline bool parse_json(rapidjson::Document& doc, std::string_view text) {
  if (json_nesting_exceeded_at(text)) {
    doc.SetNull();
    return false;
  }
  doc.Parse<ExtraFlags | rapidjson::kParseIterativeFlag>(text.data(), text.size());
  return !doc.HasParseError();
}

// Writing: a string of any length and content (NUL bytes included) as one JSON string, and a
// member whose value is a string or null, for any RapidJSON writer.
template <class Writer>
void write_json_string(Writer& w, std::string_view value) {
  w.String(value.data(), static_cast<rapidjson::SizeType>(value.size()));
}
template <class Writer>
void write_json_member(Writer& w, const char* key, std::string_view value) {
  w.Key(key);
  write_json_string(w, value);
}
template <class Writer>
void write_json_optional(Writer& w, const char* key, const std::optional<std::string>& value) {
  w.Key(key);
  if (value) {
    write_json_string(w, *value);
  } else {
    w.Null();
  }
}
// A string member that may be absent in the model: null when `value` is empty.
template <class Writer>
void write_json_member_or_null(Writer& w, const char* key, const std::string& value) {
  w.Key(key);
  if (value.empty()) {
    w.Null();
  } else {
    write_json_string(w, value);
  }
}

}  // namespace sandboxd

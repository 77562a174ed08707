// Secrets out of messages: the credentials a URL may carry ("scheme://user:password@host").
// Header-only; used wherever a URL reaches a log line or an error message.
#pragma once

#include <algorithm>
#include <cctype>
#include <string>
#include <string_view>

#include "sandboxd/logger.hpp"

namespace sandboxd {

// "scheme://user:password@host/…" → "scheme://<redacted>@host/…" (the user name goes too: a
// token is often passed as the user). Returns false and leaves `text` alone when it carries no
// credentials.
inline bool strip_url_userinfo(std::string& text) {
  const auto scheme_end = text.find("://");
  if (scheme_end == std::string::npos) return false;
  const auto authority_begin = scheme_end + 3;
  auto authority_end = text.find_first_of("/?#", authority_begin);
  if (authority_end == std::string::npos) authority_end = text.size();
  if (authority_end == authority_begin) return false;
  const auto at = text.rfind('@', authority_end - 1);
  if (at == std::string::npos || at < authority_begin) return false;
  text.replace(authority_begin, at - authority_begin, kRedacted);
  return true;
}

// The URL as it may be shown: its credentials replaced by "<redacted>".
inline std::string redacted_url(std::string_view url) {
  std::string text(url);
  strip_url_userinfo(text);
  return text;
}

// A key whose value is a secret: its name contains api_key, apikey, secret, password, token or
// credential (case-insensitive, '-' read as '_').
inline bool is_secret_key_name(std::string_view key) {
  std::string name(key);
  for (char& c : name) {
    c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  for (const char* marker : {"api_key", "apikey", "secret", "password", "token", "credential"}) {
    if (name.find(marker) != std::string::npos) return true;
  }
  return false;
}

// A key path ("sandbox.backend.environment.HOME", "sandbox.mounts[2].host_path") whose value is
// not to be shown: a component is secret-named or is an `environment` object (every value of
// which may be a secret).
inline bool is_secret_key_path(std::string_view key_path) {
  std::size_t begin = 0;
  while (begin <= key_path.size()) {
    std::size_t end = key_path.find('.', begin);
    if (end == std::string_view::npos) end = key_path.size();
    std::string_view component = key_path.substr(begin, end - begin);
    component = component.substr(0, component.find('['));
    if (component == "environment" || is_secret_key_name(component)) return true;
    begin = end + 1;
  }
  return false;
}

}  // namespace sandboxd

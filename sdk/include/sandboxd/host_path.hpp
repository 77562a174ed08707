// Host paths in their own style (design §2.6). Mount sources are raw host strings that may be
// Windows paths on a POSIX gateway (Docker-outside-of-Docker on a Windows host), so they are
// joined lexically and never through std::filesystem. Shared by the core (mount composition)
// and the remote provisioner plugin (conversion-mount check).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace sandboxd {

// Windows style: a drive letter and separator, a leading "\\", or any backslash.
inline bool is_windows_host_path(std::string_view path) {
  const auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  const bool drive =
      path.size() >= 3 && alpha(path[0]) && path[1] == ':' && (path[2] == '\\' || path[2] == '/');
  return drive || path.starts_with("\\\\") || path.find('\\') != std::string_view::npos;
}

namespace host_path_detail {

struct Split {
  bool windows = false;
  std::string prefix;  // "", "/", "\" or "\\" (UNC)
  std::vector<std::string_view> segments;

  std::string str() const {
    std::string out = prefix;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      if (i > 0) out.push_back(windows ? '\\' : '/');
      out.append(segments[i]);
    }
    return out.empty() ? "." : out;
  }
};

// Splits base and parts in base's style: repeated separators collapse, "." segments drop, ".."
// is kept (nothing is resolved).
inline Split split(std::string_view base, const std::vector<std::string_view>& parts) {
  Split out;
  out.windows = is_windows_host_path(base);
  const auto is_sep = [&](char c) { return c == '/' || (out.windows && c == '\\'); };
  if (base.size() >= 2 && out.windows && is_sep(base[0]) && is_sep(base[1])) {
    out.prefix = "\\\\";
  } else if (!base.empty() && is_sep(base[0])) {
    out.prefix = std::string(1, out.windows ? '\\' : '/');
  }
  const auto split_into = [&](std::string_view text) {
    std::size_t i = 0;
    while (i < text.size()) {
      while (i < text.size() && is_sep(text[i])) ++i;
      std::size_t j = i;
      while (j < text.size() && !is_sep(text[j])) ++j;
      const std::string_view segment = text.substr(i, j - i);
      if (!segment.empty() && segment != ".") out.segments.push_back(segment);
      i = j;
    }
  };
  split_into(base);
  for (std::string_view part : parts) split_into(part);
  return out;
}

}  // namespace host_path_detail

// base + parts in base's style. No parts → base unchanged (design §2.6).
inline std::string join_host_path(std::string_view base,
                                  const std::vector<std::string_view>& parts) {
  if (parts.empty()) return std::string(base);
  return host_path_detail::split(base, parts).str();
}

// The path with separators collapsed and "." segments dropped, in its own style.
inline std::string normalize_host_path(std::string_view path) {
  return host_path_detail::split(path, {}).str();
}

// The normalized path without its last segment (a root stays a root).
inline std::string host_path_parent(std::string_view path) {
  host_path_detail::Split parts = host_path_detail::split(path, {});
  if (!parts.segments.empty()) parts.segments.pop_back();
  return parts.str();
}

}  // namespace sandboxd

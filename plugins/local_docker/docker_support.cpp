#include "docker_support.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <random>
#include <stdexcept>

namespace sandboxd::local_docker {
namespace {

std::string lower(std::string_view text) {
  std::string out(text);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

std::string trim(std::string_view text) {
  std::size_t begin = 0;
  std::size_t end = text.size();
  while (begin < end && std::isspace(static_cast<unsigned char>(text[begin]))) ++begin;
  while (end > begin && std::isspace(static_cast<unsigned char>(text[end - 1]))) --end;
  return std::string(text.substr(begin, end - begin));
}

bool contains(const std::string& text, std::string_view fragment) {
  return text.find(fragment) != std::string::npos;
}

bool parse_port(std::string_view text, int* port) {
  if (text.empty() || text.size() > 5) return false;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value < 1 || value > 65535) return false;
  *port = value;
  return true;
}

// The host part of an http(s) URL, without brackets; empty when there is none.

}  // namespace

EngineEndpoint EngineEndpoint::parse(const std::string& raw) {
  const std::string spec = trim(raw);
  EngineEndpoint endpoint;
  if (spec.empty()) throw std::invalid_argument("empty engine address");
  std::string path;
  if (spec.rfind("unix://", 0) == 0) {
    path = spec.substr(7);
  } else if (spec.front() == '/') {
    path = spec;
  }
  if (!path.empty() || spec.rfind("unix://", 0) == 0) {
    if (path.empty() || path.front() != '/') {
      throw std::invalid_argument("unix socket address \"" + spec +
                                  "\" must name an absolute path (unix:///path/to.sock)");
    }
    if (path.size() > 107) {
      throw std::invalid_argument("unix socket path \"" + path +
                                  "\" is longer than the 107 characters Linux allows");
    }
    endpoint.unix_socket = path;
    endpoint.base_url = "http://localhost";
    endpoint.display = "unix://" + path;
    return endpoint;
  }
  std::string rest;
  if (spec.rfind("tcp://", 0) == 0) {
    rest = spec.substr(6);
  } else if (spec.rfind("http://", 0) == 0) {
    rest = spec.substr(7);
  } else {
    throw std::invalid_argument("unsupported engine address \"" + spec +
                                "\": expected unix:///path/to.sock or tcp://host:port");
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  const std::size_t colon = rest.rfind(':');
  int port = 0;
  if (rest.empty() || colon == std::string::npos || colon == 0 ||
      !parse_port(std::string_view(rest).substr(colon + 1), &port) ||
      rest.find('/') != std::string::npos) {
    throw std::invalid_argument("engine address \"" + spec + "\" must be tcp://host:port");
  }
  endpoint.base_url = "http://" + rest;
  endpoint.display = "tcp://" + rest;
  return endpoint;
}

long long parse_memory_bytes(const std::string& raw) {
  const std::string text = lower(trim(raw));
  std::size_t digits = 0;
  while (digits < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    ++digits;
  }
  if (digits == 0) throw std::invalid_argument("expected a size such as \"2g\" or \"512m\"");
  double value = 0;
  try {
    std::size_t used = 0;
    value = std::stod(text.substr(0, digits), &used);
    if (used != digits) throw std::invalid_argument("bad number");
  } catch (const std::exception&) {
    throw std::invalid_argument("expected a size such as \"2g\" or \"512m\", got \"" + raw + "\"");
  }
  std::string unit = text.substr(digits);
  if (unit.size() == 2 && unit.back() == 'b') unit.pop_back();
  double scale = 1;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else if (unit == "k") {
    scale = 1024.0;
  } else if (unit == "m") {
    scale = 1024.0 * 1024;
  } else if (unit == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (unit == "t") {
    scale = 1024.0 * 1024 * 1024 * 1024;
  } else {
    throw std::invalid_argument("unknown size unit \"" + unit + "\" in \"" + raw +
                                "\" (use b, k, m, g or t)");
  }
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes > 9e18) throw std::invalid_argument("size too large");
  return static_cast<long long>(bytes);
}

double parse_docker_timestamp(const std::string& raw) {
  const std::string text = trim(raw);
  if (text.empty()) return 0.0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &year, &month, &day, &hour, &minute,
                  &second, &consumed) != 6 ||
      consumed != 19) {
    return 0.0;
  }
  std::size_t pos = 19;
  double fraction = 0.0;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    double scale = 0.1;
    int kept = 0;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) {
      if (kept < 6) {  // design §9.9: truncate to microseconds
        fraction += (text[pos] - '0') * scale;
        scale /= 10;
        ++kept;
      }
      ++pos;
    }
  }
  long offset_seconds = 0;
  if (pos < text.size()) {
    const std::string zone = text.substr(pos);
    int oh = 0, om = 0;
    if (zone == "Z" || zone == "z") {
      offset_seconds = 0;
    } else if ((zone[0] == '+' || zone[0] == '-') && zone.size() == 6 &&
               std::sscanf(zone.c_str() + 1, "%2d:%2d", &oh, &om) == 2) {
      offset_seconds = (zone[0] == '-' ? -1 : 1) * (oh * 3600L + om * 60L);
    } else {
      return 0.0;
    }
  }
  if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60) {
    return 0.0;
  }
  std::tm tm{};
  tm.tm_year = year - 1900;
  tm.tm_mon = month - 1;
  tm.tm_mday = day;
  tm.tm_hour = hour;
  tm.tm_min = minute;
  tm.tm_sec = second;
  const time_t epoch = timegm(&tm);
  if (epoch == static_cast<time_t>(-1)) return 0.0;
  // Docker reports "0001-01-01T00:00:00Z" for "never"; that is an unknown age too.
  if (epoch < 0) return 0.0;
  return static_cast<double>(epoch - offset_seconds) + fraction;
}

std::string resolve_bind_host(const std::optional<std::string>& explicit_bind_host,
                              const std::string& sandbox_host, std::string* reason) {
  if (explicit_bind_host) {
    const std::string host = trim(*explicit_bind_host);
    if (!host.empty()) {
      if (reason) *reason = "Docker sandbox bind: " + host + " (explicit bind host override)";
      return host;
    }
  }
  const std::string host = lower(trim(sandbox_host));
  if (host == "::1" || host == "[::1]") {
    if (reason) *reason = "Docker sandbox bind: [::1] (IPv6 loopback sandbox host)";
    return "[::1]";
  }
  if (host.empty() || host == "localhost" || host == "127.0.0.1") {
    if (reason) *reason = "Docker sandbox bind: 127.0.0.1 (loopback default)";
    return "127.0.0.1";
  }
  if (reason) {
    *reason = "Docker sandbox bind: 0.0.0.0 (non-loopback sandbox host compatibility)";
  }
  return "0.0.0.0";
}

std::string sandbox_url(const std::string& host, int port) {
  std::string h = host;
  if (h.find(':') != std::string::npos && h.front() != '[') h = "[" + h + "]";
  return "http://" + h + ":" + std::to_string(port);
}

bool is_port_conflict_message(const std::string& message) {
  return contains(message, "port is already allocated") ||
         contains(lower(message), "address already in use");
}

std::string engine_failure_hint(const std::string& message) {
  const std::string text = lower(message);
  if (contains(text, "bind source path does not exist")) {
    // Docker refuses a missing source (podman creates it); the plugin creates none itself.
    return " (a bind-mount source must exist on the engine's host: create it, or fix "
           "sandbox.backend.mounts)";
  }
  const bool podman_init = contains(text, "container-init binary not found");
  const bool docker_init = contains(text, "docker-init") &&
                           (contains(text, "not found") || contains(text, "no such file"));
  if (!podman_init && !docker_init) return "";
  std::string binary = podman_init ? "catatonit" : "docker-init";
  if (const auto stat = message.find("stat /"); podman_init && stat != std::string::npos) {
    const auto end = message.find(':', stat + 5);
    binary = message.substr(stat + 5, end == std::string::npos ? end : end - stat - 5);
  }
  return std::string(" (the engine has no init binary: ") + binary + " is missing on the host; " +
         "install Debian package " + (podman_init ? "catatonit" : "tini") +
         " (scripts/setup.sh does), or set sandbox.backend.init: false to run without an init)";
}

bool is_name_conflict(long status, const std::string& message) {
  const std::string text = lower(message);
  if (status == 409) return true;
  return contains(text, "is already in use by container") ||
         contains(text, "conflict. the container name") ||
         contains(text, "that name is already in use") ||
         (contains(text, "container name") && contains(text, "is already in use"));
}

bool is_no_such_container(long status, const std::string& message, const std::string& name) {
  if (status == 404) return true;
  const std::string text = lower(message);
  if (contains(text, "no such container") || contains(text, "no such object")) return true;
  return contains(text, "not found") && ((!name.empty() && contains(text, lower(name))) ||
                                         contains(text, "container") || contains(text, "object"));
}

bool is_missing_image(long status, const std::string& message) {
  if (status != 404) return false;
  const std::string text = lower(message);
  return contains(text, "no such image") || contains(text, "image not known");
}

std::string redacted_environment(const std::map<std::string, std::string>& environment) {
  std::string out;
  for (const auto& [key, value] : environment) {
    (void)value;  // never rendered
    if (!out.empty()) out += ' ';
    out += key.empty() ? std::string("<redacted>") : key + "=<redacted>";
  }
  return out;
}

bool is_valid_container_name(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  if (!std::isalnum(static_cast<unsigned char>(name.front()))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

std::pair<std::string, std::string> split_image_reference(const std::string& image) {
  const std::size_t at = image.find('@');
  if (at != std::string::npos) return {image.substr(0, at), image.substr(at + 1)};
  const std::size_t slash = image.rfind('/');
  const std::size_t colon = image.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) {
    return {image.substr(0, colon), image.substr(colon + 1)};
  }
  return {image, "latest"};
}

std::string url_encode(std::string_view text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(text.size() * 3);
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 0x0f];
    }
  }
  return out;
}

std::string format_api_version(ApiVersion version) {
  return std::to_string(version.first) + "." + std::to_string(version.second);
}

std::optional<ApiVersion> negotiate_api_version(const EngineApiRange& engine,
                                                const ApiRange& ours) {
  if (!engine.max) return std::nullopt;
  const ApiVersion chosen = std::min(*engine.max, ours.max);
  if (chosen < ours.min) return std::nullopt;
  if (engine.min && chosen < *engine.min) return std::nullopt;
  return chosen;
}

std::string describe_api_mismatch(const EngineApiRange& engine, const ApiRange& ours) {
  const std::string engine_range =
      (engine.min ? format_api_version(*engine.min) : std::string("?")) + " to " +
      (engine.max ? format_api_version(*engine.max) : std::string("?"));
  std::string text = "the engine speaks API " + engine_range + ", this plugin " +
                     format_api_version(ours.min) + " to " + format_api_version(ours.max);
  if (engine.max && *engine.max < ours.min) {
    text += " (the engine is too old: upgrade it)";
  } else {
    text += " (the engine no longer speaks the versions this plugin knows: upgrade sandboxd)";
  }
  return text;
}

std::optional<ApiVersion> parse_api_version(const std::string& text) {
  int major = 0, minor = 0, consumed = 0;
  if (std::sscanf(text.c_str(), "%d.%d%n", &major, &minor, &consumed) != 2 ||
      static_cast<std::size_t>(consumed) != text.size() || major < 0 || minor < 0) {
    return std::nullopt;
  }
  return std::make_pair(major, minor);
}

std::string trimmed(std::string text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.pop_back();
  std::size_t start = 0;
  while (start < text.size() && std::isspace(static_cast<unsigned char>(text[start]))) ++start;
  return text.substr(start);
}

std::string render_mounts(const std::vector<Mount>& mounts) {
  std::string out;
  for (const Mount& m : mounts) {
    if (!out.empty()) out += ", ";
    out += m.host_path + ":" + m.container_path + (m.read_only ? ":ro" : "");
  }
  return out.empty() ? "none" : out;
}

std::string random_token() {
  std::random_device device;
  std::uniform_int_distribution<unsigned> digit(0, 15);
  std::string out;
  for (int i = 0; i < 8; ++i) out += "0123456789abcdef"[digit(device)];
  return out;
}

}  // namespace sandboxd::local_docker

#include "route_table.hpp"

#include <algorithm>
#include <stdexcept>

namespace sandboxd::door {
namespace {

bool is_parameter(std::string_view segment) {
  return segment.size() >= 2 && segment.front() == '{' && segment.back() == '}';
}

// The segments of a path or pattern after its leading '/': "/a/b" → {"a", "b"}, "/" → {""}.
std::vector<std::string_view> split(std::string_view path) {
  std::vector<std::string_view> segments;
  std::size_t start = 1;
  while (true) {
    const std::size_t slash = path.find('/', start);
    segments.push_back(
        path.substr(start, slash == std::string_view::npos ? path.npos : slash - start));
    if (slash == std::string_view::npos) return segments;
    start = slash + 1;
  }
}

}  // namespace

const std::string& RouteParams::operator[](std::string_view name) const {
  for (const auto& [key, value] : values_) {
    if (key == name) return value;
  }
  throw std::out_of_range("the route has no parameter {" + std::string(name) + "}");
}

RouteTable::RouteTable(UnmatchedAnswer unmatched) : unmatched_(std::move(unmatched)) {}

RouteTable& RouteTable::add(std::string method, std::string pattern, Handler handler,
                            Access access) {
  const auto refuse = [&](const std::string& why) {
    throw std::invalid_argument("route " + method + " " + pattern + ": " + why);
  };
  if (pattern.empty() || pattern.front() != '/') refuse("a pattern starts with '/'");
  Route route{method, pattern, {}, std::move(handler), access};
  std::vector<std::string_view> names;
  for (std::string_view segment : split(pattern)) {
    if (segment.find_first_of("{}") != std::string_view::npos) {
      if (!is_parameter(segment) || segment.size() == 2 ||
          segment.substr(1, segment.size() - 2).find_first_of("{}") != std::string_view::npos) {
        refuse("'" + std::string(segment) + "' is not a {name} segment");
      }
      for (std::string_view name : names) {
        if (name == segment) refuse("the parameter " + std::string(segment) + " is repeated");
      }
      names.push_back(segment);
    }
    route.segments.emplace_back(segment);
  }
  for (const Route& existing : routes_) {
    if (existing.method == method && existing.segments == route.segments) {
      refuse("already routed");
    }
  }
  routes_.push_back(std::move(route));
  return *this;
}

bool RouteTable::matches(const Route& route, std::string_view path, RouteParams* params) {
  if (path.empty() || path.front() != '/') return false;
  std::size_t start = 1;
  for (std::size_t i = 0; i < route.segments.size(); ++i) {
    const std::size_t slash = path.find('/', start);
    const bool last = i + 1 == route.segments.size();
    // The last pattern segment takes the rest of the path only if the rest holds no '/'.
    if (last != (slash == std::string_view::npos)) return false;
    const std::string_view segment = path.substr(start, last ? path.npos : slash - start);
    const std::string& wanted = route.segments[i];
    if (is_parameter(wanted)) {
      if (segment.empty()) return false;
      if (params != nullptr) {
        params->values_.emplace_back(std::string_view(wanted).substr(1, wanted.size() - 2),
                                     std::string(segment));
      }
    } else if (segment != wanted) {
      return false;
    }
    start = slash + 1;
  }
  return true;
}

bool RouteTable::is_open(const RequestHead& head) const {
  for (const Route& route : routes_) {
    if (route.access == Access::open && route.method == head.method &&
        matches(route, head.path, nullptr)) {
      return true;
    }
  }
  return false;
}

Response RouteTable::dispatch(const Request& request) const {
  std::vector<std::string_view> other_methods;  // that the path's patterns take
  const Route* path_route = nullptr;            // the first of those patterns
  for (const Route& route : routes_) {
    if (route.method != request.head.method) {
      if (matches(route, request.head.path, nullptr) &&
          std::find(other_methods.begin(), other_methods.end(), route.method) ==
              other_methods.end()) {
        other_methods.push_back(route.method);
        if (path_route == nullptr) path_route = &route;
      }
      continue;
    }
    RouteParams params;
    if (!matches(route, request.head.path, &params)) continue;
    Response response = route.handler(request, params);
    response.route = route.pattern;
    return response;
  }
  if (other_methods.empty()) {
    Response response =
        unmatched_(404, "no route " + request.head.method + " " + request.head.path);
    response.route = "";
    return response;
  }
  std::string allowed;
  for (std::string_view method : other_methods) {
    allowed += (allowed.empty() ? "" : ", ") + std::string(method);
  }
  Response response =
      unmatched_(405, request.head.path + " takes " + allowed + ", not " + request.head.method);
  response.headers.emplace_back("Allow", allowed);
  response.route = path_route->pattern;
  return response;
}

std::vector<std::string> RouteTable::patterns() const {
  std::vector<std::string> out;
  for (const Route& route : routes_) {
    bool seen = false;
    for (const std::string& pattern : out) seen = seen || pattern == route.pattern;
    if (!seen) out.push_back(route.pattern);
  }
  return out;
}

// The query's name=value pairs in order (a pair without '=' has an empty value).
std::vector<std::pair<std::string, std::string>> query_parameters(const std::string& target) {
  std::vector<std::pair<std::string, std::string>> pairs;
  const std::size_t mark = target.find('?');
  if (mark == std::string::npos) return pairs;
  const std::string query = target.substr(mark + 1);
  std::size_t at = 0;
  while (at < query.size()) {
    const std::size_t end = std::min(query.find('&', at), query.size());
    const std::string pair = query.substr(at, end - at);
    at = end + 1;
    if (pair.empty()) continue;
    const std::size_t equals = pair.find('=');
    pairs.emplace_back(pair.substr(0, equals),
                       equals == std::string::npos ? "" : pair.substr(equals + 1));
  }
  return pairs;
}

}  // namespace sandboxd::door

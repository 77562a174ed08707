// Routes in one place: a daemon declares each of its routes once, as a method, a
// pattern and a handler, and the table does the rest both daemons used to write by hand: it
// matches a request's path, hands the handler the pattern's parameters, names the answer by its
// pattern (the access log's and the metrics' label, so a made-up path never becomes a label),
// says which routes need no credentials, and answers what matches nothing: 404 for a path no
// pattern takes, 405 with an `Allow` header for a path whose patterns take other methods.
//
// A pattern is '/'-separated segments, each literal or `{name}`; `{name}` matches one non-empty
// segment, so "/v1/sandboxes/{id}" never matches "/v1/sandboxes/a/b" nor "/v1/sandboxes/".
// Lookup walks the routes in the order they were added (a dozen per daemon, each compared
// segment by segment without copying).
//
// Thread model: built before the server runs, then only read (from the I/O thread by
// is_public, from workers by dispatch); nothing in it changes after the last add().
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http_door.hpp"

namespace sandboxd::door {

// The values of a matched pattern's `{name}` segments.
class RouteParams {
 public:
  // The value of `{name}`; throws std::out_of_range naming it when the pattern has none (a
  // handler asking for a parameter its own pattern lacks: a programming error).
  const std::string& operator[](std::string_view name) const;

 private:
  friend class RouteTable;
  std::vector<std::pair<std::string_view, std::string>> values_;  // names view the pattern
};

class RouteTable {
 public:
  using Handler = std::function<Response(const Request&, const RouteParams&)>;
  // How this daemon answers a request no route takes, in its own error shape: status 404
  // (`message` "no route GET /x") or 405 (`message` names the methods the path takes; the table
  // adds the Allow header).
  using UnmatchedAnswer = std::function<Response(int status, const std::string& message)>;
  enum class Access {
    credentialed,  // the daemon's credential is checked before the body is read
    open,          // needs none (health): admitted as a public route, takes no body
  };

  explicit RouteTable(UnmatchedAnswer unmatched);

  // Throws std::invalid_argument naming the pattern when it does not start with '/', holds an
  // empty or unclosed `{}`, repeats a parameter name, or is already routed for this method.
  RouteTable& add(std::string method, std::string pattern, Handler handler,
                  Access access = Access::credentialed);

  // Whether the request's head names an open route (for a daemon's admission).
  bool is_open(const RequestHead& head) const;
  // The matching route's answer, its `route` set to the pattern; otherwise the unmatched answer,
  // a 405's `route` the pattern of the path, a 404's "" (the access log then shows the path;
  // metrics count it under one label).
  Response dispatch(const Request& request) const;
  // Each pattern once, in the order added: every label dispatch can give a matched request.
  std::vector<std::string> patterns() const;

 private:
  struct Route {
    std::string method;
    std::string pattern;
    std::vector<std::string> segments;  // "{id}" kept as written
    Handler handler;
    Access access;
  };
  // Whether `path` fits `route`'s segments; fills `params` (may be null) when it does.
  static bool matches(const Route& route, std::string_view path, RouteParams* params);

  UnmatchedAnswer unmatched_;
  std::vector<Route> routes_;
};

// A request target's query as name=value pairs in order (a pair without '=' has an empty value;
// nothing is decoded).
std::vector<std::pair<std::string, std::string>> query_parameters(const std::string& target);

}  // namespace sandboxd::door

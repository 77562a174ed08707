// What a relay or a proxy must strip and pass through of HTTP/1.1 headers (RFC 9110 §7.6.1,
// and what Go's ReverseProxy strips): the relay (relay.cpp) and the egress proxy share it.
#pragma once

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <string>
#include <string_view>

namespace sandboxd::core {

// Whether the Connection header lists `token` (case-insensitive, comma separated).
inline bool lists_token(std::string_view value, std::string_view token) {
  std::size_t start = 0;
  while (start <= value.size()) {
    std::size_t end = value.find(',', start);
    if (end == std::string_view::npos) end = value.size();
    std::string_view item = value.substr(start, end - start);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (boost::beast::iequals(boost::beast::string_view(item.data(), item.size()),
                              boost::beast::string_view(token.data(), token.size()))) {
      return true;
    }
    start = end + 1;
  }
  return false;
}

// Removes the hop-by-hop fields of `fields` (RFC 9110 §7.6.1 and what Go's ReverseProxy
// strips), the ones the Connection header names included.
template <class Fields>
inline void strip_hop_by_hop(Fields& fields) {
  const std::string connection(fields[boost::beast::http::field::connection]);
  std::size_t start = 0;
  while (start < connection.size()) {
    std::size_t end = connection.find(',', start);
    if (end == std::string::npos) end = connection.size();
    std::string name = connection.substr(start, end - start);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    // Never one the framing depends on (Beast reframes those itself), nor Host: a sender's
    // `Connection: host` must not make a request reach its destination with no name, or with
    // a name nobody checked.
    if (!name.empty() && !boost::beast::iequals(name, "content-length") &&
        !boost::beast::iequals(name, "transfer-encoding") && !boost::beast::iequals(name, "host")) {
      fields.erase(name);
    }
    start = end + 1;
  }
  for (const char* name : {"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
                           "Proxy-Authorization", "TE", "Trailer", "Upgrade"}) {
    fields.erase(name);
  }
}

}  // namespace sandboxd::core

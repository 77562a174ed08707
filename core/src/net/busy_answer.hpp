// What the relay and the egress proxy do with a connection past their bound: a 503 written
// without waiting (a client that does not read gets nothing more) and the socket closed.
#pragma once

#include <sys/socket.h>

#include <boost/asio/ip/tcp.hpp>
#include <string>

namespace sandboxd::core::net {

inline void answer_busy_and_close(boost::asio::ip::tcp::socket& socket) {
  static const std::string kBusy =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n"
      "Retry-After: 1\r\n\r\n";
  boost::system::error_code ignored;
  socket.non_blocking(true, ignored);
  ::send(socket.native_handle(), kBusy.data(), kBusy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  socket.close(ignored);
}

}  // namespace sandboxd::core::net

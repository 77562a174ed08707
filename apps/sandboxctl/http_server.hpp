// A small HTTP/1.1 server for `sandboxctl serve` on Boost.Beast, over a unix socket or
// 127.0.0.1 TCP. Thread model: one acceptor thread, and one thread per connection doing
// synchronous reads and writes, so a request that blocks (a slow create) holds only its own
// connection; at most `max_connections` run at once (a connection beyond that is answered 503
// and closed). stop() closes the acceptor, wakes idle keep-alive connections and waits for the
// in-flight requests to finish.
#pragma once

#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "sandboxd/logger.hpp"

namespace sandboxctl {

struct HttpRequest {
  std::string method;
  std::string target;  // path and query as sent
  std::string body;
  std::string authorization;  // the Authorization header, "" when absent
  bool over_tcp = false;      // false: the unix socket
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
};

struct ListenAddress {
  bool tcp = false;
  std::string unix_path;  // unix socket path (tcp == false)
  std::string host;       // tcp: always a loopback address
  int port = 0;           // tcp; 0 lets the kernel choose
  std::string display() const;
};

// "unix:PATH", a path with a '/', or "127.0.0.1:PORT" / "localhost:PORT". Anything else (a
// non-loopback host included) throws std::invalid_argument naming the value.
ListenAddress parse_listen_address(const std::string& text);

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  static constexpr std::size_t kMaxBodyBytes = 64 * 1024;

  HttpServer(ListenAddress address, Handler handler, std::shared_ptr<sandboxd::Logger> logger,
             std::size_t max_connections = 256);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds (a unix socket is created mode 0600, replacing a stale file); throws
  // std::runtime_error naming the address. After it, bound() says where (a TCP port of 0 is
  // resolved).
  void bind();
  const ListenAddress& bound() const { return address_; }
  // Accepts until stop(); returns once every connection thread has finished.
  void run();
  // From any thread, idempotent.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  ListenAddress address_;
};

}  // namespace sandboxctl

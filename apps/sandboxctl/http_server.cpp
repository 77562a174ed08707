#include "http_server.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <array>
#include <cstring>
#include <chrono>
#include <stdexcept>

#include "sandboxd/host_fs.hpp"

namespace sandboxctl {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Generic = asio::generic::stream_protocol;
using GenericAcceptor = asio::basic_socket_acceptor<Generic>;

std::string ListenAddress::display() const {
  return tcp ? "http://" + host + ":" + std::to_string(port) : "unix:" + unix_path;
}

ListenAddress parse_listen_address(const std::string& text) {
  ListenAddress address;
  if (text.rfind("unix:", 0) == 0 || text.find('/') != std::string::npos) {
    address.unix_path = text.rfind("unix:", 0) == 0 ? text.substr(5) : text;
    if (address.unix_path.empty()) {
      throw std::invalid_argument("--listen '" + text + "': the unix socket path is empty");
    }
    if (address.unix_path.size() >= sizeof(sockaddr_un::sun_path)) {
      throw std::invalid_argument("--listen '" + text +
                                  "': a unix socket path must be shorter than " +
                                  std::to_string(sizeof(sockaddr_un::sun_path)) + " bytes");
    }
    return address;
  }
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    throw std::invalid_argument("--listen '" + text + "': expected unix:PATH or 127.0.0.1:PORT");
  }
  address.tcp = true;
  address.host = text.substr(0, colon);
  if (address.host == "localhost") address.host = "127.0.0.1";
  if (address.host != "127.0.0.1" && address.host != "::1" && address.host != "[::1]") {
    throw std::invalid_argument("--listen '" + text +
                                "': serve listens on loopback only (127.0.0.1 or ::1), got host '" +
                                address.host + "'");
  }
  if (address.host == "[::1]") address.host = "::1";
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value < 0 || value > 65535) {
    throw std::invalid_argument("--listen '" + text + "': port '" + port +
                                "' is not a number from 0 to 65535");
  }
  address.port = static_cast<int>(value);
  return address;
}

namespace {

// Makes `path` ours to listen on, or throws naming who has it: an flock on "{path}.lock"
// (held for the server's life, so two servers racing for one path cannot both win), then a
// connect probe, so a socket some other program answers on is never unlinked from under it.
// A socket file nobody answers on is stale (a killed server's) and is removed.
sandboxd::host_fs::UniqueFd claim_socket_path(const std::string& path) {
  const std::string lock_path = path + ".lock";
  sandboxd::host_fs::UniqueFd lock(
      ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) {
    throw std::runtime_error("cannot open " + lock_path + ": " + std::strerror(errno));
  }
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    throw std::runtime_error(path + " is in use: another server holds " + lock_path);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return lock;
  if (!S_ISSOCK(st.st_mode)) throw std::runtime_error(path + " exists and is not a socket");
  sandboxd::host_fs::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  if (probe && ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address),
                         sizeof address) == 0) {
    throw std::runtime_error(path + " is in use: a process answers on it");
  }
  ::unlink(path.c_str());
  return lock;
}

}  // namespace

struct HttpServer::Impl {
  sandboxd::host_fs::UniqueFd path_lock;  // held while a unix socket is ours
  Handler handler;
  std::shared_ptr<sandboxd::Logger> logger;
  std::size_t max_connections;
  asio::io_context io;  // owns the sockets' executor; every operation here is synchronous
  std::unique_ptr<GenericAcceptor> acceptor;

  std::mutex mutex;  // guards stopping, connections, next_id
  std::condition_variable drained;
  bool stopping = false;
  std::map<std::uint64_t, int> connections;  // id → native fd, for waking them on stop
  std::uint64_t next_id = 0;

  void serve_connection(Generic::socket socket, std::uint64_t id, bool over_tcp);
  void finish(std::uint64_t id) {
    std::lock_guard lock(mutex);
    connections.erase(id);
    drained.notify_all();
  }
};

HttpServer::HttpServer(ListenAddress address, Handler handler,
                       std::shared_ptr<sandboxd::Logger> logger, std::size_t max_connections)
    : impl_(std::make_unique<Impl>()), address_(std::move(address)) {
  impl_->handler = std::move(handler);
  impl_->logger = std::move(logger);
  impl_->max_connections = max_connections;
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::bind() {
  try {
    if (address_.tcp) {
      const asio::ip::tcp::endpoint endpoint(asio::ip::make_address(address_.host),
                                             static_cast<unsigned short>(address_.port));
      impl_->acceptor = std::make_unique<GenericAcceptor>(impl_->io, Generic::endpoint(endpoint));
      asio::ip::tcp::endpoint bound;
      socklen_t size = static_cast<socklen_t>(bound.capacity());
      ::getsockname(impl_->acceptor->native_handle(), bound.data(), &size);
      address_.port = bound.port();
    } else {
      impl_->path_lock = claim_socket_path(address_.unix_path);
      const asio::local::stream_protocol::endpoint endpoint(address_.unix_path);
      const mode_t old_mask = ::umask(0077);  // created 0600, never briefly wider
      try {
        impl_->acceptor = std::make_unique<GenericAcceptor>(impl_->io, Generic::endpoint(endpoint));
      } catch (...) {
        ::umask(old_mask);
        throw;
      }
      ::umask(old_mask);
      ::chmod(address_.unix_path.c_str(), 0600);
    }
  } catch (const boost::system::system_error& e) {
    throw std::runtime_error("cannot listen on " + address_.display() + ": " + e.code().message());
  }
}

void HttpServer::run() {
  if (!impl_->acceptor) bind();
  while (true) {
    Generic::socket socket(impl_->io);
    boost::system::error_code ec;
    impl_->acceptor->accept(socket, ec);
    {
      std::lock_guard lock(impl_->mutex);
      if (impl_->stopping) break;
    }
    if (ec) {
      if (ec == asio::error::interrupted || ec == asio::error::connection_aborted) continue;
      impl_->logger->warning("serve: accept failed: " + ec.message());
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    std::uint64_t id = 0;
    bool over_capacity = false;
    {
      std::lock_guard lock(impl_->mutex);
      over_capacity = impl_->connections.size() >= impl_->max_connections;
      if (!over_capacity) {
        id = ++impl_->next_id;
        impl_->connections[id] = socket.native_handle();
      }
    }
    if (over_capacity) {
      const std::string busy =
          "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: "
          "close\r\nContent-Length: 61\r\n\r\n{\"error\":{\"kind\":\"busy\",\"message\":\"too many "
          "connections\"}}";
      boost::system::error_code ignored;
      asio::write(socket, asio::buffer(busy), ignored);
      continue;
    }
    // A connection that sends nothing for 30 s is closed, so it cannot pin a thread forever.
    const timeval idle{30, 0};
    ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &idle, sizeof idle);
    std::thread(&Impl::serve_connection, impl_.get(), std::move(socket), id, address_.tcp).detach();
  }
  std::unique_lock lock(impl_->mutex);
  impl_->drained.wait(lock, [&] { return impl_->connections.empty(); });
}

void HttpServer::stop() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->stopping) return;
  impl_->stopping = true;
  // shutdown() wakes a blocked accept() (it then fails) and idle keep-alive reads; a request
  // being handled still writes its answer.
  if (impl_->acceptor) ::shutdown(impl_->acceptor->native_handle(), SHUT_RDWR);
  for (const auto& [id, fd] : impl_->connections) ::shutdown(fd, SHUT_RD);
}

void HttpServer::Impl::serve_connection(Generic::socket socket, std::uint64_t id, bool over_tcp) {
  beast::flat_buffer buffer;
  while (true) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(kMaxBodyBytes);
    parser.header_limit(16 * 1024);
    beast::error_code ec;
    http::read(socket, buffer, parser, ec);
    if (ec == http::error::body_limit || ec == http::error::header_limit) {
      http::response<http::string_body> too_large{http::status::payload_too_large, 11};
      too_large.set(http::field::content_type, "application/json");
      too_large.body() = "{\"error\":{\"kind\":\"usage\",\"message\":\"request larger than " +
                         std::to_string(kMaxBodyBytes) + " bytes\"}}";
      too_large.keep_alive(false);
      too_large.prepare_payload();
      http::write(socket, too_large, ec);
      // A lingering close: the client may still be sending the body, and closing now would
      // reset the connection before it reads the answer. Stop sending, then discard what
      // still arrives (bounded in bytes and, by a short receive timeout, in time).
      boost::system::error_code ignored;
      socket.shutdown(Generic::socket::shutdown_send, ignored);
      const timeval drain{1, 0};
      ::setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &drain, sizeof drain);
      std::array<char, 16 * 1024> sink;
      for (std::size_t drained = 0; drained < 16 * kMaxBodyBytes;) {
        const std::size_t n = socket.read_some(asio::buffer(sink), ignored);
        if (ignored || n == 0) break;
        drained += n;
      }
      break;
    }
    if (ec) break;  // closed, timed out, malformed, or woken by stop()
    const auto& message = parser.get();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.body = message.body();
    request.authorization = std::string(message[http::field::authorization]);
    request.over_tcp = over_tcp;
    HttpResponse answer;
    try {
      answer = handler(request);
    } catch (const std::exception& e) {
      answer = {500, "application/json",
                std::string("{\"error\":{\"kind\":\"internal\",\"message\":\"") + "internal error" +
                    "\"}}"};
      logger->error(std::string("serve: handler failed: ") + e.what());
    }
    bool stopping_now = false;
    {
      std::lock_guard lock(mutex);
      stopping_now = stopping;
    }
    http::response<http::string_body> response{static_cast<http::status>(answer.status),
                                               message.version()};
    response.set(http::field::content_type, answer.content_type);
    response.keep_alive(message.keep_alive() && !stopping_now);
    response.body() = std::move(answer.body);
    response.prepare_payload();
    http::write(socket, response, ec);
    if (ec || !response.keep_alive()) break;
  }
  boost::system::error_code ignored;
  socket.shutdown(Generic::socket::shutdown_both, ignored);
  socket.close(ignored);
  finish(id);
}

}  // namespace sandboxctl

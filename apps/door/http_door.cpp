// The doors' HTTP server (http_door.hpp): binding, accepting, evictions when full and the stop.
// What one connection goes through is http_connection.cpp; the state both share,
// http_door_impl.hpp.
#include "http_door.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "http_door_impl.hpp"

namespace sandboxd::door {

std::string ListenAddress::display() const {
  if (!tcp) return "unix:" + unix_path;
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

const std::string& RequestHead::header(const std::string& lower_name) const {
  static const std::string kNone;
  auto it = headers.find(lower_name);
  return it == headers.end() ? kNone : it->second;
}

std::string loggable_path(const std::string& target) {
  std::string path = target.substr(0, target.find('?'));
  std::string out = path.substr(0, 200);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (path.size() > 200) out += "...";
  return out;
}

namespace {

// Makes `path` ours to listen on (see Server::bind).
host_fs::UniqueFd claim_socket_path(const std::string& path) {
  const std::string lock_path = path + ".lock";
  host_fs::UniqueFd lock(
      ::open(lock_path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!lock) {
    throw ListenError("cannot listen on unix:" + path + ": cannot open " + lock_path + ": " +
                          std::strerror(errno),
                      false);
  }
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    throw ListenError(
        "cannot listen on unix:" + path + ": it is in use: another server holds " + lock_path,
        true);
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return lock;
  if (!S_ISSOCK(st.st_mode)) {
    throw ListenError("cannot listen on unix:" + path + ": it exists and is not a socket", false);
  }
  host_fs::UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  if (probe &&
      ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0) {
    throw ListenError("cannot listen on unix:" + path + ": it is in use: a process answers on it",
                      true);
  }
  ::unlink(path.c_str());  // stale: nobody answers, and the lock is ours
  return lock;
}

}  // namespace

void Server::Impl::forget(std::uint64_t id) {
  // Erasing drops the map's reference; the closing connection is still held by its caller.
  if (connections.erase(id) > 0) --open_connections;
  if (stopping && connections.empty()) grace_timer.cancel();
}

void Server::Impl::accept() {
  acceptor->async_accept(
      [self = shared_from_this()](const boost::system::error_code& ec, Generic::socket socket) {
        self->on_accept(ec, std::move(socket));
      });
}

void Server::Impl::on_accept(const boost::system::error_code& ec, Generic::socket socket) {
  if (stopping) return;
  if (ec) {
    if (ec == asio::error::operation_aborted) return;
    // Out of descriptors or memory: the pending connection stays in the backlog, so retrying
    // at once would spin. Say so (at most once a minute) and try again shortly.
    if (Clock::now() - last_accept_warning > std::chrono::minutes(1)) {
      last_accept_warning = Clock::now();
      log(LogLevel::warning, "accept failed: " + ec.message() + " (" +
                                 std::to_string(connections.size()) +
                                 " connections open); retrying");
    }
    accept_retry.expires_after(std::chrono::milliseconds(100));
    accept_retry.async_wait([self = shared_from_this()](const boost::system::error_code& wait_ec) {
      if (!wait_ec && !self->stopping) self->accept();
    });
    return;
  }
  try {
    if (connections.size() >= options.limits.max_connections && !evict_one()) {
      refuse(std::move(socket));
    } else {
      const std::uint64_t id = ++next_id;
      auto connection = make_connection(shared_from_this(), std::move(socket), id, bound.tcp);
      connections.emplace(id, connection);
      ++open_connections;
      connection->start();
    }
  } catch (const std::exception& e) {
    log(LogLevel::warning, std::string("could not take a connection: ") + e.what());
  }
  accept();
}

bool Server::Impl::evict_one() {
  std::shared_ptr<DoorConnection> victim;
  for (const auto& [id, connection] : connections) {
    if (!connection->evictable()) continue;
    if (!victim || connection->eviction_rank() < victim->eviction_rank() ||
        (connection->eviction_rank() == victim->eviction_rank() &&
         connection->phase_since() < victim->phase_since())) {
      victim = connection;
    }
  }
  if (!victim) return false;
  ++evicted;
  victim->close();
  return true;
}

// Every slot serves an admitted request: 503 without a connection object, written once (a
// short answer fits the socket buffer) and closed.
void Server::Impl::refuse(Generic::socket socket) {
  ++refused_busy;
  const Response busy = error(503, "busy",
                              "all " + std::to_string(options.limits.max_connections) +
                                  " connections are serving requests; try again shortly");
  const std::string text =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: " + busy.content_type +
      "\r\nContent-Length: " + std::to_string(busy.body.size()) +
      "\r\nConnection: close\r\nRetry-After: 1\r\n\r\n" + busy.body;
  boost::system::error_code ignored;
  socket.non_blocking(true, ignored);
  ::send(socket.native_handle(), text.data(), text.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  socket.shutdown(Generic::socket::shutdown_both, ignored);
  socket.close(ignored);
}

void Server::Impl::begin_stop() {
  if (stopping) return;
  stopping = true;
  stop_started = Clock::now();
  boost::system::error_code ignored;
  if (acceptor) acceptor->close(ignored);
  accept_retry.cancel();
  std::vector<std::shared_ptr<DoorConnection>> open;
  for (const auto& [id, connection] : connections) open.push_back(connection);
  std::size_t in_flight = 0;
  for (const auto& connection : open) {
    if (connection->has_request_in_flight()) {
      ++in_flight;
    } else {
      connection->close();  // nothing admitted in flight: a partial request is never handled
    }
  }
  log(LogLevel::info, "stopped accepting; " + std::to_string(in_flight) +
                          " requests in flight get " +
                          std::to_string(options.limits.shutdown_grace.count()) + " ms to finish");
  if (connections.empty()) return;
  grace_timer.expires_after(options.limits.shutdown_grace);
  grace_timer.async_wait([self = shared_from_this()](const boost::system::error_code& ec) {
    if (ec) return;  // every connection finished in time
    std::vector<std::shared_ptr<DoorConnection>> left;
    for (const auto& [id, connection] : self->connections) left.push_back(connection);
    self->log(LogLevel::warning, "shutdown grace over: closing " + std::to_string(left.size()) +
                                     " connections still open (stuck readers, writers or "
                                     "handlers)");
    for (const auto& connection : left) connection->close();
  });
}

Server::Server(ServerOptions options) : impl_(std::make_shared<Impl>(std::move(options))) {
  impl_->bound = impl_->options.address;
}

Server::~Server() {
  // Connections and queued completions hold the Impl: close what is open, then run what the
  // closing made ready (aborted reads, a late handler's answer), so nothing keeps it alive.
  impl_->stop_requested.store(true);
  impl_->stopping = true;
  boost::system::error_code ignored;
  if (impl_->acceptor) impl_->acceptor->close(ignored);
  impl_->accept_retry.cancel();
  impl_->grace_timer.cancel();
  std::vector<std::shared_ptr<DoorConnection>> left;
  for (const auto& [id, connection] : impl_->connections) left.push_back(connection);
  for (const auto& connection : left) connection->close();
  left.clear();
  impl_->io.restart();
  impl_->io.poll();
}

void Server::bind() {
  ListenAddress& address = impl_->bound;
  try {
    if (address.tcp) {
      const asio::ip::tcp::endpoint endpoint(asio::ip::make_address(address.host),
                                             static_cast<unsigned short>(address.port));
      impl_->acceptor = std::make_unique<GenericAcceptor>(impl_->io, Generic::endpoint(endpoint));
      asio::ip::tcp::endpoint resolved;
      socklen_t size = static_cast<socklen_t>(resolved.capacity());
      ::getsockname(impl_->acceptor->native_handle(), resolved.data(), &size);
      address.port = resolved.port();
    } else {
      impl_->path_lock = claim_socket_path(address.unix_path);
      const asio::local::stream_protocol::endpoint endpoint(address.unix_path);
      const mode_t old_mask = ::umask(0077);  // created 0600, never briefly wider
      try {
        impl_->acceptor = std::make_unique<GenericAcceptor>(impl_->io, Generic::endpoint(endpoint));
      } catch (...) {
        ::umask(old_mask);
        throw;
      }
      ::umask(old_mask);
      ::chmod(address.unix_path.c_str(), 0600);
    }
  } catch (const boost::system::system_error& e) {
    throw ListenError("cannot listen on " + address.display() + ": " + e.code().message(),
                      e.code() == asio::error::address_in_use);
  }
}

const ListenAddress& Server::bound() const {
  return impl_->bound;
}

std::size_t Server::run() {
  if (!impl_->acceptor) bind();
  impl_->accept();
  while (true) {
    try {
      impl_->io.run();
      break;
    } catch (const std::exception& e) {
      // A handler on the I/O thread threw: report it and keep serving.
      impl_->log(LogLevel::error, std::string("I/O handler failed: ") + e.what());
    }
  }
  // Every connection is closed. Handlers that still run had their grace; wait for them only
  // within it.
  const Clock::time_point deadline =
      (impl_->stopping ? impl_->stop_started : Clock::now()) + impl_->options.limits.shutdown_grace;
  if (impl_->pool.wait_idle(deadline)) return 0;
  const WorkerPool::Counts left = impl_->pool.counts();
  impl_->log(LogLevel::warning, std::to_string(left.running) +
                                    " requests are still being handled after the grace period");
  return left.running + left.queued;
}

void Server::stop() {
  if (impl_->stop_requested.exchange(true)) return;
  asio::post(impl_->io, [weak = std::weak_ptr<Impl>(impl_)] {
    if (auto impl = weak.lock()) impl->begin_stop();
  });
}

Server::Stats Server::stats() const {
  return {impl_->open_connections.load(), impl_->evicted.load(),
          impl_->refused_busy.load(),     impl_->timed_out.load(),
          impl_->open_streams.load(),     impl_->dropped_streams.load()};
}

}  // namespace sandboxd::door

// The doors' HTTP server's shared state (http_door.hpp), private to its two files: the server
// (http_door.cpp: binding, accepting, evicting, stopping) and one connection's life
// (http_connection.cpp: head, admission, body, handler, answer, keep-alive, event stream).
// Everything here is touched on the I/O thread only, but the atomics (read by stats()) and the
// worker pool (its own lock).
#pragma once

#include <atomic>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "http_door.hpp"
#include "sandboxd/host_fs.hpp"
#include "worker_pool.hpp"

namespace sandboxd::door {

namespace asio = boost::asio;
using Generic = asio::generic::stream_protocol;
using GenericAcceptor = asio::basic_socket_acceptor<Generic>;
using Clock = std::chrono::steady_clock;

// One accepted connection, as the server's bookkeeping sees it (evictions and the stop).
class DoorConnection {
 public:
  virtual ~DoorConnection() = default;
  virtual void start() = 0;  // once, after it is counted in `connections`
  // A slot another connection may have: its request presented no credentials (still coming,
  // refused, or a public route's), or it has none in flight.
  virtual bool evictable() const = 0;
  virtual bool has_request_in_flight() const = 0;
  // Evictions prefer connections nobody has vouched for, then lingering, then idle ones.
  virtual int eviction_rank() const = 0;
  virtual Clock::time_point phase_since() const = 0;
  virtual void close() = 0;  // idempotent
};

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  explicit Impl(ServerOptions o)
      : options(std::move(o)),
        pool(options.limits.worker_threads, options.limits.queued_requests),
        accept_retry(io),
        grace_timer(io) {}

  ServerOptions options;
  asio::io_context io{1};
  std::unique_ptr<GenericAcceptor> acceptor;
  host_fs::UniqueFd path_lock;  // held while a unix socket path is ours
  ListenAddress bound;
  WorkerPool pool;
  asio::steady_timer accept_retry;
  asio::steady_timer grace_timer;

  // I/O thread only.
  std::map<std::uint64_t, std::shared_ptr<DoorConnection>> connections;
  std::uint64_t next_id = 0;
  bool stopping = false;
  Clock::time_point stop_started{};
  Clock::time_point last_accept_warning{};

  std::size_t streams = 0;  // event streams being sent (I/O thread only)

  std::atomic<bool> stop_requested{false};
  std::atomic<std::size_t> open_connections{0}, evicted{0}, refused_busy{0}, timed_out{0};
  std::atomic<std::size_t> open_streams{0}, dropped_streams{0};

  void accept();
  void on_accept(const boost::system::error_code& ec, Generic::socket socket);
  bool evict_one();
  void refuse(Generic::socket socket);
  void begin_stop();
  void forget(std::uint64_t id);
  void log(LogLevel level, const std::string& message) const {
    if (options.logger) options.logger->log(level, options.name + ": " + message);
  }
  Response error(int status, const std::string& kind, const std::string& message) const {
    if (options.error_body) return options.error_body(status, kind, message);
    return {status, "text/plain", message + "\n", {}, ""};
  }
};

// A connection for `socket` (http_connection.cpp); it serves once started.
std::shared_ptr<DoorConnection> make_connection(std::shared_ptr<Server::Impl> impl,
                                                Generic::socket socket, std::uint64_t id,
                                                bool over_tcp);

}  // namespace sandboxd::door

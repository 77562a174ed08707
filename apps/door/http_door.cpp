#include "http_door.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/basic_socket_acceptor.hpp>
#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <new>

#include "sandboxd/host_fs.hpp"
#include "worker_pool.hpp"

namespace sandboxd::door {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using Generic = asio::generic::stream_protocol;
using GenericAcceptor = asio::basic_socket_acceptor<Generic>;
using Clock = std::chrono::steady_clock;

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

// "127.0.0.1:50312" for a TCP peer, "unix" otherwise.
std::string peer_of(const Generic::socket& socket) {
  boost::system::error_code ec;
  const Generic::endpoint remote = socket.remote_endpoint(ec);
  if (ec) return "?";
  const auto* address = static_cast<const sockaddr*>(remote.data());
  char text[INET6_ADDRSTRLEN] = "?";
  if (address->sa_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(address);
    ::inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    return std::string(text) + ":" + std::to_string(ntohs(v4->sin_port));
  }
  if (address->sa_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(address);
    ::inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    return "[" + std::string(text) + "]:" + std::to_string(ntohs(v6->sin6_port));
  }
  return "unix";
}

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

class Connection;

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
  std::map<std::uint64_t, std::shared_ptr<Connection>> connections;
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

// One accepted connection, driven by the I/O thread; a worker only runs its handler and posts
// the answer back. Every wait has a deadline (`timer_`); `generation_` makes a deadline armed
// for an earlier phase a no-op.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class Phase { head, body, handling, writing, idle, lingering, streaming, closed };

  Connection(std::shared_ptr<Server::Impl> impl, Generic::socket socket, std::uint64_t id,
             bool over_tcp)
      : impl_(std::move(impl)),
        socket_(std::move(socket)),
        timer_(impl_->io),
        id_(id),
        over_tcp_(over_tcp),
        buffer_(impl_->options.limits.max_header_bytes + kBufferSlack) {}

  void start() {
    peer_ = over_tcp_ ? peer_of(socket_) : "unix";
    read_head(/*first=*/true);
  }

  // A slot another connection may have: its request presented no credentials (still coming,
  // refused, or a public route's), or it has none in flight.
  bool evictable() const {
    return !credentialed_ || phase_ == Phase::idle || phase_ == Phase::lingering;
  }
  bool has_request_in_flight() const {
    return phase_ == Phase::handling || phase_ == Phase::writing;
  }
  // Evictions prefer connections nobody has vouched for, then lingering, then idle ones.
  int eviction_rank() const {
    if (phase_ == Phase::idle) return 2;
    if (phase_ == Phase::lingering) return 1;
    return 0;
  }
  Clock::time_point phase_since() const { return phase_since_; }

  void close() {
    if (phase_ == Phase::closed) return;
    phase_ = Phase::closed;
    if (stream_) {
      stream_.reset();
      --impl_->streams;
      --impl_->open_streams;
    }
    disarm();
    boost::system::error_code ignored;
    socket_.shutdown(Generic::socket::shutdown_both, ignored);
    socket_.close(ignored);
    impl_->forget(id_);  // may drop the last reference but the caller's
  }

 private:
  void set_phase(Phase phase) {
    phase_ = phase;
    phase_since_ = Clock::now();
  }

  void arm(std::chrono::milliseconds limit) {
    ++generation_;
    timer_.expires_after(limit);
    timer_.async_wait(
        [self = shared_from_this(), generation = generation_](const boost::system::error_code& ec) {
          if (ec || generation != self->generation_) return;
          self->on_deadline();
        });
  }
  void disarm() {
    ++generation_;
    timer_.cancel();
  }

  void on_deadline() {
    if (phase_ == Phase::lingering) {
      close();
      return;
    }
    ++impl_->timed_out;
    if (phase_ == Phase::streaming) ++impl_->dropped_streams;  // it did not take what was sent
    if (impl_->options.logger && impl_->options.logger->enabled(LogLevel::debug)) {
      impl_->log(LogLevel::debug,
                 "closed a connection from " + peer_ + " at its " + phase_name() + " deadline");
    }
    close();
  }

  const char* phase_name() const {
    switch (phase_) {
      case Phase::head:
        return "request head";
      case Phase::body:
        return "request body";
      case Phase::writing:
        return "write";
      case Phase::idle:
        return "keep-alive";
      case Phase::streaming:
        return "event stream write";
      default:
        return "other";
    }
  }

  // The first request's head, or a kept-alive connection's next one: that one may take
  // `idle_timeout` to start, and then has `head_timeout` like any other (a pipelined one is
  // already in the buffer).
  void read_head(bool first) {
    credentialed_ = false;
    if (first || buffer_.size() > 0) {
      begin_head();
      return;
    }
    set_phase(Phase::idle);
    arm(impl_->options.limits.idle_timeout);
    socket_.async_wait(Generic::socket::wait_read,
                       [self = shared_from_this()](const boost::system::error_code& ec) {
                         if (ec || self->phase_ != Phase::idle) return;
                         self->begin_head();
                       });
  }

  void begin_head() {
    set_phase(Phase::head);
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(impl_->options.limits.max_header_bytes));
    // No body limit while the head is read: Beast would refuse a large Content-Length before
    // `admit` sees the credentials. The declared length is checked after admission, and the
    // limit set before any body byte is read. (Not boost::none: Beast 1.74 compares the
    // length with the optional, and every length is greater than none.)
    parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    arm(impl_->options.limits.head_timeout);
    http::async_read_header(socket_, buffer_, *parser_,
                            [self = shared_from_this()](const boost::system::error_code& ec,
                                                        std::size_t) { self->on_head(ec); });
  }

  void on_head(const boost::system::error_code& ec) {
    if (phase_ == Phase::closed) return;
    if (ec) {
      if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
        answer_early(impl_->error(431, "usage",
                                  "request headers larger than " +
                                      std::to_string(impl_->options.limits.max_header_bytes) +
                                      " bytes"));
      } else if (ec == http::error::end_of_stream || ec == asio::error::eof ||
                 ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
        close();
      } else {
        answer_early(impl_->error(400, "usage", "malformed HTTP request: " + ec.message()));
      }
      return;
    }
    started_ = Clock::now();
    const auto& message = parser_->get();
    head_ = RequestHead{};
    head_.method = std::string(message.method_string());
    head_.target = std::string(message.target());
    head_.path = head_.target.substr(0, head_.target.find('?'));
    for (const auto& field : message) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      head_.headers[name] = std::string(field.value());
    }
    head_.over_tcp = over_tcp_;
    head_.peer = peer_;
    keep_alive_ = message.keep_alive();
    version_ = message.version();

    Admission admission;
    try {
      if (impl_->options.admit) admission = impl_->options.admit(head_);
    } catch (const std::exception& e) {
      impl_->log(LogLevel::error, "admission check failed: " + std::string(e.what()));
      admission = Admission::refused(impl_->error(500, "internal", "internal error"));
    }
    if (admission.kind == Admission::Kind::refused) {
      answer_early(std::move(admission.refusal));
      return;
    }
    if (admission.kind == Admission::Kind::public_route && !parser_->is_done()) {
      // Nobody vouched for this client: it may not make the daemon read anything more.
      answer_early(impl_->error(
          400, "usage",
          head_.method + " " + loggable_path(head_.target) + " takes no request body"));
      return;
    }
    credentialed_ = admission.kind == Admission::Kind::credentialed;
    const auto declared = parser_->content_length();
    if (declared && *declared > impl_->options.limits.max_body_bytes) {
      answer_early(too_large());
      return;
    }
    if (parser_->is_done()) {  // no body
      dispatch();
      return;
    }
    parser_->body_limit(impl_->options.limits.max_body_bytes);
    set_phase(Phase::body);
    arm(impl_->options.limits.body_timeout);
    if (beast::iequals(head_.header("expect"), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(
          socket_, asio::buffer(kContinue),
          [self = shared_from_this()](const boost::system::error_code& write_ec, std::size_t) {
            if (write_ec) {
              self->close();
            } else {
              self->read_body();
            }
          });
      return;
    }
    read_body();
  }

  void read_body() {
    if (phase_ == Phase::closed) return;
    http::async_read(socket_, buffer_, *parser_,
                     [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                       self->on_body(ec);
                     });
  }

  void on_body(const boost::system::error_code& ec) {
    if (phase_ == Phase::closed) return;
    if (ec == http::error::body_limit) {
      answer_early(too_large());
      return;
    }
    if (ec == http::error::buffer_overflow) {
      answer_early(impl_->error(
          413, "usage",
          "chunk extensions or trailers larger than " +
              std::to_string(impl_->options.limits.max_header_bytes + kBufferSlack) + " bytes"));
      return;
    }
    if (ec) {
      close();
      return;
    }
    dispatch();
  }

  Response too_large() const {
    return impl_->error(
        413, "usage",
        "request larger than " + std::to_string(impl_->options.limits.max_body_bytes) + " bytes");
  }

  // The admitted request goes to a worker; its answer comes back through the I/O thread.
  void dispatch() {
    set_phase(Phase::handling);
    disarm();
    auto message = parser_->release();
    Request request{head_, std::move(message.body()), std::make_shared<core::Cancellation>()};
    parser_.reset();
    watch_for_hang_up(request.hung_up);
    std::string refusal;
    bool queued = false;
    try {
      queued = impl_->pool.submit(
          [self = shared_from_this(), request = std::move(request)]() mutable {
            Response response;
            try {
              response = self->impl_->options.handle(request);
            } catch (const std::bad_alloc&) {
              response = self->impl_->error(503, "busy", "out of memory; try again shortly");
            } catch (const std::exception& e) {
              self->impl_->log(LogLevel::error, request.head.method + " " +
                                                    loggable_path(request.head.target) +
                                                    ": handler failed: " + e.what());
              response = self->impl_->error(500, "internal", "internal error");
            }
            asio::post(self->impl_->io, [self, response = std::move(response)]() mutable {
              self->write(std::move(response), /*close_after=*/false);
            });
          },
          &refusal);
    } catch (const std::bad_alloc&) {
      refusal = "out of memory";
    }
    if (!queued) {
      ++impl_->refused_busy;
      write(impl_->error(503, "busy", "the server is busy: " + refusal), /*close_after=*/true);
    }
  }

  // While the handler runs: one wait for the socket to become readable. End of stream (the
  // client closed or shut down its sending side) or an error cancels `hung_up`; bytes instead
  // (a pipelined request) end the watch, the client being there. The peek never blocks (this
  // is the I/O thread): a readiness that finds nothing after all waits again.
  void watch_for_hang_up(std::shared_ptr<core::Cancellation> hung_up) {
    watching_ = true;
    socket_.async_wait(Generic::socket::wait_read, [self = shared_from_this(),
                                                    hung_up](const boost::system::error_code& ec) {
      if (ec || self->phase_ != Phase::handling) return;
      char byte = 0;
      const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        self->watch_for_hang_up(hung_up);
        return;
      }
      self->watching_ = false;
      if (n > 0) return;
      hung_up->cancel();
      if (self->impl_->options.logger && self->impl_->options.logger->enabled(LogLevel::debug)) {
        self->impl_->log(LogLevel::debug, "the client of " + self->head_.method + " " +
                                              loggable_path(self->head_.target) + " from " +
                                              self->peer_ + " hung up while it was handled");
      }
    });
  }

  void write(Response answer, bool close_after) {
    if (phase_ == Phase::closed) return;  // the grace period ended before the handler did
    if (watching_) {                      // the handler is done: the wait for a hang-up ends
      watching_ = false;
      boost::system::error_code ignored;
      socket_.cancel(ignored);
    }
    if (answer.stream && answer.status == 200) {
      start_stream(std::move(answer));
      return;
    }
    set_phase(Phase::writing);
    const bool keep = keep_alive_ && !close_after && !impl_->stopping;
    response_.emplace(static_cast<http::status>(answer.status), version_ ? version_ : 11);
    if (!answer.content_type.empty()) {  // a 204 has no body to type
      response_->set(http::field::content_type, answer.content_type);
    }
    for (const auto& [name, value] : answer.headers) response_->insert(name, value);
    response_->keep_alive(keep);
    response_->body() = std::move(answer.body);
    response_->prepare_payload();
    route_ = answer.route.empty() ? loggable_path(head_.target) : std::move(answer.route);
    arm(impl_->options.limits.write_timeout);
    http::async_write(
        socket_, *response_,
        [self = shared_from_this(), keep](const boost::system::error_code& ec, std::size_t) {
          self->on_written(ec, keep);
        });
  }

  void on_written(const boost::system::error_code& ec, bool keep) {
    if (phase_ == Phase::closed) return;
    const int status = response_->result_int();
    const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    response_.reset();
    if (impl_->options.logger && impl_->options.logger->enabled(LogLevel::info)) {
      char line[64];
      std::snprintf(line, sizeof line, " %d %.1fms", status, seconds * 1000.0);
      impl_->log(LogLevel::info,
                 head_.method + " " + route_ + line + (ec ? " (not delivered)" : ""));
    }
    if (impl_->options.on_answered) {
      try {
        impl_->options.on_answered(Answered{head_, status, route_, seconds});
      } catch (...) {
      }
    }
    if (ec) {
      close();
    } else if (lingering_) {
      linger();
    } else if (keep && !impl_->stopping) {
      read_head(/*first=*/false);
    } else {
      close();
    }
  }

  // An event stream (EventStream): the head, then whatever the stream has, one chunk at a time.
  void start_stream(Response answer) {
    const std::size_t limit = impl_->options.limits.max_streams;
    if (impl_->streams >= limit) {
      ++impl_->refused_busy;
      write(impl_->error(
                503, "busy",
                "all " + std::to_string(limit) + " event streams are open; try again shortly"),
            /*close_after=*/true);
      return;
    }
    ++impl_->streams;
    ++impl_->open_streams;
    stream_ = std::move(answer.stream);
    route_ = answer.route.empty() ? loggable_path(head_.target) : std::move(answer.route);
    std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n";
    for (const auto& [name, value] : answer.headers) head += name + ": " + value + "\r\n";
    head += "\r\n";
    set_phase(Phase::streaming);
    const double seconds = std::chrono::duration<double>(Clock::now() - started_).count();
    impl_->log(LogLevel::info, head_.method + " " + route_ + " 200 (event stream)");
    if (impl_->options.on_answered) {
      try {
        impl_->options.on_answered(Answered{head_, 200, route_, seconds});
      } catch (...) {
      }
    }
    watch_stream_reader();
    send_chunk(std::move(head));
  }

  void send_chunk(std::string chunk) {
    chunk_ = std::move(chunk);
    arm(impl_->options.limits.write_timeout);  // not taken by then: dropped (on_deadline)
    asio::async_write(
        socket_, asio::buffer(chunk_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          if (self->phase_ != Phase::streaming) return;
          if (ec) {
            self->close();
            return;
          }
          self->chunk_.clear();
          self->last_chunk_ = Clock::now();
          self->pump_stream();
        });
  }

  // The next chunk, a heartbeat when the stream has been quiet, or a wait of `stream_poll`.
  void pump_stream() {
    if (phase_ != Phase::streaming) return;
    if (impl_->stopping) {
      close();
      return;
    }
    std::string chunk;
    try {
      chunk = stream_->next();
    } catch (const std::exception& e) {
      impl_->log(LogLevel::error, "event stream " + route_ + " failed: " + e.what());
      close();
      return;
    }
    const auto& limits = impl_->options.limits;
    if (chunk.empty() && Clock::now() - last_chunk_ >= limits.stream_heartbeat) {
      chunk = ": heartbeat\n\n";
    }
    if (!chunk.empty()) {
      send_chunk(std::move(chunk));
      return;
    }
    ++generation_;
    timer_.expires_after(limits.stream_poll);
    timer_.async_wait(
        [self = shared_from_this(), generation = generation_](const boost::system::error_code& ec) {
          if (ec || generation != self->generation_) return;
          self->pump_stream();
        });
  }

  // A stream's client has nothing to say: end of stream, an error or any byte ends it.
  void watch_stream_reader() {
    socket_.async_wait(Generic::socket::wait_read, [self = shared_from_this()](
                                                       const boost::system::error_code& ec) {
      if (self->phase_ != Phase::streaming) return;
      if (ec) {
        self->close();
        return;
      }
      char byte = 0;
      const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
        self->watch_stream_reader();
        return;
      }
      self->close();
    });
  }

  // Answers before the request was read whole (a refusal, 413): the client may still be
  // sending its body, and closing now could reset the connection before it reads the answer.
  void answer_early(Response answer) {
    lingering_ = true;
    keep_alive_ = false;
    if (started_ == Clock::time_point{}) started_ = Clock::now();
    write(std::move(answer), /*close_after=*/true);
  }

  // Stop sending, then discard what still arrives, bounded in bytes and time, then close.
  void linger() {
    set_phase(Phase::lingering);
    boost::system::error_code ignored;
    socket_.shutdown(Generic::socket::shutdown_send, ignored);
    arm(std::chrono::milliseconds(1000));
    drain();
  }
  void drain() {
    socket_.async_read_some(
        asio::buffer(sink_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          self->drained_ += n;
          if (ec || n == 0 || self->drained_ > 256 * 1024) {
            self->close();
          } else {
            self->drain();
          }
        });
  }

  std::shared_ptr<Server::Impl> impl_;
  Generic::socket socket_;
  asio::steady_timer timer_;
  std::uint64_t generation_ = 0;
  const std::uint64_t id_;
  const bool over_tcp_;
  std::string peer_;
  Phase phase_ = Phase::head;
  Clock::time_point phase_since_ = Clock::now();
  Clock::time_point started_{};
  bool credentialed_ = false;  // this request's head carried valid credentials
  bool keep_alive_ = false;
  bool lingering_ = false;
  bool watching_ = false;  // a wait for a hang-up is pending (watch_for_hang_up)
  unsigned version_ = 11;
  beast::flat_buffer buffer_;  // bounded: max_header_bytes + kBufferSlack
  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::string_body>> response_;
  RequestHead head_;
  std::string route_;
  std::array<char, 16 * 1024> sink_{};
  std::size_t drained_ = 0;
  std::shared_ptr<EventStream> stream_;  // while streaming
  std::string chunk_;                    // the one chunk of it being sent
  Clock::time_point last_chunk_{};
};

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
      auto connection =
          std::make_shared<Connection>(shared_from_this(), std::move(socket), id, bound.tcp);
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
  std::shared_ptr<Connection> victim;
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
  std::vector<std::shared_ptr<Connection>> open;
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
    std::vector<std::shared_ptr<Connection>> left;
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
  std::vector<std::shared_ptr<Connection>> left;
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

// One connection of the doors' HTTP server (http_door.hpp), driven by the I/O thread: the
// head under its deadline and bound, admission before any body byte, the body, the handler on a
// worker, the answer, keep-alive, lingering after an early answer, and event streams.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <new>
#include <optional>

#include "http_door_impl.hpp"

namespace sandboxd::door {

namespace beast = boost::beast;
namespace http = beast::http;

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

// One accepted connection, driven by the I/O thread; a worker only runs its handler and posts
// the answer back. Every wait has a deadline (`timer_`); `generation_` makes a deadline armed
// for an earlier phase a no-op.
class Connection final : public DoorConnection, public std::enable_shared_from_this<Connection> {
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

  void start() override {
    peer_ = over_tcp_ ? peer_of(socket_) : "unix";
    read_head(/*first=*/true);
  }

  bool evictable() const override {
    return !credentialed_ || phase_ == Phase::idle || phase_ == Phase::lingering;
  }
  bool has_request_in_flight() const override {
    return phase_ == Phase::handling || phase_ == Phase::writing;
  }
  int eviction_rank() const override {
    if (phase_ == Phase::idle) return 2;
    if (phase_ == Phase::lingering) return 1;
    return 0;
  }
  Clock::time_point phase_since() const override { return phase_since_; }

  void close() override {
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

}  // namespace

std::shared_ptr<DoorConnection> make_connection(std::shared_ptr<Server::Impl> impl,
                                                Generic::socket socket, std::uint64_t id,
                                                bool over_tcp) {
  return std::make_shared<Connection>(std::move(impl), std::move(socket), id, over_tcp);
}

}  // namespace sandboxd::door

// The relay's server (relay.hpp). Thread model: one I/O thread owns every socket, timer, parser
// and serializer; no connection has a thread of its own. Making a socket inside a sandbox's
// network namespace may block (the backend may ask the engine for the sandbox's process), so it
// runs on a small pool of dialer threads and its result is posted back to the I/O thread.
//
// One relayed request, on a connection that may carry many (kept alive):
//   head (deadline) → a token present → sandbox looked up and the token checked against its
//   instance → dial (a fresh connection to the sandbox for
//   each request, `Connection: close` upstream) → request head rewritten and written → body
//   streamed in 64 KiB pieces → answer head read (answer deadline) → 101: two-way pipe; else
//   answer streamed back → next request, or close.
// Every step after the head has a progress deadline; a connection that makes none is closed.
#include "sandboxd/core/relay.hpp"

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <limits>
#include <list>
#include <map>
#include <optional>
#include <thread>

#include "net/busy_answer.hpp"
#include "net/deadline.hpp"
#include "net/io_thread.hpp"
#include "relay/hop_by_hop.hpp"
#include "sandboxd/core/provider.hpp"

namespace sandboxd::core {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr std::size_t kChunkBytes = 64 * 1024;
constexpr int kMaxInterimAnswers = 16;  // 1xx answers before one request's final answer
constexpr std::size_t kBufferSlack =
    8 * 1024;  // chunk lines, trailers, a pipelined request's start

std::string_view view(beast::string_view text) {
  return {text.data(), text.size()};
}

bool valid_id_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

// "/s/{id}/rest?query" → id and "/rest?query" ("/" when there is no rest); false otherwise.
bool split_target(std::string_view target, std::string& id, std::string& rest) {
  if (target.rfind("/s/", 0) != 0) return false;
  target.remove_prefix(3);
  std::size_t end = 0;
  while (end < target.size() && valid_id_char(target[end])) ++end;
  if (end == 0 || end > 64) return false;
  id = std::string(target.substr(0, end));
  std::string_view tail = target.substr(end);
  if (!tail.empty() && tail.front() != '/' && tail.front() != '?') return false;
  rest = tail.empty() || tail.front() == '?' ? "/" + std::string(tail) : std::string(tail);
  return true;
}

}  // namespace

class RelayConnection;

struct Relay::Impl : std::enable_shared_from_this<Relay::Impl> {
  Impl(RelayTargets t, RelayTokens k, RelayOptions o, std::shared_ptr<Logger> l)
      : targets(std::move(t)), tokens(std::move(k)), options(std::move(o)), logger(std::move(l)) {}

  const RelayTargets targets;
  const RelayTokens tokens;
  const RelayOptions options;
  std::shared_ptr<Logger> logger;

  asio::io_context io{1};
  std::optional<tcp::acceptor> acceptor;
  asio::thread_pool dialers{2};
  std::thread thread;
  int port = 0;
  std::atomic<bool> started{false}, stopped{false};

  // I/O thread only.
  std::map<std::uint64_t, std::shared_ptr<RelayConnection>> connections;
  std::uint64_t next_id = 0;

  std::atomic<std::uint64_t> forwarded{0}, upgraded{0}, missing_token{0}, wrong_token{0},
      unknown_sandbox{0}, upstream_failed{0}, refused_busy{0}, open_connections{0};

  void accept();
  void forget(std::uint64_t id) {
    if (connections.erase(id) > 0) --open_connections;
  }
  bool evict_one();
  void log(LogLevel level, const std::string& message) const {
    if (logger) logger->log(level, "relay: " + message);
  }
};

// One client connection. Every member is touched on the I/O thread only, but for the dial,
// whose thread only looks the sandbox up, makes a socket and posts both back.
class RelayConnection : public std::enable_shared_from_this<RelayConnection> {
 public:
  RelayConnection(std::shared_ptr<Relay::Impl> impl, tcp::socket client, std::uint64_t id)
      : impl_(std::move(impl)),
        client_(std::move(client)),
        upstream_(impl_->io),
        deadline_(impl_->io),
        id_(id),
        client_buffer_(impl_->options.max_header_bytes + kBufferSlack + kChunkBytes),
        upstream_buffer_(impl_->options.max_header_bytes + kBufferSlack + kChunkBytes) {}

  void start() { read_head(/*first=*/true); }

  // Nobody has presented a valid token on it (it is reading a head, or answering a refusal).
  bool unvouched() const { return !vouched_; }
  Clock::time_point since() const { return since_; }

  void close() {
    if (closed_) return;
    closed_ = true;
    deadline_.cancel();
    boost::system::error_code ignored;
    client_.shutdown(tcp::socket::shutdown_both, ignored);
    client_.close(ignored);
    upstream_.close(ignored);
    impl_->forget(id_);
  }

 private:
  // ── deadlines ──
  void arm(std::chrono::milliseconds limit) {
    deadline_.arm(limit, [self = shared_from_this()] { self->close(); });
  }

  // ── the request head ──
  void read_head(bool first) {
    vouched_ = false;
    since_ = Clock::now();
    request_.emplace();
    request_->header_limit(static_cast<std::uint32_t>(impl_->options.max_header_bytes));
    request_->body_limit(std::numeric_limits<std::uint64_t>::max());  // streamed, not buffered
    if (!first && client_buffer_.size() == 0) {
      // Kept alive: the idle deadline until the next request starts, then the head's.
      arm(impl_->options.idle_timeout);
      client_.async_wait(tcp::socket::wait_read,
                         [self = shared_from_this()](const boost::system::error_code& ec) {
                           if (ec || self->closed_) return;
                           self->read_head_now();
                         });
      return;
    }
    read_head_now();
  }

  void read_head_now() {
    arm(impl_->options.head_timeout);
    http::async_read_header(client_, client_buffer_, *request_,
                            [self = shared_from_this()](const boost::system::error_code& ec,
                                                        std::size_t) { self->on_head(ec); });
  }

  void on_head(const boost::system::error_code& ec) {
    if (closed_) return;
    if (ec) {
      if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
        refuse(431, "request headers too large");
      } else if (ec == http::error::end_of_stream || ec == asio::error::eof ||
                 ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
        close();
      } else {
        refuse(400, "malformed HTTP request");
      }
      return;
    }
    started_ = Clock::now();
    auto& message = request_->get();
    std::string rest;
    if (!split_target(view(message.target()), sandbox_id_, rest)) {
      refuse(404, "not a relay path: use /s/{sandbox_id}/...");
      return;
    }
    const auto token = message.find(kRelayTokenHeader);
    if (token == message.end()) {
      ++impl_->missing_token;
      refuse(401, "");
      return;
    }
    // Checked against the sandbox's instance once it is looked up (dial), before anything is
    // dialled or a body byte read.
    presented_token_ = std::string(view(token->value()));
    client_keep_alive_ = message.keep_alive();
    upgrade_ = lists_token(view(message[http::field::connection]), "upgrade") &&
               !message[http::field::upgrade].empty();
    head_request_ = message.method() == http::verb::head;
    client_http10_ = message.version() < 11;
    // The relay answers "100 Continue" itself once the sandbox is dialled (the sandbox's own
    // would only be read after the body, which the client holds back until it hears one).
    expect_continue_ = !client_http10_ && beast::iequals(message[http::field::expect],
                                                         "100-continue");
    if (expect_continue_) message.erase(http::field::expect);
    interim_answers_ = 0;
    const std::string upgrade_to(message[http::field::upgrade]);
    // What the sandbox sees: its own path, no token, no hop-by-hop fields.
    message.target(rest);
    message.erase(kRelayTokenHeader);
    strip_hop_by_hop(message);
    if (upgrade_) {
      message.set(http::field::connection, "Upgrade");
      message.set(http::field::upgrade, upgrade_to);
    } else {
      message.set(http::field::connection, "close");
    }
    dial();
  }

  // ── the sandbox ──
  // Which sandbox, and a socket to it, are found on a dialer thread: the lookup may ask the
  // backend (sandboxd-provisioner's targets inspect the container) and a socket in a network
  // namespace may wait for the namespace's helper; the I/O thread never waits for either.
  void dial() {
    arm(impl_->options.connect_timeout);
    auto self = shared_from_this();
    // `refusal` set: answered with it, nothing dialled; else `fd` is the socket (or -1, `error`).
    auto done = [self](int fd, std::string error, tcp::endpoint target,
                       std::optional<std::pair<int, std::string>> refusal) {
      asio::post(self->impl_->io, [self, fd, error, target, refusal] {
        if (self->closed_) {
          if (fd >= 0) ::close(fd);
          return;
        }
        if (refusal) {
          if (refusal->first == 404) ++self->impl_->unknown_sandbox;
          if (refusal->first == 403) ++self->impl_->wrong_token;
          self->refuse(refusal->first, refusal->second);
          return;
        }
        self->vouched_ = true;
        if (fd < 0) {
          self->upstream_failure("cannot reach sandbox " + self->sandbox_id_ + ": " + error);
          return;
        }
        boost::system::error_code ec;
        self->upstream_.assign(target.protocol(), fd, ec);
        if (ec) {
          ::close(fd);
          self->upstream_failure("cannot use the socket to sandbox " + self->sandbox_id_);
          return;
        }
        self->upstream_.async_connect(target, [self](const boost::system::error_code& connect) {
          if (self->closed_) return;
          if (connect) {
            self->upstream_failure("sandbox " + self->sandbox_id_ + " refused the connection (" +
                                   connect.message() + ")");
            return;
          }
          boost::system::error_code ignored;
          self->upstream_.set_option(tcp::no_delay(true), ignored);
          self->write_request_head();
        });
      });
    };
    asio::post(impl_->dialers, [impl = impl_, id = sandbox_id_,
                                presented = std::exchange(presented_token_, std::string()), done]() {
      std::optional<SandboxEndpoint> endpoint;
      try {
        endpoint = impl->targets(id);
      } catch (const std::exception& e) {
        impl->log(LogLevel::warning, "looking up sandbox " + id + ": " + e.what());
      }
      if (!endpoint) {
        done(-1, "", {}, std::pair(404, "sandbox " + id + " is not tracked by this host"));
        return;
      }
      // Another sandbox's token, or one of an earlier instance of this one (destroyed since):
      // refused, and nothing is dialled.
      if (!impl->tokens.verify(id, endpoint->incarnation, presented)) {
        done(-1, "", {}, std::pair(403, ""));
        return;
      }
      if (endpoint->paused) {
        done(-1, "", {}, std::pair(409, "sandbox " + id + " is paused; acquire it to resume it"));
        return;
      }
      boost::system::error_code ec;
      const auto address = asio::ip::make_address(endpoint->host, ec);
      if (ec) {
        done(-1, "its address " + endpoint->host + " is not numeric", {}, std::nullopt);
        return;
      }
      const tcp::endpoint target(address, static_cast<unsigned short>(endpoint->port));
      try {
        const int fd = endpoint->open_socket
                           ? endpoint->open_socket()
                           : ::socket(target.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
        done(fd, fd < 0 ? std::string(std::strerror(errno)) : std::string(), target, std::nullopt);
      } catch (const std::exception& e) {
        done(-1, e.what(), target, std::nullopt);
      }
    });
  }

  void write_request_head() {
    request_serializer_.emplace(request_->get());
    arm(impl_->options.progress_timeout);
    http::async_write_header(
        upstream_, *request_serializer_,
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          if (ec) return self->upstream_failure("writing to the sandbox");
          if (self->expect_continue_ && !self->request_->is_done()) return self->tell_to_go_on();
          self->pump_request_body();
        });
  }

  void tell_to_go_on() {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    arm(impl_->options.progress_timeout);
    asio::async_write(client_, asio::buffer(kContinue),
                      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                        if (self->closed_) return;
                        if (ec) return self->close();
                        self->pump_request_body();
                      });
  }

  // Client → sandbox: read a piece of the body, write it, until the parser is done.
  void pump_request_body() {
    auto& body = request_->get().body();
    if (request_->is_done()) {
      body.data = nullptr;
      body.size = 0;
      body.more = false;
      arm(impl_->options.progress_timeout);
      http::async_write(
          upstream_, *request_serializer_,
          [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
            if (self->closed_) return;
            if (ec && ec != http::error::need_buffer) {
              return self->upstream_failure("writing to the sandbox");
            }
            self->read_answer_head();
          });
      return;
    }
    ready_for_body(request_chunk_, client_buffer_);
    body.data = request_chunk_.data();
    body.size = request_chunk_.size();
    arm(impl_->options.progress_timeout);
    http::async_read(client_, client_buffer_, *request_,
                     [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                       if (self->closed_) return;
                       if (ec && ec != http::error::need_buffer) return self->close();
                       auto& piece = self->request_->get().body();
                       piece.size = self->request_chunk_.size() - piece.size;
                       piece.data = self->request_chunk_.data();
                       piece.more = !self->request_->is_done();
                       self->arm(self->impl_->options.progress_timeout);
                       http::async_write(
                           self->upstream_, *self->request_serializer_,
                           [self](const boost::system::error_code& write_ec, std::size_t) {
                             if (self->closed_) return;
                             if (write_ec && write_ec != http::error::need_buffer) {
                               return self->upstream_failure("writing to the sandbox");
                             }
                             if (self->request_serializer_->is_done()) {
                               return self->read_answer_head();
                             }
                             self->pump_request_body();
                           });
                     });
  }

  // ── the answer ──
  void read_answer_head() {
    answer_.emplace();
    answer_->header_limit(static_cast<std::uint32_t>(impl_->options.max_header_bytes));
    answer_->body_limit(std::numeric_limits<std::uint64_t>::max());
    if (head_request_) answer_->skip(true);
    arm(impl_->options.answer_timeout);
    http::async_read_header(
        upstream_, upstream_buffer_, *answer_,
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          if (ec) return self->upstream_failure("reading the sandbox's answer");
          self->on_answer_head();
        });
  }

  void on_answer_head() {
    auto& message = answer_->get();
    const unsigned status = message.result_int();
    if (status == 101) {
      if (!upgrade_) {
        return upstream_failure("sandbox " + sandbox_id_ +
                                " switched protocols on a request that asked for no upgrade");
      }
      ++impl_->forwarded;
      ++impl_->upgraded;
      write_upgrade_answer();
      return;
    }
    if (status >= 100 && status < 200) return pass_interim_answer();
    ++impl_->forwarded;
    strip_hop_by_hop(message);
    message.keep_alive(client_keep_alive_ && !impl_->stopped.load());
    answer_serializer_.emplace(message);
    arm(impl_->options.progress_timeout);
    http::async_write_header(
        client_, *answer_serializer_,
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          if (ec) return self->close();
          self->pump_answer_body();
        });
  }

  // An interim answer (1xx but 101: 100 Continue, 103 Early Hints…) is not the answer: it is
  // passed on to an HTTP/1.1 client (dropped for HTTP/1.0, which cannot tell it from a final
  // one) and the final answer is read next, from what the sandbox sent after it. Bounded, so a
  // sandbox cannot hold its client with interim answers forever.
  void pass_interim_answer() {
    if (++interim_answers_ > kMaxInterimAnswers) {
      return upstream_failure("sandbox " + sandbox_id_ + " sent more than " +
                              std::to_string(kMaxInterimAnswers) + " interim answers");
    }
    if (client_http10_) return read_answer_head();
    auto& message = answer_->get();
    strip_hop_by_hop(message);
    interim_head_ = std::make_shared<http::response<http::empty_body>>();
    interim_head_->version(message.version());
    interim_head_->result(message.result_int());  // 103 and the like: codes Beast has no name for
    interim_head_->reason(message.reason());
    for (const auto& field : message) interim_head_->insert(field.name_string(), field.value());
    arm(impl_->options.progress_timeout);
    http::async_write(client_, *interim_head_,
                      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                        if (self->closed_) return;
                        if (ec) return self->close();
                        self->interim_head_.reset();
                        self->read_answer_head();
                      });
  }

  // Sandbox → client, as pump_request_body.
  void pump_answer_body() {
    auto& body = answer_->get().body();
    if (answer_->is_done()) {
      body.data = nullptr;
      body.size = 0;
      body.more = false;
      arm(impl_->options.progress_timeout);
      http::async_write(
          client_, *answer_serializer_,
          [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
            if (self->closed_) return;
            if (ec && ec != http::error::need_buffer) return self->close();
            self->finish_exchange();
          });
      return;
    }
    ready_for_body(answer_chunk_, upstream_buffer_);
    body.data = answer_chunk_.data();
    body.size = answer_chunk_.size();
    arm(impl_->options.progress_timeout);
    http::async_read(upstream_, upstream_buffer_, *answer_,
                     [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                       if (self->closed_) return;
                       if (ec && ec != http::error::need_buffer) {
                         // Headers are out: the client sees the answer cut off, as it was.
                         ++self->impl_->upstream_failed;
                         return self->close();
                       }
                       auto& piece = self->answer_->get().body();
                       piece.size = self->answer_chunk_.size() - piece.size;
                       piece.data = self->answer_chunk_.data();
                       piece.more = !self->answer_->is_done();
                       self->arm(self->impl_->options.progress_timeout);
                       http::async_write(
                           self->client_, *self->answer_serializer_,
                           [self](const boost::system::error_code& write_ec, std::size_t) {
                             if (self->closed_) return;
                             if (write_ec && write_ec != http::error::need_buffer) {
                               return self->close();
                             }
                             if (self->answer_serializer_->is_done()) {
                               return self->finish_exchange();
                             }
                             self->pump_answer_body();
                           });
                     });
  }

  void finish_exchange() {
    log_answer(answer_->get().result_int());
    boost::system::error_code ignored;
    upstream_.close(ignored);
    upstream_buffer_.consume(upstream_buffer_.size());
    const bool again = client_keep_alive_ && !impl_->stopped.load() && request_->is_done();
    request_serializer_.reset();
    answer_serializer_.reset();
    answer_.reset();
    release_body_buffers();
    if (again) {
      read_head(/*first=*/false);
    } else {
      close();
    }
  }

  // ── an upgraded connection: a two-way byte pipe ──
  void write_upgrade_answer() {
    auto& message = answer_->get();
    upgrade_head_ =
        std::make_shared<http::response<http::empty_body>>(message.result(), message.version());
    for (const auto& field : message) upgrade_head_->set(field.name_string(), field.value());
    arm(impl_->options.progress_timeout);
    http::async_write(
        client_, *upgrade_head_,
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          if (ec) return self->close();
          self->log_answer(101);
          self->start_pipe();
        });
  }

  void start_pipe() {
    piping_ = true;
    ready_for_body(to_upstream_, client_buffer_);
    ready_for_body(to_client_, upstream_buffer_);
    arm(impl_->options.tunnel_idle_timeout);
    // What each side already sent past its head goes first.
    pipe(client_, upstream_, client_buffer_, to_upstream_);
    pipe(upstream_, client_, upstream_buffer_, to_client_);
  }

  void pipe(tcp::socket& from, tcp::socket& to, beast::flat_buffer& pending,
            std::vector<char>& chunk) {
    if (pending.size() > 0) {
      const std::size_t n = asio::buffer_copy(asio::buffer(chunk), pending.data());
      pending.consume(n);
      forward(from, to, pending, chunk, n);
      return;
    }
    from.async_read_some(asio::buffer(chunk),
                         [self = shared_from_this(), &from, &to, &pending, &chunk](
                             const boost::system::error_code& ec, std::size_t n) {
                           if (self->closed_) return;
                           if (ec) return self->close();
                           self->forward(from, to, pending, chunk, n);
                         });
  }

  void forward(tcp::socket& from, tcp::socket& to, beast::flat_buffer& pending,
               std::vector<char>& chunk, std::size_t n) {
    arm(impl_->options.tunnel_idle_timeout);
    asio::async_write(to, asio::buffer(chunk.data(), n),
                      [self = shared_from_this(), &from, &to, &pending, &chunk](
                          const boost::system::error_code& ec, std::size_t) {
                        if (self->closed_) return;
                        if (ec) return self->close();
                        self->pipe(from, to, pending, chunk);
                      });
  }

  // A body piece's buffer, and the socket's read buffer at its full bound: the parser reads
  // only what the buffer has room for, and a small one makes a body thousands of tiny reads.
  static void ready_for_body(std::vector<char>& chunk, beast::flat_buffer& reads) {
    if (chunk.empty()) chunk.resize(kChunkBytes);
    reads.reserve(reads.max_size());
  }
  void release_body_buffers() {
    std::vector<char>().swap(request_chunk_);
    std::vector<char>().swap(answer_chunk_);
    upstream_buffer_.shrink_to_fit();
    if (client_buffer_.size() == 0) client_buffer_.shrink_to_fit();
  }

  // ── answers of the relay's own ──
  void refuse(int status, const std::string& text) {
    answered_status_ = status;
    const char* reason = status == 401   ? "Unauthorized"
                         : status == 403 ? "Forbidden"
                         : status == 404 ? "Not Found"
                         : status == 409 ? "Conflict"
                         : status == 431 ? "Request Header Fields Too Large"
                         : status == 502 ? "Bad Gateway"
                         : status == 503 ? "Service Unavailable"
                                         : "Bad Request";
    const std::string body = text.empty() ? std::string() : text + "\n";
    own_answer_ = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                  "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\nConnection: close\r\n" +
                  (status == 401 ? std::string("WWW-Authenticate: ") + kRelayTokenHeader + "\r\n"
                                 : std::string()) +
                  "\r\n" + body;
    arm(impl_->options.progress_timeout);
    asio::async_write(
        client_, asio::buffer(own_answer_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          self->log_answer(self->answered_status_);
          if (ec) return self->close();
          self->linger();
        });
  }

  // The client may still be sending a body: stop sending, drain a little, then close, so the
  // answer is not lost to a reset.
  void linger() {
    boost::system::error_code ignored;
    client_.shutdown(tcp::socket::shutdown_send, ignored);
    arm(std::chrono::milliseconds(1000));
    drain();
  }
  void drain() {
    if (request_chunk_.empty()) request_chunk_.resize(kChunkBytes);
    client_.async_read_some(
        asio::buffer(request_chunk_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          self->drained_ += n;
          if (ec || n == 0 || self->drained_ > 256 * 1024) {
            self->close();
          } else {
            self->drain();
          }
        });
  }

  void upstream_failure(const std::string& what) {
    ++impl_->upstream_failed;
    impl_->log(LogLevel::warning, what);
    boost::system::error_code ignored;
    upstream_.close(ignored);
    refuse(502, "the relay could not reach the sandbox");
  }

  void log_answer(int status) {
    if (!impl_->logger || !impl_->logger->enabled(LogLevel::debug)) return;
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - started_).count();
    char line[64];
    std::snprintf(line, sizeof line, " %d %.1fms", status, ms);
    // The sandbox id is in the path the client chose; the query and the token never appear.
    impl_->log(LogLevel::debug, "/s/" + (sandbox_id_.empty() ? "?" : sandbox_id_) + line);
  }

  std::shared_ptr<Relay::Impl> impl_;
  tcp::socket client_;
  tcp::socket upstream_;
  net::Deadline deadline_;
  const std::uint64_t id_;
  bool closed_ = false;
  bool vouched_ = false;
  bool piping_ = false;
  Clock::time_point since_ = Clock::now();
  Clock::time_point started_ = Clock::now();
  // Bounded: head limit + slack + a body piece (grown to it only while a body streams).
  beast::flat_buffer client_buffer_;
  beast::flat_buffer upstream_buffer_;
  std::optional<http::request_parser<http::buffer_body>> request_;
  std::optional<http::request_serializer<http::buffer_body>> request_serializer_;
  std::optional<http::response_parser<http::buffer_body>> answer_;
  std::optional<http::response_serializer<http::buffer_body>> answer_serializer_;
  std::shared_ptr<http::response<http::empty_body>> upgrade_head_;
  std::shared_ptr<http::response<http::empty_body>> interim_head_;
  // Body pieces and pipe buffers, kChunkBytes each, allocated when a body or a pipe needs
  // them and freed after the exchange: an idle or waiting connection holds none.
  std::vector<char> request_chunk_;
  std::vector<char> answer_chunk_;
  std::vector<char> to_upstream_;
  std::vector<char> to_client_;
  std::string sandbox_id_;
  std::string presented_token_;  // from the head until the dial checks it
  std::string own_answer_;
  int answered_status_ = 0;
  std::size_t drained_ = 0;
  bool client_keep_alive_ = false;
  bool upgrade_ = false;
  bool head_request_ = false;
  bool client_http10_ = false;
  bool expect_continue_ = false;
  int interim_answers_ = 0;  // of the request in flight
};

void Relay::Impl::accept() {
  acceptor->async_accept([self = shared_from_this()](const boost::system::error_code& ec,
                                                     tcp::socket socket) {
    if (self->stopped.load()) return;
    if (ec) {
      if (ec == asio::error::operation_aborted) return;
      // Out of descriptors: the connection stays in the backlog; try again shortly.
      auto retry = std::make_shared<asio::steady_timer>(self->io, std::chrono::milliseconds(100));
      retry->async_wait([self, retry](const boost::system::error_code&) {
        if (!self->stopped.load()) self->accept();
      });
      return;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    if (self->connections.size() >= self->options.max_connections && !self->evict_one()) {
      ++self->refused_busy;
      net::answer_busy_and_close(socket);
    } else {
      const std::uint64_t id = ++self->next_id;
      auto connection = std::make_shared<RelayConnection>(self, std::move(socket), id);
      self->connections.emplace(id, connection);
      ++self->open_connections;
      connection->start();
    }
    self->accept();
  });
}

bool Relay::Impl::evict_one() {
  std::shared_ptr<RelayConnection> victim;
  for (const auto& [id, connection] : connections) {
    if (!connection->unvouched()) continue;
    if (!victim || connection->since() < victim->since()) victim = connection;
  }
  if (!victim) return false;
  victim->close();
  return true;
}

Relay::Relay(Provider& provider, RelayTokens tokens, RelayOptions options,
             std::shared_ptr<Logger> logger)
    : Relay([&provider](const std::string& id) { return provider.endpoint(id); }, std::move(tokens),
            std::move(options), std::move(logger)) {}

Relay::Relay(RelayTargets targets, RelayTokens tokens, RelayOptions options,
             std::shared_ptr<Logger> logger)
    : impl_(std::make_shared<Impl>(std::move(targets), std::move(tokens), std::move(options),
                                   std::move(logger))) {}

Relay::~Relay() {
  stop();
}

void Relay::start() {
  if (impl_->started.exchange(true)) return;
  try {
    const tcp::endpoint endpoint(asio::ip::make_address(impl_->options.host),
                                 static_cast<unsigned short>(impl_->options.port));
    impl_->acceptor.emplace(impl_->io);
    impl_->acceptor->open(endpoint.protocol());
    impl_->acceptor->set_option(tcp::acceptor::reuse_address(true));
    impl_->acceptor->bind(endpoint);
    impl_->acceptor->listen(asio::socket_base::max_listen_connections);
    impl_->port = impl_->acceptor->local_endpoint().port();
  } catch (const boost::system::system_error& e) {
    impl_->started = false;
    throw std::runtime_error("cannot listen for the relay on " + impl_->options.host + ":" +
                             std::to_string(impl_->options.port) + ": " + e.code().message());
  }
  impl_->accept();
  impl_->thread = net::start_io_thread(impl_->io, [impl = impl_](const std::string& failure) {
    impl->log(LogLevel::error, failure);
  });
  impl_->log(LogLevel::info, "relaying sandboxes without a host address at " + base_url() +
                                 "/s/{sandbox_id} (each request needs its sandbox's " +
                                 kRelayTokenHeader + ")");
}

void Relay::stop() {
  if (!impl_->started.load() || impl_->stopped.exchange(true)) return;
  asio::post(impl_->io, [impl = impl_] {
    boost::system::error_code ignored;
    if (impl->acceptor) impl->acceptor->close(ignored);
    std::vector<std::shared_ptr<RelayConnection>> open;
    for (const auto& [id, connection] : impl->connections) open.push_back(connection);
    for (const auto& connection : open) connection->close();
  });
  if (impl_->thread.joinable()) impl_->thread.join();
  impl_->dialers.join();
}

std::string Relay::base_url() const {
  const std::string& host =
      impl_->options.advertised_host.empty() ? impl_->options.host : impl_->options.advertised_host;
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(impl_->port);
}

int Relay::port() const {
  return impl_->port;
}

std::string Relay::url_for(const std::string& sandbox_id) const {
  return base_url() + "/s/" + sandbox_id;
}

std::map<std::string, std::string> Relay::headers_for(const SandboxInfo& info) const {
  return {{kRelayTokenHeader, impl_->tokens.token_for(info.sandbox_id, incarnation_of(info))}};
}

RelayStats Relay::stats() const {
  RelayStats out;
  out.forwarded = impl_->forwarded.load();
  out.upgraded = impl_->upgraded.load();
  out.missing_token = impl_->missing_token.load();
  out.wrong_token = impl_->wrong_token.load();
  out.unknown_sandbox = impl_->unknown_sandbox.load();
  out.upstream_failed = impl_->upstream_failed.load();
  out.refused_busy = impl_->refused_busy.load();
  out.open_connections = impl_->open_connections.load();
  return out;
}

}  // namespace sandboxd::core

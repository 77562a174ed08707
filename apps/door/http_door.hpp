// The one HTTP/1.1 server of both daemons (`sandboxctl serve`, `sandboxd-provisioner`),
// on Boost.Beast/Asio, built for clients that are slow, silent or hostile (design "The
// doors' HTTP server").
//
// Thread model: one I/O thread (the one that calls run()) owns every socket, timer and parser;
// no connection has a thread of its own. Handlers, which may block (a create waits for an
// engine), run on a bounded WorkerPool, and their answers are posted back to the I/O thread.
//
// What a client cannot do:
//  - hold a connection by being slow: the request line and headers must arrive whole within
//    `head_timeout`, the body within `body_timeout`, every answer be taken within
//    `write_timeout`, and a kept-alive connection start its next request within
//    `idle_timeout` (and then send its head whole within `head_timeout`);
//  - get a body read without credentials: `admit` sees the head as soon as it is in and may
//    answer (401) before one body byte is read; a declared body over the limit is 413 at once;
//    a route that needs no credentials takes no body at all (400 before it is read);
//  - grow the daemon by what it sends: a connection's read buffer is bounded (head limit plus
//    `kBufferSlack`), so a chunk-size line with an endless extension or trailers that never
//    end are 413 once the buffer is full; the body itself is bounded by `max_body_bytes`;
//  - exhaust the connection slots: at `max_connections` a new connection evicts one that
//    presented no credentials (one still sending its head first, whatever it is doing), else
//    the oldest idle kept-alive one; only when every slot holds a request with valid
//    credentials is it answered 503;
//  - exhaust threads or memory: a handler that cannot get a worker (pool full, no thread to be
//    had) or memory is answered 503, and the server keeps serving;
//  - leave a handler waiting for nobody: while it runs the I/O thread watches the connection,
//    and a hang-up cancels the request's `hung_up`;
//  - hold an event stream's memory or more than its share: streams are bounded in number
//    (`max_streams`, then 503), each has at most one chunk in flight, and one not taken within
//    `write_timeout` drops the subscriber (EventStream).
// stop() (from any thread, a signal watcher's) stops accepting, closes connections that have
// no request in flight, lets requests in flight finish within `shutdown_grace`, then closes
// whatever is left, stuck readers and writers included; run() then returns.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sandboxd/core/cancellation.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxd::door {

struct ListenAddress {
  bool tcp = false;
  std::string unix_path;        // tcp == false
  std::string host;             // tcp: a numeric address
  int port = 0;                 // tcp; 0 lets the kernel choose
  std::string display() const;  // "unix:PATH" or "http://HOST:PORT"
};

// A request's line and headers, what `admit` decides on.
struct RequestHead {
  std::string method;
  std::string target;                          // path and query as sent
  std::string path;                            // target without the query
  std::map<std::string, std::string> headers;  // names lower-cased; a repeated one's last value
  bool over_tcp = false;
  std::string peer;  // "127.0.0.1:50312", or "unix"
  const std::string& header(const std::string& lower_name) const;
};

struct Request {
  RequestHead head;
  std::string body;
  // Cancelled by the I/O thread when the client hangs up (or shuts down its sending side)
  // while the handler runs, so a handler that waits can stop waiting (serve's acquire queued
  // for a slot). Never null in a handler.
  std::shared_ptr<sandboxd::core::Cancellation> hung_up;
};

// An answer that stays open and sends Server-Sent Events (text/event-stream) for as long as the
// client takes them (issue 36: the operator page's live tail). The server asks it for more on
// the I/O thread: once at the start, after each chunk is taken, and every `stream_poll` while
// it had nothing. A subscriber has at most one chunk pending: one that does not take it within
// `write_timeout` is dropped, never buffered for; with nothing to send, a comment line goes out
// every `stream_heartbeat` so a vanished client is noticed.
class EventStream {
 public:
  virtual ~EventStream() = default;
  // The next bytes in text/event-stream form, "" when nothing is ready now. Must not block
  // (the I/O thread calls it) and should bound what it returns: it is sent whole.
  virtual std::string next() = 0;
};

struct Response {
  Response(int status_code = 200, std::string type = "application/json", std::string text = {},
           std::vector<std::pair<std::string, std::string>> extra_headers = {},
           std::string route_label = {})
      : status(status_code),
        content_type(std::move(type)),
        body(std::move(text)),
        headers(std::move(extra_headers)),
        route(std::move(route_label)) {}

  int status;
  std::string content_type;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones (Retry-After…)
  // How the access log names the route ("/v1/sandboxes/{id}"); "" logs the path.
  std::string route;
  // When set (status 200): the head goes out with `headers` and no length, then the stream's
  // events until the client leaves, the stream's deadline passes, or the server stops; `body`
  // is not sent. At `max_streams` open ones the answer is 503 instead.
  std::shared_ptr<EventStream> stream;
};

// What `admit` decided on a request's head.
struct Admission {
  enum class Kind {
    credentialed,  // valid credentials: its body is read, its connection holds a slot
    public_route,  // needs none: takes no body, its connection stays evictable
    refused,       // answered with `refusal` at once, before any body byte is read
  };
  Kind kind = Kind::credentialed;
  Response refusal;

  static Admission credentialed() { return {}; }
  static Admission public_route() { return {Kind::public_route, {}}; }
  static Admission refused(Response answer) { return {Kind::refused, std::move(answer)}; }
};

// What a connection's read buffer may hold beyond the head limit: a chunk-size line with its
// extensions, trailers, the start of a pipelined request. Chunk data goes straight into the
// body, which `max_body_bytes` bounds.
inline constexpr std::size_t kBufferSlack = 8 * 1024;

struct Limits {
  std::size_t max_connections = 1024;  // open at once; each costs a descriptor, not a thread
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_body_bytes = 64 * 1024;
  std::chrono::milliseconds head_timeout{10'000};   // request line and headers, whole
  std::chrono::milliseconds body_timeout{30'000};   // the whole body
  std::chrono::milliseconds write_timeout{30'000};  // the whole answer
  std::chrono::milliseconds idle_timeout{30'000};   // a kept-alive connection's next request
  std::size_t worker_threads = 64;                  // handlers running at once
  std::size_t queued_requests = 1024;               // admitted requests waiting for a worker
  std::chrono::milliseconds shutdown_grace{10'000};
  std::size_t max_streams = 64;                // event streams open at once
  std::chrono::milliseconds stream_poll{250};  // how often an idle stream asks for more
  std::chrono::milliseconds stream_heartbeat{15'000};
};

// What the access log and metrics see of one answered request.
struct Answered {
  const RequestHead& head;
  int status;
  const std::string& route;
  double seconds;
};

struct ServerOptions {
  std::string name;  // log prefix: "serve", "sandboxd-provisioner"
  ListenAddress address;
  Limits limits;
  // On the I/O thread, with the head only (see Admission); unset admits every request as
  // credentialed. Must not block.
  std::function<Admission(const RequestHead&)> admit;
  // On a worker thread; may block. What it throws is answered 500 (std::bad_alloc: 503).
  std::function<Response(const Request&)> handle;
  // The server's own answers (400 malformed, 413, 503, 500) in the door's error shape.
  std::function<Response(int status, const std::string& kind, const std::string& message)>
      error_body;
  // After every answer, on the I/O thread (metrics); must not block.
  std::function<void(const Answered&)> on_answered;
  std::shared_ptr<Logger> logger;
};

// Binding failed: the address is taken (a live socket, another server's lock) or unusable.
class ListenError : public std::runtime_error {
 public:
  ListenError(const std::string& message, bool in_use)
      : std::runtime_error(message), in_use_(in_use) {}
  bool in_use() const { return in_use_; }

 private:
  bool in_use_;
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens. A unix socket is created mode 0600; its path is claimed first: an
  // flock on "{path}.lock" held for the server's life, and a connect probe, so a socket
  // another process answers on is never taken (ListenError with in_use()); a stale one is
  // replaced. Afterwards bound() says where (a TCP port of 0 resolved).
  void bind();
  const ListenAddress& bound() const;

  // Serves on the calling thread until stop() and the shutdown described above; returns how
  // many handlers were still running when it gave up waiting for them (0: none). The caller
  // must not destroy what such a handler uses; leaving the process is the way out.
  std::size_t run();
  void stop();  // any thread, idempotent

  struct Stats {
    std::size_t open_connections = 0;
    std::size_t evicted = 0;          // connections closed to make room for a new one
    std::size_t refused_busy = 0;     // 503: no slot, no worker
    std::size_t timed_out = 0;        // connections closed at a deadline
    std::size_t open_streams = 0;     // event streams being sent
    std::size_t dropped_streams = 0;  // subscribers closed for not taking what was sent
  };
  Stats stats() const;

  struct Impl;  // defined in http_door.cpp, shared with the connections

 private:
  std::shared_ptr<Impl> impl_;
};

// A path as a log line may show it: at most 200 characters, control bytes as '?', no query.
std::string loggable_path(const std::string& target);

}  // namespace sandboxd::door

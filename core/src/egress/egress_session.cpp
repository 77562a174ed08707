// One connection from an allowlist sandbox through the egress proxy (egress_proxy.hpp), on the
// proxy's I/O thread:
//   head (deadline, bounded) → method, port, name checked against the list and the grants →
//   resolved on the pool; every address must be public → CONNECT: 200, then the ClientHello
//   (deadline, bounded) must name the same host and hide nothing, then dial and pipe both ways;
//   plain: the body read whole (bounded), dial, the request written in origin form with
//   `Connection: close`, and the answer piped back until the upstream closes.
// A tunnel to the destination of an https secret is ended here instead (TLS interception,
// egress_tls.hpp): after the ClientHello the proxy completes the handshake itself with a
// certificate for that name from the operator's CA, reads one request (bounded, like a plain
// one; its Host must name the destination), dials the destination with its own TLS (the name
// verified against the host's trust store and `upstream_ca_file`), writes the request with the
// secret put in and `Connection: close`, and relays the answer until the destination closes.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cctype>
#include <cstring>
#include <optional>

#include "egress/egress_proxy_impl.hpp"
#include "net/deadline.hpp"
#include "relay/hop_by_hop.hpp"

namespace sandboxd::core {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// What one splice moves at most, and the pipe's capacity asked for (the kernel's default is
// 64 KiB; a larger pipe halves the system calls of a long transfer; kept when refused).
constexpr std::size_t kPipeBytes = 256 * 1024;

// A kernel pipe between two sockets (EgressSession::move), made when bytes flow and closed when
// they stop. Owned by one session, used on the I/O thread only.
struct SplicePipe {
  int read_end = -1;
  int write_end = -1;
  std::size_t held = 0;  // bytes in the pipe, not yet written on

  SplicePipe() = default;
  SplicePipe(const SplicePipe&) = delete;
  SplicePipe& operator=(const SplicePipe&) = delete;
  ~SplicePipe() { release(); }

  bool open() {
    if (read_end >= 0) return true;
    int ends[2];
    if (::pipe2(ends, O_NONBLOCK | O_CLOEXEC) != 0) return false;
    read_end = ends[0];
    write_end = ends[1];
    (void)::fcntl(write_end, F_SETPIPE_SZ, static_cast<int>(kPipeBytes));
    return true;
  }
  void release() {
    if (read_end >= 0) ::close(read_end);
    if (write_end >= 0) ::close(write_end);
    read_end = write_end = -1;
    held = 0;
  }
};
constexpr std::size_t kMaxHelloBytes = 16 * 1024 + 5;  // one TLS record

// The methods an agent needs for the web, forwarded with their method intact. TRACE and TRACK
// are never forwarded (a destination echoes them, a secret put in included), nor anything
// else: a method the proxy does not know it would not know how to frame.
bool forwarded_method(http::verb method) {
  switch (method) {
    case http::verb::get:
    case http::verb::head:
    case http::verb::post:
    case http::verb::put:
    case http::verb::patch:
    case http::verb::delete_:
    case http::verb::options:
      return true;
    default:
      return false;
  }
}

// A method as a refusal's line shows it: at most 16 characters of a token.
std::string shown_method(beast::string_view method) {
  std::string out;
  for (const char c : method.substr(0, 16)) {
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '?';
  }
  return out;
}

// One connection from a sandbox. Every member is touched on the I/O thread only, but for the
// resolution, whose thread only calls the network and posts its answer back.
class EgressSession final : public EgressConnection,
                            public std::enable_shared_from_this<EgressSession> {
 public:
  EgressSession(std::shared_ptr<EgressProxy::Impl> impl, tcp::socket client, std::uint64_t id,
                std::string sandbox_id)
      : impl_(std::move(impl)),
        client_(std::move(client)),
        upstream_(impl_->io),
        deadline_(impl_->io),
        id_(id),
        sandbox_id_(std::move(sandbox_id)),
        client_buffer_(impl_->options.max_header_bytes + impl_->options.max_plain_body_bytes +
                       kMaxHelloBytes) {}

  void start() override {
    arm(impl_->options.head_timeout);
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(impl_->options.max_header_bytes));
    parser_->body_limit(impl_->options.max_plain_body_bytes);
    http::async_read_header(client_, client_buffer_, *parser_,
                            [self = shared_from_this()](const boost::system::error_code& ec,
                                                        std::size_t) { self->on_head(ec); });
  }

  const std::string& sandbox_id() const override { return sandbox_id_; }

  void close() override {
    if (closed_) return;
    closed_ = true;
    deadline_.cancel();
    boost::system::error_code ignored;
    client_.shutdown(tcp::socket::shutdown_both, ignored);
    client_.close(ignored);
    upstream_.close(ignored);
    to_upstream_.release();
    to_client_.release();
    impl_->held_body_bytes -= held_body_bytes_;
    held_body_bytes_ = 0;
    impl_->forget(id_, sandbox_id_);
  }

 private:
  void arm(std::chrono::milliseconds limit) {
    deadline_.arm(limit, [self = shared_from_this()] { self->close(); });
  }

  // No exception leaves a handler: one is a refusal of this request, counted like the others.
  template <class Step>
  void guarded(Step&& step) {
    try {
      step();
    } catch (const std::bad_alloc&) {
      refuse(503, "busy", "no memory for this request");
    } catch (const std::exception& e) {
      refuse(400, "bad_request", std::string("the request cannot be forwarded: ") + e.what());
    }
  }

  void on_head(const boost::system::error_code& ec) {
    guarded([&] { check_head(ec); });
  }

  void check_head(const boost::system::error_code& ec) {
    if (closed_) return;
    if (ec) {
      if (ec == http::error::header_limit) return refuse(431, "bad_request", "headers too large");
      if (ec == http::error::end_of_stream || ec == asio::error::eof ||
          ec == asio::error::operation_aborted || ec == asio::error::connection_reset) {
        return close();
      }
      return refuse(400, "bad_request", "malformed HTTP request");
    }
    auto& message = parser_->get();
    const std::string target(message.target());
    std::string host;
    int port = 0;
    if (message.method() == http::verb::connect) {
      tunnel_ = true;
      const std::size_t colon = target.rfind(':');
      if (colon == std::string::npos || colon == 0 || target.front() == '[') {
        return refuse(400, "bad_request", "CONNECT needs host:port");
      }
      host = target.substr(0, colon);
      port = parse_port(target.substr(colon + 1));
      if (port != 443) return refuse(403, "port_not_allowed", "port not allowed: " + target);
    } else {
      if (!forwarded_method(message.method())) {
        return refuse(405, "method_not_allowed",
                      "method not allowed: " + shown_method(message.method_string()));
      }
      // Absolute form, http only: "http://host[:port]/path".
      if (target.rfind("http://", 0) != 0) {
        return refuse(target.rfind("https://", 0) == 0 ? 400 : 405, "bad_request",
                      target.rfind("https://", 0) == 0
                          ? "use CONNECT for https"
                          : "only CONNECT host:443 and absolute http:// requests pass");
      }
      const std::size_t authority_end = target.find_first_of("/?#", 7);
      const std::string authority = target.substr(7, authority_end - 7);
      path_ = authority_end == std::string::npos ? "/" : target.substr(authority_end);
      if (path_.front() != '/') path_ = "/" + path_;
      if (authority.find('@') != std::string::npos) {
        return refuse(400, "bad_request", "credentials in the URL are not passed");
      }
      const std::size_t colon = authority.rfind(':');
      const bool bracketed = !authority.empty() && authority.front() == '[';
      if (colon != std::string::npos && !(bracketed && authority.back() == ']')) {
        host = authority.substr(0, colon);
        port = parse_port(authority.substr(colon + 1));
      } else {
        host = authority;
        port = 80;
      }
      if (port != 80) return refuse(403, "port_not_allowed", "port not allowed: " + authority);
    }
    shown_ = (tunnel_ ? "CONNECT " : std::string(message.method_string()) + " http://") + host +
             (tunnel_ ? ":443" : "");  // never the path or the query
    if (egress::is_ip_literal(host)) {
      return refuse(403, "ip_literal", "IP address not allowed: " + host);
    }
    const auto domain = egress::normalize_domain(host);
    if (!domain) return refuse(400, "bad_request", "not a host name: " + host);
    domain_ = *domain;
    if (!tunnel_ && !host_header_names_domain(message)) return;
    if (!impl_->allowed(sandbox_id_, domain_, port,
                        tunnel_ ? "CONNECT" : std::string(message.method_string()))) {
      return refuse(403, "domain_not_allowed", "domain not allowed: " + domain_);
    }
    port_ = static_cast<std::uint16_t>(port);
    if (!tunnel_) {
      // The body, whole and bounded (for this request, and for every request held at once),
      // before anything is dialled.
      const auto length = parser_->content_length();
      const std::size_t held = parser_->is_done() ? 0
                               : length ? static_cast<std::size_t>(*length)
                                        : impl_->options.max_plain_body_bytes;
      if (held > 0 && impl_->held_body_bytes + held > impl_->options.max_held_body_bytes) {
        return refuse(503, "busy", "too many request bodies held at once");
      }
      impl_->held_body_bytes += held;
      held_body_bytes_ = held;
      if (beast::iequals(message[http::field::expect], "100-continue") && !parser_->is_done()) {
        return continue_then_read_body();
      }
      read_body();
      return;
    }
    resolve();
  }

  // A client that waits for "100 Continue" before its body is told to go on, once the request
  // passed every check.
  void continue_then_read_body() {
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    arm(impl_->options.progress_timeout);
    asio::async_write(client_, asio::buffer(kContinue),
                      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                        if (self->closed_) return;
                        if (ec) return self->close();
                        self->read_body();
                      });
  }

  void read_body() {
    {
      arm(impl_->options.progress_timeout);
      http::async_read(
          client_, client_buffer_, *parser_,
          [self = shared_from_this()](const boost::system::error_code& read_ec, std::size_t) {
            if (self->closed_) return;
            if (read_ec == http::error::body_limit) {
              return self->refuse(413, "bad_request", "request body too large");
            }
            if (read_ec) return self->close();
            self->resolve();
          });
    }
  }

  // Whether the request's one Host header (a port allowed) names domain_; refused when not:
  // a plain request's, and one read inside an intercepted tunnel, must name the host dialled.
  bool host_header_names_domain(const http::request<http::string_body>& message) {
    if (const auto [first, end] = message.equal_range(http::field::host);
        first != end && std::next(first) != end) {
      refuse(400, "bad_request", "more than one Host header");
      return false;
    }
    const auto named = message.find(http::field::host);
    std::string named_host = named == message.end() ? "" : std::string(named->value());
    if (const std::size_t colon = named_host.rfind(':');
        colon != std::string::npos && named_host.find(']') == std::string::npos) {
      named_host = named_host.substr(0, colon);
    }
    const auto host_header = egress::normalize_domain(named_host);
    if (!host_header || *host_header != domain_) {
      refuse(403, "host_mismatch", "Host header does not name " + domain_ + ": " + named_host);
      return false;
    }
    return true;
  }

  static int parse_port(const std::string& text) {
    if (text.empty() || text.size() > 5 ||
        text.find_first_not_of("0123456789") != std::string::npos) {
      return -1;
    }
    return std::stoi(text);
  }

  // ── the name, resolved by the proxy itself ──
  void resolve() {
    arm(impl_->options.connect_timeout);
    auto self = shared_from_this();
    asio::post(impl_->resolvers, [self, network = impl_->network, domain = domain_, port = port_] {
      std::vector<tcp::endpoint> endpoints = network->resolve(domain, port);
      const bool resolved = !endpoints.empty();
      std::string refusal;
      for (const auto& endpoint : endpoints) {
        if (const std::string why = network->refusal(endpoint.address()); !why.empty()) {
          refusal = why + ": " + endpoint.address().to_string();
          break;  // every answer must be public: one that is not spoils the name
        }
      }
      asio::post(self->impl_->io, [self, endpoints = std::move(endpoints), refusal, resolved] {
        if (self->closed_) return;
        if (!resolved) {
          return self->refuse(502, "resolve_failed", "cannot resolve " + self->domain_);
        }
        if (!refusal.empty()) return self->refuse(403, "non_public_address", refusal);
        self->endpoints_ = endpoints;
        if (self->tunnel_) {
          self->accept_tunnel();
        } else {
          self->dial();
        }
      });
    });
  }

  // ── CONNECT: 200, then the ClientHello must say the same host ──
  void accept_tunnel() {
    static const std::string kEstablished = "HTTP/1.1 200 Connection Established\r\n\r\n";
    arm(impl_->options.progress_timeout);
    asio::async_write(
        client_, asio::buffer(kEstablished),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          if (ec) return self->close();
          self->arm(self->impl_->options.hello_timeout);
          self->read_hello();
        });
  }

  void read_hello() {
    egress::ClientHello hello;
    const auto data = client_buffer_.data();
    const std::string_view bytes(static_cast<const char*>(data.data()), data.size());
    switch (egress::parse_client_hello(bytes, hello)) {
      case egress::HelloParse::complete:
        break;
      case egress::HelloParse::not_tls:
        return refuse_tunnel("not_tls", "not a TLS ClientHello");
      case egress::HelloParse::need_more:
        if (bytes.size() >= kMaxHelloBytes) {
          return refuse_tunnel("not_tls", "ClientHello too large");
        }
        client_.async_read_some(
            client_buffer_.prepare(kMaxHelloBytes - bytes.size()),
            [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
              if (self->closed_) return;
              if (ec) return self->close();
              self->client_buffer_.commit(n);
              self->read_hello();
            });
        return;
    }
    if (hello.encrypted_client_hello) {
      return refuse_tunnel("ech", "Encrypted Client Hello hides the host");
    }
    if (!hello.server_name) return refuse_tunnel("no_sni", "no server name in the ClientHello");
    const auto named = egress::normalize_domain(*hello.server_name);
    if (!named || *named != domain_) {
      return refuse_tunnel("sni_mismatch", "ClientHello names " + *hello.server_name);
    }
    if (asio::ssl::context* context = impl_->interception_context(domain_)) {
      return intercept(*context);
    }
    dial();
  }

  // ── the destination of an https secret: the proxy ends the sandbox's TLS ──
  void intercept(asio::ssl::context& context) {
    const auto data = client_buffer_.data();
    auto hello = std::make_shared<std::string>(static_cast<const char*>(data.data()), data.size());
    client_buffer_.consume(client_buffer_.size());
    client_tls_.emplace(client_, context);
    client_tls_->async_handshake(
        asio::ssl::stream_base::server, asio::buffer(*hello),
        [self = shared_from_this(), hello](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          if (ec) {
            return self->refuse_tunnel("client_tls_failed",
                                       "TLS with the sandbox failed; does its image trust the "
                                       "inject_tls_ca certificate?");
          }
          self->read_intercepted_request();
        });
  }

  void read_intercepted_request() {
    // Its body is held whole too, and counted against the bound on all held bodies.
    const std::size_t held = impl_->options.max_plain_body_bytes;
    if (impl_->held_body_bytes + held > impl_->options.max_held_body_bytes) {
      return refuse(503, "busy", "too many request bodies held at once");
    }
    impl_->held_body_bytes += held;
    held_body_bytes_ += held;
    arm(impl_->options.head_timeout);
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(impl_->options.max_header_bytes));
    parser_->body_limit(impl_->options.max_plain_body_bytes);
    http::async_read(*client_tls_, client_buffer_, *parser_,
                     [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                       if (self->closed_) return;
                       if (ec == http::error::header_limit) {
                         return self->refuse(431, "bad_request", "headers too large");
                       }
                       if (ec == http::error::body_limit) {
                         return self->refuse(413, "bad_request", "request body too large");
                       }
                       if (ec) return self->close();
                       self->check_intercepted_request();
                     });
  }

  void check_intercepted_request() {
    auto& message = parser_->get();
    path_ = std::string(message.target());
    if (message.method() == http::verb::connect || path_.empty() || path_.front() != '/') {
      return refuse(400, "bad_request", "expected a request in origin form (GET /path)");
    }
    if (!forwarded_method(message.method())) {
      return refuse(405, "method_not_allowed",
                    "method not allowed: " + shown_method(message.method_string()));
    }
    if (host_header_names_domain(message)) dial();
  }

  void verify_upstream() {
    upstream_tls_.emplace(upstream_, *impl_->upstream_tls);
    if (SSL_set_tlsext_host_name(upstream_tls_->native_handle(), domain_.c_str()) != 1) {
      return refuse(502, "upstream_tls_failed", "cannot name " + domain_ + " in TLS");
    }
    upstream_tls_->set_verify_mode(asio::ssl::verify_peer);
    upstream_tls_->set_verify_callback(asio::ssl::host_name_verification(domain_));
    arm(impl_->options.connect_timeout);
    upstream_tls_->async_handshake(
        asio::ssl::stream_base::client,
        [self = shared_from_this()](const boost::system::error_code& ec) {
          if (self->closed_) return;
          if (ec) {
            return self->refuse(502, "upstream_tls_failed",
                                "TLS to " + self->domain_ + " failed: " + ec.message());
          }
          ++self->impl_->tunnels;
          ++self->impl_->intercepted;
          self->guarded([&] { self->request_ = self->outgoing_request(); });
          if (self->closed_ || !self->request_) return;
          self->arm(self->impl_->options.progress_timeout);
          http::async_write(*self->upstream_tls_, *self->request_,
                            [self](const boost::system::error_code& write_ec, std::size_t) {
                              if (self->closed_) return;
                              if (write_ec) return self->close();
                              self->relay_answer();
                            });
        });
  }

  // The destination's answer, record by record, until it closes; then the sandbox's TLS ends.
  void relay_answer() {
    if (!relay_buffer_) relay_buffer_ = std::make_unique<std::array<char, 16 * 1024>>();
    arm(impl_->options.progress_timeout);
    upstream_tls_->async_read_some(
        asio::buffer(*relay_buffer_),
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t n) {
          if (self->closed_) return;
          if (n == 0 && ec) {
            self->arm(self->impl_->options.progress_timeout);
            return self->client_tls_->async_shutdown(
                [self](const boost::system::error_code&) { self->close(); });
          }
          asio::async_write(*self->client_tls_, asio::buffer(self->relay_buffer_->data(), n),
                            [self](const boost::system::error_code& write_ec, std::size_t) {
                              if (self->closed_) return;
                              if (write_ec) return self->close();
                              self->relay_answer();
                            });
        });
  }

  // ── the upstream ──
  void dial() {
    arm(impl_->options.connect_timeout);
    asio::async_connect(
        upstream_, endpoints_,
        [self = shared_from_this()](const boost::system::error_code& ec, const tcp::endpoint&) {
          if (self->closed_) return;
          if (ec) {
            return self->refuse(502, "connect_failed", "cannot connect to " + self->domain_);
          }
          boost::system::error_code ignored;
          self->upstream_.set_option(tcp::no_delay(true), ignored);
          if (self->client_tls_) return self->verify_upstream();
          if (self->tunnel_) {
            ++self->impl_->tunnels;
            self->pipe_both();
          } else {
            ++self->impl_->requests;
            self->forward_request();
          }
        });
  }

  // The request read from the sandbox as the destination gets it: origin form, no hop-by-hop
  // header, one Host naming what the proxy checked and dialled (in its normalised form, so no
  // look-alike the check folded reaches a virtual host), no Expect (the body is here whole),
  // the secrets bound to it put in, and `Connection: close` (one request per connection, so
  // every request the destination sees went through here).
  std::shared_ptr<http::request<http::string_body>> outgoing_request() {
    auto& message = parser_->get();
    auto request = std::make_shared<http::request<http::string_body>>(message.method(), path_,
                                                                      message.version());
    for (const auto& field : message) {
      request->insert(field.name(), field.name_string(), field.value());
    }
    strip_hop_by_hop(*request);
    request->set(http::field::host, domain_);
    request->erase(http::field::expect);
    if (inject_secrets(*request)) ++impl_->secrets_injected;
    request->set(http::field::connection, "close");
    request->body() = std::move(message.body());
    request->prepare_payload();
    return request;
  }

  void forward_request() {
    guarded([&] { request_ = outgoing_request(); });
    if (closed_ || !request_) return;
    arm(impl_->options.progress_timeout);
    http::async_write(
        upstream_, *request_,
        [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          if (ec) return self->close();
          // One request per connection: the answer, then nothing more.
          self->pipe(self->upstream_, self->client_, self->to_client_);
        });
  }

  void pipe_both() {
    arm(impl_->options.tunnel_idle_timeout);
    // The ClientHello (and anything after it) goes first.
    const auto data = client_buffer_.data();
    std::string hello(static_cast<const char*>(data.data()), data.size());
    client_buffer_.consume(client_buffer_.size());
    client_buffer_.shrink_to_fit();  // a held tunnel keeps no buffer
    parser_.reset();
    auto held = std::make_shared<std::string>(std::move(hello));
    asio::async_write(
        upstream_, asio::buffer(*held),
        [self = shared_from_this(), held](const boost::system::error_code& ec, std::size_t) {
          if (self->closed_) return;
          if (ec) return self->close();
          self->pipe(self->client_, self->upstream_, self->to_upstream_);
          self->pipe(self->upstream_, self->client_, self->to_client_);
        });
  }

  // The secrets bound to this request's host: each one's placeholder, in its header only,
  // becomes the secret. True when one was put in.
  bool inject_secrets(http::request<http::string_body>& request) const {
    bool injected = false;
    const bool inside_tls = client_tls_.has_value();
    for (const EgressSecret& secret : impl_->policy.secrets) {
      if (secret.domain != domain_ || secret.https != inside_tls) continue;
      // Every line of that header, in order: each holding the placeholder gets the secret.
      std::vector<std::string> values;
      bool holds = false;
      for (auto [it, end] = request.equal_range(secret.header); it != end; ++it) {
        values.emplace_back(it->value());
        holds = holds || values.back().find(secret.placeholder) != std::string::npos;
      }
      if (!holds) continue;
      request.erase(secret.header);
      for (std::string& value : values) {
        if (value == secret.placeholder) {
          value = secret.format;
          value.replace(value.find("{}"), 2, secret.value);
        } else {
          for (std::size_t at = value.find(secret.placeholder); at != std::string::npos;
               at = value.find(secret.placeholder, at + secret.value.size())) {
            value.replace(at, secret.placeholder.size(), secret.value);
          }
        }
        request.insert(secret.header, value);
      }
      injected = true;
    }
    return injected;
  }

  // Bytes move socket to socket through a kernel pipe (splice), never through this process's
  // memory: a held tunnel costs its two sockets and no buffer, and a transfer is not copied
  // through user space. The pipe exists only while bytes flow: made when the source has data,
  // closed when it has none left to give.
  void pipe(tcp::socket& from, tcp::socket& to, SplicePipe& through) {
    boost::system::error_code ignored;
    from.native_non_blocking(true, ignored);
    to.native_non_blocking(true, ignored);
    move(from, to, through);
  }

  void move(tcp::socket& from, tcp::socket& to, SplicePipe& through) {
    // At most this many pipe-fulls before yielding the I/O thread to other connections.
    for (int round = 0; round < 16; ++round) {
      if (!through.open()) return close();
      const ssize_t got = ::splice(from.native_handle(), nullptr, through.write_end, nullptr,
                                   kPipeBytes, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (got == 0) return close();  // either side's end ends the connection
      if (got < 0) {
        if (errno != EAGAIN && errno != EWOULDBLOCK) return close();
        through.release();
        from.async_wait(tcp::socket::wait_read, [self = shared_from_this(), &from, &to,
                                                 &through](const boost::system::error_code& ec) {
          if (self->closed_) return;
          if (ec) return self->close();
          self->move(from, to, through);
        });
        return;
      }
      through.held = static_cast<std::size_t>(got);
      arm(tunnel_ ? impl_->options.tunnel_idle_timeout : impl_->options.progress_timeout);
      if (!drain(from, to, through)) return;  // waiting for `to`, or closed
    }
    asio::post(impl_->io, [self = shared_from_this(), &from, &to, &through] {
      if (!self->closed_) self->move(from, to, through);
    });
  }

  // Empties the pipe into `to`: true when it is empty; false when it waits for `to` to take more
  // (and moves on from there) or the connection closed.
  bool drain(tcp::socket& from, tcp::socket& to, SplicePipe& through) {
    while (through.held > 0) {
      const ssize_t sent = ::splice(through.read_end, nullptr, to.native_handle(), nullptr,
                                    through.held, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (sent > 0) {
        through.held -= static_cast<std::size_t>(sent);
        continue;
      }
      if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        to.async_wait(tcp::socket::wait_write, [self = shared_from_this(), &from, &to,
                                                &through](const boost::system::error_code& ec) {
          if (self->closed_) return;
          if (ec) return self->close();
          self->arm(self->tunnel_ ? self->impl_->options.tunnel_idle_timeout
                                  : self->impl_->options.progress_timeout);
          if (self->drain(from, to, through)) self->move(from, to, through);
        });
        return false;
      }
      close();
      return false;
    }
    return true;
  }

  // ── refusals ──
  void refuse(int status, const std::string& reason, const std::string& line) {
    impl_->count_refusal(reason, sandbox_id_,
                         (shown_.empty() ? "a request" : shown_) + " (" + line + ")");
    const char* text = status == 400   ? "Bad Request"
                       : status == 403 ? "Forbidden"
                       : status == 405 ? "Method Not Allowed"
                       : status == 413 ? "Content Too Large"
                       : status == 431 ? "Request Header Fields Too Large"
                       : status == 502 ? "Bad Gateway"
                                       : "Service Unavailable";
    answer_ = "HTTP/1.1 " + std::to_string(status) + " " + text +
              "\r\nContent-Type: text/plain\r\nContent-Length: " + std::to_string(line.size() + 1) +
              "\r\nConnection: close\r\n\r\n" + line + "\n";
    arm(impl_->options.progress_timeout);
    const auto then_close = [self = shared_from_this()](const boost::system::error_code&,
                                                        std::size_t) { self->close(); };
    if (client_tls_) {
      asio::async_write(*client_tls_, asio::buffer(answer_), then_close);
    } else {
      asio::async_write(client_, asio::buffer(answer_), then_close);
    }
  }
  void refuse_tunnel(const std::string& reason, const std::string& line) {
    impl_->count_refusal(reason, sandbox_id_, shown_ + " (" + line + ")");
    close();  // the 200 is out: the tunnel just ends
  }

  std::shared_ptr<EgressProxy::Impl> impl_;
  tcp::socket client_;
  tcp::socket upstream_;
  net::Deadline deadline_;
  const std::uint64_t id_;
  const std::string sandbox_id_;
  beast::flat_buffer client_buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::shared_ptr<http::request<http::string_body>> request_;
  std::vector<tcp::endpoint> endpoints_;
  SplicePipe to_upstream_, to_client_;
  // An intercepted tunnel's two TLS ends and the buffer its answer passes through.
  std::optional<asio::ssl::stream<tcp::socket&>> client_tls_, upstream_tls_;
  std::unique_ptr<std::array<char, 16 * 1024>> relay_buffer_;
  std::string domain_, path_, shown_, answer_;
  std::uint16_t port_ = 0;
  std::size_t held_body_bytes_ = 0;  // counted in impl_->held_body_bytes until closed
  bool tunnel_ = false;
  bool closed_ = false;
};

}  // namespace

std::shared_ptr<EgressConnection> make_egress_session(std::shared_ptr<EgressProxy::Impl> impl,
                                                      tcp::socket client, std::uint64_t id,
                                                      std::string sandbox_id) {
  return std::make_shared<EgressSession>(std::move(impl), std::move(client), id,
                                         std::move(sandbox_id));
}

}  // namespace sandboxd::core

// The egress proxy (core/include/sandboxd/core/egress_proxy.hpp) with real sockets: the
// sandbox's listener is an ordinary socket on 127.0.0.1 here (the engine tests put it in a
// sandbox's namespace), the upstreams are real servers on 127.0.0.1 named through the test-only
// network, and a scripted network stands in for DNS where a test needs answers a resolver would
// give (rebinding to a private or metadata address). Every refusal reason is provoked and seen
// from the client; what reaches an upstream is read on the upstream.
#include "sandboxd/core/egress_proxy.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>

#include "client_hellos.hpp"
#include "loopback_listener.hpp"
#include "test_support.hpp"

namespace sandboxd::testing {
namespace {

using boost::asio::ip::make_address;
using boost::asio::ip::tcp;
using core::EgressDecision;
using core::EgressOptions;
using core::EgressPolicy;
using core::EgressProxy;
using namespace std::chrono_literals;

int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  timeval limit{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  return fd;
}

void send_all(int fd, const std::string& data) {
  ASSERT_EQ(::send(fd, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
}

// Everything until the peer closes (or 5 s of silence).
std::string read_all(int fd) {
  std::string out;
  char buffer[4096];
  ssize_t n;
  while ((n = ::recv(fd, buffer, sizeof buffer, 0)) > 0)
    out.append(buffer, static_cast<std::size_t>(n));
  return out;
}

std::string read_head(int fd) {
  std::string out;
  char c;
  while (out.find("\r\n\r\n") == std::string::npos && ::recv(fd, &c, 1, 0) == 1) out += c;
  return out;
}

// A TCP upstream that records what it is sent and echoes it back.
class EchoUpstream {
 public:
  EchoUpstream() {
    fd_ = listen_on_loopback(&port_);
    thread_ = std::thread([this] {
      while (true) {
        const int client = ::accept(fd_, nullptr, nullptr);
        if (client < 0) return;
        ++connections_;
        char buffer[4096];
        ssize_t n;
        while ((n = ::recv(client, buffer, sizeof buffer, 0)) > 0) {
          {
            std::lock_guard lock(mutex_);
            received_.append(buffer, static_cast<std::size_t>(n));
          }
          ::send(client, buffer, static_cast<std::size_t>(n), MSG_NOSIGNAL);
        }
        ::close(client);
      }
    });
  }
  ~EchoUpstream() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }
  int connections() const { return connections_.load(); }
  std::string received() const {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  std::atomic<int> connections_{0};
  mutable std::mutex mutex_;
  std::string received_;
};

// What DNS would answer, scripted; addresses are judged as the system network judges them.
class ScriptedNetwork final : public core::EgressNetwork {
 public:
  std::map<std::string, std::vector<std::string>> answers;
  std::vector<tcp::endpoint> resolve(const std::string& name, std::uint16_t port) override {
    std::vector<tcp::endpoint> out;
    for (const auto& text : answers[name]) out.emplace_back(make_address(text), port);
    return out;
  }
  std::string refusal(const boost::asio::ip::address& address) const override {
    return core::egress::non_public_reason(address);
  }
};

class EgressProxyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    http_.Get("/big", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(32u << 20, 'b'), "application/octet-stream");
    });
    http_.Get(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex_);
      seen_target_ = req.target;
      seen_headers_.clear();
      for (const auto& [name, value] : req.headers) seen_headers_ += name + ": " + value + "\n";
      res.set_content("hello from the upstream", "text/plain");
    });
    http_.Post("/upload", [](const httplib::Request& req, httplib::Response& res) {
      res.set_content(std::to_string(req.body.size()), "text/plain");
    });
    http_port_ = http_.bind_to_any_port("127.0.0.1");
    http_thread_ = std::thread([this] { http_.listen_after_bind(); });
    while (!http_.is_running()) std::this_thread::sleep_for(1ms);
  }
  void TearDown() override {
    if (proxy_) proxy_->stop();
    http_.stop();
    http_thread_.join();
  }

  // A proxy for sandbox "sb1" with `allow`, over the test-only network naming the upstreams.
  void start(std::vector<std::string> allow, bool prompt = false,
             std::shared_ptr<core::EgressNetwork> network = nullptr) {
    EgressPolicy policy;
    policy.allow = core::egress::DomainAllowlist(allow);
    policy.prompt = prompt;
    policy.temporary_grant_ttl = 300;
    policy.secrets = secrets_;
    if (!network) {
      network = core::test_upstream_network(
          {{"allowed.test", tcp::endpoint(make_address("127.0.0.1"), http_port_)},
           {"other.test", tcp::endpoint(make_address("127.0.0.1"), http_port_)},
           {"tls.test", tcp::endpoint(make_address("127.0.0.1"), echo_.port())}});
    }
    proxy_ = std::make_unique<EgressProxy>(policy, network, options_, logger_, clock_);
    proxy_->start();
    int port = 0;
    proxy_->attach("sb1", listen_on_loopback(&port));
    proxy_port_ = port;
  }

  // One request through the proxy; the whole answer.
  std::string ask(const std::string& request) {
    const int fd = connect_to(proxy_port_);
    if (fd < 0) return "(refused)";
    send_all(fd, request);
    std::string answer = read_all(fd);
    ::close(fd);
    return answer;
  }
  std::string get(const std::string& url, const std::string& host) {
    return ask("GET " + url + " HTTP/1.1\r\nHost: " + host +
               "\r\nProxy-Connection: keep-alive\r\nUser-Agent: test\r\n\r\n");
  }
  std::uint64_t refused(const std::string& reason) {
    const auto stats = proxy_->stats();
    const auto it = stats.refused.find(reason);
    return it == stats.refused.end() ? 0 : it->second;
  }
  std::string seen_target() {
    std::lock_guard lock(mutex_);
    return seen_target_;
  }
  std::string seen_headers() {
    std::lock_guard lock(mutex_);
    return seen_headers_;
  }

  std::vector<core::EgressSecret> secrets_;  // the next start()'s
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  EgressOptions options_;
  httplib::Server http_;
  int http_port_ = 0;
  std::thread http_thread_;
  EchoUpstream echo_;
  std::unique_ptr<EgressProxy> proxy_;
  int proxy_port_ = 0;
  std::mutex mutex_;
  std::string seen_target_, seen_headers_;
};

TEST_F(EgressProxyTest, AnAllowedNameIsReachedInOriginFormWithNothingOfTheProxysOwn) {
  start({"allowed.test"});
  const std::string answer = get("http://allowed.test/simple?token=secret-query", "allowed.test");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(answer.find("hello from the upstream"), std::string::npos);
  EXPECT_EQ(seen_target(), "/simple?token=secret-query");
  EXPECT_EQ(seen_headers().find("Proxy-Connection"), std::string::npos) << seen_headers();
  EXPECT_NE(seen_headers().find("Connection: close"), std::string::npos) << seen_headers();
  EXPECT_EQ(proxy_->stats().requests, 1u);
  // A body, read whole and bounded, goes along.
  const std::string body(100'000, 'b');
  const std::string posted =
      ask("POST http://allowed.test/upload HTTP/1.1\r\nHost: allowed.test"
          "\r\nContent-Length: 100000\r\n\r\n" +
          body);
  EXPECT_NE(posted.find("\r\n\r\n100000"), std::string::npos) << posted.substr(0, 200);
  for (const auto& line : logger_->lines()) {
    EXPECT_EQ(line.message.find("secret-query"), std::string::npos) << "a query string was logged";
  }
}

// Header lines are passed on as the sandbox sent them, repeated ones included; a second Host
// line is refused: the proxy checks one name and must not forward another the upstream might
// route by.
TEST_F(EgressProxyTest, RepeatedHeadersPassButASecondHostIsRefused) {
  start({"allowed.test"});
  const std::string answer =
      ask("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nX-Tag: one\r\n"
          "X-Tag: two\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  EXPECT_NE(seen_headers().find("X-Tag: one\n"), std::string::npos) << seen_headers();
  EXPECT_NE(seen_headers().find("X-Tag: two\n"), std::string::npos) << seen_headers();

  const std::string twice =
      ask("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n"
          "Host: internal.example\r\n\r\n");
  EXPECT_EQ(twice.rfind("HTTP/1.1 400", 0), 0u) << twice;
  EXPECT_NE(twice.find("more than one Host"), std::string::npos) << twice;
  EXPECT_EQ(proxy_->stats().requests, 1u) << "nothing was dialled for it";
}

TEST_F(EgressProxyTest, EveryPlainRefusalIsA403WithItsReasonAndCounted) {
  start({"allowed.test"});
  std::string answer = get("http://other.test/", "other.test");
  EXPECT_EQ(answer.rfind("HTTP/1.1 403", 0), 0u) << answer;
  EXPECT_NE(answer.find("domain not allowed: other.test"), std::string::npos) << answer;
  answer = get("http://10.0.0.5/", "10.0.0.5");
  EXPECT_NE(answer.find("IP address not allowed: 10.0.0.5"), std::string::npos) << answer;
  answer = get("http://127.1/", "127.1");
  EXPECT_NE(answer.find("IP address not allowed: 127.1"), std::string::npos) << answer;
  answer = get("http://allowed.test:8080/", "allowed.test");
  EXPECT_NE(answer.find("port not allowed: allowed.test:8080"), std::string::npos) << answer;
  answer = get("http://allowed.test/", "other.test");
  EXPECT_NE(answer.find("Host header does not name allowed.test: other.test"), std::string::npos)
      << answer;
  answer = ask("GET /relative HTTP/1.1\r\nHost: allowed.test\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 405", 0), 0u) << answer;
  answer = ask("GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n");
  EXPECT_NE(answer.find("use CONNECT for https"), std::string::npos) << answer;
  answer = get("http://user:pw@allowed.test/", "allowed.test");
  EXPECT_EQ(answer.rfind("HTTP/1.1 400", 0), 0u) << answer;
  EXPECT_EQ(seen_target(), "") << "nothing reached the upstream";
  EXPECT_EQ(refused("domain_not_allowed"), 1u);
  EXPECT_EQ(refused("ip_literal"), 2u);
  EXPECT_EQ(refused("port_not_allowed"), 1u);
  EXPECT_EQ(refused("host_mismatch"), 1u);
  EXPECT_TRUE(logger_->contains(LogLevel::info,
                                "egress: sandbox sb1: refused GET http://other.test (domain not "
                                "allowed: other.test)"));
}

TEST_F(EgressProxyTest, ATunnelNeedsAClientHelloNamingTheSameHost) {
  start({"tls.test", "allowed.test"});
  // The right name: 200, then the ClientHello and what follows reach the upstream.
  int fd = connect_to(proxy_port_);
  send_all(fd, "CONNECT tls.test:443 HTTP/1.1\r\nHost: tls.test:443\r\n\r\n");
  EXPECT_EQ(read_head(fd).rfind("HTTP/1.1 200", 0), 0u);
  const std::string hello = openssl_client_hello("tls.test");
  send_all(fd, hello + "after");
  std::string echoed;
  char buffer[65536];
  while (echoed.size() < hello.size() + 5) {
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) break;
    echoed.append(buffer, static_cast<std::size_t>(n));
  }
  EXPECT_EQ(echoed, hello + "after");
  ::close(fd);
  EXPECT_EQ(proxy_->stats().tunnels, 1u);

  const auto refused_tunnel = [&](const std::string& first_bytes) {
    const int before = echo_.connections();
    const int tunnel = connect_to(proxy_port_);
    send_all(tunnel, "CONNECT tls.test:443 HTTP/1.1\r\nHost: tls.test:443\r\n\r\n");
    EXPECT_EQ(read_head(tunnel).rfind("HTTP/1.1 200", 0), 0u);
    send_all(tunnel, first_bytes);
    const std::string rest = read_all(tunnel);
    ::close(tunnel);
    EXPECT_EQ(rest, "") << "the tunnel went on";
    EXPECT_EQ(echo_.connections(), before) << "the upstream was dialled";
  };
  refused_tunnel(openssl_client_hello("allowed.test"));  // another (allowed) name
  refused_tunnel(openssl_client_hello(nullptr));
  refused_tunnel("GET / HTTP/1.1\r\nHost: tls.test\r\n\r\n");
  refused_tunnel(built_client_hello({{0, sni_extension({"tls.test"})}, {0xfe0d, "hidden"}}));
  EXPECT_EQ(refused("sni_mismatch"), 1u);
  EXPECT_EQ(refused("no_sni"), 1u);
  EXPECT_EQ(refused("not_tls"), 1u);
  EXPECT_EQ(refused("ech"), 1u);
  // Only port 443.
  const std::string answer = ask("CONNECT tls.test:22 HTTP/1.1\r\nHost: tls.test:22\r\n\r\n");
  EXPECT_NE(answer.find("port not allowed: tls.test:22"), std::string::npos) << answer;
}

// Bytes move through a kernel pipe (splice) that exists only while they flow: a long transfer
// both ways, with the client writing faster than it reads so the proxy must wait for a socket
// to take more, arrives whole and in order.
TEST_F(EgressProxyTest, ATunnelCarriesALongTransferBothWaysIntact) {
  start({"tls.test"});
  const int fd = connect_to(proxy_port_);
  send_all(fd, "CONNECT tls.test:443 HTTP/1.1\r\nHost: tls.test:443\r\n\r\n");
  ASSERT_EQ(read_head(fd).rfind("HTTP/1.1 200", 0), 0u);
  std::string sent = openssl_client_hello("tls.test");
  for (std::size_t i = 0; sent.size() < (8u << 20); ++i) {
    sent += std::to_string(i) + ",";
  }
  std::thread writer([&] { send_all(fd, sent); });
  std::string echoed;
  std::vector<char> buffer(1 << 16);
  while (echoed.size() < sent.size()) {
    const ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
    if (n <= 0) break;
    echoed.append(buffer.data(), static_cast<std::size_t>(n));
  }
  writer.join();
  ::close(fd);
  EXPECT_EQ(echoed.size(), sent.size());
  EXPECT_TRUE(echoed == sent) << "the bytes arrived changed or out of order";
}

// A secret the sandbox never holds: its placeholder becomes the secret in its header, in a
// request to its host, and nowhere else; nothing the proxy logs holds it.
TEST_F(EgressProxyTest, ASecretReplacesItsPlaceholderOnlyInItsHeaderToItsHost) {
  const std::string secret = "s3cr3t-value";
  const std::string placeholder = "sandboxd-placeholder-0123456789abcdef0123456789abcdef";
  core::EgressSecret token;
  token.name = "TOKEN";
  token.domain = "allowed.test";
  token.header = "Authorization";
  token.format = "Bearer {}";
  token.placeholder = placeholder;
  token.value = secret;
  secrets_ = {token};
  start({"allowed.test", "other.test"});
  const auto ask_with = [&](const std::string& host, const std::string& header) {
    return ask("GET http://" + host + "/api?x=1 HTTP/1.1\r\nHost: " + host + "\r\n" + header +
               "\r\n\r\n");
  };

  EXPECT_NE(ask_with("allowed.test", "Authorization: " + placeholder).find("hello"),
            std::string::npos);
  EXPECT_NE(seen_headers().find("Authorization: Bearer " + secret + "\n"), std::string::npos)
      << "the header holding only the placeholder is the format, filled: " << seen_headers();
  ask_with("allowed.test", "authorization: token " + placeholder + " " + placeholder);
  EXPECT_NE(seen_headers().find("token " + secret + " " + secret + "\n"), std::string::npos)
      << "within a longer value, each placeholder becomes the secret: " << seen_headers();
  ask_with("allowed.test", "X-Other: " + placeholder);
  EXPECT_EQ(seen_headers().find(secret), std::string::npos) << "another header: " << seen_headers();
  EXPECT_NE(seen_headers().find("X-Other: " + placeholder), std::string::npos);
  ask_with("other.test", "Authorization: " + placeholder);
  EXPECT_EQ(seen_headers().find(secret), std::string::npos) << "another host: " << seen_headers();
  EXPECT_EQ(proxy_->stats().secrets_injected, 2u);
  // Two lines of the header: each holding the placeholder gets the secret, in their order.
  ask_with("allowed.test",
           "Authorization: " + placeholder + "\r\nAuthorization: basic " + placeholder);
  const std::string both = seen_headers();
  const std::size_t first = both.find("Authorization: Bearer " + secret + "\n");
  const std::size_t second = both.find("Authorization: basic " + secret + "\n");
  EXPECT_NE(first, std::string::npos) << both;
  EXPECT_NE(second, std::string::npos) << both;
  EXPECT_LT(first, second) << "the lines changed order: " << both;
  EXPECT_EQ(both.find(placeholder), std::string::npos) << "a line kept its placeholder: " << both;
  EXPECT_EQ(proxy_->stats().secrets_injected, 3u);

  // Refused requests carrying it are logged without it.
  ask_with("denied.test", "Authorization: " + placeholder);
  ask("CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\nAuthorization: " + placeholder +
      "\r\n\r\n");
  for (const auto& line : logger_->lines()) {
    EXPECT_EQ(line.message.find(secret), std::string::npos) << line.message;
  }
}

// A sandbox that hangs up in the middle of an answer (a reset, or a FIN the proxy's next bytes
// meet with a reset) ends its own connection and nothing else: the proxy serves on. (A splice
// into a socket raises SIGPIPE when it fails with EPIPE; the I/O thread blocks that signal, so
// no order of errors can end the process hosting the proxy either.)
TEST_F(EgressProxyTest, ASandboxHangingUpMidAnswerEndsOnlyItsConnection) {
  start({"allowed.test"});
  for (int round = 0; round < 6; ++round) {
    const int fd = connect_to(proxy_port_);
    send_all(fd, "GET http://allowed.test/big HTTP/1.1\r\nHost: allowed.test\r\n\r\n");
    char buffer[4096];
    ASSERT_GT(::recv(fd, buffer, sizeof buffer, 0), 0);
    if (round % 2 == 0) {
      const linger abort_on_close{1, 0};  // close with a reset, answer unread
      ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &abort_on_close, sizeof abort_on_close);
    } else {
      ::shutdown(fd, SHUT_RDWR);  // a FIN; the proxy's next bytes meet a reset
      std::this_thread::sleep_for(100ms);
    }
    ::close(fd);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NE(get("http://allowed.test/after", "allowed.test").find("hello from the upstream"),
            std::string::npos)
      << "the proxy serves on";
}

TEST_F(EgressProxyTest, ANameThatResolvesToANonPublicAddressIsRefusedWhateverTheSandboxBelieves) {
  auto network = std::make_shared<ScriptedNetwork>();
  network->answers["rebind.test"] = {"10.0.0.5"};
  network->answers["metadata.test"] = {"169.254.169.254"};
  network->answers["mixed.test"] = {"93.184.216.34", "192.168.1.1"};
  network->answers["six.test"] = {"::ffff:127.0.0.1"};
  start({"rebind.test", "metadata.test", "mixed.test", "six.test", "nowhere.test"}, false, network);
  EXPECT_NE(get("http://rebind.test/", "rebind.test").find("private address: 10.0.0.5"),
            std::string::npos);
  EXPECT_NE(get("http://metadata.test/", "metadata.test").find("metadata address: 169.254.169.254"),
            std::string::npos);
  EXPECT_NE(get("http://mixed.test/", "mixed.test").find("private address: 192.168.1.1"),
            std::string::npos)
      << "every answer must be public";
  EXPECT_NE(get("http://six.test/", "six.test").find("loopback address: ::ffff:127.0.0.1"),
            std::string::npos);
  const std::string answer = ask("CONNECT rebind.test:443 HTTP/1.1\r\nHost: rebind.test\r\n\r\n");
  EXPECT_EQ(answer.rfind("HTTP/1.1 403", 0), 0u) << "refused before any 200: " << answer;
  EXPECT_NE(get("http://nowhere.test/", "nowhere.test").find("cannot resolve nowhere.test"),
            std::string::npos);
  EXPECT_EQ(refused("non_public_address"), 5u);
  EXPECT_EQ(refused("resolve_failed"), 1u);
}

TEST_F(EgressProxyTest, UnderPromptARefusalWaitsForADecisionWhichAppliesAtOnce) {
  start({}, /*prompt=*/true);
  EXPECT_NE(get("http://allowed.test/", "allowed.test").find("domain not allowed"),
            std::string::npos);
  get("http://allowed.test/again", "allowed.test");
  auto pending = proxy_->pending("sb1");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].domain, "allowed.test");
  EXPECT_EQ(pending[0].port, 80);
  EXPECT_EQ(pending[0].count, 2u);

  EXPECT_EQ(pending[0].method, "GET");
  EXPECT_EQ(pending[0].request_id.size(), 16u);
  // DeerFlow's calls: each request handed out once; a decision by its id.
  const auto events = proxy_->consume_events("sb1");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].request_id, pending[0].request_id);
  EXPECT_TRUE(proxy_->consume_events("sb1").empty()) << "handed out twice";
  EXPECT_FALSE(proxy_->decide_request("sb1", "0000000000000000", EgressDecision::allow_temporary));
  EXPECT_TRUE(proxy_->decide_request("sb1", events[0].request_id, EgressDecision::allow_temporary));
  EXPECT_TRUE(proxy_->pending("sb1").empty());
  EXPECT_EQ(get("http://allowed.test/", "allowed.test").rfind("HTTP/1.1 200", 0), 0u);
  ASSERT_EQ(proxy_->grants("sb1").size(), 1u);
  EXPECT_DOUBLE_EQ(proxy_->grants("sb1")[0].expires, clock_->wall_now() + 300);
  clock_->advance(301);
  EXPECT_NE(get("http://allowed.test/", "allowed.test").find("domain not allowed"),
            std::string::npos)
      << "a temporary grant ends";

  proxy_->decide("sb1", "allowed.test", EgressDecision::allow_sandbox);
  clock_->advance(100'000);
  EXPECT_EQ(get("http://allowed.test/", "allowed.test").rfind("HTTP/1.1 200", 0), 0u);
  // Grants outlive a restart of the host: out as JSON, back in.
  const std::string saved = proxy_->grants_json();
  proxy_->stop();
  start({}, true);
  proxy_->restore_grants(saved);
  EXPECT_EQ(get("http://allowed.test/", "allowed.test").rfind("HTTP/1.1 200", 0), 0u);
  proxy_->decide("sb1", "allowed.test", EgressDecision::deny);
  EXPECT_NE(get("http://allowed.test/", "allowed.test").find("domain not allowed"),
            std::string::npos);
  EXPECT_THROW(proxy_->decide("sb1", "10.0.0.1", EgressDecision::allow_sandbox),
               std::invalid_argument);
  // deny_pending drops what was not handed out.
  get("http://other.test/", "other.test");
  proxy_->deny_pending("sb1");
  EXPECT_TRUE(proxy_->pending("sb1").empty());
  // A sandbox that goes takes its grants along.
  proxy_->decide("sb1", "allowed.test", EgressDecision::allow_sandbox);
  proxy_->detach("sb1");
  EXPECT_TRUE(proxy_->grants("sb1").empty());
}

// The destination gets one Host: the name the proxy checked and dialled. Before, a name the
// check folded (a soft hyphen, full-width letters) arrived as the sandbox wrote it, for a
// virtual host to route by, and `Connection: host` made the request arrive with no Host.
TEST_F(EgressProxyTest, TheDestinationGetsTheNameThatWasCheckedAsItsOneHost) {
  start({"allowed.test"});
  const auto host_seen = [&](const std::string& request) {
    const std::string answer = ask(request);
    EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
    std::string hosts;
    const std::string headers = seen_headers();
    for (std::size_t at = headers.find("Host: "); at != std::string::npos;
         at = headers.find("Host: ", at + 1)) {
      if (at > 0 && headers[at - 1] != '\n') continue;
      hosts += headers.substr(at, headers.find('\n', at) - at) + "|";
    }
    return hosts;
  };
  EXPECT_EQ(host_seen("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed\xC2\xAD.test\r\n\r\n"),
            "Host: allowed.test|");
  EXPECT_EQ(host_seen("GET http://allowed.test/ HTTP/1.1\r\nHost: "
                      "\xEF\xBD\x81\xEF\xBD\x8C\xEF\xBD\x8C\xEF\xBD\x8F\xEF\xBD\x97\xEF\xBD\x85"
                      "\xEF\xBD\x84.test\r\n\r\n"),
            "Host: allowed.test|");
  EXPECT_EQ(host_seen("GET http://allowed.test/ HTTP/1.1\r\nHost: ALLOWED.test.\r\n"
                      "Connection: host, x-drop\r\nX-Drop: 1\r\n\r\n"),
            "Host: allowed.test|");
  EXPECT_EQ(seen_headers().find("X-Drop"), std::string::npos) << "hop-by-hop names still go";
}

// Only the methods an agent needs for the web are forwarded, with their method intact; TRACE
// (which a destination echoes, the secret put in included) never; a method the proxy does not
// know is refused instead of going out with an empty method line. Before, TRACE went out after
// the secret was put in, BREW went out as " /u HTTP/1.1", and a TRACE with a body threw inside
// the I/O handler (no answer, an error line outside the refusal budget).
TEST_F(EgressProxyTest, OnlyTheWebsMethodsPassAndTraceNeverCarriesASecret) {
  const std::string secret = "s3cr3t-value";
  const std::string placeholder = "sandboxd-placeholder-0123456789abcdef0123456789abcdef";
  core::EgressSecret token;
  token.name = "TOKEN";
  token.domain = "tls.test";
  token.header = "Authorization";
  token.placeholder = placeholder;
  token.value = secret;
  secrets_ = {token};
  start({"allowed.test", "tls.test"});
  for (const std::string method : {"TRACE", "TRACK", "BREW", "PROPFIND"}) {
    const std::string answer = ask(method + " http://tls.test/u HTTP/1.1\r\nHost: tls.test\r\n" +
                                   "Authorization: " + placeholder + "\r\n\r\n");
    EXPECT_EQ(answer.rfind("HTTP/1.1 405", 0), 0u) << method << ": " << answer;
    EXPECT_NE(answer.find("method not allowed: " + method), std::string::npos) << answer;
  }
  const std::string with_body =
      ask("TRACE http://allowed.test/u HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: 4"
          "\r\n\r\nbody");
  EXPECT_EQ(with_body.rfind("HTTP/1.1 405", 0), 0u) << with_body;
  EXPECT_EQ(echo_.received().find(secret), std::string::npos) << "the secret went out";
  EXPECT_EQ(echo_.connections(), 0) << "a refused method was dialled";
  EXPECT_EQ(refused("method_not_allowed"), 5u);
  for (const auto& line : logger_->lines()) {
    EXPECT_NE(line.level, LogLevel::error) << line.message;
  }
  for (const std::string method : {"PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"}) {
    const std::string answer =
        ask(method + " http://allowed.test/any HTTP/1.1\r\nHost: allowed.test\r\n\r\n");
    EXPECT_EQ(answer.find("405"), std::string::npos) << method << ": " << answer;
  }
}

// A client that waits for "100 Continue" before its body is told to go on.
TEST_F(EgressProxyTest, AClientThatExpectsContinueIsToldToGoOn) {
  start({"allowed.test"});
  const int fd = connect_to(proxy_port_);
  ASSERT_GE(fd, 0);
  send_all(fd,
           "POST http://allowed.test/upload HTTP/1.1\r\nHost: allowed.test\r\n"
           "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n");
  const std::string go_on = read_head(fd);
  EXPECT_EQ(go_on, "HTTP/1.1 100 Continue\r\n\r\n");
  send_all(fd, "hello");
  const std::string answer = read_all(fd);
  ::close(fd);
  EXPECT_NE(answer.find("\r\n\r\n5"), std::string::npos) << answer;
}

// The bodies held at once are bounded in all, not only per request: past the bound, 503.
TEST_F(EgressProxyTest, BodiesHeldAtOnceAreBoundedInAll) {
  options_.max_held_body_bytes = 150'000;
  start({"allowed.test"});
  const int first = connect_to(proxy_port_);
  ASSERT_GE(first, 0);
  send_all(first,
           "POST http://allowed.test/upload HTTP/1.1\r\nHost: allowed.test\r\n"
           "Content-Length: 100000\r\n\r\npart");  // held: the rest never comes
  std::this_thread::sleep_for(200ms);
  const std::string second =
      ask("POST http://allowed.test/upload HTTP/1.1\r\nHost: allowed.test\r\n"
          "Content-Length: 100000\r\n\r\n" + std::string(100'000, 'x'));
  EXPECT_EQ(second.rfind("HTTP/1.1 503", 0), 0u) << second.substr(0, 200);
  ::close(first);
  std::this_thread::sleep_for(200ms);  // the first connection's hold is given back
  const std::string third =
      ask("POST http://allowed.test/upload HTTP/1.1\r\nHost: allowed.test\r\n"
          "Content-Length: 100000\r\n\r\n" + std::string(100'000, 'x'));
  EXPECT_NE(third.find("\r\n\r\n100000"), std::string::npos) << third.substr(0, 200);
}

// A decision on a request grants what it asked for: its name at its port. Before, approving
// `GET later.test` (port 80) also opened `CONNECT later.test:443`, and the reverse.
TEST_F(EgressProxyTest, AGrantIsForTheRequestsNameAndPort) {
  start({}, /*prompt=*/true);
  get("http://allowed.test/", "allowed.test");
  const auto events = proxy_->consume_events("sb1");
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(proxy_->decide_request("sb1", events[0].request_id, EgressDecision::allow_sandbox));
  EXPECT_EQ(get("http://allowed.test/", "allowed.test").rfind("HTTP/1.1 200", 0), 0u);
  const std::string tunnel = ask("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n");
  EXPECT_EQ(tunnel.rfind("HTTP/1.1 403", 0), 0u) << "port 80's grant opened 443: " << tunnel;
  const auto grants = proxy_->grants("sb1");
  ASSERT_EQ(grants.size(), 1u);
  EXPECT_EQ(grants[0].port, 80);
  // A word on the name alone is for both ports.
  proxy_->decide("sb1", "allowed.test", EgressDecision::allow_sandbox);
  EXPECT_EQ(ask("CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
                .rfind("HTTP/1.1 200", 0),
            0u);
}

// Grants belong to one instance of a sandbox: a new instance of the same id starts with none,
// whether the proxy saw the old one go or loaded its grants from a file. A pending request the
// gateway fetched and never decided expires, so the bound never fills with them.
TEST_F(EgressProxyTest, GrantsAreAnInstancesAndFetchedRequestsExpire) {
  options_.max_pending_per_sandbox = 2;
  start({}, /*prompt=*/true);
  int port = 0;
  proxy_->attach("sb1", listen_on_loopback(&port), "instance-one");
  proxy_port_ = port;
  proxy_->decide("sb1", "allowed.test", EgressDecision::allow_sandbox);
  const std::string saved = proxy_->grants_json();
  EXPECT_NE(saved.find("instance-one"), std::string::npos) << saved;
  // The same instance attached again (a restart of the host): its grants stand.
  proxy_->attach("sb1", listen_on_loopback(&port), "instance-one");
  proxy_port_ = port;
  EXPECT_EQ(proxy_->grants("sb1").size(), 1u);
  // A new instance: none, and the old one's from the file are not its either.
  proxy_->attach("sb1", listen_on_loopback(&port), "instance-two");
  proxy_port_ = port;
  EXPECT_TRUE(proxy_->grants("sb1").empty());
  proxy_->restore_grants(saved);
  proxy_->attach("sb1", listen_on_loopback(&port), "instance-two");
  proxy_port_ = port;
  EXPECT_TRUE(proxy_->grants("sb1").empty());
  EXPECT_NE(get("http://allowed.test/", "allowed.test").find("domain not allowed"),
            std::string::npos);
  // Pruning keeps only what a keeper says is tracked now.
  proxy_->restore_grants(saved);
  proxy_->retain_decisions([](const std::string&, const std::string& incarnation) {
    return incarnation == "instance-two";
  });
  EXPECT_TRUE(proxy_->grants("sb1").empty());

  // The bound of 2 pending: two fetched and undecided, then a third name is still recorded.
  get("http://allowed.test/", "allowed.test");
  get("http://other.test/", "other.test");
  EXPECT_EQ(proxy_->pending("sb1").size(), 2u);
  EXPECT_EQ(proxy_->consume_events("sb1").size(), 2u);
  clock_->advance(1);
  get("http://other.test/", "other.test");  // asked again: the newer of the two
  get("http://third.test/", "third.test");
  auto pending = proxy_->pending("sb1");
  EXPECT_EQ(pending.size(), 2u);
  EXPECT_TRUE(std::any_of(pending.begin(), pending.end(),
                          [](const auto& r) { return r.domain == "third.test"; }))
      << "a new name was refused unrecorded while fetched ones filled the bound";
  EXPECT_TRUE(std::none_of(pending.begin(), pending.end(),
                           [](const auto& r) { return r.domain == "allowed.test"; }))
      << "the one fetched and asked for longest ago made room";
  // Fetched requests past their time make room before any other.
  proxy_->consume_events("sb1");
  clock_->advance(601);
  get("http://fourth.test/", "fourth.test");
  pending = proxy_->pending("sb1");
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].domain, "fourth.test");
}

TEST_F(EgressProxyTest, SlowAndGreedyClientsAreBounded) {
  options_.head_timeout = 300ms;
  options_.max_connections_per_sandbox = 2;
  start({"allowed.test"});
  const int silent_a = connect_to(proxy_port_);
  const int silent_b = connect_to(proxy_port_);
  std::this_thread::sleep_for(50ms);
  EXPECT_NE(ask("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n").find("503"),
            std::string::npos)
      << "a third connection of the sandbox is turned away";
  EXPECT_EQ(read_all(silent_a), "") << "closed at the head deadline";
  EXPECT_EQ(read_all(silent_b), "");
  ::close(silent_a);
  ::close(silent_b);
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(get("http://allowed.test/", "allowed.test").rfind("HTTP/1.1 200", 0), 0u);
  const std::string huge = ask("GET http://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\nX: " +
                               std::string(20'000, 'x') + "\r\n\r\n");
  EXPECT_EQ(huge.rfind("HTTP/1.1 431", 0), 0u) << huge.substr(0, 100);

  proxy_->detach("sb1");
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(connect_to(proxy_port_), -1) << "a detached sandbox's listener is closed";
}

}  // namespace
}  // namespace sandboxd::testing

// TLS interception for secrets bound to https destinations (issue 34 §3, `inject_tls_ca`), with
// real TLS on both sides: the sandbox is cpp-httplib's SSLClient going through the proxy with
// CONNECT and verifying what it is shown against the operator's CA; the destination is an
// SSLServer on 127.0.0.1 (named through the test-only network) whose certificate comes from a
// second CA, the one `upstream_ca_file` names. What reaches the destination is read there.
#include <gtest/gtest.h>
#include <httplib.h>

#include <boost/asio/read_until.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "loopback_listener.hpp"
#include "sandboxd/core/egress_proxy.hpp"
#include "sandboxd/core/egress_tls.hpp"
#include "test_support.hpp"

namespace sandboxd::testing {
namespace {

using boost::asio::ip::make_address;
using boost::asio::ip::tcp;
using namespace std::chrono_literals;

constexpr const char* kSecret = "s3cr3t-https-value";
constexpr const char* kPlaceholder = "sandboxd-placeholder-00112233445566778899aabbccddeeff";

class EgressInterceptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    interception_ca_ = core::make_certificate_authority("sandboxd test interception CA", 2);
    upstream_ca_ = core::make_certificate_authority("test upstream CA", 2);
    write(dir_.file("interception-ca.pem"), interception_ca_.certificate_pem);
    write(dir_.file("upstream-ca.pem"), upstream_ca_.certificate_pem);
    const core::TlsKeyPair served = core::issue_server_certificate(upstream_ca_, "secure.test", 2);
    write(dir_.file("secure.pem"), served.certificate_pem);
    write(dir_.file("secure.key"), served.key_pem);
    upstream_ = std::make_unique<httplib::SSLServer>(dir_.file("secure.pem").c_str(),
                                                     dir_.file("secure.key").c_str());
    upstream_->Get(R"(/.*)", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mutex_);
      ++requests_seen_;
      seen_headers_.clear();
      for (const auto& [name, value] : req.headers) seen_headers_ += name + ": " + value + "\n";
      res.set_content("hello over tls " + req.target, "text/plain");
    });
    upstream_port_ = upstream_->bind_to_any_port("127.0.0.1");
    upstream_thread_ = std::thread([this] { upstream_->listen_after_bind(); });
    while (!upstream_->is_running()) std::this_thread::sleep_for(1ms);
  }
  void TearDown() override {
    if (proxy_) proxy_->stop();
    upstream_->stop();
    upstream_thread_.join();
  }

  static void write(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }

  core::EgressSecret secret(const std::string& domain, bool https) const {
    core::EgressSecret out;
    out.name = "TOKEN";
    out.domain = domain;
    out.header = "Authorization";
    out.format = "Bearer {}";
    out.placeholder = kPlaceholder;
    out.value = kSecret;
    out.https = https;
    return out;
  }

  // The proxy for sandbox "sb1": secure.test (and plain.test, for the plain-HTTP check) reach
  // the TLS upstream; the destination's certificate is trusted through `upstream_roots`.
  void start(std::vector<core::EgressSecret> secrets, bool trust_upstream = true) {
    core::EgressPolicy policy;
    policy.allow = core::egress::DomainAllowlist({"secure.test", "plain.test"});
    policy.secrets = std::move(secrets);
    policy.interception_authority = interception_ca_;
    if (trust_upstream) policy.upstream_roots_pem = upstream_ca_.certificate_pem;
    const tcp::endpoint upstream(make_address("127.0.0.1"),
                                 static_cast<unsigned short>(upstream_port_));
    proxy_ = std::make_unique<core::EgressProxy>(
        policy, core::test_upstream_network({{"secure.test", upstream}, {"plain.test", upstream}}),
        core::EgressOptions{}, logger_, std::make_shared<ManualClock>());
    proxy_->start();
    int port = 0;
    proxy_->attach("sb1", listen_on_loopback(&port));
    proxy_port_ = port;
  }

  // A sandbox's HTTPS client through the proxy, trusting `ca_file` only.
  httplib::Result get_through_proxy(const std::string& ca_file,
                                    const httplib::Headers& headers = {}) {
    httplib::SSLClient client("secure.test", 443);
    client.set_proxy("127.0.0.1", proxy_port_);
    client.set_ca_cert_path(ca_file.c_str());
    client.enable_server_certificate_verification(true);
    client.set_connection_timeout(5, 0);
    client.set_read_timeout(5, 0);
    httplib::Headers sent = headers;
    if (sent.find("Authorization") == sent.end()) {
      sent.emplace("Authorization", kPlaceholder);
    }
    return client.Get("/api/user?page=2", sent);
  }

  std::string seen_headers() {
    std::lock_guard lock(mutex_);
    return seen_headers_;
  }
  int requests_seen() {
    std::lock_guard lock(mutex_);
    return requests_seen_;
  }
  std::uint64_t refused(const std::string& reason) const {
    const auto stats = proxy_->stats();
    const auto it = stats.refused.find(reason);
    return it == stats.refused.end() ? 0 : it->second;
  }

  TempDir dir_;
  core::TlsKeyPair interception_ca_, upstream_ca_;
  std::unique_ptr<httplib::SSLServer> upstream_;
  int upstream_port_ = 0;
  std::thread upstream_thread_;
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
  std::unique_ptr<core::EgressProxy> proxy_;
  int proxy_port_ = 0;
  std::mutex mutex_;
  std::string seen_headers_;
  int requests_seen_ = 0;
};

TEST_F(EgressInterceptionTest, AnHttpsSecretReachesItsHeaderInsideTheTunnelTheProxyEnds) {
  start({secret("secure.test", true)});
  const auto answer = get_through_proxy(dir_.file("interception-ca.pem"));
  ASSERT_TRUE(answer) << "the sandbox's client failed: " << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(answer->body, "hello over tls /api/user?page=2");
  EXPECT_NE(seen_headers().find(std::string("Authorization: Bearer ") + kSecret + "\n"),
            std::string::npos)
      << seen_headers();
  EXPECT_EQ(seen_headers().find(kPlaceholder), std::string::npos) << seen_headers();
  EXPECT_NE(seen_headers().find("Connection: close"), std::string::npos)
      << "one request per intercepted connection: " << seen_headers();
  const auto stats = proxy_->stats();
  EXPECT_EQ(stats.intercepted, 1u);
  EXPECT_EQ(stats.secrets_injected, 1u);
  for (const auto& line : logger_->lines()) {
    EXPECT_EQ(line.message.find(kSecret), std::string::npos) << line.message;
  }
}

// The sandbox is shown a certificate from the operator's CA, not the destination's: a client
// that trusts only the destination's CA refuses it, and nothing reaches the destination. (An
// httplib client checks the certificate after its handshake and hangs up; a client that checks
// during the handshake aborts it, which the proxy counts as client_tls_failed.)
TEST_F(EgressInterceptionTest, ASandboxThatDoesNotTrustTheCaGetsNothingThrough) {
  start({secret("secure.test", true)});
  const auto answer = get_through_proxy(dir_.file("upstream-ca.pem"));
  EXPECT_FALSE(answer) << "the client accepted a certificate from a CA it does not trust";

  boost::asio::io_context io;
  tcp::socket socket(io);
  socket.connect(
      tcp::endpoint(make_address("127.0.0.1"), static_cast<unsigned short>(proxy_port_)));
  const std::string connect = "CONNECT secure.test:443 HTTP/1.1\r\nHost: secure.test:443\r\n\r\n";
  boost::asio::write(socket, boost::asio::buffer(connect));
  boost::asio::streambuf head;
  boost::asio::read_until(socket, head, "\r\n\r\n");
  boost::asio::ssl::context context(boost::asio::ssl::context::tls_client);
  context.add_certificate_authority(boost::asio::buffer(upstream_ca_.certificate_pem));
  boost::asio::ssl::stream<tcp::socket&> tls(socket, context);
  tls.set_verify_mode(boost::asio::ssl::verify_peer);
  SSL_set_tlsext_host_name(tls.native_handle(), "secure.test");
  boost::system::error_code ec;
  tls.handshake(boost::asio::ssl::stream_base::client, ec);
  EXPECT_TRUE(ec) << "the handshake passed with a CA the client does not trust";
  socket.close();
  for (int i = 0; i < 500 && refused("client_tls_failed") == 0; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(refused("client_tls_failed"), 1u);
  EXPECT_EQ(requests_seen(), 0);
}

// The proxy verifies the real destination: one whose certificate no trusted CA signed gets no
// request and no secret; the sandbox hears 502 with the reason.
TEST_F(EgressInterceptionTest, AnUntrustedDestinationGetsNeitherTheRequestNorTheSecret) {
  start({secret("secure.test", true)}, /*trust_upstream=*/false);
  const auto answer = get_through_proxy(dir_.file("interception-ca.pem"));
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 502);
  EXPECT_NE(answer->body.find("TLS to secure.test failed"), std::string::npos) << answer->body;
  EXPECT_EQ(requests_seen(), 0);
  EXPECT_EQ(refused("upstream_tls_failed"), 1u);
  EXPECT_EQ(proxy_->stats().secrets_injected, 0u);
}

// Inside the tunnel, the request must name the tunnel's host: a Host header naming another
// (even an allowed one) is refused before anything is dialled.
TEST_F(EgressInterceptionTest, ARequestNamingAnotherHostInsideTheTunnelIsRefused) {
  start({secret("secure.test", true)});
  const auto answer = get_through_proxy(dir_.file("interception-ca.pem"), {{"Host", "plain.test"}});
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 403);
  EXPECT_NE(answer->body.find("Host header does not name secure.test: plain.test"),
            std::string::npos)
      << answer->body;
  EXPECT_EQ(requests_seen(), 0);
  EXPECT_EQ(refused("host_mismatch"), 1u);
}

// A tunnel to a host no https secret is bound to stays end to end: the sandbox sees the
// destination's own certificate (and must trust its CA), and its placeholder passes unchanged.
TEST_F(EgressInterceptionTest, OtherTunnelsStayEndToEnd) {
  start({secret("plain.test", true)});
  const auto answer = get_through_proxy(dir_.file("upstream-ca.pem"));
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_EQ(answer->status, 200);
  EXPECT_NE(seen_headers().find(std::string("Authorization: ") + kPlaceholder), std::string::npos)
      << seen_headers();
  EXPECT_EQ(proxy_->stats().intercepted, 0u);
  EXPECT_EQ(proxy_->stats().secrets_injected, 0u);
}

// A secret is bound to its scheme: a plain-HTTP one never goes into a tunnel the proxy ends.
TEST_F(EgressInterceptionTest, APlainHttpSecretNeverGoesIntoAnInterceptedTunnel) {
  core::EgressSecret plain = secret("secure.test", false);
  plain.name = "PLAIN";
  plain.placeholder = "sandboxd-placeholder-ffeeddccbbaa99887766554433221100";
  core::EgressSecret https = secret("secure.test", true);
  https.header = "X-Api-Key";
  https.format = "{}";
  start({plain, https});
  const auto answer =
      get_through_proxy(dir_.file("interception-ca.pem"),
                        {{"Authorization", plain.placeholder}, {"X-Api-Key", https.placeholder}});
  ASSERT_TRUE(answer) << httplib::to_string(answer.error());
  EXPECT_NE(seen_headers().find("Authorization: " + plain.placeholder), std::string::npos)
      << seen_headers();
  EXPECT_NE(seen_headers().find(std::string("X-Api-Key: ") + kSecret), std::string::npos)
      << seen_headers();
}

TEST_F(EgressInterceptionTest, AnHttpsSecretWithoutACaIsRefusedWhenTheProxyIsMade) {
  core::EgressPolicy policy;
  policy.allow = core::egress::DomainAllowlist({"secure.test"});
  policy.secrets = {secret("secure.test", true)};
  try {
    core::EgressProxy proxy(policy, core::test_upstream_network({}), core::EgressOptions{}, logger_,
                            std::make_shared<ManualClock>());
    FAIL() << "made";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("inject_tls_ca"), std::string::npos) << e.what();
  }
  policy.interception_authority = core::issue_server_certificate(interception_ca_, "leaf", 1);
  EXPECT_THROW(core::EgressProxy(policy, core::test_upstream_network({}), core::EgressOptions{},
                                 logger_, std::make_shared<ManualClock>()),
               std::invalid_argument)
      << "a leaf certificate is not a CA";
}

}  // namespace
}  // namespace sandboxd::testing

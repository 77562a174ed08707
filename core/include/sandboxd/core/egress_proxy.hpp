// The egress proxy (network mode `allowlist`; design "Network isolation and the
// relay"): the only way out of a sandbox that has no network of its own. The host makes a
// listening socket inside each such sandbox's network namespace (127.0.0.1:3128 there, which
// the sandbox's HTTP_PROXY, HTTPS_PROXY and ALL_PROXY name) and hands it to attach(); whatever
// connects to it is that sandbox, so no credential is needed to know who asks.
//
// What it lets through, DeerFlow's and E2B's rules:
//   - `CONNECT host:443` and absolute-form plain HTTP to port 80 (`GET http://host/...`), one
//     request per plain connection, with the methods GET, HEAD, POST, PUT, PATCH, DELETE and
//     OPTIONS (inside an intercepted tunnel too); nothing else (405; TRACE and TRACK never);
//   - the destination gets one Host header: the name the proxy checked and dialled, which no
//     `Connection:` list can remove;
//   - the name must be on the allow-list (exact or `*.suffix`, IDNA-normalised) or granted at
//     run time; an IP literal never is;
//   - a plain request's Host header, and a tunnel's TLS ClientHello SNI, must name the same
//     host; a ClientHello with Encrypted Client Hello is refused (its real target is hidden);
//   - the proxy resolves the name itself and dials what it resolved, and every address the
//     name resolves to must be public (EgressNetwork::refusal): a sandbox that edits its
//     /etc/hosts, or a DNS answer that rebinds to a private or metadata address, gains nothing.
// A tunnel to the destination of an https secret is the one the proxy does not leave end to end:
// it ends the sandbox's TLS itself with a certificate from the operator's CA, reads one request,
// and sends it on over its own verified TLS with the secret put in (egress_tls.hpp).
// A refusal before a tunnel is up is `403` with one line of reason (`domain not allowed:
// example.org`, `private address: 10.0.0.5`), counted per reason and logged without a query
// string or a header; one after the 200 (a wrong SNI) closes the tunnel.
//
// With approval `prompt`, a refused name is kept as a pending request (an id, host, port,
// method, first seen, count) for the gateway to decide, in DeerFlow's terms: `deny`,
// `allow_temporary` (for `temporary_grant_ttl`) or `allow_sandbox` (for the sandbox's life).
// consume_events() hands each request out once (DeerFlow's consume_network_policy_events). A
// grant applies to new connections at once.
//
// Built for hostile clients as the doors' server and the relay are: one I/O thread owns every
// socket; the head and the ClientHello have deadlines and bounds, every later read or write a
// progress deadline; connections are bounded per sandbox and in all.
#pragma once

#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/clock.hpp"
#include "sandboxd/core/egress_rules.hpp"
#include "sandboxd/core/egress_tls.hpp"
#include "sandboxd/core/socket_namespace.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxd::core {


// Where the proxy listens inside a sandbox's network namespace.
inline constexpr const char* kEgressProxyHost = "127.0.0.1";
inline constexpr int kEgressProxyPort = 3128;

// How the proxy reaches the outside. resolve() blocks; the proxy calls it on its own threads.
class EgressNetwork {
 public:
  virtual ~EgressNetwork() = default;
  // Where `name`, asked for at `port`, is dialled: the addresses it resolves to (at that port;
  // test upstreams at their own); empty when it does not resolve.
  virtual std::vector<boost::asio::ip::tcp::endpoint> resolve(const std::string& name,
                                                              std::uint16_t port) = 0;
  // Why `address` must not be dialled, or "" to dial it.
  virtual std::string refusal(const boost::asio::ip::address& address) const = 0;
};

// The host's resolver (getaddrinfo) and public addresses only (egress::non_public_reason).
std::shared_ptr<EgressNetwork> system_egress_network();

// FOR TESTS ONLY: each name resolves to its endpoint's address, which is dialled even when it
// is a loopback one, at the endpoint's port for both 80 and 443; every other name resolves to
// nothing. What `network.test_only_upstreams` configures; check-config warns about it.
std::shared_ptr<EgressNetwork> test_upstream_network(
    std::map<std::string, boost::asio::ip::tcp::endpoint> upstreams);

// A secret the sandbox never holds (`network.secrets`): the sandbox's environment variable
// `name` holds `placeholder`; in a request to `domain` the proxy replaces the placeholder in
// header `header` with `format` ("{}" standing for the secret; a header whose value is more
// than the placeholder has just the placeholder replaced by the secret). Nowhere else, for no
// other host, and only over the scheme it is bound to: a plain-HTTP secret never goes into a
// tunnel, an https one never into plain HTTP (where anyone on the way could read it). `value`
// is never logged, shown or written anywhere.
struct EgressSecret {
  std::string name;
  std::string domain;  // normalized
  std::string header;
  std::string format = "{}";
  std::string placeholder;
  std::string value;
  // https: put into requests inside a CONNECT tunnel to `domain`, which the proxy then ends
  // itself with a certificate from the policy's interception_authority (egress_tls.hpp).
  bool https = false;
};

struct EgressPolicy {
  egress::DomainAllowlist allow;
  std::vector<EgressSecret> secrets;
  // `inject_tls_ca`: the CA that signs the certificates the proxy shows a sandbox for the
  // destinations of https secrets (the image must trust it). Required when a secret is https.
  std::optional<TlsKeyPair> interception_authority;
  // `upstream_ca_file`: certificates (PEM) trusted for those destinations' real servers besides
  // the host's own store (an internal service with a private CA).
  std::string upstream_roots_pem;
  bool prompt = false;               // approval `prompt`: refusals wait for the gateway's word
  double temporary_grant_ttl = 300;  // seconds a temporary grant lasts
};

struct EgressOptions {
  std::size_t max_connections = 4096;
  std::size_t max_connections_per_sandbox = 64;
  std::size_t max_header_bytes = 16 * 1024;
  std::size_t max_plain_body_bytes = 1024 * 1024;   // a plain request's body, held whole
  // Every plain request's body held at once, in all sandboxes: past it, 503. With the read
  // buffer each body passes through, what they hold stays under twice this.
  std::size_t max_held_body_bytes = 64 * 1024 * 1024;
  std::size_t max_pending_per_sandbox = 256;        // distinct names waiting for a decision
  std::chrono::milliseconds head_timeout{10'000};   // the request's line and headers
  std::chrono::milliseconds hello_timeout{10'000};  // a tunnel's ClientHello after the 200
  std::chrono::milliseconds connect_timeout{10'000};
  std::chrono::milliseconds progress_timeout{60'000};      // any read or write making no headway
  std::chrono::milliseconds tunnel_idle_timeout{600'000};  // a tunnel with no traffic
};

// A name a sandbox asked for and was refused, waiting for a decision (approval `prompt`);
// one per name and port.
struct EgressRequest {
  std::string request_id;  // 16 hex characters
  std::string domain;
  int port = 0;
  std::string method;     // "CONNECT", "GET", …
  double first_seen = 0;  // wall clock
  double last_seen = 0;
  std::uint64_t count = 0;
  bool surfaced = false;  // handed out by consume_events()
};

// What the gateway allowed beyond the allow-list: a name at one port (80 for plain HTTP, 443
// for a CONNECT tunnel), or at both (port 0: a decision on the name alone), for one instance of
// the sandbox.
struct EgressGrant {
  std::string domain;
  double expires = 0;  // wall clock; 0: for the life of the sandbox's instance
  int port = 0;        // 0: both
};

// DeerFlow's decisions: "deny", "allow_temporary", "allow_sandbox".
enum class EgressDecision { deny, allow_temporary, allow_sandbox };
std::optional<EgressDecision> egress_decision_from(const std::string& text);
const char* to_string(EgressDecision decision);

struct EgressStats {
  std::uint64_t tunnels = 0;                     // CONNECT tunnels opened
  std::uint64_t requests = 0;                    // plain requests forwarded
  std::uint64_t secrets_injected = 0;            // requests a secret was put into
  std::uint64_t intercepted = 0;                 // tunnels ended by the proxy (https secrets)
  std::map<std::string, std::uint64_t> refused;  // by reason (domain_not_allowed, …)
  std::uint64_t open_connections = 0;
  std::uint64_t attached_sandboxes = 0;
};

class EgressProxy {
 public:
  // Throws std::invalid_argument when an https secret has no interception_authority, or the
  // authority or the upstream roots cannot be used (check_certificate_authority's words).
  EgressProxy(EgressPolicy policy, std::shared_ptr<EgressNetwork> network, EgressOptions options,
              std::shared_ptr<Logger> logger, std::shared_ptr<Clock> clock);
  ~EgressProxy();  // stop()
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  void start();  // the I/O thread
  void stop();   // every listener and connection closed; idempotent

  // Serves `sandbox_id`'s egress on `listening_fd`, a listening TCP socket made in its network
  // namespace, for its instance `incarnation` (relay_tokens.hpp's incarnation_of; decisions
  // recorded for another instance are dropped); the proxy owns the socket from now on. An id
  // already attached has its listener replaced and its open connections closed.
  void attach(const std::string& sandbox_id, int listening_fd, const std::string& incarnation = "");
  // The network namespace `sandbox_id`'s listener was made in; nullopt when it is not attached
  // or the kernel would not say.
  std::optional<net::NamespaceId> attached_namespace(const std::string& sandbox_id) const;
  // Drops the decisions (grants, pending requests) of every sandbox but those `keep` answers
  // true for, given its id and the instance they were made for ("" : unknown).
  void retain_decisions(const std::function<bool(const std::string& sandbox_id,
                                                 const std::string& incarnation)>& keep);
  // Its listener and connections closed; its pending requests and grants forgotten.
  void detach(const std::string& sandbox_id);
  std::vector<std::string> attached() const;  // in id order
  bool is_attached(const std::string& sandbox_id) const;

  std::vector<EgressRequest> pending(const std::string& sandbox_id) const;
  std::vector<EgressGrant> grants(const std::string& sandbox_id) const;  // unexpired ones
  // The pending requests not handed out before, now marked handed out.
  std::vector<EgressRequest> consume_events(const std::string& sandbox_id);
  // Denies (drops) every pending request not handed out yet.
  void deny_pending(const std::string& sandbox_id);
  // The gateway's word on pending request `request_id`: false when there is no such request.
  bool decide_request(const std::string& sandbox_id, const std::string& request_id,
                      EgressDecision decision);
  // The gateway's word on `domain` (pending or not): deny drops it from pending and from the
  // grants; the others grant it. Throws std::invalid_argument naming a bad domain.
  void decide(const std::string& sandbox_id, const std::string& domain, EgressDecision decision);
  // Grants of every sandbox as one JSON document, and back (serve keeps them across restarts).
  std::string grants_json() const;
  void restore_grants(const std::string& json);

  EgressStats stats() const;
  const EgressPolicy& policy() const;

  struct Impl;

 private:
  std::shared_ptr<Impl> impl_;
};

// A listening socket for the proxy at 127.0.0.1:3128 in the namespace `open_socket` makes
// sockets in (NamespacedSandboxes::open_socket). Throws std::runtime_error naming the failure.
int make_egress_listener(const std::function<int()>& open_socket);

}  // namespace sandboxd::core

// What the egress proxy (network mode `allowlist`) decides with, as pure functions
// the proxy and the tests share: domain names as the allow-list compares them (IDNA to ASCII,
// lower case), the allow-list itself (exact names and `*.suffix`), which addresses are public,
// and what a TLS ClientHello says about where it is going (SNI, and whether it hides that
// behind Encrypted Client Hello).
#pragma once

#include <boost/asio/ip/address.hpp>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace sandboxd::core::egress {

// `name` as the allow-list compares it: IDNA2008 (UTS #46 mapping) to its ASCII form, lower
// case, one trailing dot dropped. nullopt for anything that is not a host name: empty, an IP
// literal, a label over 63 bytes or a name over 253, characters a name cannot hold.
std::optional<std::string> normalize_domain(std::string_view name);

// An IPv4 or IPv6 literal (also "[::1]"), which the proxy never dials by name.
bool is_ip_literal(std::string_view host);

class DomainAllowlist {
 public:
  DomainAllowlist() = default;
  // Each entry an exact name or "*.suffix" (any name strictly under suffix, not suffix
  // itself). Throws std::invalid_argument naming the entry that is not one.
  explicit DomainAllowlist(const std::vector<std::string>& entries);

  // `normalized` (normalize_domain's answer) is allowed.
  bool allows(const std::string& normalized) const;
  bool empty() const { return exact_.empty() && suffixes_.empty(); }
  // The entries as given, normalized ("*.suffix" for suffixes), for check-config.
  std::vector<std::string> entries() const;

 private:
  std::set<std::string> exact_;
  std::set<std::string> suffixes_;  // ".suffix"
};

// Why the proxy must not connect to `address`, or "" when it is a public address. Refused:
// unspecified, loopback, private (10/8, 172.16/12, 192.168/16), carrier-grade NAT
// (100.64/10), link-local (169.254/16, fe80::/10) and the cloud metadata address
// 169.254.169.254, multicast, IETF-reserved and documentation ranges, broadcast, unique-local
// fc00::/7, and an IPv4-mapped IPv6 address whose IPv4 address is any of those.
std::string non_public_reason(const boost::asio::ip::address& address);

// What a TLS ClientHello record says, read from the first bytes a client sends in a tunnel.
struct ClientHello {
  std::optional<std::string> server_name;  // the SNI host name, as sent
  bool encrypted_client_hello = false;     // the encrypted_client_hello extension (0xfe0d)
};
enum class HelloParse {
  complete,   // `out` is filled
  need_more,  // a prefix of a ClientHello: read more (bounded by the caller)
  not_tls,    // not a TLS handshake record holding a ClientHello
};
HelloParse parse_client_hello(std::string_view bytes, ClientHello& out);

}  // namespace sandboxd::core::egress

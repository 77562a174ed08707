// The egress proxy's rules (egress_rules.hpp).
#include "sandboxd/core/egress_rules.hpp"

#include <idn2.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>

namespace sandboxd::core::egress {

namespace {

bool valid_ascii_name(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  std::size_t start = 0;
  while (start <= name.size()) {
    const std::size_t dot = name.find('.', start);
    const std::size_t end = dot == std::string::npos ? name.size() : dot;
    const std::size_t length = end - start;
    if (length == 0 || length > 63) return false;
    for (std::size_t i = start; i < end; ++i) {
      const unsigned char c = static_cast<unsigned char>(name[i]);
      // Letters, digits, hyphens; underscores appear in real names (SRV-style labels).
      if (!(std::isalnum(c) || c == '-' || c == '_')) return false;
    }
    if (name[start] == '-' || name[end - 1] == '-') return false;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return true;
}

}  // namespace

bool is_ip_literal(std::string_view host) {
  std::string text(host);
  if (text.size() > 2 && text.front() == '[' && text.back() == ']') {
    text = text.substr(1, text.size() - 2);
  }
  boost::system::error_code ec;
  boost::asio::ip::make_address(text, ec);
  if (!ec) return true;
  // inet_aton's other spellings ("127.1", "0x7f.1", "2130706433") are literals to a resolver.
  if (!text.empty() && text.find_first_not_of("0123456789.xXabcdefABCDEF") == std::string::npos &&
      std::isdigit(static_cast<unsigned char>(text.front()))) {
    const std::size_t last_dot = text.rfind('.');
    const std::string last = last_dot == std::string::npos ? text : text.substr(last_dot + 1);
    return last.empty() || std::isdigit(static_cast<unsigned char>(last.front()));
  }
  return false;
}

std::optional<std::string> normalize_domain(std::string_view name) {
  std::string text(name);
  if (!text.empty() && text.back() == '.') text.pop_back();
  if (text.empty() || text.size() > 1024 || is_ip_literal(text)) return std::nullopt;
  if (text.find('\0') != std::string::npos) return std::nullopt;
  char* ascii = nullptr;
  const int rc = idn2_to_ascii_8z(text.c_str(), &ascii, IDN2_NONTRANSITIONAL | IDN2_NFC_INPUT);
  if (rc != IDN2_OK || ascii == nullptr) {
    if (ascii != nullptr) idn2_free(ascii);
    return std::nullopt;
  }
  std::string out(ascii);
  idn2_free(ascii);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (!valid_ascii_name(out) || is_ip_literal(out)) return std::nullopt;
  return out;
}

DomainAllowlist::DomainAllowlist(const std::vector<std::string>& entries) {
  for (const std::string& entry : entries) {
    const bool wildcard = entry.rfind("*.", 0) == 0;
    const auto normalized =
        normalize_domain(wildcard ? std::string_view(entry).substr(2) : std::string_view(entry));
    if (!normalized) {
      throw std::invalid_argument("'" + entry +
                                  "' is not a domain name or *.suffix (IP addresses are never "
                                  "allowed by name)");
    }
    if (wildcard) {
      suffixes_.insert("." + *normalized);
    } else {
      exact_.insert(*normalized);
    }
  }
}

bool DomainAllowlist::allows(const std::string& normalized) const {
  if (exact_.count(normalized) != 0) return true;
  for (std::size_t dot = normalized.find('.'); dot != std::string::npos;
       dot = normalized.find('.', dot + 1)) {
    if (suffixes_.count(normalized.substr(dot)) != 0) return true;
  }
  return false;
}

std::vector<std::string> DomainAllowlist::entries() const {
  std::vector<std::string> out(exact_.begin(), exact_.end());
  for (const std::string& suffix : suffixes_) out.push_back("*" + suffix);
  return out;
}

std::string non_public_reason(const boost::asio::ip::address& address) {
  if (address.is_v6()) {
    const auto v6 = address.to_v6();
    if (v6.is_v4_mapped()) {
      return non_public_reason(boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, v6));
    }
    const auto bytes = v6.to_bytes();
    if (v6.is_unspecified()) return "unspecified address";
    if (v6.is_loopback()) return "loopback address";
    if (v6.is_multicast()) return "multicast address";
    if ((bytes[0] & 0xfe) == 0xfc) return "private address";  // fc00::/7, unique local
    if (bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80) return "link-local address";
    if (bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0xc0) return "private address";  // site-local
    if (bytes[0] == 0x20 && bytes[1] == 0x01 && bytes[2] == 0x0d && bytes[3] == 0xb8) {
      return "reserved address";  // 2001:db8::/32, documentation
    }
    if (bytes[0] == 0x00 && bytes[1] == 0x64 && bytes[2] == 0xff && bytes[3] == 0x9b) {
      // 64:ff9b::/96, NAT64: the embedded IPv4 address decides.
      const boost::asio::ip::address_v4::bytes_type v4 = {bytes[12], bytes[13], bytes[14],
                                                          bytes[15]};
      return non_public_reason(boost::asio::ip::address_v4(v4));
    }
    if (bytes[0] == 0x20 && bytes[1] == 0x02) {
      // 2002::/16, 6to4: likewise.
      const boost::asio::ip::address_v4::bytes_type v4 = {bytes[2], bytes[3], bytes[4], bytes[5]};
      return non_public_reason(boost::asio::ip::address_v4(v4));
    }
    if ((bytes[0] & 0xe0) != 0x20) return "reserved address";  // outside 2000::/3, global unicast
    return "";
  }
  const auto b = address.to_v4().to_bytes();
  const auto in = [&](std::uint8_t first, std::uint8_t second_mask, std::uint8_t second) {
    return b[0] == first && (b[1] & second_mask) == second;
  };
  if (b[0] == 169 && b[1] == 254 && b[2] == 169 && b[3] == 254) return "metadata address";
  if (b[0] == 0) return "unspecified address";  // 0/8, "this network"
  if (b[0] == 127) return "loopback address";
  if (b[0] == 10 || in(172, 0xf0, 16) || in(192, 0xff, 168)) return "private address";
  if (in(100, 0xc0, 64)) return "carrier-grade NAT address";
  if (in(169, 0xff, 254)) return "link-local address";
  if (b[0] >= 224 && b[0] <= 239) return "multicast address";
  if (b[0] >= 240) return "reserved address";                    // 240/4 and the broadcast address
  if (in(192, 0xff, 0) && b[2] == 0) return "reserved address";  // 192.0.0/24, IETF
  if (in(192, 0xff, 0) && b[2] == 2) return "reserved address";  // TEST-NET-1
  if (in(198, 0xfe, 18)) return "reserved address";              // 198.18/15, benchmarking
  if (in(198, 0xff, 51) && b[2] == 100) return "reserved address";  // TEST-NET-2
  if (in(203, 0xff, 0) && b[2] == 113) return "reserved address";   // TEST-NET-3
  return "";
}

HelloParse parse_client_hello(std::string_view bytes, ClientHello& out) {
  const auto u8 = [&](std::size_t at) { return static_cast<std::uint8_t>(bytes[at]); };
  const auto u16 = [&](std::size_t at) {
    return static_cast<std::size_t>(u8(at)) << 8 | static_cast<std::size_t>(u8(at + 1));
  };
  // TLS record: type 22 (handshake), version 3.x, a length; the ClientHello may span records
  // in theory, but a first record holding the whole of it is what every client sends.
  if (bytes.size() < 5) {
    if (!bytes.empty() && u8(0) != 22) return HelloParse::not_tls;
    return HelloParse::need_more;
  }
  if (u8(0) != 22 || u8(1) != 3) return HelloParse::not_tls;
  const std::size_t record = u16(3);
  if (record < 4 || record > 16384) return HelloParse::not_tls;
  if (bytes.size() < 5 + record) return HelloParse::need_more;
  std::string_view body = bytes.substr(5, record);
  if (static_cast<std::uint8_t>(body[0]) != 1) return HelloParse::not_tls;  // client_hello
  const std::size_t hello_length =
      static_cast<std::size_t>(static_cast<std::uint8_t>(body[1])) << 16 |
      static_cast<std::size_t>(static_cast<std::uint8_t>(body[2])) << 8 |
      static_cast<std::size_t>(static_cast<std::uint8_t>(body[3]));
  if (hello_length + 4 > body.size()) return HelloParse::not_tls;  // spans records: refused
  std::string_view hello = body.substr(4, hello_length);
  const auto h8 = [&](std::size_t at) { return static_cast<std::uint8_t>(hello[at]); };
  const auto h16 = [&](std::size_t at) {
    return static_cast<std::size_t>(h8(at)) << 8 | static_cast<std::size_t>(h8(at + 1));
  };
  std::size_t at = 2 + 32;  // client_version, random
  if (at + 1 > hello.size()) return HelloParse::not_tls;
  at += 1 + h8(at);  // session_id
  if (at + 2 > hello.size()) return HelloParse::not_tls;
  at += 2 + h16(at);  // cipher_suites
  if (at + 1 > hello.size()) return HelloParse::not_tls;
  at += 1 + h8(at);  // compression_methods
  out = ClientHello{};
  if (at == hello.size()) return HelloParse::complete;  // no extensions at all
  if (at + 2 > hello.size()) return HelloParse::not_tls;
  const std::size_t extensions_end = at + 2 + h16(at);
  if (extensions_end > hello.size()) return HelloParse::not_tls;
  at += 2;
  while (at + 4 <= extensions_end) {
    const std::size_t type = h16(at);
    const std::size_t length = h16(at + 2);
    at += 4;
    if (at + length > extensions_end) return HelloParse::not_tls;
    if (type == 0xfe0d) out.encrypted_client_hello = true;
    if (type == 0x0000 && length >= 2) {  // server_name
      std::size_t list = at + 2;
      const std::size_t list_end = std::min(at + 2 + h16(at), at + length);
      while (list + 3 <= list_end) {
        const std::size_t name_type = h8(list);
        const std::size_t name_length = h16(list + 1);
        list += 3;
        if (list + name_length > list_end) return HelloParse::not_tls;
        if (name_type == 0) {
          if (out.server_name) return HelloParse::not_tls;  // two host names: ambiguous
          out.server_name = std::string(hello.substr(list, name_length));
        }
        list += name_length;
      }
    }
    at += length;
  }
  return at == extensions_end ? HelloParse::complete : HelloParse::not_tls;
}

}  // namespace sandboxd::core::egress

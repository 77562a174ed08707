// The egress proxy's rules (core/include/sandboxd/core/egress_rules.hpp): names as the
// allow-list compares them, the allow-list, which addresses are public, and what a ClientHello
// says. The ClientHellos are OpenSSL's own (a real client's first bytes) and, for what OpenSSL
// will not send (Encrypted Client Hello, two names), built by hand.
#include "sandboxd/core/egress_rules.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "client_hellos.hpp"

namespace sandboxd::core::egress {
namespace {

using sandboxd::testing::built_client_hello;
using sandboxd::testing::openssl_client_hello;
using sandboxd::testing::sni_extension;

using boost::asio::ip::make_address;

TEST(EgressRules, NamesAreNormalisedAndNonNamesRefused) {
  EXPECT_EQ(normalize_domain("PyPI.org."), "pypi.org");
  EXPECT_EQ(normalize_domain("bücher.example"), "xn--bcher-kva.example");
  EXPECT_EQ(normalize_domain("XN--BCHER-KVA.example"), "xn--bcher-kva.example");
  EXPECT_EQ(normalize_domain("files.pythonhosted.org"), "files.pythonhosted.org");
  for (const char* bad : {"", ".", "a..b", "-a.example", "a-.example", "exa mple.org",
                          "a/b.example", "10.0.0.1", "127.1", "[::1]", "::1", "2130706433"}) {
    EXPECT_EQ(normalize_domain(bad), std::nullopt) << bad;
  }
  EXPECT_EQ(normalize_domain(std::string(64, 'a') + ".example"), std::nullopt) << "label > 63";
  EXPECT_TRUE(normalize_domain(std::string(63, 'a') + ".example").has_value());
}

TEST(EgressRules, IpLiteralsInEverySpellingAResolverTakes) {
  for (const char* literal : {"10.0.0.5", "127.1", "0x7f000001", "2130706433", "0177.0.0.1",
                              "[::1]", "::ffff:10.0.0.1", "169.254.169.254"}) {
    EXPECT_TRUE(is_ip_literal(literal)) << literal;
  }
  for (const char* name : {"example.com", "1example.com", "123.example", "deadbeef.example"}) {
    EXPECT_FALSE(is_ip_literal(name)) << name;
  }
}

TEST(EgressRules, TheAllowListTakesExactNamesAndSuffixesOnly) {
  const DomainAllowlist list({"PyPI.org", "*.pythonhosted.org", "bücher.example"});
  EXPECT_TRUE(list.allows("pypi.org"));
  EXPECT_FALSE(list.allows("www.pypi.org")) << "an exact name allows only itself";
  EXPECT_TRUE(list.allows("files.pythonhosted.org"));
  EXPECT_TRUE(list.allows("a.b.pythonhosted.org"));
  EXPECT_FALSE(list.allows("pythonhosted.org")) << "*.suffix is strictly under the suffix";
  EXPECT_FALSE(list.allows("evilpythonhosted.org"));
  EXPECT_TRUE(list.allows("xn--bcher-kva.example"));
  EXPECT_EQ(list.entries(),
            (std::vector<std::string>{"pypi.org", "xn--bcher-kva.example", "*.pythonhosted.org"}));
  for (const char* bad : {"10.0.0.1", "*", "*.", "a b", "**.example"}) {
    try {
      DomainAllowlist({bad});
      ADD_FAILURE() << bad << " was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}

TEST(EgressRules, OnlyPublicAddressesAreDialled) {
  const std::pair<const char*, const char*> cases[] = {
      {"8.8.8.8", ""},
      {"93.184.216.34", ""},
      {"2606:4700::1111", ""},
      {"10.0.0.5", "private address"},
      {"172.16.3.4", "private address"},
      {"172.32.0.1", ""},
      {"192.168.1.1", "private address"},
      {"100.64.0.1", "carrier-grade NAT address"},
      {"127.0.0.1", "loopback address"},
      {"0.0.0.0", "unspecified address"},
      {"169.254.169.254", "metadata address"},
      {"169.254.1.1", "link-local address"},
      {"224.0.0.1", "multicast address"},
      {"255.255.255.255", "reserved address"},
      {"192.0.2.1", "reserved address"},
      {"::1", "loopback address"},
      {"::", "unspecified address"},
      {"fc00::1", "private address"},
      {"fd12:3456::1", "private address"},
      {"fe80::1", "link-local address"},
      {"ff02::1", "multicast address"},
      {"::ffff:10.0.0.1", "private address"},
      {"::ffff:169.254.169.254", "metadata address"},
      {"64:ff9b::a00:1", "private address"},
      {"2002:a00:1::", "private address"},
      {"2001:db8::1", "reserved address"},
  };
  for (const auto& [address, reason] : cases) {
    EXPECT_EQ(non_public_reason(make_address(address)), reason) << address;
  }
}

TEST(EgressRules, AClientHelloSaysWhereItGoes) {
  ClientHello hello;
  const std::string real = openssl_client_hello("pypi.org");
  EXPECT_EQ(parse_client_hello(real, hello), HelloParse::complete);
  EXPECT_EQ(hello.server_name, "pypi.org");
  EXPECT_FALSE(hello.encrypted_client_hello);
  // Byte by byte it is a prefix until the whole record is in.
  EXPECT_EQ(parse_client_hello(real.substr(0, 3), hello), HelloParse::need_more);
  EXPECT_EQ(parse_client_hello(real.substr(0, real.size() - 1), hello), HelloParse::need_more);

  const std::string nameless = openssl_client_hello(nullptr);
  EXPECT_EQ(parse_client_hello(nameless, hello), HelloParse::complete);
  EXPECT_EQ(hello.server_name, std::nullopt);

  EXPECT_EQ(parse_client_hello(
                built_client_hello({{0, sni_extension({"a.example"})}, {0xfe0d, "opaque"}}), hello),
            HelloParse::complete);
  EXPECT_TRUE(hello.encrypted_client_hello);
  EXPECT_EQ(parse_client_hello(built_client_hello({{0, sni_extension({"a.example", "b.example"})}}),
                               hello),
            HelloParse::not_tls)
      << "two host names are ambiguous";
  EXPECT_EQ(parse_client_hello("GET / HTTP/1.1\r\n\r\n", hello), HelloParse::not_tls);
  std::string truncated = built_client_hello({{0, sni_extension({"a.example"})}});
  truncated[truncated.size() - 11] = '\x7f';  // a name length past the record
  EXPECT_EQ(parse_client_hello(truncated, hello), HelloParse::not_tls);
}

}  // namespace
}  // namespace sandboxd::core::egress

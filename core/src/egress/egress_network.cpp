// How the egress proxy reaches the outside (EgressNetwork): the host's resolver with public
// addresses only, and the test-only upstreams on loopback that `network.test_only_upstreams`
// declares.
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "sandboxd/core/egress_proxy.hpp"
#include "sandboxd/core/egress_rules.hpp"

namespace sandboxd::core {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

class SystemEgressNetwork final : public EgressNetwork {
 public:
  std::vector<tcp::endpoint> resolve(const std::string& name, std::uint16_t port) override {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    std::vector<tcp::endpoint> out;
    if (::getaddrinfo(name.c_str(), nullptr, &hints, &found) != 0) return out;
    for (addrinfo* at = found; at != nullptr; at = at->ai_next) {
      if (at->ai_family == AF_INET) {
        const auto* v4 = reinterpret_cast<const sockaddr_in*>(at->ai_addr);
        out.emplace_back(asio::ip::address_v4(ntohl(v4->sin_addr.s_addr)), port);
      } else if (at->ai_family == AF_INET6) {
        const auto* v6 = reinterpret_cast<const sockaddr_in6*>(at->ai_addr);
        asio::ip::address_v6::bytes_type bytes;
        std::memcpy(bytes.data(), v6->sin6_addr.s6_addr, bytes.size());
        out.emplace_back(asio::ip::address_v6(bytes), port);
      }
    }
    ::freeaddrinfo(found);
    return out;
  }
  std::string refusal(const asio::ip::address& address) const override {
    return egress::non_public_reason(address);
  }
};

class TestUpstreamNetwork final : public EgressNetwork {
 public:
  explicit TestUpstreamNetwork(std::map<std::string, tcp::endpoint> upstreams)
      : upstreams_(std::move(upstreams)) {}
  std::vector<tcp::endpoint> resolve(const std::string& name, std::uint16_t) override {
    const auto it = upstreams_.find(name);
    if (it == upstreams_.end()) return {};
    return {it->second};
  }
  std::string refusal(const asio::ip::address& address) const override {
    for (const auto& [name, endpoint] : upstreams_) {
      if (endpoint.address() == address) return "";
    }
    return egress::non_public_reason(address);
  }

 private:
  const std::map<std::string, tcp::endpoint> upstreams_;
};

}  // namespace

std::shared_ptr<EgressNetwork> system_egress_network() {
  return std::make_shared<SystemEgressNetwork>();
}

std::shared_ptr<EgressNetwork> test_upstream_network(
    std::map<std::string, tcp::endpoint> upstreams) {
  return std::make_shared<TestUpstreamNetwork>(std::move(upstreams));
}

}  // namespace sandboxd::core

#include "sandboxd/core/owner_id.hpp"

#include <openssl/rand.h>
#include <unistd.h>

#include <array>
#include <stdexcept>

namespace sandboxd::core {

std::string host_name() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "unknown";
  return host.data();
}

std::string generate_owner_id() {
  std::array<unsigned char, 16> random{};
  if (RAND_bytes(random.data(), static_cast<int>(random.size())) != 1) {
    throw std::runtime_error("cannot generate an owner id: OpenSSL RAND_bytes failed");
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = host_name() + ':';
  for (unsigned char byte : random) {
    id += kHex[byte >> 4];
    id += kHex[byte & 0xF];
  }
  return id;
}

}  // namespace sandboxd::core

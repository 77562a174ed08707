#include "sandboxd/core/random_hex.hpp"

#include <openssl/rand.h>

#include <stdexcept>
#include <vector>

namespace sandboxd::core {

std::string to_hex(const unsigned char* bytes, std::size_t size) {
  static constexpr char kHexDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (std::size_t i = 0; i < size; ++i) {
    out.push_back(kHexDigits[bytes[i] >> 4]);
    out.push_back(kHexDigits[bytes[i] & 0x0f]);
  }
  return out;
}

std::string random_hex(std::size_t count, const std::string& what) {
  std::vector<unsigned char> bytes(count);
  if (RAND_bytes(bytes.data(), static_cast<int>(bytes.size())) != 1) {
    throw std::runtime_error("cannot make " + what + ": no randomness from OpenSSL");
  }
  return to_hex(bytes.data(), bytes.size());
}

}  // namespace sandboxd::core

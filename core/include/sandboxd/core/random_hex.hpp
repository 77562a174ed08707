// Bytes as text: the one hex writer of the core and its programs (sandbox ids, owner ids, secret
// placeholders, egress request ids, the operator page's sessions).
#pragma once

#include <cstddef>
#include <string>

namespace sandboxd::core {

// Lower-case hex, two characters a byte.
std::string to_hex(const unsigned char* bytes, std::size_t size);

// `count` bytes from OpenSSL's generator as hex. Throws std::runtime_error
// "cannot make {what}: no randomness from OpenSSL".
std::string random_hex(std::size_t count, const std::string& what);

}  // namespace sandboxd::core

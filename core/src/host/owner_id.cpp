#include "sandboxd/core/owner_id.hpp"

#include <unistd.h>

#include <array>
#include <stdexcept>

#include "sandboxd/core/random_hex.hpp"

namespace sandboxd::core {

std::string host_name() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "unknown";
  return host.data();
}

std::string generate_owner_id() {
  return host_name() + ':' + random_hex(16, "an owner id");
}

}  // namespace sandboxd::core

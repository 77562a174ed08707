#include "listen_address.hpp"

#include <sys/un.h>

#include <cstdlib>
#include <stdexcept>

namespace sandboxctl {

using sandboxd::door::ListenAddress;

ListenAddress parse_listen_address(const std::string& text) {
  ListenAddress address;
  if (text.rfind("unix:", 0) == 0 || text.find('/') != std::string::npos) {
    address.unix_path = text.rfind("unix:", 0) == 0 ? text.substr(5) : text;
    if (address.unix_path.empty()) {
      throw std::invalid_argument("--listen '" + text + "': the unix socket path is empty");
    }
    if (address.unix_path.size() >= sizeof(sockaddr_un::sun_path)) {
      throw std::invalid_argument("--listen '" + text +
                                  "': a unix socket path must be shorter than " +
                                  std::to_string(sizeof(sockaddr_un::sun_path)) + " bytes");
    }
    return address;
  }
  const auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    throw std::invalid_argument("--listen '" + text + "': expected unix:PATH or 127.0.0.1:PORT");
  }
  address.tcp = true;
  address.host = text.substr(0, colon);
  if (address.host == "localhost") address.host = "127.0.0.1";
  if (address.host != "127.0.0.1" && address.host != "::1" && address.host != "[::1]") {
    throw std::invalid_argument("--listen '" + text +
                                "': serve listens on loopback only (127.0.0.1 or ::1), got host '" +
                                address.host + "'");
  }
  if (address.host == "[::1]") address.host = "::1";
  const std::string port = text.substr(colon + 1);
  char* end = nullptr;
  const long value = std::strtol(port.c_str(), &end, 10);
  if (port.empty() || *end != '\0' || value < 0 || value > 65535) {
    throw std::invalid_argument("--listen '" + text + "': port '" + port +
                                "' is not a number from 0 to 65535");
  }
  address.port = static_cast<int>(value);
  return address;
}

}  // namespace sandboxctl

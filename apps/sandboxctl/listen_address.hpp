// Where `sandboxctl serve` may listen: a unix socket, or loopback TCP only.
#pragma once

#include <string>

#include "http_door.hpp"

namespace sandboxctl {

// "unix:PATH", a path with a '/', or "127.0.0.1:PORT" / "localhost:PORT" / "[::1]:PORT".
// Anything else (a non-loopback host included) throws std::invalid_argument naming the value.
sandboxd::door::ListenAddress parse_listen_address(const std::string& text);

}  // namespace sandboxctl

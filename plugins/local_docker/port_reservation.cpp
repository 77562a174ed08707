#include "port_reservation.hpp"

#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

namespace sandboxd::local_docker {
namespace {

std::mutex& port_mutex() {
  static std::mutex mutex;
  return mutex;
}
std::set<int>& reserved_ports() {
  static std::set<int> ports;  // guarded by port_mutex()
  return ports;
}

}  // namespace

int PortReservation::claim_from(int start) {
  release();
  std::lock_guard lock(port_mutex());
  for (int port = start; port <= 65535 && port < start + 100; ++port) {
    if (reserved_ports().insert(port).second) {
      port_ = port;
      return port;
    }
  }
  throw std::runtime_error("No available port found in range " + std::to_string(start) + "-" +
                           std::to_string(start + 100));
}

void PortReservation::release() {
  if (port_ == 0) return;
  std::lock_guard lock(port_mutex());
  reserved_ports().erase(port_);
  port_ = 0;
}

}  // namespace sandboxd::local_docker

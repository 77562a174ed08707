// Host ports this process is starting containers on, when a base port is configured (design
// §9.2): two threads never offer the engine the same port at once. Process-wide, like the
// reference's allocator. Lock story: one process-wide mutex guards the set of reserved ports;
// held only to add or remove one.
#pragma once

namespace sandboxd::local_docker {

class PortReservation {
 public:
  PortReservation() = default;
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  ~PortReservation() { release(); }

  // Reserves the first port >= start (at most 100 tried) that no other thread of this process
  // is starting on. Throws std::runtime_error naming the range when none is free.
  int claim_from(int start);
  void release();

 private:
  int port_ = 0;
};

}  // namespace sandboxd::local_docker

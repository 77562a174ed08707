// A connection's one deadline (the relay's and the egress proxy's sessions): arm() replaces
// the one before; a deadline that expires without being replaced or cancelled calls its
// on_expiry. Owned by its session and used on the session's I/O thread only; on_expiry must
// hold the session (a shared_ptr), which keeps this alive while the wait is pending.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <utility>

namespace sandboxd::core::net {

class Deadline {
 public:
  explicit Deadline(boost::asio::io_context& io) : timer_(io) {}

  template <class OnExpiry>
  void arm(std::chrono::milliseconds limit, OnExpiry on_expiry) {
    const std::uint64_t armed = ++generation_;
    timer_.expires_after(limit);
    timer_.async_wait([this, armed, on_expiry = std::move(on_expiry)](
                          const boost::system::error_code& ec) mutable {
      if (!ec && armed == generation_) on_expiry();
    });
  }
  void cancel() {
    ++generation_;
    timer_.cancel();
  }

 private:
  boost::asio::steady_timer timer_;
  std::uint64_t generation_ = 0;
};

}  // namespace sandboxd::core::net

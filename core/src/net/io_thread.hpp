// The one I/O thread of the relay and of the egress proxy: it runs their io_context until it
// has no more work, logging a handler's exception and going on rather than ending the process.
// SIGPIPE stays blocked on it: a write (splice(2) has no MSG_NOSIGNAL) that fails with EPIPE
// ends one connection, never the process hosting the daemon.
#pragma once

#include <pthread.h>
#include <signal.h>

#include <boost/asio/io_context.hpp>
#include <exception>
#include <functional>
#include <string>
#include <thread>

namespace sandboxd::core::net {

inline std::thread start_io_thread(boost::asio::io_context& io,
                                   std::function<void(const std::string&)> log_failure) {
  return std::thread([&io, log_failure = std::move(log_failure)] {
    sigset_t pipe_signal;
    sigemptyset(&pipe_signal);
    sigaddset(&pipe_signal, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);
    while (true) {
      try {
        io.run();
        return;
      } catch (const std::exception& e) {
        log_failure(std::string("I/O handler failed: ") + e.what());
      }
    }
  });
}

}  // namespace sandboxd::core::net

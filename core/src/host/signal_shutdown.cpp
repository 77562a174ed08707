#include "sandboxd/core/signal_shutdown.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <stdexcept>
#include <system_error>
#include <thread>

namespace sandboxd::core {
namespace {

constexpr int kSignals[] = {SIGTERM, SIGINT, SIGHUP};

int g_pipe_write = -1;              // written once before any handler is installed
struct sigaction g_previous[NSIG];  // written once before any handler is installed
std::atomic<bool> g_installed{false};

void on_signal_write(int signal) {
  const int saved = errno;
  const unsigned char number = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t written = ::write(g_pipe_write, &number, 1);
  errno = saved;
}

void chain_to_previous(int signal) {
  const struct sigaction& previous = g_previous[signal];
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction != nullptr) previous.sa_sigaction(signal, nullptr, nullptr);
    return;
  }
  if (previous.sa_handler == SIG_IGN) return;
  if (previous.sa_handler == SIG_DFL) {
    ::sigaction(signal, &previous, nullptr);
    ::raise(signal);
    return;
  }
  previous.sa_handler(signal);
}

}  // namespace

void install_shutdown_on_signals(std::function<void(int signal)> on_signal) {
  if (g_installed.exchange(true)) {
    throw std::logic_error("shutdown signal handlers are already installed in this process");
  }
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe for signal handling");
  }
  g_pipe_write = fds[1];
  std::thread([read_fd = fds[0], on_signal = std::move(on_signal)] {
    unsigned char number = 0;
    while (true) {
      const ssize_t got = ::read(read_fd, &number, 1);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return;
      on_signal(number);
      chain_to_previous(number);
    }
  }).detach();  // lives as long as the process, like the handlers
  for (int signal : kSignals) {
    struct sigaction action {};
    action.sa_handler = on_signal_write;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    if (::sigaction(signal, &action, &g_previous[signal]) != 0) {
      throw std::system_error(errno, std::generic_category(), "sigaction");
    }
  }
}

}  // namespace sandboxd::core

// Child process for the signal-shutdown test. Usage: signal_shutdown_helper MARKER MODE
// MODE "default": no previous handler; "chain": a previous handler that exits with 7.
// Prints "ready" once the handlers are installed, then waits for a signal.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "sandboxd/core/signal_shutdown.hpp"

namespace {
const char* g_marker = nullptr;

void append(const std::string& text) {
  const int fd = ::open(g_marker, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return;
  [[maybe_unused]] const ssize_t n = ::write(fd, text.data(), text.size());
  ::close(fd);
}

void previous_handler(int signal) {
  append("previous " + std::to_string(signal) + "\n");
  ::_exit(7);
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) return 2;
  g_marker = argv[1];
  if (std::strcmp(argv[2], "chain") == 0) ::signal(SIGTERM, previous_handler);
  sandboxd::core::install_shutdown_on_signals(
      [](int signal) { append("shutdown " + std::to_string(signal) + "\n"); });
  std::printf("ready\n");
  std::fflush(stdout);
  while (true) ::pause();
}

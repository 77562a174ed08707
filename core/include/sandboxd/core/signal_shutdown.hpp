// Shutdown on SIGTERM, SIGINT and SIGHUP (design §5.2 step 4), for hosts that want it.
//
// A signal handler may not take locks or log, so the handler only writes the signal number to
// a pipe; a watcher thread reads it, runs `on_signal` (typically Provider::shutdown), then
// chains to what was installed before: a previous handler function is called with the signal,
// and a default disposition is restored and the signal re-raised, so the process still ends
// the way it would have. A signal that was ignored before still runs `on_signal`, then stays
// ignored.
#pragma once

#include <functional>

namespace sandboxd::core {

// Installs the handlers once per process; a second call throws std::logic_error.
// Throws std::system_error when the pipe, the thread or sigaction cannot be set up.
void install_shutdown_on_signals(std::function<void(int signal)> on_signal);

}  // namespace sandboxd::core

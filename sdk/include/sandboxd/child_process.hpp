// Starting a child process from a plugin: its signals as a fresh process has them.
//
// `sandboxctl serve` and sandboxd-provisioner block SIGHUP, SIGINT and SIGTERM on every thread
// (one thread waits for them), and ignore SIGPIPE. A child inherits the blocked mask and the
// ignored dispositions across exec, so a process a backend starts would ignore the SIGTERM its
// destroy sends and only die of SIGKILL after the stop timeout. Start every child with one of
// these.
#pragma once

#include <signal.h>
#include <spawn.h>

namespace sandboxd {

// For posix_spawn: the child starts with an empty signal mask and every signal's default
// disposition. Call on an initialised `attributes` before posix_spawn; it keeps any flags the
// caller set already.
inline void set_child_signal_defaults(posix_spawnattr_t& attributes) {
  sigset_t empty;
  sigemptyset(&empty);
  posix_spawnattr_setsigmask(&attributes, &empty);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attributes, &all);
  short flags = 0;
  posix_spawnattr_getflags(&attributes, &flags);
  posix_spawnattr_setflags(&attributes, flags | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
}

// For fork: call in the child before exec (async-signal-safe: sigaction and sigprocmask only).
inline void reset_signals_in_child() noexcept {
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  for (int signal_number = 1; signal_number < NSIG; ++signal_number) {
    // SIGKILL, SIGSTOP and the C library's own signals refuse; nothing to do for them.
    ::sigaction(signal_number, &default_action, nullptr);
  }
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
}

}  // namespace sandboxd

// A process a plugin starts has the signals of a fresh process (sandboxd/child_process.hpp),
// although the daemons block SIGTERM, SIGINT and SIGHUP and ignore SIGPIPE: the child's
// /proc/self/status says nothing is blocked or ignored, for posix_spawn and for fork + exec.
// Without the helper the same child shows the inherited mask (the premise, checked too).
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "sandboxd/child_process.hpp"

extern char** environ;

namespace {

// The daemon's signal set-up on this thread, undone at the end of the scope.
class DaemonSignals {
 public:
  DaemonSignals() {
    sigset_t stop;
    sigemptyset(&stop);
    for (int s : {SIGHUP, SIGINT, SIGTERM}) sigaddset(&stop, s);
    pthread_sigmask(SIG_BLOCK, &stop, &old_mask_);
    struct sigaction ignore {};
    ignore.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ignore, &old_pipe_);
  }
  ~DaemonSignals() {
    pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
    sigaction(SIGPIPE, &old_pipe_, nullptr);
  }

 private:
  sigset_t old_mask_;
  struct sigaction old_pipe_ {};
};

// The child's SigBlk and SigIgn lines, as it prints them to a pipe.
std::string child_signal_lines(bool with_helper, bool by_fork) {
  int pipe_fds[2];
  EXPECT_EQ(::pipe(pipe_fds), 0);
  // grep itself, no shell between: a shell may change its own signals.
  const char* argv[] = {"/bin/grep", "-E", "^Sig(Blk|Ign)", "/proc/self/status", nullptr};
  pid_t pid = -1;
  if (by_fork) {
    pid = ::fork();
    if (pid == 0) {
      if (with_helper) sandboxd::reset_signals_in_child();
      ::dup2(pipe_fds[1], STDOUT_FILENO);
      ::execve(argv[0], const_cast<char**>(argv), environ);
      ::_exit(127);
    }
  } else {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    if (with_helper) sandboxd::set_child_signal_defaults(attributes);
    EXPECT_EQ(
        ::posix_spawn(&pid, argv[0], &actions, &attributes, const_cast<char**>(argv), environ), 0);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
  }
  ::close(pipe_fds[1]);
  std::string out;
  char buffer[512];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) out.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return out;
}

// The standard signals (1-31) blocked or ignored per the lines, as one mask each: "blk ign".
// (glibc's posix_spawn leaves its own two real-time signals, 32 and 33, ignored in the child
// whatever it is asked; a process never receives them from us.)
std::string standard_signals(const std::string& lines) {
  unsigned long long blocked = 0, ignored = 0;
  std::sscanf(lines.c_str(), "SigBlk:\t%llx\nSigIgn:\t%llx", &blocked, &ignored);
  char shown[64];
  std::snprintf(shown, sizeof shown, "%llx %llx", blocked & 0x7fffffffULL, ignored & 0x7fffffffULL);
  return shown;
}

constexpr const char* kNothing = "0 0";

TEST(ChildSignalsTest, ASpawnedChildStartsWithNothingBlockedOrIgnored) {
  const DaemonSignals daemon;
  const std::string inherited = child_signal_lines(false, false);
  // The premise: SIGHUP, SIGINT, SIGTERM blocked (0x4003), SIGPIPE ignored (0x1000).
  EXPECT_EQ(standard_signals(inherited), "4003 1000") << inherited;
  EXPECT_EQ(standard_signals(child_signal_lines(true, false)), kNothing);
}

TEST(ChildSignalsTest, AForkedChildStartsWithNothingBlockedOrIgnored) {
  const DaemonSignals daemon;
  EXPECT_EQ(standard_signals(child_signal_lines(false, true)), "4003 1000");
  EXPECT_EQ(standard_signals(child_signal_lines(true, true)), kNothing);
}

}  // namespace

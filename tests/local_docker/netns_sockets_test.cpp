// NetnsSockets (plugins/local_docker/sandbox_network.hpp): a socket made for a sandbox is made in
// that sandbox's network namespace, and a cached process id is trusted only while it still has
// the namespace it had, never after its namespace changed under the same pid (what a reused pid
// looks like). Real namespaces: a child process unshares its own (root only; skipped otherwise).
#include <gtest/gtest.h>
#include <linux/sockios.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "sandbox_network.hpp"

namespace sandboxd::local_docker {
namespace {

// A child process in a network namespace of its own; move() puts it in another, same pid.
class NamespacedChild {
 public:
  NamespacedChild() {
    if (::pipe(to_child_) != 0 || ::pipe(from_child_) != 0) throw std::runtime_error("pipe");
    pid_ = ::fork();
    if (pid_ == 0) {
      char go = 0;
      do {
        if (::unshare(CLONE_NEWNET) != 0) ::_exit(1);
        (void)!::write(from_child_[1], "r", 1);
      } while (::read(to_child_[0], &go, 1) == 1);
      ::_exit(0);
    }
    char ready = 0;
    if (::read(from_child_[0], &ready, 1) != 1) throw std::runtime_error("the child did not start");
  }
  ~NamespacedChild() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    for (int fd : {to_child_[0], to_child_[1], from_child_[0], from_child_[1]}) ::close(fd);
  }
  int pid() const { return pid_; }
  void move() {
    char ready = 0;
    if (::write(to_child_[1], "m", 1) != 1 || ::read(from_child_[0], &ready, 1) != 1) {
      throw std::runtime_error("the child did not move");
    }
  }
  ino_t netns() const {
    struct stat st {};
    ::stat(("/proc/" + std::to_string(pid_) + "/ns/net").c_str(), &st);
    return st.st_ino;
  }

 private:
  int pid_ = -1;
  int to_child_[2] = {-1, -1};
  int from_child_[2] = {-1, -1};
};

// The namespace a socket belongs to (SIOCGSKNS hands out a descriptor of it).
ino_t netns_of_socket(int fd) {
  const int ns = ::ioctl(fd, SIOCGSKNS);
  if (ns < 0) return 0;
  struct stat st {};
  ::fstat(ns, &st);
  ::close(ns);
  return st.st_ino;
}

TEST(NetnsSocketsTest, ACachedPidIsTrustedOnlyWhileItKeepsItsNamespace) {
  if (::geteuid() != 0) GTEST_SKIP() << "entering another network namespace needs root";
  NamespacedChild child;
  NetnsSockets sockets;
  std::atomic<int> asked{0};
  const auto pid_of = [&] {
    ++asked;
    return child.pid();
  };

  int fd = sockets.socket_in_container("c1", pid_of, AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(netns_of_socket(fd), child.netns()) << "made in the sandbox's namespace";
  ::close(fd);
  fd = sockets.socket_in_container("c1", pid_of, AF_INET, SOCK_STREAM, 0);
  ::close(fd);
  // The first lookup asks twice (the process is confirmed after its namespace was opened).
  EXPECT_EQ(asked.load(), 2) << "the second socket comes from the cache";

  const ino_t before = child.netns();
  child.move();  // same pid, another namespace: what a reused pid looks like
  ASSERT_NE(child.netns(), before);
  fd = sockets.socket_in_container("c1", pid_of, AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(asked.load(), 4) << "a pid whose namespace changed was trusted from the cache";
  EXPECT_EQ(netns_of_socket(fd), child.netns());
  ::close(fd);
}

// At a first lookup nothing tied the pid the engine reported to the
// /proc/PID/ns/net then opened: a container whose process changed in between (a pid freed and
// reused by another sandbox's process) gave a socket in another namespace, and that answer was
// cached. Now the process is held while its namespace is opened and the engine asked again:
// a process that is no longer the container's is not used.
TEST(NetnsSocketsTest, AProcessThatChangedWhileItsNamespaceWasOpenedIsNotUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "entering another network namespace needs root";
  NamespacedChild other;      // what the engine reported first: another sandbox's by now
  NamespacedChild container;  // the container's process, as the engine reports it next
  NetnsSockets sockets;
  std::atomic<int> asked{0};
  const auto pid_of = [&] { return ++asked == 1 ? other.pid() : container.pid(); };
  const int fd = sockets.socket_in_container("c1", pid_of, AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(netns_of_socket(fd), container.netns()) << "made in another sandbox's namespace";
  ::close(fd);
  EXPECT_EQ(asked.load(), 4) << "asked, changed; asked, confirmed";
  // And the cache holds the confirmed one.
  const int again = sockets.socket_in_container("c1", pid_of, AF_INET, SOCK_STREAM, 0);
  EXPECT_EQ(netns_of_socket(again), container.netns());
  ::close(again);
}

// A container that keeps changing is refused, not guessed at.
TEST(NetnsSocketsTest, AContainerThatKeepsChangingItsProcessIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "entering another network namespace needs root";
  NamespacedChild a, b;
  NetnsSockets sockets;
  int asked = 0;
  const auto pid_of = [&] { return ++asked % 2 == 1 ? a.pid() : b.pid(); };
  EXPECT_THROW(sockets.socket_in_container("c1", pid_of, AF_INET, SOCK_STREAM, 0),
               std::runtime_error);
}

}  // namespace
}  // namespace sandboxd::local_docker

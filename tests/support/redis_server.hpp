// A private redis-server child for tests that must stop and start their Redis: 127.0.0.1, a
// free port, no persistence. start() after stop() reuses the port, as a restarted server would.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "free_port.hpp"

extern char** environ;

namespace sandboxd::testing {

inline std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  std::array<char, 512> buffer{};
  while (std::fgets(buffer.data(), buffer.size(), pipe) != nullptr) out += buffer.data();
  ::pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// A private redis-server child on 127.0.0.1, no persistence; start() again after stop() reuses
// the port, as a restarted server would.
// Whether redis-server is on PATH (tests skip without it).
inline bool redis_server_installed() {
  return !run("command -v redis-server").empty();
}

class RedisServer {
 public:
  explicit RedisServer(std::string dir) : dir_(std::move(dir)), port_(free_port()) { start(); }
  ~RedisServer() { stop(); }

  void start() {
    std::vector<std::string> args = {
        "redis-server", "--bind", "127.0.0.1", "--port", std::to_string(port_), "--save", "",
        "--appendonly", "no",     "--dir",     dir_};
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
    ASSERT_EQ(::posix_spawnp(&pid_, "redis-server", &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    for (int i = 0; i < 200 && cli("PING") != "PONG"; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_EQ(cli("PING"), "PONG") << "redis-server did not start on port " << port_;
  }
  void stop() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
  int port() const { return port_; }
  std::string cli(const std::string& args) const {
    return run("redis-cli -h 127.0.0.1 -p " + std::to_string(port_) + " " + args + " 2>/dev/null");
  }

 private:
  std::string dir_;
  int port_;
  pid_t pid_ = -1;
};

}  // namespace sandboxd::testing

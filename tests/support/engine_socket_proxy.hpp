// A unix-socket proxy in front of the real test engine that can make the engine "vanish" at an
// exact point of a conversation: right after it has passed the engine's answer to a
// `POST …/containers/create` back to the client. From then on the socket file is gone and every
// open connection is closed, so the plugin's next call (its /start) meets an engine that is not
// there, while the engine itself, reached directly by the test, holds the container just made.
// restore() puts the socket back. Used by the engine-labelled fault tests (RELIABILITY.md B).
// It can also hold the engine's answer to the next `POST …/containers/…/start` back and run a
// function of the test's first (what a peer does to the engine between the start and the
// plugin's next step), then pass the answer on.
//
// Lock story: `mutex_` guards `listener_`, `connections_`, `vanish_after_create_`,
// `before_start_answer_` and `vanished_`; the pump threads read them under it and never hold it
// across I/O or while running the test's function.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <cstring>
#include <functional>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::testing {

class EngineSocketProxy {
 public:
  EngineSocketProxy(std::string listen_path, std::string engine_path)
      : listen_path_(std::move(listen_path)), engine_path_(std::move(engine_path)) {
    listen();
    acceptor_ = std::thread([this] { accept_loop(); });
  }
  EngineSocketProxy(const EngineSocketProxy&) = delete;
  EngineSocketProxy& operator=(const EngineSocketProxy&) = delete;

  ~EngineSocketProxy() {
    stopping_ = true;
    vanish();
    acceptor_.join();
    for (std::thread& pump : pumps_) pump.join();
  }

  const std::string& path() const { return listen_path_; }

  // The engine vanishes once the answer to the next container create has reached the client.
  void vanish_after_next_create() {
    std::lock_guard lock(mutex_);
    vanish_after_create_ = true;
  }

  // `hook` runs once the engine has answered the next container start, before the answer
  // reaches the client.
  void before_next_start_answer(std::function<void()> hook) {
    std::lock_guard lock(mutex_);
    before_start_answer_ = std::move(hook);
  }

  // How many start answers were held for a hook.
  int starts_held() const { return starts_held_; }

  // The socket file is back and new connections reach the engine again.
  void restore() {
    std::lock_guard lock(mutex_);
    if (!vanished_) return;
    vanished_ = false;
    listen_locked();
  }

  bool vanished() const {
    std::lock_guard lock(mutex_);
    return vanished_;
  }

  // How many create answers it passed before vanishing (0 or 1 per arming).
  int creates_seen() const { return creates_seen_; }

 private:
  void listen() {
    std::lock_guard lock(mutex_);
    listen_locked();
  }

  void listen_locked() {
    ::unlink(listen_path_.c_str());
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address = unix_address(listen_path_);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd, 64) != 0) {
      const std::string why = std::strerror(errno);
      if (fd >= 0) ::close(fd);
      throw std::runtime_error("proxy cannot listen on " + listen_path_ + ": " + why);
    }
    listener_ = fd;
  }

  // The socket file goes away, the listener closes and every open connection is cut.
  void vanish() {
    std::lock_guard lock(mutex_);
    vanish_locked();
  }
  void vanish_locked() {
    vanished_ = true;
    vanish_after_create_ = false;
    ::unlink(listen_path_.c_str());
    if (listener_ >= 0) {
      ::shutdown(listener_, SHUT_RDWR);
      ::close(listener_);
      listener_ = -1;
    }
    for (int fd : connections_) ::shutdown(fd, SHUT_RDWR);
  }

  static sockaddr_un unix_address(const std::string& path) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    return address;
  }

  void accept_loop() {
    while (!stopping_) {
      int listener;
      {
        std::lock_guard lock(mutex_);
        listener = listener_;
      }
      if (listener < 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      pollfd ready{listener, POLLIN, 0};
      if (::poll(&ready, 1, 20) <= 0 || !(ready.revents & POLLIN)) continue;
      std::lock_guard lock(mutex_);
      if (listener_ != listener) continue;  // vanished meanwhile
      const int client = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      const int engine = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un address = unix_address(engine_path_);
      if (engine < 0 ||
          ::connect(engine, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        if (engine >= 0) ::close(engine);
        ::close(client);
        continue;
      }
      connections_.insert(client);
      connections_.insert(engine);
      pumps_.emplace_back([this, client, engine] { pump(client, engine); });
    }
  }

  // Copies bytes both ways until either side closes. A create request arms the connection;
  // once the whole answer to it (headers and a Content-Length body) has been passed back, the
  // engine vanishes before anything more crosses.
  void pump(int client, int engine) {
    std::string request_window;  // the client's latest bytes, to spot a create request
    bool armed = false;
    std::string answer;                // the engine's answer to the armed create, as far as passed
    std::function<void()> start_hook;  // taken for a start request on this connection
    std::string held;                  // the engine's answer to that start, held back
    char buffer[65536];
    while (!stopping_) {
      pollfd fds[2] = {{client, POLLIN, 0}, {engine, POLLIN, 0}};
      if (::poll(fds, 2, 50) < 0) break;
      bool closed = false;
      for (int side = 0; side < 2 && !closed; ++side) {
        if (!(fds[side].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        const ssize_t n = ::read(fds[side].fd, buffer, sizeof buffer);
        if (n <= 0) {
          closed = true;
          break;
        }
        const std::string chunk(buffer, static_cast<size_t>(n));
        if (side == 0) {
          request_window = (request_window + chunk)
                               .substr(request_window.size() + chunk.size() > 4096
                                           ? request_window.size() + chunk.size() - 4096
                                           : 0);
          std::lock_guard lock(mutex_);
          // A request that reached us after the vanishing never reaches the engine: the
          // plugin's /start right after the create answer raced the shutdown (under load it
          // got through on another connection, and the engine started the container).
          if (vanished_) {
            closed = true;
            break;
          }
          if (vanish_after_create_ && request_window.find("POST ") != std::string::npos &&
              request_window.find("/containers/create") != std::string::npos) {
            armed = true;
          }
          if (before_start_answer_ && request_window.find("POST ") != std::string::npos &&
              request_window.find("/containers/") != std::string::npos &&
              request_window.find("/start") != std::string::npos) {
            start_hook = std::move(before_start_answer_);
            before_start_answer_ = nullptr;
            request_window.clear();
          }
        } else if (armed) {
          answer += chunk;
        }
        if (side == 1 && start_hook) {
          held += chunk;
          if (!complete_answer(held)) continue;
          start_hook();
          start_hook = nullptr;
          ++starts_held_;
          if (!write_all(client, held)) closed = true;
          held.clear();
          continue;
        }
        if (armed && side == 1 && complete_answer(answer)) {
          // The answer and the vanishing under one lock: no request the client sends after
          // reading it can be accepted or forwarded in between.
          std::lock_guard lock(mutex_);
          write_all(fds[1 - side].fd, chunk);
          ++creates_seen_;
          vanish_locked();
          closed = true;
        } else if (!write_all(fds[1 - side].fd, chunk)) {
          closed = true;
        }
      }
      if (closed) break;
    }
    {
      std::lock_guard lock(mutex_);
      connections_.erase(client);
      connections_.erase(engine);
    }
    ::close(client);
    ::close(engine);
  }

  static bool write_all(int fd, const std::string& data) {
    size_t done = 0;
    while (done < data.size()) {
      const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // An HTTP answer whose headers have ended and whose Content-Length body (or chunked body's
  // last chunk) has arrived.
  static bool complete_answer(const std::string& answer) {
    const size_t headers_end = answer.find("\r\n\r\n");
    if (headers_end == std::string::npos) return false;
    std::string headers = answer.substr(0, headers_end);
    for (char& c : headers) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const size_t length_at = headers.find("content-length:");
    if (length_at != std::string::npos) {
      const size_t length = std::stoul(headers.substr(length_at + 15));
      return answer.size() >= headers_end + 4 + length;
    }
    if (headers.find("transfer-encoding: chunked") != std::string::npos) {
      return answer.find("\r\n0\r\n\r\n", headers_end) != std::string::npos;
    }
    return true;  // no body announced
  }

  const std::string listen_path_;
  const std::string engine_path_;
  mutable std::mutex mutex_;
  int listener_ = -1;
  std::set<int> connections_;
  bool vanish_after_create_ = false;
  std::function<void()> before_start_answer_;
  bool vanished_ = false;
  std::atomic<bool> stopping_{false};
  std::atomic<int> creates_seen_{0};
  std::atomic<int> starts_held_{0};
  std::thread acceptor_;
  std::vector<std::thread> pumps_;  // only the acceptor adds; joined after it has stopped
};

}  // namespace sandboxd::testing

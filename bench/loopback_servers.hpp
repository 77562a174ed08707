// What the relay and egress benchmarks share: a minimal HTTP/1.1 client over plain sockets (the
// same for every path measured, so the difference is what sits between), an HTTP server on
// 127.0.0.1 (cpp-httplib) answering /small and /big?mib=M with a Content-Length, and a server
// that answers 101 (or nothing) and echoes every byte.
#pragma once

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace sandboxd::bench {

using Clock = std::chrono::steady_clock;

inline double micros_since(Clock::time_point start) {
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count();
}

inline double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  const auto index = static_cast<std::size_t>(p * static_cast<double>(samples.size() - 1));
  return samples[index];
}

inline int connect_to(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<unsigned short>(port));
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    throw std::runtime_error("cannot connect to 127.0.0.1:" + std::to_string(port));
  }
  const int on = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  return fd;
}

inline void write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) throw std::runtime_error("write failed");
    done += static_cast<std::size_t>(n);
  }
}

// One request on `fd`; reads the answer whole (Content-Length bodies only, which is what the
// bench's sandbox sends). Returns the body's size.
inline std::size_t request_and_read_body(int fd, const std::string& request) {
  write_all(fd, request);
  std::string head;
  std::vector<char> buffer(1 << 16);
  std::size_t header_end = std::string::npos;
  while (header_end == std::string::npos) {
    const ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n <= 0) throw std::runtime_error("connection closed before the answer's head");
    head.append(buffer.data(), static_cast<std::size_t>(n));
    header_end = head.find("\r\n\r\n");
  }
  if (head.compare(0, 12, "HTTP/1.1 200") != 0) {
    throw std::runtime_error("answer: " + head.substr(0, head.find("\r\n")));
  }
  std::string lower = head.substr(0, header_end);
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  const auto length_at = lower.find("content-length:");
  if (length_at == std::string::npos) throw std::runtime_error("no content-length");
  const std::size_t length = std::stoull(lower.substr(length_at + 15));
  std::size_t have = head.size() - header_end - 4;
  while (have < length) {
    const ssize_t n = ::read(fd, buffer.data(), std::min(buffer.size(), length - have));
    if (n <= 0) throw std::runtime_error("connection closed mid-body");
    have += static_cast<std::size_t>(n);
  }
  return length;
}

// The sandbox: GET /small (64 bytes) and GET /big?mib=M with a Content-Length.
class BenchSandbox {
 public:
  BenchSandbox() {
    server_.Get("/small", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(std::string(64, 's'), "text/plain");
    });
    server_.Get("/big", [](const httplib::Request& req, httplib::Response& res) {
      const std::size_t total = std::stoul(req.get_param_value("mib")) << 20;
      res.set_content_provider(total, "application/octet-stream",
                               [](size_t offset, size_t length, httplib::DataSink& sink) {
                                 static const std::string block(256 * 1024, 'z');
                                 (void)offset;
                                 return sink.write(block.data(), std::min(length, block.size()));
                               });
    });
    server_.set_keep_alive_max_count(1000000);
    server_.set_tcp_nodelay(true);
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~BenchSandbox() {
    server_.stop();
    thread_.join();
  }
  int port() const { return port_; }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// Answers one request 101 and echoes every byte after it, per connection.
class EchoSandbox {
 public:
  // `upgrade_first`: read a request head and answer 101 before echoing (a WebSocket-style
  // upgrade); else echo from the first byte (a TLS server's stand-in behind a tunnel).
  explicit EchoSandbox(bool upgrade_first = true) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(fd_, 16) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      throw std::runtime_error("echo sandbox cannot listen");
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this, upgrade_first] {
      while (true) {
        const int client = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (client < 0) return;
        const int on = 1;
        ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
        if (upgrade_first) {
          std::string head;
          char byte;
          while (head.find("\r\n\r\n") == std::string::npos && ::read(client, &byte, 1) == 1) {
            head += byte;
          }
          const std::string answer =
              "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: "
              "Upgrade\r\n\r\n";
          (void)!::write(client, answer.data(), answer.size());
        }
        char buffer[4096];
        ssize_t got;
        while ((got = ::read(client, buffer, sizeof buffer)) > 0) {
          (void)!::write(client, buffer, static_cast<std::size_t>(got));
        }
        ::close(client);
      }
    });
  }
  ~EchoSandbox() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace sandboxd::bench

// libFuzzer target: what a sandbox answers through the relay (relay.hpp) is hostile input: any
// code in a sandbox can replace its server. One relay runs for the whole run; for each input a
// client sends two requests pipelined on one connection, the first to a sandbox that answers
// with the input's bytes (then hangs up), the second to another that answers with a marker the
// fuzzer cannot know. The client reads answers in order: whatever the first sandbox sent, the
// first final answer the client gets never carries the second sandbox's marker (an answer is
// never matched to another request), and the relay answers every input without crashing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "sandboxd/core/relay.hpp"

namespace {

namespace http = boost::beast::http;
using sandboxd::core::Relay;
using sandboxd::core::RelayOptions;
using sandboxd::core::RelayTokens;
using sandboxd::core::SandboxEndpoint;

const std::string kMarker = "marker-of-the-other-sandbox-7f3a9c";

// A listener on 127.0.0.1 that answers each connection's head with what `answer()` gives, then
// hangs up.
class Sandbox {
 public:
  explicit Sandbox(bool fuzzed) : fuzzed_(fuzzed) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address);
    ::listen(fd_, 64);
    socklen_t length = sizeof address;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length);
    port_ = ntohs(address.sin_port);
    std::thread([this] { serve(); }).detach();
  }
  int port() const { return port_; }
  void set_answer(std::string answer) {
    std::lock_guard lock(mutex_);
    answer_ = std::move(answer);
  }

 private:
  void serve() {
    while (true) {
      const int client = ::accept(fd_, nullptr, nullptr);
      if (client < 0) continue;
      timeval limit{2, 0};
      ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
      std::string head;
      char byte;
      while (head.find("\r\n\r\n") == std::string::npos && head.size() < 65536 &&
             ::read(client, &byte, 1) == 1) {
        head += byte;
      }
      std::string answer;
      if (fuzzed_) {
        std::lock_guard lock(mutex_);
        answer = answer_;
      } else {
        answer = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kMarker.size()) +
                 "\r\n\r\n" + kMarker;
      }
      (void)!::send(client, answer.data(), answer.size(), MSG_NOSIGNAL);
      ::shutdown(client, SHUT_WR);
      ::close(client);
    }
  }

  const bool fuzzed_;
  int fd_ = -1;
  int port_ = 0;
  std::mutex mutex_;
  std::string answer_;
};

struct World {
  World() : fuzzed(true), other(false), tokens(std::string(32, 'f')) {
    RelayOptions options;
    options.head_timeout = std::chrono::milliseconds(2000);
    options.idle_timeout = std::chrono::milliseconds(2000);
    options.progress_timeout = std::chrono::milliseconds(2000);
    options.answer_timeout = std::chrono::milliseconds(2000);
    options.tunnel_idle_timeout = std::chrono::milliseconds(2000);
    const int fuzzed_port = fuzzed.port();
    const int other_port = other.port();
    relay = std::make_unique<Relay>(
        [fuzzed_port, other_port](const std::string& id) -> std::optional<SandboxEndpoint> {
          SandboxEndpoint endpoint;
          endpoint.host = "127.0.0.1";
          endpoint.port = id == "fuzzed" ? fuzzed_port : other_port;
          return endpoint;
        },
        tokens, options, nullptr);
    relay->start();
  }
  std::string request(const std::string& id, const char* connection) const {
    return "GET /s/" + id + "/x HTTP/1.1\r\nHost: relay\r\nConnection: " + connection + "\r\n" +
           sandboxd::core::kRelayTokenHeader + ": " + tokens.token_for(id, "") + "\r\n\r\n";
  }
  Sandbox fuzzed, other;
  RelayTokens tokens;
  std::unique_ptr<Relay> relay;
};

World& world() {
  static World* instance = new World();  // lives for the process: the relay's threads use it
  return *instance;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  World& w = world();
  w.fuzzed.set_answer(std::string(reinterpret_cast<const char*>(data), size));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<std::uint16_t>(w.relay->port()));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) std::abort();
  timeval limit{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  const std::string pipelined = w.request("fuzzed", "keep-alive") + w.request("other", "close");
  (void)!::send(fd, pipelined.data(), pipelined.size(), MSG_NOSIGNAL);
  std::string received;
  char buffer[65536];
  ssize_t got;
  while ((got = ::recv(fd, buffer, sizeof buffer, 0)) > 0) {
    received.append(buffer, static_cast<std::size_t>(got));
    if (received.size() > (16u << 20)) break;
  }
  ::close(fd);
  // The first final answer the client reads (interim ones skipped) is never the other
  // sandbox's.
  if (received.empty()) return 0;  // closed without an answer: nothing matched to anything
  boost::beast::flat_buffer in;
  auto bytes = in.prepare(received.size());
  std::memcpy(bytes.data(), received.data(), received.size());
  in.commit(received.size());
  for (int answers = 0; answers < 64; ++answers) {
    http::response_parser<http::string_body> parser;
    parser.eager(true);
    parser.body_limit(16u << 20);
    boost::system::error_code ec;
    while (!parser.is_done()) {
      const std::size_t used = parser.put(in.data(), ec);
      in.consume(used);
      if (ec || used == 0) break;
    }
    if (!parser.is_done()) return 0;  // cut off: the relay closed on a broken answer
    const auto& answer = parser.get();
    if (answer.result_int() / 100 == 1 && answer.result_int() != 101) continue;
    if (answer.body().find(kMarker) != std::string::npos) __builtin_trap();
    return 0;
  }
  return 0;
}

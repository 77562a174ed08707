// sandboxd_relay_bench: what the relay adds to a request, against the same sandbox
// reached directly (BENCHMARKS.md, "The relay"). The sandbox is a real HTTP server on 127.0.0.1
// (cpp-httplib) and, for the WebSocket figure, a raw server that answers 101 and echoes; the
// client is a minimal HTTP/1.1 client over plain sockets, the same for both paths, so the
// difference is the relay. Figures: per-request latency p50/p99 with a kept-alive connection and
// with a new connection per request, a 64 MiB download's throughput, and an upgraded pipe's
// echo round trip. Not a test: speed goals never live in timed unit tests.
//
//   sandboxd_relay_bench [--requests N] [--mib M] [--echoes N] [--json]
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.hpp"
#include "loopback_servers.hpp"
#include "quiet_logger.hpp"
#include "sandboxd/core/relay.hpp"

namespace {

using namespace sandboxd::bench;
using sandboxd::core::Relay;
using sandboxd::core::RelayOptions;
using sandboxd::core::RelayTokens;
using sandboxd::core::SandboxEndpoint;

struct Path {
  int port;
  std::string prefix;  // "" direct; "/s/{id}" through the relay
  std::string token_header;
};

std::string request_for(const Path& path, const std::string& target, bool keep_alive) {
  return "GET " + path.prefix + target + " HTTP/1.1\r\nHost: 127.0.0.1\r\n" + path.token_header +
         (keep_alive ? "" : "Connection: close\r\n") + "\r\n";
}

std::vector<double> kept_alive(const Path& path, int requests) {
  const int fd = connect_to(path.port);
  const std::string request = request_for(path, "/small", true);
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(requests));
  for (int i = 0; i < requests; ++i) {
    const auto start = Clock::now();
    request_and_read_body(fd, request);
    samples.push_back(micros_since(start));
  }
  ::close(fd);
  return samples;
}

std::vector<double> new_connections(const Path& path, int requests) {
  const std::string request = request_for(path, "/small", false);
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(requests));
  for (int i = 0; i < requests; ++i) {
    const auto start = Clock::now();
    const int fd = connect_to(path.port);
    request_and_read_body(fd, request);
    samples.push_back(micros_since(start));
    ::close(fd);
  }
  return samples;
}

// MiB/s of the best of three downloads of `mib` MiB.
double download(const Path& path, int mib) {
  double best = 0;
  for (int run = 0; run < 3; ++run) {
    const int fd = connect_to(path.port);
    const auto start = Clock::now();
    const std::size_t got =
        request_and_read_body(fd, request_for(path, "/big?mib=" + std::to_string(mib), false));
    const double seconds = micros_since(start) / 1e6;
    ::close(fd);
    if (got != static_cast<std::size_t>(mib) << 20) throw std::runtime_error("short download");
    best = std::max(best, mib / seconds);
  }
  return best;
}

std::vector<double> echoes(const Path& path, int count) {
  const int fd = connect_to(path.port);
  write_all(fd, "GET " + path.prefix + "/ws HTTP/1.1\r\nHost: 127.0.0.1\r\n" + path.token_header +
                    "Connection: Upgrade\r\nUpgrade: websocket\r\n\r\n");
  std::string head;
  char byte;
  while (head.find("\r\n\r\n") == std::string::npos && ::read(fd, &byte, 1) == 1) head += byte;
  if (head.compare(0, 12, "HTTP/1.1 101") != 0) throw std::runtime_error("no upgrade: " + head);
  const std::string message(32, 'm');
  std::vector<double> samples;
  char buffer[64];
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    write_all(fd, message);
    std::size_t have = 0;
    while (have < message.size()) {
      const ssize_t n = ::read(fd, buffer, message.size() - have);
      if (n <= 0) throw std::runtime_error("echo pipe closed");
      have += static_cast<std::size_t>(n);
    }
    samples.push_back(micros_since(start));
  }
  ::close(fd);
  return samples;
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 2000, mib = 64, echo_count = 2000;
  bool json = false;
  if (!read_flags(argc, argv,
                  {{"--requests", &requests}, {"--mib", &mib}, {"--echoes", &echo_count}}, json,
                  "sandboxd_relay_bench [--requests N] [--mib M] [--echoes N] [--json]")) {
    return 2;
  }

  BenchSandbox sandbox;
  EchoSandbox echo;
  const RelayTokens tokens(std::string(32, 'k'));
  const std::map<std::string, int> ports = {{"bench", sandbox.port()}, {"echo", echo.port()}};
  Relay relay(
      [&](const std::string& id) -> std::optional<SandboxEndpoint> {
        const auto it = ports.find(id);
        if (it == ports.end()) return std::nullopt;
        SandboxEndpoint endpoint;
        endpoint.host = "127.0.0.1";
        endpoint.port = it->second;
        return endpoint;
      },
      tokens, RelayOptions{}, std::make_shared<sandboxd::bench::QuietLogger>());
  relay.start();

  const Path direct{sandbox.port(), "", ""};
  const Path relayed{
      relay.port(), "/s/bench",
      std::string(sandboxd::core::kRelayTokenHeader) + ": " + tokens.token_for("bench", "") + "\r\n"};
  const Path echo_direct{echo.port(), "", ""};
  const Path echo_relayed{
      relay.port(), "/s/echo",
      std::string(sandboxd::core::kRelayTokenHeader) + ": " + tokens.token_for("echo", "") + "\r\n"};

  kept_alive(direct, 200);  // warm both paths
  kept_alive(relayed, 200);
  const auto direct_kept = kept_alive(direct, requests);
  const auto relay_kept = kept_alive(relayed, requests);
  const auto direct_new = new_connections(direct, requests);
  const auto relay_new = new_connections(relayed, requests);
  const double direct_mibs = download(direct, mib);
  const double relay_mibs = download(relayed, mib);
  const auto direct_echo = echoes(echo_direct, echo_count);
  const auto relay_echo = echoes(echo_relayed, echo_count);

  struct Row {
    const char* name;
    const std::vector<double>& direct;
    const std::vector<double>& relay;
  };
  const Row rows[] = {{"kept_alive", direct_kept, relay_kept},
                      {"new_connection", direct_new, relay_new},
                      {"websocket_echo", direct_echo, relay_echo}};
  if (json) {
    std::printf("{\n");
    for (const Row& row : rows) {
      std::printf(
          "  \"%s\": {\"direct_p50_us\": %.1f, \"direct_p99_us\": %.1f, \"relay_p50_us\": %.1f, "
          "\"relay_p99_us\": %.1f, \"added_p50_us\": %.1f, \"added_p99_us\": %.1f},\n",
          row.name, percentile(row.direct, 0.5), percentile(row.direct, 0.99),
          percentile(row.relay, 0.5), percentile(row.relay, 0.99),
          percentile(row.relay, 0.5) - percentile(row.direct, 0.5),
          percentile(row.relay, 0.99) - percentile(row.direct, 0.99));
    }
    std::printf(
        "  \"download\": {\"mib\": %d, \"direct_mib_per_s\": %.0f, \"relay_mib_per_s\": %.0f, "
        "\"ratio\": %.2f},\n  \"requests\": %d, \"echoes\": %d\n}\n",
        mib, direct_mibs, relay_mibs, relay_mibs / direct_mibs, requests, echo_count);
  } else {
    std::printf("relay bench: %d requests per path, %d echoes, a %d MiB download\n", requests,
                echo_count, mib);
    std::printf("%-16s %12s %12s %12s %12s %12s %12s\n", "", "direct p50", "direct p99",
                "relay p50", "relay p99", "added p50", "added p99");
    for (const Row& row : rows) {
      std::printf("%-16s %10.1fus %10.1fus %10.1fus %10.1fus %10.1fus %10.1fus\n", row.name,
                  percentile(row.direct, 0.5), percentile(row.direct, 0.99),
                  percentile(row.relay, 0.5), percentile(row.relay, 0.99),
                  percentile(row.relay, 0.5) - percentile(row.direct, 0.5),
                  percentile(row.relay, 0.99) - percentile(row.direct, 0.99));
    }
    std::printf("download         direct %.0f MiB/s, relay %.0f MiB/s: ratio %.2f\n", direct_mibs,
                relay_mibs, relay_mibs / direct_mibs);
  }
  relay.stop();
  return 0;
}

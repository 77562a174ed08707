// sandboxd_egress_bench: what the egress proxy (network mode `allowlist`) costs, against
// the same upstream reached directly (BENCHMARKS.md, "Egress"). Everything is on 127.0.0.1: the
// proxy is the product's EgressProxy with the test-only upstream network (names resolve to
// loopback servers this bench starts), listening on a loopback socket instead of one inside a
// sandbox's namespace (the namespace changes where the socket was made, not what the proxy does
// per byte). The client is a minimal HTTP/1.1 client over plain sockets, the same on both paths.
// Figures:
//   - a plain request (absolute-form through the proxy, one per connection as the proxy allows;
//     a new connection per request directly): p50/p99;
//   - a tunnel's time to first byte: CONNECT, the 200, a real ClientHello (OpenSSL's) checked
//     for its SNI and echoed back by the upstream;
//   - a 64 MiB plain download's throughput, proxy beside direct (median of three each), and the
//     proxy's own CPU per GiB moved;
//   - refusals at 1,000 per second (distinct names under approval `prompt`, so the pending list
//     fills to its bound): the bench's resident memory after the first second and at the end;
//   - the memory and descriptors each open tunnel costs, over --tunnels held at once;
//   - an HTTPS request carrying an https secret (TLS interception, `inject_tls_ca`): CONNECT,
//     the client's TLS with the proxy, the proxy's own TLS to the upstream, the request with the
//     secret put in, the answer; beside the same request straight to the upstream over TLS (a
//     new connection, so a full handshake, each time on both paths): p50/p99.
// The upstreams run in a child process, so their threads and memory are not counted.
// Not a test: speed goals never live in timed unit tests.
//
//   sandboxd_egress_bench [--requests N] [--mib M] [--refusals N] [--tunnels N] [--json]
#include <httplib.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_flags.hpp"
#include "client_hellos.hpp"
#include "loopback_listener.hpp"
#include "loopback_servers.hpp"
#include "quiet_logger.hpp"
#include "sandboxd/clock.hpp"
#include "sandboxd/core/egress_proxy.hpp"
#include "sandboxd/core/egress_tls.hpp"

namespace {

using namespace sandboxd::bench;
using sandboxd::core::EgressOptions;
using sandboxd::core::EgressPolicy;
using sandboxd::core::EgressProxy;

long resident_kib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return 0;
}

std::size_t open_fds() {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    ++count;
  }
  return count;
}

// The upstreams, in a child process forked before this one starts any thread (so their threads
// and copies are not counted as the proxy's): an HTTP server (BenchSandbox), an HTTPS server
// with the certificate in `tls_files` ("{prefix}.pem", "{prefix}.key") and an echo server with
// a thread per client. Returns the child's pid; the ports are where they listen.
pid_t fork_upstreams(int& http_port, int& echo_port, int& tls_port, const std::string& tls_files) {
  const int echo_fd = sandboxd::testing::listen_on_loopback(&echo_port, 1024);
  int ports[2];
  if (::pipe(ports) != 0) throw std::runtime_error("pipe failed");
  const pid_t child = ::fork();
  if (child < 0) throw std::runtime_error("fork failed");
  if (child > 0) {
    ::close(echo_fd);
    ::close(ports[1]);
    if (::read(ports[0], &http_port, sizeof http_port) != sizeof http_port ||
        ::read(ports[0], &tls_port, sizeof tls_port) != sizeof tls_port) {
      throw std::runtime_error("the upstreams did not start");
    }
    ::close(ports[0]);
    return child;
  }
  BenchSandbox upstream;
  const int port = upstream.port();
  httplib::SSLServer tls((tls_files + ".pem").c_str(), (tls_files + ".key").c_str());
  tls.Get("/small", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("small", "text/plain");
  });
  const int tls_bound = tls.bind_to_any_port("127.0.0.1");
  std::thread([&tls] { tls.listen_after_bind(); }).detach();
  (void)!::write(ports[1], &port, sizeof port);
  (void)!::write(ports[1], &tls_bound, sizeof tls_bound);
  while (true) {
    const int client = ::accept4(echo_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    std::thread([client] {
      char buffer[16384];
      ssize_t got;
      while ((got = ::read(client, buffer, sizeof buffer)) > 0) {
        if (::write(client, buffer, static_cast<std::size_t>(got)) != got) break;
      }
      ::close(client);
    }).detach();
  }
}

std::string read_head(int fd) {
  std::string head;
  char byte;
  while (head.find("\r\n\r\n") == std::string::npos && ::read(fd, &byte, 1) == 1) head += byte;
  return head;
}

void read_exactly(int fd, std::size_t size) {
  std::vector<char> buffer(size);
  std::size_t have = 0;
  while (have < size) {
    const ssize_t n = ::read(fd, buffer.data() + have, size - have);
    if (n <= 0) throw std::runtime_error("closed before " + std::to_string(size) + " bytes");
    have += static_cast<std::size_t>(n);
  }
}

// CONNECT through the proxy, then a ClientHello for `name`, echoed back: the open tunnel.
int open_tunnel(int proxy_port, const std::string& name, const std::string& hello) {
  const int fd = connect_to(proxy_port);
  write_all(fd, "CONNECT " + name + ":443 HTTP/1.1\r\nHost: " + name + ":443\r\n\r\n");
  const std::string head = read_head(fd);
  if (head.compare(0, 12, "HTTP/1.1 200") != 0) {
    throw std::runtime_error("CONNECT answered: " + head.substr(0, head.find("\r\n")));
  }
  write_all(fd, hello);
  read_exactly(fd, hello.size());
  return fd;
}

std::vector<double> plain_requests(int port, const std::string& request, int count) {
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    const int fd = connect_to(port);
    request_and_read_body(fd, request);
    ::close(fd);
    samples.push_back(micros_since(start));
  }
  return samples;
}

// `count` HTTPS GETs, each on a new connection: through the proxy (CONNECT secure.test:443,
// the interception CA trusted) when `proxy_port` > 0, else straight to the upstream.
std::vector<double> https_requests(int proxy_port, int tls_port, const std::string& ca_file,
                                   const std::string& placeholder, int count) {
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(count));
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    // Straight: the upstream's certificate names secure.test, not 127.0.0.1, so this side
    // skips the check (a few microseconds of a handshake's hundreds).
    httplib::SSLClient client(proxy_port > 0 ? "secure.test" : "127.0.0.1",
                              proxy_port > 0 ? 443 : tls_port);
    if (proxy_port > 0) {
      client.set_proxy("127.0.0.1", proxy_port);
      client.set_ca_cert_path(ca_file.c_str());
      client.enable_server_certificate_verification(true);
    } else {
      client.enable_server_certificate_verification(false);
    }
    const auto answer = client.Get("/small", {{"Authorization", "Bearer " + placeholder}});
    if (!answer || answer->status != 200) throw std::runtime_error("an https request failed");
    samples.push_back(micros_since(start));
  }
  return samples;
}

double cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

struct Download {
  double mib_per_second = 0;
  double cpu_seconds = 0;  // this process's: the client's, and the proxy's when it is in the path
};

Download download(int port, const std::string& request) {
  const double cpu_before = cpu_seconds();
  const auto start = Clock::now();
  const int fd = connect_to(port);
  const std::size_t size = request_and_read_body(fd, request);
  ::close(fd);
  return {static_cast<double>(size) / (1 << 20) / (micros_since(start) / 1e6),
          cpu_seconds() - cpu_before};
}

std::vector<double> tunnel_first_bytes(int port, const std::string& name, const std::string& hello,
                                       int count, bool through_proxy) {
  std::vector<double> samples;
  for (int i = 0; i < count; ++i) {
    const auto start = Clock::now();
    int fd;
    if (through_proxy) {
      fd = open_tunnel(port, name, hello);
    } else {
      fd = connect_to(port);
      write_all(fd, hello);
      read_exactly(fd, hello.size());
    }
    samples.push_back(micros_since(start));
    ::close(fd);
  }
  return samples;
}

struct RefusalFigures {
  double per_second = 0;
  long rss_after_first_second_kib = 0;
  long rss_at_end_kib = 0;
  std::size_t pending = 0;
};

// `count` refused requests at up to 1,000 per second, each for a new name.
RefusalFigures refusals(EgressProxy& proxy, int port, int count) {
  RefusalFigures figures;
  const auto start = Clock::now();
  for (int i = 0; i < count; ++i) {
    const auto due = start + std::chrono::microseconds(1000LL * i);
    std::this_thread::sleep_until(due);
    const std::string name = "denied-" + std::to_string(i) + ".test";
    const int fd = connect_to(port);
    write_all(fd, "GET http://" + name + "/ HTTP/1.1\r\nHost: " + name + "\r\n\r\n");
    const std::string head = read_head(fd);
    ::close(fd);
    if (head.compare(0, 12, "HTTP/1.1 403") != 0) {
      throw std::runtime_error("a refusal answered: " + head.substr(0, head.find("\r\n")));
    }
    if (i == 1000) figures.rss_after_first_second_kib = resident_kib();
  }
  figures.per_second = count / (micros_since(start) / 1e6);
  figures.rss_at_end_kib = resident_kib();
  figures.pending = proxy.pending("bench").size();
  return figures;
}

}  // namespace

int main(int argc, char** argv) {
  int requests = 2000, mib = 64, refusal_count = 5000, tunnels = 500;
  bool json = false;
  if (!read_flags(argc, argv,
                  {{"--requests", &requests},
                   {"--mib", &mib},
                   {"--refusals", &refusal_count},
                   {"--tunnels", &tunnels}},
                  json,
                  "sandboxd_egress_bench [--requests N] [--mib M] [--refusals N (>1000)] "
                  "[--tunnels N] [--json]")) {
    return 2;
  }
  refusal_count = std::max(1001, refusal_count);  // the first second's reading needs 1,000

  // TLS interception's certificates: the operator's CA, and the upstream's own.
  const std::filesystem::path tls_dir = std::filesystem::temp_directory_path() /
                                        ("sandboxd-egress-bench-" + std::to_string(::getpid()));
  std::filesystem::create_directories(tls_dir);
  const sandboxd::core::TlsKeyPair interception_ca =
      sandboxd::core::make_certificate_authority("bench interception CA", 1);
  const sandboxd::core::TlsKeyPair upstream_ca =
      sandboxd::core::make_certificate_authority("bench upstream CA", 1);
  const sandboxd::core::TlsKeyPair upstream_certificate =
      sandboxd::core::issue_server_certificate(upstream_ca, "secure.test", 1);
  std::ofstream(tls_dir / "upstream.pem") << upstream_certificate.certificate_pem;
  std::ofstream(tls_dir / "upstream.key") << upstream_certificate.key_pem;
  std::ofstream(tls_dir / "interception-ca.pem") << interception_ca.certificate_pem;
  struct DirRemover {
    std::filesystem::path path;
    ~DirRemover() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } remover{tls_dir};

  int http_port = 0, echo_port = 0, tls_port = 0;
  const pid_t upstreams =
      fork_upstreams(http_port, echo_port, tls_port, (tls_dir / "upstream").string());
  struct ChildReaper {
    pid_t pid;
    ~ChildReaper() {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  } reaper{upstreams};

  const auto loopback = [](int port) {
    return boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"),
                                          static_cast<unsigned short>(port));
  };
  EgressPolicy policy;
  policy.allow =
      sandboxd::core::egress::DomainAllowlist({"plain.test", "tunnel.test", "secure.test"});
  policy.prompt = true;
  const std::string placeholder = "sandboxd-placeholder-0123456789abcdef0123456789abcdef";
  sandboxd::core::EgressSecret secret;
  secret.name = "TOKEN";
  secret.domain = "secure.test";
  secret.header = "Authorization";
  secret.placeholder = placeholder;
  secret.value = "bench-secret";
  secret.https = true;
  policy.secrets = {secret};
  policy.interception_authority = interception_ca;
  policy.upstream_roots_pem = upstream_ca.certificate_pem;
  EgressOptions options;
  options.max_connections_per_sandbox = static_cast<std::size_t>(tunnels) + 16;
  options.max_connections = options.max_connections_per_sandbox + 16;
  EgressProxy proxy(policy,
                    sandboxd::core::test_upstream_network({{"plain.test", loopback(http_port)},
                                                           {"tunnel.test", loopback(echo_port)},
                                                           {"secure.test", loopback(tls_port)}}),
                    options, std::make_shared<QuietLogger>(),
                    std::make_shared<sandboxd::SystemClock>());
  proxy.start();
  int proxy_port = 0;
  proxy.attach("bench", sandboxd::testing::listen_on_loopback(&proxy_port, 1024));

  const std::string hello = sandboxd::testing::openssl_client_hello("tunnel.test");
  const std::string direct_small = "GET /small HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  const std::string proxied_small =
      "GET http://plain.test/small HTTP/1.1\r\nHost: plain.test\r\n\r\n";
  const std::string big = "/big?mib=" + std::to_string(mib);
  const std::string direct_big = "GET " + big + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  const std::string proxied_big =
      "GET http://plain.test" + big + " HTTP/1.1\r\nHost: plain.test\r\n\r\n";

  plain_requests(http_port, direct_small, 100);  // warm both paths
  plain_requests(proxy_port, proxied_small, 100);
  const auto direct_plain = plain_requests(http_port, direct_small, requests);
  const auto proxy_plain = plain_requests(proxy_port, proxied_small, requests);
  const auto direct_tunnel = tunnel_first_bytes(echo_port, "tunnel.test", hello, requests, false);
  const auto proxy_tunnel = tunnel_first_bytes(proxy_port, "tunnel.test", hello, requests, true);
  const std::string ca_file = (tls_dir / "interception-ca.pem").string();
  const int https_count = std::max(10, requests / 4);
  https_requests(0, tls_port, ca_file, placeholder, 20);  // warm both paths
  https_requests(proxy_port, tls_port, ca_file, placeholder, 20);
  const auto direct_https = https_requests(0, tls_port, ca_file, placeholder, https_count);
  const auto proxy_https = https_requests(proxy_port, tls_port, ca_file, placeholder, https_count);
  // Three of each, alternating; the median by throughput.
  std::vector<Download> directs, proxied;
  for (int round = 0; round < 3; ++round) {
    directs.push_back(download(http_port, direct_big));
    proxied.push_back(download(proxy_port, proxied_big));
  }
  const auto median = [](std::vector<Download> runs) {
    std::sort(runs.begin(), runs.end(), [](const Download& a, const Download& b) {
      return a.mib_per_second < b.mib_per_second;
    });
    return runs[runs.size() / 2];
  };
  const Download direct_download = median(directs);
  const Download proxy_download = median(proxied);
  const double direct_mibs = direct_download.mib_per_second;
  const double proxy_mibs = proxy_download.mib_per_second;
  // The proxy's own CPU: this process's during the proxied download less the client's alone.
  const double proxy_cpu_ms_per_gib =
      std::max(0.0, proxy_download.cpu_seconds - direct_download.cpu_seconds) * 1000 * 1024 / mib;
  const RefusalFigures refused = refusals(proxy, proxy_port, refusal_count);

  const long rss_before = resident_kib();
  const std::size_t fds_before = open_fds();
  std::vector<int> held;
  for (int i = 0; i < tunnels; ++i) held.push_back(open_tunnel(proxy_port, "tunnel.test", hello));
  const long rss_holding = resident_kib();
  const std::size_t fds_holding = open_fds();
  for (const int fd : held) ::close(fd);
  // Each held tunnel is one client socket here and two in the proxy (client, upstream).
  const double bytes_per_tunnel =
      tunnels > 0 ? static_cast<double>(rss_holding - rss_before) * 1024 / tunnels : 0;
  const double proxy_fds_per_tunnel =
      tunnels > 0 ? static_cast<double>(fds_holding - fds_before) / tunnels - 1 : 0;
  const auto stats = proxy.stats();
  proxy.stop();

  struct Row {
    const char* name;
    const std::vector<double>& direct;
    const std::vector<double>& proxied;
  };
  const Row rows[] = {{"plain_request", direct_plain, proxy_plain},
                      {"tunnel_first_byte", direct_tunnel, proxy_tunnel},
                      {"https_secret_request", direct_https, proxy_https}};
  if (json) {
    std::printf("{\n");
    for (const Row& row : rows) {
      std::printf(
          "  \"%s\": {\"direct_p50_us\": %.1f, \"direct_p99_us\": %.1f, \"proxy_p50_us\": %.1f, "
          "\"proxy_p99_us\": %.1f},\n",
          row.name, percentile(row.direct, 0.5), percentile(row.direct, 0.99),
          percentile(row.proxied, 0.5), percentile(row.proxied, 0.99));
    }
    std::printf(
        "  \"download\": {\"mib\": %d, \"direct_mib_per_s\": %.0f, \"proxy_mib_per_s\": %.0f, "
        "\"ratio\": %.2f, \"proxy_cpu_ms_per_gib\": %.0f},\n",
        mib, direct_mibs, proxy_mibs, proxy_mibs / direct_mibs, proxy_cpu_ms_per_gib);
    std::printf(
        "  \"refusals\": {\"count\": %d, \"per_second\": %.0f, \"rss_after_1s_kib\": %ld, "
        "\"rss_at_end_kib\": %ld, \"pending_kept\": %zu},\n",
        refusal_count, refused.per_second, refused.rss_after_first_second_kib,
        refused.rss_at_end_kib, refused.pending);
    std::printf(
        "  \"tunnels\": {\"held\": %d, \"bytes_each\": %.0f, \"proxy_fds_each\": %.2f, "
        "\"opened_in_all\": %llu}\n}\n",
        tunnels, bytes_per_tunnel, proxy_fds_per_tunnel,
        static_cast<unsigned long long>(stats.tunnels));
  } else {
    std::printf("egress bench: %d requests per path, a %d MiB download, %d refusals, %d tunnels\n",
                requests, mib, refusal_count, tunnels);
    std::printf("%-18s %12s %12s %12s %12s\n", "", "direct p50", "direct p99", "proxy p50",
                "proxy p99");
    for (const Row& row : rows) {
      std::printf("%-18s %10.1fus %10.1fus %10.1fus %10.1fus\n", row.name,
                  percentile(row.direct, 0.5), percentile(row.direct, 0.99),
                  percentile(row.proxied, 0.5), percentile(row.proxied, 0.99));
    }
    std::printf(
        "download           direct %.0f MiB/s, proxy %.0f MiB/s: ratio %.2f; the proxy's CPU %.0f "
        "ms per GiB\n",
        direct_mibs, proxy_mibs, proxy_mibs / direct_mibs, proxy_cpu_ms_per_gib);
    std::printf(
        "refusals           %.0f/s, each a new name: RSS %.1f MiB after 1 s, %.1f MiB at the end; "
        "%zu pending kept (the bound)\n",
        refused.per_second, refused.rss_after_first_second_kib / 1024.0,
        refused.rss_at_end_kib / 1024.0, refused.pending);
    std::printf("tunnels            %d held: %.0f bytes and %.2f proxy fds each\n", tunnels,
                bytes_per_tunnel, proxy_fds_per_tunnel);
  }
  return 0;
}

// Unit tests of the local_docker plugin's pure helpers (no engine needed).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <sandboxd/readiness.hpp>
#include <stdexcept>

#include "docker_support.hpp"
#include "engine_client.hpp"

namespace sandboxd::local_docker {
namespace {

TEST(LocalDockerSupport, ParsesEngineEndpoints) {
  EngineEndpoint unix = EngineEndpoint::parse("unix:///run/podman/podman.sock");
  EXPECT_EQ(unix.unix_socket, "/run/podman/podman.sock");
  EXPECT_EQ(unix.display, "unix:///run/podman/podman.sock");
  EXPECT_EQ(EngineEndpoint::parse("/var/run/docker.sock").unix_socket, "/var/run/docker.sock");

  EngineEndpoint tcp = EngineEndpoint::parse("tcp://127.0.0.1:2375");
  EXPECT_TRUE(tcp.unix_socket.empty());
  EXPECT_EQ(tcp.base_url, "http://127.0.0.1:2375");

  EXPECT_THROW(EngineEndpoint::parse("ssh://host"), std::invalid_argument);
  EXPECT_THROW(EngineEndpoint::parse("unix://relative.sock"), std::invalid_argument);
  EXPECT_THROW(EngineEndpoint::parse("tcp://127.0.0.1"), std::invalid_argument);
  EXPECT_THROW(EngineEndpoint::parse(""), std::invalid_argument);
}

TEST(LocalDockerSupport, ParsesMemorySizes) {
  EXPECT_EQ(parse_memory_bytes("2g"), 2LL * 1024 * 1024 * 1024);
  EXPECT_EQ(parse_memory_bytes("512M"), 512LL * 1024 * 1024);
  EXPECT_EQ(parse_memory_bytes("1024kb"), 1024LL * 1024);
  EXPECT_EQ(parse_memory_bytes("1000"), 1000);
  EXPECT_EQ(parse_memory_bytes("1.5g"), 3LL * 512 * 1024 * 1024);
  EXPECT_THROW(parse_memory_bytes("lots"), std::invalid_argument);
  EXPECT_THROW(parse_memory_bytes("2x"), std::invalid_argument);
}

TEST(LocalDockerSupport, ParsesDockerTimestamps) {
  // design §9.9 example: nanoseconds are truncated to microseconds.
  EXPECT_NEAR(parse_docker_timestamp("2026-04-08T01:22:50.123456789Z"), 1775611370.123456, 1e-6);
  EXPECT_DOUBLE_EQ(parse_docker_timestamp("2026-04-08T03:22:50+02:00"), 1775611370.0);
  EXPECT_DOUBLE_EQ(parse_docker_timestamp(""), 0.0);
  EXPECT_DOUBLE_EQ(parse_docker_timestamp("yesterday"), 0.0);
  EXPECT_DOUBLE_EQ(parse_docker_timestamp("0001-01-01T00:00:00Z"), 0.0);
}

TEST(LocalDockerSupport, ResolvesBindHostPerSpec) {
  std::string reason;
  EXPECT_EQ(resolve_bind_host(std::string(" 10.0.0.5 "), "localhost", &reason), "10.0.0.5");
  EXPECT_EQ(reason, "Docker sandbox bind: 10.0.0.5 (explicit bind host override)");
  EXPECT_EQ(resolve_bind_host(std::nullopt, "localhost", &reason), "127.0.0.1");
  EXPECT_EQ(reason, "Docker sandbox bind: 127.0.0.1 (loopback default)");
  EXPECT_EQ(resolve_bind_host(std::string("  "), "", &reason), "127.0.0.1");
  EXPECT_EQ(resolve_bind_host(std::nullopt, "::1", &reason), "[::1]");
  EXPECT_EQ(resolve_bind_host(std::nullopt, "host.docker.internal", &reason), "0.0.0.0");
}

TEST(LocalDockerSupport, TrustEnvFollowsTheProxyRule) {
  EXPECT_FALSE(sandboxd::trust_env("http://localhost:8080"));
  EXPECT_FALSE(sandboxd::trust_env("http://sandbox.localhost:8080"));
  EXPECT_FALSE(sandboxd::trust_env("http://host.docker.internal:8080"));
  EXPECT_FALSE(sandboxd::trust_env("http://127.0.0.1:8080"));
  EXPECT_FALSE(sandboxd::trust_env("http://10.1.2.3:8080"));
  EXPECT_FALSE(sandboxd::trust_env("http://192.168.1.1"));
  EXPECT_FALSE(sandboxd::trust_env("http://[::1]:8080"));
  EXPECT_FALSE(sandboxd::trust_env("http://k3s:8080"));
  EXPECT_TRUE(sandboxd::trust_env("http://8.8.8.8"));
  EXPECT_TRUE(sandboxd::trust_env("https://sandbox.example.com"));
  EXPECT_TRUE(sandboxd::trust_env(""));
}

TEST(LocalDockerSupport, ClassifiesEngineAnswers) {
  EXPECT_TRUE(is_port_conflict_message(
      "driver failed programming external connectivity: Bind for 0.0.0.0:8080 failed: port is "
      "already allocated"));
  EXPECT_TRUE(is_port_conflict_message(
      "cannot listen on the TCP port: listen tcp4 127.0.0.1:18555: bind: address already in use"));
  EXPECT_FALSE(is_port_conflict_message("no such image"));

  EXPECT_TRUE(is_name_conflict(409, "anything"));
  // podman 4.3 answers a name conflict with HTTP 500.
  EXPECT_TRUE(is_name_conflict(
      500,
      "container create: creating container storage: the container name \"x\" is already in use "
      "by abc. You have to remove that container to be able to reuse that name: that name is "
      "already in use"));
  EXPECT_FALSE(is_name_conflict(500, "address already in use"));

  EXPECT_TRUE(is_missing_image(404, "No such image: busybox:latest"));
  EXPECT_TRUE(is_missing_image(404, "no such image: x: image not known"));
  EXPECT_FALSE(is_missing_image(500, "no such image"));
}

TEST(LocalDockerSupport, NegotiatesTheNewestVersionBothSidesSpeak) {
  const ApiRange ours{{1, 30}, {1, 47}};
  // podman 4.3 and Docker 20.10: /_ping says 1.41, the minimum is not needed.
  EXPECT_EQ(negotiate_api_version({std::nullopt, ApiVersion{1, 41}}, ours), ApiVersion(1, 41));
  // Docker 29: 1.44 to 1.52.
  EXPECT_EQ(negotiate_api_version({ApiVersion{1, 44}, ApiVersion{1, 52}}, ours), ApiVersion(1, 47));
  // An engine newer than every version we know, and one older than we need.
  EXPECT_FALSE(negotiate_api_version({ApiVersion{1, 48}, ApiVersion{1, 53}}, ours));
  EXPECT_FALSE(negotiate_api_version({std::nullopt, ApiVersion{1, 25}}, ours));
  EXPECT_FALSE(negotiate_api_version({std::nullopt, std::nullopt}, ours));
  EXPECT_EQ(describe_api_mismatch({ApiVersion{1, 48}, ApiVersion{1, 53}}, ours),
            "the engine speaks API 1.48 to 1.53, this plugin 1.30 to 1.47 (the engine no longer "
            "speaks the versions this plugin knows: upgrade sandboxd)");
  EXPECT_EQ(describe_api_mismatch({std::nullopt, ApiVersion{1, 25}}, ours),
            "the engine speaks API ? to 1.25, this plugin 1.30 to 1.47 (the engine is too old: "
            "upgrade it)");
}

// The answers podman 4.3 and Docker 20.10 give when their init binary is missing.
TEST(LocalDockerSupport, AMissingInitBinaryNamesTheBinaryThePackageAndTheWayOut) {
  const std::string podman =
      "container create: container-init binary not found on the host: stat "
      "/usr/libexec/podman/catatonit: no such file or directory";
  const std::string hint = engine_failure_hint(podman);
  EXPECT_NE(hint.find("/usr/libexec/podman/catatonit is missing"), std::string::npos) << hint;
  EXPECT_NE(hint.find("Debian package catatonit"), std::string::npos) << hint;
  EXPECT_NE(hint.find("sandbox.backend.init: false"), std::string::npos) << hint;

  const std::string docker =
      "OCI runtime create failed: exec: \"docker-init\": executable file not found in $PATH";
  EXPECT_NE(engine_failure_hint(docker).find("Debian package tini"), std::string::npos);
  EXPECT_NE(engine_failure_hint("invalid mount config for type \"bind\": bind source path does "
                                "not exist: /srv/x")
                .find("sandbox.backend.mounts"),
            std::string::npos);
  EXPECT_EQ(engine_failure_hint("port is already allocated"), "");
  EXPECT_EQ(engine_failure_hint("no such image"), "");
}

TEST(LocalDockerSupport, RedactsEnvironmentValues) {
  const std::string rendered = redacted_environment({{"API_KEY", "s3cret"}, {"MODE", "x"}});
  EXPECT_EQ(rendered, "API_KEY=<redacted> MODE=<redacted>");
  EXPECT_EQ(rendered.find("s3cret"), std::string::npos);
}

TEST(LocalDockerSupport, SplitsImageReferences) {
  EXPECT_EQ(split_image_reference("busybox"),
            std::make_pair(std::string("busybox"), std::string("latest")));
  EXPECT_EQ(split_image_reference("host:5000/a/b:1"),
            std::make_pair(std::string("host:5000/a/b"), std::string("1")));
  EXPECT_EQ(split_image_reference("host:5000/a/b"),
            std::make_pair(std::string("host:5000/a/b"), std::string("latest")));
  EXPECT_EQ(split_image_reference("a@sha256:abc"),
            std::make_pair(std::string("a"), std::string("sha256:abc")));
}

TEST(LocalDockerSupport, MiscHelpers) {
  EXPECT_TRUE(is_valid_container_name("deer-flow-sandbox-abc_1.2"));
  EXPECT_FALSE(is_valid_container_name("-x"));
  EXPECT_FALSE(is_valid_container_name("a/b"));
  EXPECT_EQ(sandbox_url("::1", 80), "http://[::1]:80");
  EXPECT_EQ(sandbox_url("127.0.0.1", 80), "http://127.0.0.1:80");
  EXPECT_EQ(url_encode("{\"a\":[\"b=c\"]}"), "%7B%22a%22%3A%5B%22b%3Dc%22%5D%7D");
  EXPECT_EQ(parse_api_version("1.41"), std::make_pair(1, 41));
  EXPECT_FALSE(parse_api_version("4.3.1").has_value());
}

// A TCP listener on 127.0.0.1 that never answers (the kernel completes connections).
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        ::listen(fd_, 8) == 0) {
      socklen_t len = sizeof addr;
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
      port_ = ntohs(addr.sin_port);
    }
  }
  ~SilentListener() { ::close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(LocalDockerEngineClient, ASilentEngineIsATimeoutNotAHang) {
  SilentListener listener;
  ASSERT_GT(listener.port(), 0);
  EngineClient client(EngineEndpoint::parse("tcp://127.0.0.1:" + std::to_string(listener.port())));
  const auto start = std::chrono::steady_clock::now();
  try {
    client.raw_call("POST", "/containers/x/stop?t=1", 0.3);
    FAIL() << "no timeout";
  } catch (const EngineTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("tcp://127.0.0.1:"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 3.0);
}

TEST(LocalDockerEngineClient, AClosedPortIsUnreachableAndNamed) {
  int port = 0;
  {
    SilentListener listener;  // find a free port, then close it
    port = listener.port();
  }
  EngineClient client(EngineEndpoint::parse("tcp://127.0.0.1:" + std::to_string(port)));
  try {
    client.api_version();
    FAIL() << "connected to a closed port";
  } catch (const EngineUnreachableError& e) {
    EXPECT_NE(std::string(e.what()).find("tcp://127.0.0.1:" + std::to_string(port)),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sandboxd::local_docker

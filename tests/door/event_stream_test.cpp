// Event streams on the doors' server (http_door.hpp EventStream) and the lifecycle log as one
// (lifecycle_stream.hpp): a real server on 127.0.0.1 and raw sockets as subscribers, including
// one that never reads, one too many, one that hangs up.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "http_door.hpp"
#include "lifecycle_stream.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "test_support.hpp"

namespace sandboxd::door {
namespace {

using namespace std::chrono_literals;

// Hands out what a test queues; counts what it handed out.
class ScriptedStream : public EventStream {
 public:
  explicit ScriptedStream(std::function<std::string()> produce) : produce_(std::move(produce)) {}
  std::string next() override {
    std::string chunk = produce_();
    produced_bytes += chunk.size();
    return chunk;
  }
  std::atomic<std::size_t> produced_bytes{0};

 private:
  std::function<std::string()> produce_;
};

// A server on 127.0.0.1 whose every request is answered with `make_stream()`'s stream.
class StreamServer {
 public:
  StreamServer(Limits limits, std::function<std::shared_ptr<EventStream>()> make_stream) {
    ServerOptions options;
    options.name = "test";
    options.address.tcp = true;
    options.address.host = "127.0.0.1";
    options.limits = limits;
    options.handle = [make_stream](const Request&) {
      Response response(200, "text/event-stream");
      response.stream = make_stream();
      response.headers.emplace_back("X-Test", "yes");
      return response;
    };
    server_ = std::make_unique<Server>(std::move(options));
    server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~StreamServer() {
    server_->stop();
    thread_.join();
  }
  int port() const { return server_->bound().port; }
  Server& server() { return *server_; }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
};

// A connected client that sent one GET; `receive_buffer` shrinks its socket's buffer first.
int subscribe(int port, int receive_buffer = 0) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (receive_buffer > 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof receive_buffer);
  }
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    ::close(fd);
    return -1;
  }
  const std::string request = "GET /events HTTP/1.1\r\nHost: x\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) < 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Reads until `text` has arrived (or the peer closes, or 10 s pass); everything read.
std::string read_until(int fd, const std::string& text) {
  timeval timeout{0, 200'000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::string got;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (got.find(text) == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n == 0) break;
    if (n > 0) got.append(buffer, static_cast<std::size_t>(n));
  }
  return got;
}

bool eventually(const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return condition();
}

TEST(EventStreamServer, SendsTheHeadThenEachChunkAsItBecomesReady) {
  std::atomic<int> ready{0};
  auto stream = std::make_shared<ScriptedStream>([&ready, sent = 0]() mutable {
    if (sent >= ready.load()) return std::string();
    return "data: " + std::to_string(++sent) + "\n\n";
  });
  Limits limits;
  limits.stream_poll = 10ms;
  StreamServer server(limits, [stream] { return stream; });
  const int fd = subscribe(server.port());
  ASSERT_GE(fd, 0);
  ready = 1;
  const std::string first = read_until(fd, "data: 1\n\n");
  EXPECT_NE(first.find("HTTP/1.1 200 OK\r\n"), std::string::npos) << first;
  EXPECT_NE(first.find("Content-Type: text/event-stream\r\n"), std::string::npos) << first;
  EXPECT_NE(first.find("X-Test: yes\r\n"), std::string::npos) << first;
  EXPECT_EQ(first.find("Content-Length"), std::string::npos) << first;
  EXPECT_EQ(server.server().stats().open_streams, 1u);
  ready = 3;  // later events arrive on the open stream
  const std::string later = read_until(fd, "data: 3\n\n");
  EXPECT_NE(later.find("data: 2\n\ndata: 3\n\n"), std::string::npos) << later;
  ::close(fd);
  EXPECT_TRUE(eventually([&] { return server.server().stats().open_streams == 0; }))
      << "a subscriber that hung up still holds its stream";
}

TEST(EventStreamServer, AQuietStreamSendsHeartbeats) {
  Limits limits;
  limits.stream_poll = 10ms;
  limits.stream_heartbeat = 50ms;
  StreamServer server(
      limits, [] { return std::make_shared<ScriptedStream>([] { return std::string(); }); });
  const int fd = subscribe(server.port());
  ASSERT_GE(fd, 0);
  EXPECT_NE(read_until(fd, ": heartbeat\n\n").find(": heartbeat\n\n"), std::string::npos);
  ::close(fd);
}

TEST(EventStreamServer, ASubscriberThatNeverReadsIsDroppedWithOneChunkHeldForIt) {
  // An endless stream of 64 KiB chunks, to a client that reads nothing.
  auto stream = std::make_shared<ScriptedStream>([] { return std::string(64 * 1024, 'x'); });
  Limits limits;
  limits.write_timeout = 300ms;
  limits.stream_poll = 10ms;  // a dropped stream still polled would grow within the wait below
  StreamServer server(limits, [stream] { return stream; });
  const int fd = subscribe(server.port(), /*receive_buffer=*/4096);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(eventually([&] { return server.server().stats().dropped_streams == 1; }))
      << "a subscriber that takes nothing was never dropped";
  EXPECT_EQ(server.server().stats().open_streams, 0u);
  // What the server took from the stream is what the socket buffers held plus one chunk: it
  // asked for no more while one was pending (a few MiB at most, against endless).
  EXPECT_LT(stream->produced_bytes.load(), 16u * 1024 * 1024);
  const std::size_t produced = stream->produced_bytes.load();
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(stream->produced_bytes.load(), produced) << "the dropped stream is still polled";
  ::close(fd);
}

TEST(EventStreamServer, StreamsPastTheLimitAre503AndTheOthersKeepStreaming) {
  Limits limits;
  limits.max_streams = 1;
  limits.stream_poll = 10ms;
  std::atomic<int> made{0};
  StreamServer server(limits, [&made] {
    const int number = ++made;
    return std::make_shared<ScriptedStream>([number, sent = false]() mutable {
      if (sent) return std::string();
      sent = true;
      return "data: stream " + std::to_string(number) + "\n\n";
    });
  });
  const int first = subscribe(server.port());
  ASSERT_GE(first, 0);
  ASSERT_NE(read_until(first, "data: stream 1").find("data: stream 1"), std::string::npos);
  const int second = subscribe(server.port());
  ASSERT_GE(second, 0);
  const std::string refused = read_until(second, "\r\n\r\n");
  EXPECT_NE(refused.find("HTTP/1.1 503"), std::string::npos) << refused;
  ::close(second);
  EXPECT_EQ(server.server().stats().open_streams, 1u);
  ::close(first);
  ASSERT_TRUE(eventually([&] { return server.server().stats().open_streams == 0; }));
  const int third = subscribe(server.port());  // the slot is free again
  ASSERT_GE(third, 0);
  EXPECT_NE(read_until(third, "data: stream").find("HTTP/1.1 200"), std::string::npos);
  ::close(third);
}

TEST(EventStreamServer, StopEndsOpenStreams) {
  Limits limits;
  limits.stream_poll = 10ms;
  auto server = std::make_unique<StreamServer>(
      limits, [] { return std::make_shared<ScriptedStream>([] { return std::string(); }); });
  const int fd = subscribe(server->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(eventually([&] { return server->server().stats().open_streams == 1; }));
  server.reset();  // stop() and run() returning: the stream did not hold the server up
  // What was sent (the head, the retry line) is read, then the end of the stream.
  read_until(fd, "\x01never sent");
  char byte;
  EXPECT_EQ(::recv(fd, &byte, 1, 0), 0) << "the stream was not closed at stop";
  ::close(fd);
}

// The lifecycle log as a stream.
class LifecycleStreamTest : public ::testing::Test {
 protected:
  std::shared_ptr<testing::ManualClock> clock = std::make_shared<testing::ManualClock>(1000.0);
  std::shared_ptr<core::LifecycleEventLog> log =
      std::make_shared<core::LifecycleEventLog>(clock, /*capacity=*/5);
};

TEST_F(LifecycleStreamTest, EachEventGoesOutWithItsNumberAsTheId) {
  LifecycleEventStream stream(log, 0);
  EXPECT_EQ(stream.next(), "retry: 2000\n\n");
  log->record(core::LifecycleEventKind::created, "sb-1", "alice", "<img src=x>");
  log->record(core::LifecycleEventKind::released, "sb-1", "alice", "t\n2", "why");
  const std::string chunk = stream.next();
  EXPECT_EQ(chunk.find("id: 1\nevent: lifecycle\ndata: {\"sequence\":1,"), 0u) << chunk;
  EXPECT_NE(chunk.find("\"thread_id\":\"<img src=x>\""), std::string::npos) << chunk;
  // A newline in a value stays inside the JSON string: one data line per event.
  EXPECT_NE(chunk.find("\"thread_id\":\"t\\n2\",\"reason\":\"why\"}\n\n"), std::string::npos)
      << chunk;
  EXPECT_EQ(stream.next(), "");
}

TEST_F(LifecycleStreamTest, AReconnectResumesAfterTheLastIdAndCountsWhatTheRingLost) {
  for (int i = 1; i <= 8; ++i) {
    log->record(core::LifecycleEventKind::created, "sb-" + std::to_string(i), "u", "t");
  }
  LifecycleEventStream resumed(log, 6);  // the ring holds 4..8
  std::string chunk = resumed.next();
  EXPECT_EQ(chunk.find("id: 7\n"), std::string("retry: 2000\n\n").size()) << chunk;
  EXPECT_EQ(chunk.find("id: 6\n"), std::string::npos);
  LifecycleEventStream behind(log, 1);  // 2 and 3 are gone
  chunk = behind.next();
  EXPECT_NE(chunk.find("event: dropped\ndata: 2\n\nid: 4\n"), std::string::npos) << chunk;
}

TEST_F(LifecycleStreamTest, AChunkHoldsAtMostItsShareOfEvents) {
  for (int i = 1; i <= 5; ++i) log->record(core::LifecycleEventKind::created, "sb", "u", "t");
  LifecycleEventStream stream(log, 0, /*per_chunk=*/2);
  const std::string first = stream.next();
  EXPECT_NE(first.find("id: 2\n"), std::string::npos);
  EXPECT_EQ(first.find("id: 3\n"), std::string::npos) << first;
  EXPECT_NE(stream.next().find("id: 3\n"), std::string::npos);
}

TEST_F(LifecycleStreamTest, AnIdFromAnEarlierRunStartsFromTheBeginning) {
  log->record(core::LifecycleEventKind::created, "sb-1", "u", "t");
  LifecycleEventStream stream(log, 500);  // a browser that saw 500 events of the last serve
  stream.next();
  EXPECT_NE(stream.next().find("id: 1\n"), std::string::npos);
}

RequestHead head_of(const std::string& target, const std::string& last_event_id = "") {
  RequestHead head;
  head.method = "GET";
  head.target = target;
  head.path = target.substr(0, target.find('?'));
  if (!last_event_id.empty()) head.headers["last-event-id"] = last_event_id;
  return head;
}

TEST(StreamStart, LastEventIdThenAfterThenTheBeginning) {
  EXPECT_EQ(stream_start(head_of("/ui/events")), 0u);
  EXPECT_EQ(stream_start(head_of("/ui/events?x=1&after=12")), 12u);
  EXPECT_EQ(stream_start(head_of("/ui/events?after=12", "40")), 40u);
  try {
    stream_start(head_of("/ui/events", "forty"));
    FAIL() << "a Last-Event-ID that is not a number was taken";
  } catch (const core::ServiceError& e) {
    EXPECT_EQ(e.kind(), core::ErrorKind::invalid_argument);
    EXPECT_STREQ(e.what(), "Last-Event-ID: expected an event number >= 0, got \"forty\"");
  }
  EXPECT_THROW(stream_start(head_of("/ui/events?after=-1")), core::ServiceError);
}

}  // namespace
}  // namespace sandboxd::door

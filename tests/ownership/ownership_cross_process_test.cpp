// The SQLite store between real processes: ownership_contender children share one database
// file with each other and with this test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "ownership_test_support.hpp"

extern char** environ;

namespace sandboxd::testing {
namespace {

// One ownership_contender child. The destructor kills and reaps it if the test did not, so a
// failing assertion never leaves a process behind.
class Contender {
 public:
  Contender(const std::string& db_path, const std::string& owner_id, const std::string& ids,
            int duration_ms, const std::string& output, const std::string& mode)
      : owner_id_(owner_id), output_(output) {
    std::vector<std::string> args = {OWNERSHIP_CONTENDER_PATH,    db_path, owner_id, ids,
                                     std::to_string(duration_ms), output,  mode};
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    const int rc =
        ::posix_spawn(&pid_, OWNERSHIP_CONTENDER_PATH, nullptr, nullptr, argv.data(), environ);
    if (rc != 0) {
      pid_ = -1;
      ADD_FAILURE() << "cannot start " << OWNERSHIP_CONTENDER_PATH << ": " << std::strerror(rc);
    }
  }
  ~Contender() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Contender(const Contender&) = delete;
  Contender& operator=(const Contender&) = delete;

  const std::string& owner_id() const { return owner_id_; }
  const std::string& output() const { return output_; }

  // The wait status, or nothing if the child did not end within `timeout` (it is then killed).
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
      int status = 0;
      const pid_t done = ::waitpid(pid_, &status, WNOHANG);
      if (done == pid_) {
        pid_ = -1;
        return status;
      }
      if (std::chrono::steady_clock::now() > deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::nullopt;
  }

  void kill_now() {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
  }

 private:
  pid_t pid_ = -1;
  std::string owner_id_;
  std::string output_;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream content;
  content << in.rdbuf();
  return content.str();
}

// Polls until `path` exists (the child writes it atomically) or the timeout passes.
bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(path)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

struct HeldInterval {
  std::string owner_id;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

// Four processes contend for destroy claims on three ids for 2.5 s; every claim interval is
// recorded and no two may overlap. `store` is a SQLite path or "redis://…#prefix".
void expect_exclusive_destroy_claims(const TempDir& dir, const std::string& db_path) {
  constexpr int kContenders = 4;
  constexpr int kDurationMs = 2500;

  std::vector<std::unique_ptr<Contender>> contenders;
  for (int i = 0; i < kContenders; ++i) {
    contenders.push_back(std::make_unique<Contender>(
        db_path, "contender-" + std::to_string(i), "sb-0,sb-1,sb-2", kDurationMs,
        dir.file("intervals-" + std::to_string(i) + ".txt"), "contend"));
  }

  std::map<std::string, std::vector<HeldInterval>> intervals_by_id;
  for (auto& contender : contenders) {
    const std::optional<int> status = contender->wait(std::chrono::seconds(20));
    ASSERT_TRUE(status.has_value()) << contender->owner_id() << " did not finish in time";
    ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << contender->owner_id() << " ended with wait status " << *status
        << " (exit 1: store error, 2: broken invariant; see its stderr above)";

    std::istringstream lines(read_file(contender->output()));
    int held = 0;
    long iterations = 0;
    for (std::string kind; lines >> kind;) {
      if (kind == "interval") {
        std::string id;
        HeldInterval interval{contender->owner_id()};
        lines >> id >> interval.start_ns >> interval.end_ns;
        intervals_by_id[id].push_back(interval);
        ++held;
      } else if (kind == "iterations") {
        lines >> iterations;
      }
    }
    EXPECT_GE(held, 1) << contender->owner_id() << " never held a destroy claim in " << iterations
                       << " iterations, so exclusivity was not exercised";
  }

  int total = 0;
  for (auto& [id, intervals] : intervals_by_id) {
    total += static_cast<int>(intervals.size());
    std::sort(intervals.begin(), intervals.end(),
              [](const HeldInterval& a, const HeldInterval& b) { return a.start_ns < b.start_ns; });
    // Sorted by start, two holds overlap iff one starts before the latest end seen so far.
    const HeldInterval* latest_ending = nullptr;
    for (const HeldInterval& interval : intervals) {
      if (latest_ending != nullptr) {
        EXPECT_GE(interval.start_ns, latest_ending->end_ns)
            << id << ": " << interval.owner_id << " held a destroy claim from " << interval.start_ns
            << " while " << latest_ending->owner_id << " held it until " << latest_ending->end_ns;
      }
      if (latest_ending == nullptr || interval.end_ns > latest_ending->end_ns) {
        latest_ending = &interval;
      }
    }
  }
  ::testing::Test::RecordProperty("destroy_claims_held", total);
  std::printf("[ figures ] %d destroy claims held by %d processes, none overlapping\n", total,
              kContenders);
}

// Three processes reserve capacity in one store for 2.5 s under the ceilings 3 in all
// and 2 per user; at no instant may the reservations they held exceed either.
void expect_ceilings_hold_across_processes(const TempDir& dir, const std::string& db_path) {
  constexpr int kProcesses = 3;
  constexpr int kDurationMs = 2500;
  std::vector<std::unique_ptr<Contender>> children;
  for (int i = 0; i < kProcesses; ++i) {
    children.push_back(
        std::make_unique<Contender>(db_path, "gateway-" + std::to_string(i), "unused", kDurationMs,
                                    dir.file("reserved-" + std::to_string(i) + ".txt"), "reserve"));
  }
  struct Event {
    std::int64_t at;
    int delta;
    std::string user;
  };
  std::vector<Event> events;
  long attempts = 0;
  for (auto& child : children) {
    const std::optional<int> status = child->wait(std::chrono::seconds(20));
    ASSERT_TRUE(status.has_value()) << child->owner_id() << " did not finish in time";
    ASSERT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
        << child->owner_id() << " ended with wait status " << *status;
    std::istringstream lines(read_file(child->output()));
    for (std::string kind; lines >> kind;) {
      if (kind == "reserved") {
        std::string user;
        std::int64_t start = 0, end = 0;
        lines >> user >> start >> end;
        events.push_back({start, +1, user});
        events.push_back({end, -1, user});
      } else if (kind == "attempts") {
        long n = 0;
        lines >> n;
        attempts += n;
      }
    }
  }
  // Ends before starts at the same instant: a slot given back and taken at once is not two.
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return a.at != b.at ? a.at < b.at : a.delta < b.delta;
  });
  int in_all = 0, most_in_all = 0, most_of_one_user = 0;
  std::map<std::string, int> of_user;
  for (const Event& event : events) {
    in_all += event.delta;
    of_user[event.user] += event.delta;
    most_in_all = std::max(most_in_all, in_all);
    most_of_one_user = std::max(most_of_one_user, of_user[event.user]);
  }
  const std::size_t granted = events.size() / 2;
  std::printf(
      "[ figures ] %d processes, %ld reservation attempts, %zu granted; at most %d held "
      "at once (ceiling 3), at most %d of one user (ceiling 2)\n",
      kProcesses, attempts, granted, most_in_all, most_of_one_user);
  EXPECT_LE(most_in_all, 3) << "the deployment-wide ceiling did not hold";
  EXPECT_LE(most_of_one_user, 2) << "the per-user ceiling did not hold";
  EXPECT_EQ(most_in_all, 3) << "the ceiling was never reached, so it was not exercised";
  EXPECT_GT(attempts, static_cast<long>(granted)) << "nothing was ever refused";
}

TEST(OwnershipCrossProcess, CapacityCeilingsHoldAcrossProcessesOverSqlite) {
  TempDir dir;
  expect_ceilings_hold_across_processes(dir, dir.file("leases.db"));
}

TEST(OwnershipCrossProcess, CapacityCeilingsHoldAcrossProcessesOverRedis) {
  if (redis_test_url().empty()) GTEST_SKIP() << "SANDBOXD_TEST_REDIS_URL is not set";
  TempDir dir;
  expect_ceilings_hold_across_processes(
      dir, redis_test_url() + "#capacity:" + std::to_string(::getpid()));
}

TEST(OwnershipCrossProcess, DestroyClaimsAreExclusiveBetweenProcesses) {
  TempDir dir;
  expect_exclusive_destroy_claims(dir, dir.file("leases.db"));
}

// Gateway workers started together by a service manager on a fresh host all open one new lease
// database at once. Switching a new database to WAL can answer SQLITE_BUSY without calling the
// busy handler, so the busy timeout alone does not cover it (issue 20 A.11: seen once in about
// 40 runs of four processes; here 8 processes released at one CLOCK_MONOTONIC instant, 25 times).
TEST(OwnershipCrossProcess, ManyProcessesOpeningOneNewDatabaseAtOnceAllSucceed) {
  TempDir dir;
  constexpr int kRounds = 25;
  constexpr int kProcesses = 8;
  int failed = 0;
  for (int round = 0; round < kRounds; ++round) {
    const std::string db = dir.file("leases-" + std::to_string(round) + ".db");
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    const std::int64_t start_at = static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 +
                                  now.tv_nsec + 150'000'000;  // all spawned by then
    ScopedEnv start("CONTENDER_START_AT_NS", std::to_string(start_at));
    std::vector<std::unique_ptr<Contender>> openers;
    for (int i = 0; i < kProcesses; ++i) {
      openers.push_back(std::make_unique<Contender>(db, "opener-" + std::to_string(i), "x", 0,
                                                    dir.file("unused"), "open"));
    }
    for (auto& opener : openers) {
      const std::optional<int> status = opener->wait(std::chrono::seconds(30));
      ASSERT_TRUE(status.has_value()) << opener->owner_id() << " hung opening " << db;
      if (!(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)) ++failed;
    }
  }
  std::printf("[ figures ] %d rounds of %d processes opening one new database at once: %d failed\n",
              kRounds, kProcesses, failed);
  EXPECT_EQ(failed, 0) << "see the children's errors above";
}

TEST(OwnershipCrossProcess, DestroyClaimsAreExclusiveBetweenProcessesOverRedis) {
  if (redis_test_url().empty()) GTEST_SKIP() << "SANDBOXD_TEST_REDIS_URL is not set";
  TempDir dir;
  expect_exclusive_destroy_claims(dir,
                                  redis_test_url() + "#crossprocess:" + std::to_string(::getpid()));
}

// A child claims a lease, is SIGKILLed, and the lease frees itself one TTL later. The child
// runs on the real wall clock; this test reads the expiry instant from inspect() and puts its
// own ManualClock just before and just after it.
class KilledHolder : public ::testing::TestWithParam<bool> {};

TEST_P(KilledHolder, LeaseOfAKilledProcessLastsUntilItsTtlThenFrees) {
  const bool destroying = GetParam();
  TempDir dir;
  const std::string db_path = dir.file("leases.db");
  const std::string sandbox_id = "sb-held";
  auto clock = std::make_shared<ManualClock>(0.0);
  auto logger = std::make_shared<CapturingLogger>();
  auto parent =
      load_store(kSqliteStoreUse, make_store_context("parent", R"({"path": ")" + db_path + R"("})",
                                                     dir.path().string(), clock, logger));

  Contender child(db_path, "child", sandbox_id, 0, dir.file("held.txt"),
                  destroying ? "hold-del" : "hold-own");
  ASSERT_TRUE(wait_for_file(child.output(), std::chrono::seconds(10)))
      << "the child never reported holding the lease";
  child.kill_now();
  const std::optional<int> status = child.wait(std::chrono::seconds(10));
  ASSERT_TRUE(status.has_value());
  ASSERT_TRUE(WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL) << "status " << *status;

  const std::optional<LeaseRecord> lease = parent->inspect(sandbox_id);
  ASSERT_TRUE(lease.has_value()) << "the killed child's lease vanished before its TTL";
  EXPECT_EQ(lease->owner_id, "child");
  EXPECT_EQ(lease->destroying, destroying);

  clock->set(lease->expires_at - 0.05);
  EXPECT_EQ(parent->owner(sandbox_id), "child");
  EXPECT_FALSE(parent->claim(sandbox_id));
  EXPECT_FALSE(parent->claim(sandbox_id, /*for_destroy=*/true));
  EXPECT_EQ(parent->renew(sandbox_id), RenewOutcome::lost);
  EXPECT_EQ(parent->owner(sandbox_id), "child") << "the refused calls changed nothing";

  clock->set(lease->expires_at + 0.05);
  EXPECT_EQ(parent->owner(sandbox_id), std::nullopt);
  EXPECT_EQ(parent->inspect(sandbox_id), std::nullopt);
  EXPECT_TRUE(parent->claim(sandbox_id));
  EXPECT_EQ(parent->owner(sandbox_id), "parent");
}

INSTANTIATE_TEST_SUITE_P(States, KilledHolder, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Del" : "Own");
                         });

// The same over Redis, whose expiry runs on the server's clock: real time, a 2 s TTL.
class KilledHolderOverRedis : public ::testing::TestWithParam<bool> {};

TEST_P(KilledHolderOverRedis, LeaseOfAKilledProcessLastsUntilItsTtlThenFrees) {
  if (redis_test_url().empty()) GTEST_SKIP() << "SANDBOXD_TEST_REDIS_URL is not set";
  const bool destroying = GetParam();
  TempDir dir;
  const std::string prefix =
      "killed:" + std::to_string(::getpid()) + (destroying ? ":del" : ":own");
  const std::string sandbox_id = "sb-held";
  auto parent = load_store(
      kRedisStoreUse,
      make_store_context(
          "parent", R"({"url": ")" + redis_test_url() + R"(", "key_prefix": ")" + prefix + R"("})",
          dir.path().string(), std::make_shared<SystemClock>(),
          std::make_shared<CapturingLogger>()));
  ::setenv("CONTENDER_RENEWAL_SECONDS", "0.5", 1);  // TTL 2 s
  Contender child(redis_test_url() + "#" + prefix, "child", sandbox_id, 0, dir.file("held.txt"),
                  destroying ? "hold-del" : "hold-own");
  ::unsetenv("CONTENDER_RENEWAL_SECONDS");
  ASSERT_TRUE(wait_for_file(child.output(), std::chrono::seconds(10)))
      << "the child never reported holding the lease";
  child.kill_now();
  ASSERT_TRUE(child.wait(std::chrono::seconds(10)).has_value());

  const std::optional<LeaseRecord> lease = parent->inspect(sandbox_id);
  ASSERT_TRUE(lease.has_value()) << "the killed child's lease vanished before its TTL";
  EXPECT_EQ(lease->owner_id, "child");
  EXPECT_EQ(lease->destroying, destroying);
  EXPECT_FALSE(parent->claim(sandbox_id));
  EXPECT_FALSE(parent->claim(sandbox_id, /*for_destroy=*/true));
  EXPECT_EQ(parent->renew(sandbox_id), RenewOutcome::lost);

  // Past the expiry the server reported (plus a margin for the round trips), it is free.
  const auto wall = [] {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
  std::this_thread::sleep_for(std::chrono::duration<double>(lease->expires_at - wall() + 0.2));
  EXPECT_EQ(parent->owner(sandbox_id), std::nullopt);
  EXPECT_TRUE(parent->claim(sandbox_id));
  EXPECT_EQ(parent->owner(sandbox_id), "parent");
}

INSTANTIATE_TEST_SUITE_P(States, KilledHolderOverRedis, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "Del" : "Own");
                         });

// A gateway SIGKILLed while it holds a capacity reservation: the slot stays taken
// until one TTL (1 s here) after the reservation's last write, then another gateway gets it.
// Real time on both stores (the child writes on the wall clock or the server's).
class KilledReservationHolder : public ::testing::TestWithParam<std::string> {};

TEST_P(KilledReservationHolder, ItsReservationFreesWithinOneTtl) {
  const bool redis = GetParam() == kRedisStoreUse;
  if (redis && redis_test_url().empty()) GTEST_SKIP() << "SANDBOXD_TEST_REDIS_URL is not set";
  TempDir dir;
  const std::string prefix = "killed-capacity:" + std::to_string(::getpid());
  const std::string target = redis ? redis_test_url() + "#" + prefix : dir.file("leases.db");
  const std::string options =
      redis ? R"({"url": ")" + redis_test_url() + R"(", "key_prefix": ")" + prefix + R"("})"
            : R"({"path": ")" + dir.file("leases.db") + R"("})";
  ::setenv("CONTENDER_RENEWAL_SECONDS", "0.25", 1);  // TTL 1 s
  Contender child(target, "child", "sb-reserved", 0, dir.file("held.txt"), "hold-reservation");
  ::unsetenv("CONTENDER_RENEWAL_SECONDS");
  ASSERT_TRUE(wait_for_file(child.output(), std::chrono::seconds(10)))
      << "the child never reported its reservation";
  const auto killed_at = std::chrono::steady_clock::now();
  child.kill_now();
  ASSERT_TRUE(child.wait(std::chrono::seconds(10)).has_value());

  auto parent = load_store(GetParam(), make_store_context("parent", options, dir.path().string(),
                                                          std::make_shared<SystemClock>(),
                                                          std::make_shared<CapturingLogger>()));
  auto* ledger = store_capability<CapacityLedger>(*parent);
  ASSERT_NE(ledger, nullptr);
  // Checked only while well inside the TTL: a loaded machine may have spent it already.
  if (std::chrono::steady_clock::now() - killed_at < std::chrono::milliseconds(700)) {
    EXPECT_EQ(ledger->reserve("sb-parent", "u", 1, 0), CapacityLedger::Refusal::total)
        << "the killed gateway's slot was free before its TTL";
  }
  bool granted = false;
  while (!granted && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    granted = ledger->reserve("sb-parent", "u", 1, 0) == CapacityLedger::Refusal::none;
  }
  const double freed_after =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  std::printf(
      "[ figures ] %s: a SIGKILLed gateway's reservation freed %.2f s after the kill "
      "(TTL 1 s)\n",
      GetParam().c_str(), freed_after);
  EXPECT_TRUE(granted) << "the reservation never freed";
  EXPECT_LT(freed_after, 3.0) << "it outlived its TTL (1 s) by far";
}

INSTANTIATE_TEST_SUITE_P(Stores, KilledReservationHolder,
                         ::testing::Values(kSqliteStoreUse, kRedisStoreUse),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param.substr(0, info.param.find(':'));
                         });

}  // namespace
}  // namespace sandboxd::testing

// A separate process that uses the SQLite (or Redis) ownership store, for the cross-process
// tests. It
// loads the store through the plugin loader by its use string, exactly as a gateway would.
//
//   ownership_contender <db path> <owner id> <ids,comma,separated> <duration ms> <output> <mode>
//
// mode "contend": for <duration ms>, do random take / claim / renew / release calls on the ids,
// and the exclusive step claim(id, for_destroy=true) → hold a few ms → release(id). Every
// interval during which this process held a "del" claim (from just after claim returned true to
// just before release was called) is written to <output> as
//   interval <id> <start ns> <end ns>
// on CLOCK_MONOTONIC, which is system-wide, so intervals from different processes compare.
//
// mode "reserve": for <duration ms>, reserve capacity (ceilings: 3 in all, 2 per
// user) for new sandbox ids of this process under a random user of u0..u2, hold each a few ms
// and give it back. Every held reservation is written as
//   reserved <user> <start ns> <end ns>
// (from just after reserve granted it to just before unreserve), so the parent can check that
// no instant saw more than 3 (or 2 of one user) across all processes.
//
// mode "hold-reservation": reserve capacity for the first id (ceiling 1 in all), write
// "reserved <id>" and sleep until killed.
//
// mode "hold-own" / "hold-del": claim the first id (own or del), write "held <id>" to <output>
// and sleep until killed (at most a minute, in case the parent died).
//
// mode "open": only open the store (for a new database file, its creation and WAL switch) and
// exit 0. With CONTENDER_START_AT_NS set (a CLOCK_MONOTONIC instant), every mode first waits
// for that instant, so several children open one file at the same moment.
//
// Exit status: 0 on success, 1 on a store error or bad arguments, 2 when the store broke an
// invariant this process can see by itself.
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "sandboxd/capabilities.hpp"
#include "sandboxd/core/plugin_loader.hpp"
#include "sandboxd/sdk.hpp"

namespace {

// TTL = 2.5 s × 4 = 10 s: far longer than any hold, so a lease never expires mid-hold.
constexpr const char* kStoreOptions = R"("renewal_interval_seconds": 2.5, "ttl_multiplier": 4)";

class StderrLogger final : public sandboxd::Logger {
 public:
  void log(sandboxd::LogLevel level, std::string_view message) override {
    if (level >= sandboxd::LogLevel::warning) {
      std::cerr << "ownership_contender: " << sandboxd::to_string(level) << ": " << message << "\n";
    }
  }
};

std::int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000 + now.tv_nsec;
}

std::vector<std::string> split_ids(const std::string& text) {
  std::vector<std::string> ids;
  std::stringstream stream(text);
  for (std::string id; std::getline(stream, id, ',');) {
    if (!id.empty()) ids.push_back(id);
  }
  return ids;
}

// Writes via a temporary file and rename, so a reader never sees half a file.
void write_output(const std::string& path, const std::string& content) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << content;
    if (!out.flush()) throw std::runtime_error("cannot write " + temporary);
  }
  if (std::rename(temporary.c_str(), path.c_str()) != 0) {
    throw std::runtime_error("cannot rename " + temporary + " to " + path);
  }
}

struct Violation : std::runtime_error {
  using std::runtime_error::runtime_error;
};

int contend(sandboxd::OwnershipStore& store, const std::vector<std::string>& ids, int duration_ms,
            const std::string& output) {
  std::mt19937 random(std::random_device{}() ^ static_cast<unsigned int>(::getpid()));
  std::uniform_int_distribution<std::size_t> pick_id(0, ids.size() - 1);
  std::uniform_int_distribution<int> pick_action(0, 99);
  std::uniform_int_distribution<int> hold_us(1000, 4000);
  std::uniform_int_distribution<int> pause_us(0, 500);

  std::ostringstream intervals;
  long iterations = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(duration_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    ++iterations;
    const std::string& id = ids[pick_id(random)];
    const int action = pick_action(random);
    if (action < 35) {
      // The exclusive step: no other process may hold a del claim on id at the same time.
      if (store.claim(id, /*for_destroy=*/true)) {
        const std::int64_t start = monotonic_ns();
        const auto lease = store.inspect(id);
        if (!lease.has_value() || lease->owner_id != store.owner_id() || !lease->destroying) {
          throw Violation("claim(" + id + ", for_destroy) returned true but the lease is " +
                          (lease ? lease->owner_id + (lease->destroying ? " del" : " own")
                                 : std::string("absent")));
        }
        std::this_thread::sleep_for(std::chrono::microseconds(hold_us(random)));
        const std::int64_t end = monotonic_ns();
        store.release(id);
        intervals << "interval " << id << " " << start << " " << end << "\n";
      }
    } else if (action < 55) {
      // Every lease written here is released in the same iteration, so ids do not stay
      // blocked for a whole TTL and every process gets its turn at the exclusive step.
      if (store.claim(id)) {
        store.renew(id);  // may be lost: a peer's take() can overwrite an own lease
        store.release(id);
      }
    } else if (action < 75) {
      if (store.take(id)) {
        store.renew(id);
        store.release(id);
      }
    } else if (action < 85) {
      store.release(id);
    } else {
      store.renew(id);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(pause_us(random)));
  }
  intervals << "iterations " << iterations << "\n";
  write_output(output, intervals.str());
  return 0;
}

int reserve(sandboxd::OwnershipStore& store, const std::string& owner_id, int duration_ms,
            const std::string& output) {
  auto* ledger = sandboxd::store_capability<sandboxd::CapacityLedger>(store);
  if (ledger == nullptr) throw std::invalid_argument("the store keeps no capacity ledger");
  std::mt19937 random(std::random_device{}() ^ static_cast<unsigned int>(::getpid()));
  std::uniform_int_distribution<int> pick_user(0, 2);
  std::uniform_int_distribution<int> hold_us(500, 3000);
  std::ostringstream held;
  long attempts = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(duration_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string id = owner_id + "-" + std::to_string(++attempts);
    const std::string user = "u" + std::to_string(pick_user(random));
    if (ledger->reserve(id, user, 3, 2) == sandboxd::CapacityLedger::Refusal::none) {
      const std::int64_t start = monotonic_ns();
      std::this_thread::sleep_for(std::chrono::microseconds(hold_us(random)));
      const std::int64_t end = monotonic_ns();
      ledger->unreserve(id, user);
      held << "reserved " << user << " " << start << " " << end << "\n";
    }
  }
  held << "attempts " << attempts << "\n";
  write_output(output, held.str());
  return 0;
}

int hold(sandboxd::OwnershipStore& store, const std::string& id, bool for_destroy,
         const std::string& output) {
  if (!store.claim(id, for_destroy)) {
    std::cerr << "ownership_contender: could not claim " << id << "\n";
    return 1;
  }
  write_output(output, "held " + id + "\n");
  std::this_thread::sleep_for(std::chrono::minutes(1));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    std::cerr << "usage: ownership_contender <db path> <owner id> <ids,comma,separated> "
                 "<duration ms> <output file> <contend|hold-own|hold-del>\n";
    return 1;
  }
  const std::string db_path = argv[1];
  const std::string owner_id = argv[2];
  const std::vector<std::string> ids = split_ids(argv[3]);
  const std::string output = argv[5];
  const std::string mode = argv[6];
  try {
    const int duration_ms = std::stoi(argv[4]);
    if (ids.empty()) throw std::invalid_argument("no sandbox ids given");

    // The store: a SQLite file path, or "redis://HOST:PORT/DB#KEY_PREFIX".
    std::string options = kStoreOptions;
    if (const char* renewal = std::getenv("CONTENDER_RENEWAL_SECONDS")) {
      options =
          std::string(R"("renewal_interval_seconds": )") + renewal + R"(, "ttl_multiplier": 4)";
    }
    if (const char* start_at = std::getenv("CONTENDER_START_AT_NS")) {
      const std::int64_t instant = std::stoll(start_at);
      while (monotonic_ns() < instant) {
      }
    }
    sandboxd::PluginContext context;
    std::string use = "ownership_sqlite:SqliteOwnershipStore";
    if (db_path.rfind("redis://", 0) == 0) {
      const auto hash = db_path.find('#');
      use = "ownership_redis:RedisOwnershipStore";
      context.config_json = R"({"url": ")" + db_path.substr(0, hash) + R"(", "key_prefix": ")" +
                            db_path.substr(hash + 1) + R"(", )" + options + "}";
    } else {
      context.config_json = R"({"path": ")" + db_path + R"(", )" + options + "}";
    }
    context.config_key_path = "sandbox.ownership";
    context.owner_id = owner_id;
    context.logger = std::make_shared<StderrLogger>();
    context.clock = std::make_shared<sandboxd::SystemClock>();
    const sandboxd::core::PluginLoader loader({SANDBOXD_TEST_PLUGIN_DIR});
    auto store = loader.load_ownership_store(use, context, "ownership_contender");

    if (mode == "open") return 0;
    if (mode == "contend") return contend(*store, ids, duration_ms, output);
    if (mode == "reserve") return reserve(*store, owner_id, duration_ms, output);
    if (mode == "hold-reservation") {
      auto* ledger = sandboxd::store_capability<sandboxd::CapacityLedger>(*store);
      if (ledger == nullptr || ledger->reserve(ids.front(), "held-user", 1, 0) !=
                                   sandboxd::CapacityLedger::Refusal::none) {
        std::cerr << "ownership_contender: could not reserve " << ids.front() << "\n";
        return 1;
      }
      write_output(output, "reserved " + ids.front() + "\n");
      std::this_thread::sleep_for(std::chrono::minutes(1));
      return 0;
    }
    if (mode == "hold-own") return hold(*store, ids.front(), false, output);
    if (mode == "hold-del") return hold(*store, ids.front(), true, output);
    throw std::invalid_argument("unknown mode '" + mode + "'");
  } catch (const Violation& violation) {
    std::cerr << "ownership_contender " << owner_id << ": invariant broken: " << violation.what()
              << "\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "ownership_contender " << owner_id << ": " << error.what() << "\n";
    return 1;
  }
}

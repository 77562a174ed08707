// What only the SQLite store promises: where its file lives and with which mode, WAL, a
// recorded schema version, clear start-up errors naming the path, and SQLite failures during a
// call surfacing as OwnershipBackendError.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <functional>

#include "ownership_test_support.hpp"

namespace sandboxd::testing {
namespace {

using ::testing::HasSubstr;

// A plain connection of the test's own, to look at (or lock) the file behind the store's back.
class RawDatabase {
 public:
  explicit RawDatabase(const std::string& path) {
    if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << "cannot open " << path << ": " << sqlite3_errmsg(db_);
    }
  }
  ~RawDatabase() { sqlite3_close_v2(db_); }
  RawDatabase(const RawDatabase&) = delete;
  RawDatabase& operator=(const RawDatabase&) = delete;

  std::string query(const std::string& sql) {
    sqlite3_stmt* statement = nullptr;
    std::string result;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &statement, nullptr) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << sqlite3_errmsg(db_);
    } else if (sqlite3_step(statement) == SQLITE_ROW) {
      const unsigned char* text = sqlite3_column_text(statement, 0);
      result = text == nullptr ? "" : reinterpret_cast<const char*>(text);
    }
    sqlite3_finalize(statement);
    return result;
  }
  void execute(const std::string& sql) {
    char* error = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
      ADD_FAILURE() << sql << ": " << (error != nullptr ? error : "?");
    }
    sqlite3_free(error);
  }

 private:
  sqlite3* db_ = nullptr;
};

// Runs `body` in a forked child that has dropped to uid/gid 65534 and returns what it returned.
// Only for single-threaded moments of the test process (fork copies just the calling thread).
std::string in_child_as_nobody(const std::function<std::string()>& body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    std::string result = "could not drop privileges";
    if (::setgid(65534) == 0 && ::setuid(65534) == 0) result = body();
    const ssize_t written = ::write(pipe_fds[1], result.data(), result.size());
    ::_exit(written == static_cast<ssize_t>(result.size()) ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string result;
  char buffer[4096];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) result.append(buffer, n);
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  return result;
}

class SqliteStore : public ::testing::Test {
 protected:
  PluginContext context(const std::string& options_json = "{}",
                        const std::string& owner_id = "owner-a") {
    return make_store_context(owner_id, options_json, dir_.path().string(), clock_, logger_);
  }
  std::shared_ptr<OwnershipStore> open(const std::string& options_json = "{}") {
    return load_store(kSqliteStoreUse, context(options_json));
  }
  std::string load_error_for(const std::string& options_json) {
    return load_error(kSqliteStoreUse, context(options_json));
  }
  static std::string path_option(const std::string& path) {
    return R"({"path": ")" + path + R"("})";
  }

  TempDir dir_;
  std::shared_ptr<ManualClock> clock_ = std::make_shared<ManualClock>();
  std::shared_ptr<CapturingLogger> logger_ = std::make_shared<CapturingLogger>();
};

TEST_F(SqliteStore, DefaultsToAFileUnderTheBaseDirectory) {
  auto store = open();
  EXPECT_TRUE(std::filesystem::is_regular_file(dir_.file("sandbox_ownership.db")));
}

TEST_F(SqliteStore, AnExplicitPathWins) {
  const std::string path = dir_.file("leases.db");
  auto store = open(path_option(path));
  EXPECT_TRUE(std::filesystem::is_regular_file(path));
  EXPECT_FALSE(std::filesystem::exists(dir_.file("sandbox_ownership.db")));
  EXPECT_TRUE(logger_->contains(LogLevel::info,
                                "Sandbox ownership store: sqlite " + path + " (ttl=120.0s)"));
}

TEST_F(SqliteStore, NeedsAPathWhenTheHostGivesNoBaseDirectory) {
  PluginContext no_base = context();
  no_base.base_dir.clear();
  const std::string message = load_error(kSqliteStoreUse, no_base);
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.path"));
  EXPECT_THAT(message, HasSubstr("is required"));
}

TEST_F(SqliteStore, CreatesItsFilesPrivateWhateverTheUmask) {
  const std::string path = dir_.file("leases.db");
  const mode_t previous_umask = ::umask(0);
  std::shared_ptr<OwnershipStore> store;
  try {
    store = open(path_option(path));
  } catch (...) {
    ::umask(previous_umask);
    throw;
  }
  ::umask(previous_umask);
  ASSERT_TRUE(store->take("sb-1"));  // makes sure the WAL side files exist

  EXPECT_EQ(file_mode(path), 0600u);
  for (const char* suffix : {"-wal", "-shm"}) {
    const std::string side_file = path + suffix;
    if (!std::filesystem::exists(side_file)) continue;
    EXPECT_EQ(file_mode(side_file) & 0077u, 0u) << side_file << " is readable by others";
  }
}

TEST_F(SqliteStore, LeavesTheModeOfAnExistingFileAlone) {
  const std::string path = dir_.file("leases.db");
  write_file(path, "");  // an empty file is a valid empty database
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  auto store = open(path_option(path));
  EXPECT_EQ(file_mode(path), 0640u);
}

TEST_F(SqliteStore, UsesWalJournalModeAndRecordsItsSchemaVersion) {
  auto store = open();
  RawDatabase raw(dir_.file("sandbox_ownership.db"));
  EXPECT_EQ(raw.query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(raw.query("PRAGMA user_version"), "1");
  EXPECT_EQ(raw.query("SELECT count(*) FROM sqlite_master WHERE name = 'leases'"), "1");
}

TEST_F(SqliteStore, StoresLeaseStateAsOwnOrDel) {
  auto store = open();
  ASSERT_TRUE(store->take("sb-own"));
  ASSERT_TRUE(store->claim("sb-del", /*for_destroy=*/true));
  RawDatabase raw(dir_.file("sandbox_ownership.db"));
  EXPECT_EQ(raw.query("SELECT state FROM leases WHERE sandbox_id = 'sb-own'"), "own");
  EXPECT_EQ(raw.query("SELECT state FROM leases WHERE sandbox_id = 'sb-del'"), "del");
  EXPECT_EQ(raw.query("SELECT owner_id FROM leases WHERE sandbox_id = 'sb-del'"), "owner-a");
}

// Every warm acquire takes its lease and every release renews it. While our own
// lease has more than 3/4 of its TTL left neither writes (the renewal interval is at most half
// the TTL), so the warm path costs a SELECT, not a WAL commit; the renewal loop still writes. A
// peer's lease or a teardown decide as before.
TEST_F(SqliteStore, ATakeOfOurFreshLeaseWritesNothing) {
  auto store = open();
  auto peer = load_store(kSqliteStoreUse, context("{}", "owner-b"));
  ASSERT_TRUE(store->take("sb"));
  const double first = store->inspect("sb")->expires_at;
  clock_->advance(10.0);
  ASSERT_TRUE(store->take("sb"));
  EXPECT_EQ(store->inspect("sb")->expires_at, first) << "rewrote a lease with most of its TTL left";
  EXPECT_EQ(store->renew("sb"), RenewOutcome::renewed);
  EXPECT_EQ(store->inspect("sb")->expires_at, first) << "a renew of a fresh lease wrote too";
  clock_->advance(store->ttl_seconds() / 2);
  ASSERT_TRUE(store->take("sb"));
  EXPECT_GT(store->inspect("sb")->expires_at, first) << "a half-spent lease must be extended";
  const double second = store->inspect("sb")->expires_at;
  clock_->advance(store->ttl_seconds() / 4 + 1.0);
  EXPECT_EQ(store->renew("sb"), RenewOutcome::renewed);
  EXPECT_GT(store->inspect("sb")->expires_at, second) << "the renewal loop's renew must write";

  ASSERT_TRUE(peer->take("sb"));  // take overwrites another owner's own-lease, as before
  EXPECT_EQ(store->owner("sb"), "owner-b");
  ASSERT_TRUE(store->take("sb"));
  EXPECT_EQ(store->owner("sb"), "owner-a") << "a fresh lease of the peer must not be skipped";
  ASSERT_TRUE(store->claim("sb", /*for_destroy=*/true));
  EXPECT_FALSE(store->take("sb")) << "our own teardown still refuses the take";
}

TEST_F(SqliteStore, RefusesADatabaseFromANewerSchemaVersion) {
  open()->close();
  {
    RawDatabase raw(dir_.file("sandbox_ownership.db"));
    raw.execute("PRAGMA user_version = 7");
  }
  const std::string message = load_error_for("{}");
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.path"));
  EXPECT_THAT(message, HasSubstr(dir_.file("sandbox_ownership.db")));
  EXPECT_THAT(message, HasSubstr("schema version 7"));
}

TEST_F(SqliteStore, RefusesAnotherProgramsDatabase) {
  const std::string path = dir_.file("other.db");
  write_file(path, "");
  {
    RawDatabase raw(path);
    raw.execute("CREATE TABLE accounts (id INTEGER PRIMARY KEY)");
  }
  const std::string message = load_error_for(path_option(path));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.path"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("not a sandboxd ownership database"));
}

TEST_F(SqliteStore, RejectsAFileThatIsNotADatabase) {
  const std::string path = dir_.file("garbage.db");
  write_file(path, std::string(4096, 'x'));
  const std::string message = load_error_for(path_option(path));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.path"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("file is not a database"));
}

TEST_F(SqliteStore, RejectsAPathThatIsADirectory) {
  const std::string path = dir_.file("a-directory");
  std::filesystem::create_directory(path);
  const std::string message = load_error_for(path_option(path));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.path"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("is a directory"));
}

// The lease file lives in the state directory; a link there (dangling or to another file) is
// never followed, so nobody can make the store create or rewrite a file elsewhere.
TEST_F(SqliteStore, RejectsAPathThatIsASymbolicLink) {
  const std::string elsewhere = dir_.file("elsewhere.db");
  const std::string path = dir_.file("leases.db");
  std::filesystem::create_symlink(elsewhere, path);
  const std::string message = load_error_for(path_option(path));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("symbolic link"));
  EXPECT_FALSE(std::filesystem::exists(elsewhere)) << "the store created a file through the link";
}

TEST_F(SqliteStore, RejectsAPathInADirectoryThatDoesNotExist) {
  const std::string path = dir_.file("missing/leases.db");
  const std::string message = load_error_for(path_option(path));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.path"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("No such file or directory"));
}

TEST_F(SqliteStore, RejectsAPathUnderARegularFile) {
  write_file(dir_.file("plain-file"), "hello");
  const std::string path = dir_.file("plain-file/leases.db");
  const std::string message = load_error_for(path_option(path));
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.path"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("Not a directory"));
}

TEST_F(SqliteStore, RejectsAPathInADirectoryItCannotWrite) {
  const std::string locked_dir = dir_.file("read-only");
  std::filesystem::create_directory(locked_dir);
  ASSERT_EQ(::chmod(dir_.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(locked_dir.c_str(), 0555), 0);
  const std::string path = locked_dir + "/leases.db";
  const PluginContext options = context(path_option(path));

  std::string message;
  if (::access(locked_dir.c_str(), W_OK) != 0) {
    message = load_error(kSqliteStoreUse, options);
  } else if (::geteuid() == 0) {
    // Root writes anywhere, so load as an unprivileged user in a child process. That user may
    // not be able to read the build tree (a clone under a 0700 temp dir), so it loads a copy
    // of the plugin placed beside the database.
    const std::string plugin_copy = dir_.file("ownership_sqlite.so");
    std::filesystem::copy_file(std::string(SANDBOXD_TEST_PLUGIN_DIR) + "/ownership_sqlite.so",
                               plugin_copy);
    ASSERT_EQ(::chmod(plugin_copy.c_str(), 0755), 0);
    const std::string use = plugin_copy + ":SqliteOwnershipStore";
    message = in_child_as_nobody([&] { return load_error(use, options); });
  } else {
    GTEST_SKIP() << "this process can write a 0555 directory";
  }
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.path"));
  EXPECT_THAT(message, HasSubstr(path));
  EXPECT_THAT(message, HasSubstr("Permission denied"));
}

TEST_F(SqliteStore, RejectsABusyTimeoutBelowOneMillisecond) {
  const std::string message = load_error_for(R"({"busy_timeout_ms": 0})");
  EXPECT_THAT(message, HasSubstr("sandbox.ownership.busy_timeout_ms"));
  EXPECT_THAT(message, HasSubstr("got 0"));
}

TEST_F(SqliteStore, ASqliteFailureDuringACallIsAnOwnershipBackendError) {
  auto store = open(R"({"busy_timeout_ms": 50})");
  RawDatabase locker(dir_.file("sandbox_ownership.db"));
  locker.execute("BEGIN IMMEDIATE");  // holds the write lock past the store's busy timeout
  try {
    store->claim("sb-1");
    ADD_FAILURE() << "claim succeeded while another connection held the write lock";
  } catch (const OwnershipBackendError& error) {
    EXPECT_THAT(error.what(), HasSubstr("failed to claim sandbox ownership for sb-1: "));
    EXPECT_THAT(error.what(), HasSubstr("database is locked"));
  }
  EXPECT_THROW(store->renew("sb-1"), OwnershipBackendError);
  locker.execute("COMMIT");
  EXPECT_TRUE(store->claim("sb-1")) << "the store recovers once the lock is gone";
}

TEST_F(SqliteStore, LeasesSurviveReopeningTheFile) {
  open()->take("sb-1");
  auto reopened = open();
  EXPECT_EQ(reopened->owner("sb-1"), "owner-a");
}

// Issue 13 A.7 and B: the file behind an open store deleted, replaced by another database or by
// garbage. SQLite keeps using the unlinked inode, so before the check every lease written
// afterwards went to a file no other process can see: two gateways would both "own" a sandbox.
// Now every call fails closed with the reason, and a fresh store on the new file works.
TEST_F(SqliteStore, AFileDeletedOrReplacedWhileOpenFailsClosedNamingWhatHappened) {
  const std::string path = dir_.file("sandbox_ownership.db");
  auto store = open();
  ASSERT_TRUE(store->take("sb-1"));

  ASSERT_EQ(::unlink(path.c_str()), 0);
  try {
    store->claim("sb-2");
    ADD_FAILURE() << "claim succeeded on a deleted database";
  } catch (const OwnershipBackendError& error) {
    std::printf("deleted:  %s\n", error.what());
    EXPECT_THAT(error.what(), HasSubstr("failed to claim sandbox ownership for sb-2: the "
                                        "database file was deleted while in use"));
  }
  EXPECT_THROW(store->owner("sb-1"), OwnershipBackendError);

  // Another store creates a fresh file at the same path: a different inode.
  auto fresh = open();
  EXPECT_FALSE(fresh->owner("sb-1").has_value());
  try {
    store->renew("sb-1");
    ADD_FAILURE() << "renew succeeded on a replaced database";
  } catch (const OwnershipBackendError& error) {
    std::printf("replaced: %s\n", error.what());
    EXPECT_THAT(error.what(), HasSubstr("the database file was replaced while in use"));
  }
  EXPECT_TRUE(fresh->take("sb-3")) << "a store opened on the new file serves";

  // Garbage at the path: the open store refuses. (A new store on garbage is refused by name:
  // RejectsAFileThatIsNotADatabase.)
  const std::string garbage = dir_.file("garbage");
  { std::ofstream(garbage) << std::string(8192, 'x'); }
  ASSERT_EQ(::rename(garbage.c_str(), path.c_str()), 0);
  try {
    fresh->claim("sb-4");
    ADD_FAILURE() << "claim succeeded on a file replaced by garbage";
  } catch (const OwnershipBackendError& error) {
    std::printf("garbage:  %s\n", error.what());
    EXPECT_THAT(error.what(), HasSubstr("the database file was replaced while in use"));
  }
}

}  // namespace
}  // namespace sandboxd::testing

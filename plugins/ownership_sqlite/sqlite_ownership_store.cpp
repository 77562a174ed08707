// ownership_sqlite:SqliteOwnershipStore — one SQLite file shared by every gateway process on
// the host (design §7.5, with SQLite in place of Redis). Each read-modify-write is one
// `BEGIN IMMEDIATE` transaction: the database's write lock makes it atomic across processes
// and connections. Expiry uses wall-clock time because it is the only clock that processes
// agree on.
#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>

#include "sandboxd/capabilities.hpp"
#include "sandboxd/host_fs.hpp"
#include "sandboxd/lease_rules.hpp"
#include "sandboxd/sdk.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::plugins::ownership_sqlite {
namespace {

constexpr const char* kUse = "ownership_sqlite:SqliteOwnershipStore";
constexpr const char* kDefaultFileName = "sandbox_ownership.db";
constexpr long long kDefaultBusyTimeoutMs = 5000;

// Recorded in PRAGMA user_version. A file with a larger number was written by a newer build
// whose layout we cannot assume, so we refuse it rather than guess.
constexpr long long kSchemaVersion = 1;
// Recorded in PRAGMA application_id ("SBOW"), so a path that points at some other program's
// SQLite database is refused instead of getting a leases table added to it.
constexpr long long kApplicationId = 0x53424f57;

// An SQLite call failed; what() is SQLite's own message. It never leaves this file: calls turn
// it into OwnershipBackendError and start-up into PluginConfigError.
class SqliteFailure : public std::runtime_error {
 public:
  explicit SqliteFailure(const std::string& message, int code = SQLITE_ERROR)
      : std::runtime_error(message), code_(code) {}
  // Another connection held a lock longer than we waited (or SQLite would not wait at all).
  bool busy() const { return code_ == SQLITE_BUSY || code_ == SQLITE_LOCKED; }

 private:
  int code_;
};

// SQLite's message, plus the OS's when SQLite recorded one (e.g. "unable to open database
// file (Permission denied)").
std::string describe_error(sqlite3* db) {
  std::string message = db != nullptr ? sqlite3_errmsg(db) : "out of memory";
  const int os_errno = db != nullptr ? sqlite3_system_errno(db) : 0;
  if (os_errno != 0) message += std::string(" (") + std::strerror(os_errno) + ")";
  return message;
}

// The connection's last error as a SqliteFailure that knows its primary result code.
SqliteFailure failure_of(sqlite3* db) {
  return SqliteFailure(describe_error(db),
                       db != nullptr ? (sqlite3_errcode(db) & 0xff) : SQLITE_NOMEM);
}

struct ConnectionCloser {
  // close_v2 also copes with a statement someone forgot to finalize.
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using Connection = std::unique_ptr<sqlite3, ConnectionCloser>;

struct StatementFinalizer {
  void operator()(sqlite3_stmt* statement) const { sqlite3_finalize(statement); }
};
using Statement = std::unique_ptr<sqlite3_stmt, StatementFinalizer>;

Statement prepare(sqlite3* db, const char* sql, unsigned int flags = 0) {
  sqlite3_stmt* raw = nullptr;
  const int rc = sqlite3_prepare_v3(db, sql, -1, flags, &raw, nullptr);
  Statement statement(raw);
  if (rc != SQLITE_OK) throw failure_of(db);
  return statement;
}

// One execution of a prepared statement. It resets the statement on scope exit, because a
// statement left mid-step keeps a read transaction open (and would pin the WAL).
class Execution {
 public:
  Execution(sqlite3* db, sqlite3_stmt* statement) : db_(db), statement_(statement) {}
  ~Execution() {
    sqlite3_reset(statement_);
    sqlite3_clear_bindings(statement_);
  }
  Execution(const Execution&) = delete;
  Execution& operator=(const Execution&) = delete;

  Execution& bind(int index, const std::string& text) {
    check(sqlite3_bind_text(statement_, index, text.data(), static_cast<int>(text.size()),
                            SQLITE_TRANSIENT));
    return *this;
  }
  Execution& bind(int index, double value) {
    check(sqlite3_bind_double(statement_, index, value));
    return *this;
  }

  // true while a row is available.
  bool step() {
    const int rc = sqlite3_step(statement_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    throw failure_of(db_);
  }
  void run() {
    while (step()) {
    }
  }

  std::string text(int column) const {
    const unsigned char* value = sqlite3_column_text(statement_, column);
    return value == nullptr ? std::string() : reinterpret_cast<const char*>(value);
  }
  double real(int column) const { return sqlite3_column_double(statement_, column); }
  long long integer(int column) const { return sqlite3_column_int64(statement_, column); }

 private:
  void check(int rc) {
    if (rc != SQLITE_OK) throw failure_of(db_);
  }

  sqlite3* db_;
  sqlite3_stmt* statement_;
};

// Runs a one-off statement (start-up only) and returns its first row's first column.
std::string query_text(sqlite3* db, const std::string& sql) {
  Statement statement = prepare(db, sql.c_str());
  Execution execution(db, statement.get());
  return execution.step() ? execution.text(0) : std::string();
}
long long query_integer(sqlite3* db, const std::string& sql) {
  Statement statement = prepare(db, sql.c_str());
  Execution execution(db, statement.get());
  return execution.step() ? execution.integer(0) : 0;
}
void execute(sqlite3* db, const std::string& sql) {
  Statement statement = prepare(db, sql.c_str());
  Execution(db, statement.get()).run();
}

// Makes sure `path` names a regular file, creating it ourselves with mode 0600 when it is
// missing: SQLite would create it 0644 minus the umask, readable by every local user. fchmod
// makes the mode independent of the umask. Returns true when this call created the file; an
// existing file keeps the mode its owner chose.
bool ensure_private_file(const std::string& path, const std::string& path_key,
                         const std::string& described_path) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) == 0) {
    if (S_ISLNK(info.st_mode)) {
      throw PluginConfigError(path_key, described_path +
                                            " is a symbolic link; the lease database is never "
                                            "opened through a link: name the file itself");
    }
    if (S_ISDIR(info.st_mode)) {
      throw PluginConfigError(path_key, described_path +
                                            " is a directory; the path must name a database "
                                            "file, for example " +
                                            path + "/" + kDefaultFileName);
    }
    if (!S_ISREG(info.st_mode)) {
      throw PluginConfigError(path_key, described_path +
                                            " exists but is not a regular file; the path "
                                            "must name a database file");
    }
    return false;
  }
  // O_EXCL: if another process creates the file between stat() and here, it is theirs.
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    throw PluginConfigError(path_key, "cannot create the ownership database " + described_path +
                                          ": " + std::strerror(errno));
  }
  const int chmod_errno = ::fchmod(fd, 0600) == 0 ? 0 : errno;
  ::close(fd);
  if (chmod_errno != 0) {
    throw PluginConfigError(path_key, "cannot make the ownership database " + described_path +
                                          " private (chmod 0600): " + std::strerror(chmod_errno));
  }
  return true;
}

}  // namespace

class SqliteOwnershipStore final : public OwnershipStore, public CapacityLedger {
 public:
  explicit SqliteOwnershipStore(const PluginContext& context)
      : owner_id_(lease_rules::resolve_owner_id(context)), clock_(context.clock) {
    const PluginConfig options = context.options();
    const std::string path_key = options.path_of("path");

    const std::optional<std::string> configured_path = options.optional_string("path");
    ttl_seconds_ = lease_rules::read_lease_timing(options).ttl_seconds();
    const long long busy_timeout_ms = options.get_integer("busy_timeout_ms", kDefaultBusyTimeoutMs);
    if (busy_timeout_ms < 1 || busy_timeout_ms > INT_MAX) {
      // 0 would turn every moment of contention between processes into a store error.
      options.reject("busy_timeout_ms", "must be between 1 and " + std::to_string(INT_MAX) +
                                            " milliseconds, got " +
                                            json_to_string(*options.raw("busy_timeout_ms")));
    }
    lease_rules::check_type(options, "sqlite", kUse);
    lease_rules::warn_unread_keys(options, *context.logger);

    std::string described_path;  // the path, and where it came from, for error messages
    if (configured_path.has_value() && !configured_path->empty()) {
      path_ = *configured_path;
      described_path = "'" + path_ + "'";
    } else if (!context.base_dir.empty()) {
      path_ = context.base_dir + "/" + kDefaultFileName;
      described_path = "'" + path_ + "' (the default under the base directory; set " + path_key +
                       " to choose another file)";
    } else {
      throw PluginConfigError(path_key, std::string("is required: it is not set and the host "
                                                    "gave no base directory to put ") +
                                            kDefaultFileName + " in");
    }

    const bool created_file = ensure_private_file(path_, path_key, described_path);
    // Several gateway processes started together open one new file at once. Making it WAL can
    // answer SQLITE_BUSY without ever calling the busy handler, so the busy timeout alone does
    // not cover the open: the whole open is retried, with a little jitter, until that timeout.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms);
    std::minstd_rand jitter(static_cast<unsigned>(::getpid()));
    for (int attempt = 1;; ++attempt) {
      try {
        open_database(static_cast<int>(busy_timeout_ms), path_key, described_path, created_file);
        break;
      } catch (const SqliteFailure& failure) {
        close();  // statements, then the connection: the next attempt starts clean
        if (!failure.busy() || std::chrono::steady_clock::now() >= deadline) {
          throw PluginConfigError(
              path_key, "cannot use " + described_path +
                            " as the ownership database: " + failure.what() +
                            (attempt > 1 ? " (after " + std::to_string(attempt) + " attempts)"
                                         : std::string()));
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2 + jitter() % 20));
      }
    }
    context.logger->info("Sandbox ownership store: sqlite " + path_ +
                         " (ttl=" + lease_rules::format_one_decimal(ttl_seconds_) + "s)");
  }

  ~SqliteOwnershipStore() override { close(); }

  const std::string& owner_id() const override { return owner_id_; }
  bool supports_cross_process() const override { return true; }
  double ttl_seconds() const override { return ttl_seconds_; }

  bool take(const std::string& sandbox_id) override {
    if (our_lease_is_fresh("take", sandbox_id)) return true;
    return in_write_transaction("take", sandbox_id, [&](double now) REQUIRES(mutex_) {
      if (!lease_rules::may_take(live_lease_for_write(sandbox_id, now))) return false;
      write_lease(sandbox_id, /*destroying=*/false, now + ttl_seconds_);
      return true;
    });
  }

  bool claim(const std::string& sandbox_id, bool for_destroy) override {
    return in_write_transaction("claim", sandbox_id, [&](double now) REQUIRES(mutex_) {
      if (!lease_rules::may_claim(live_lease_for_write(sandbox_id, now), owner_id_, for_destroy)) {
        return false;
      }
      write_lease(sandbox_id, for_destroy, now + ttl_seconds_);
      return true;
    });
  }

  RenewOutcome renew(const std::string& sandbox_id) override {
    if (our_lease_is_fresh("renew", sandbox_id)) return RenewOutcome::renewed;
    return in_write_transaction("renew", sandbox_id, [&](double now) REQUIRES(mutex_) {
      const RenewOutcome outcome =
          lease_rules::renew_outcome(live_lease_for_write(sandbox_id, now), owner_id_);
      if (outcome == RenewOutcome::renewed) {
        write_lease(sandbox_id, /*destroying=*/false, now + ttl_seconds_);
      }
      return outcome;
    });
  }

  void release(const std::string& sandbox_id) override {
    in_write_transaction("release", sandbox_id, [&](double now) REQUIRES(mutex_) {
      if (lease_rules::may_release(live_lease_for_write(sandbox_id, now), owner_id_)) {
        delete_lease(sandbox_id);
      }
      return true;
    });
  }

  // Read-only: a single SELECT, so an expired row is reported absent but left in place.
  std::optional<std::string> owner(const std::string& sandbox_id) override {
    return in_read("read", sandbox_id,
                   [&](double now) REQUIRES(mutex_) -> std::optional<std::string> {
                     std::optional<LeaseRecord> row = select_lease(sandbox_id);
                     if (!row.has_value() || !lease_rules::is_live(row->expires_at, now))
                       return std::nullopt;
                     return row->owner_id;
                   });
  }

  // expires_at is wall-clock seconds since the Unix epoch.
  std::optional<LeaseRecord> inspect(const std::string& sandbox_id) override {
    return in_read("inspect", sandbox_id,
                   [&](double now) REQUIRES(mutex_) -> std::optional<LeaseRecord> {
                     std::optional<LeaseRecord> row = select_lease(sandbox_id);
                     if (!row.has_value() || !lease_rules::is_live(row->expires_at, now))
                       return std::nullopt;
                     return row;
                   });
  }

  // ── CapacityLedger: the `capacity` table, one row per sandbox of the host ──
  Refusal reserve(const std::string& sandbox_id, const std::string& user, std::size_t total_ceiling,
                  std::size_t per_user_ceiling) override {
    return in_write_transaction("reserve capacity", sandbox_id, [&](double now) REQUIRES(mutex_) {
      Execution(db_.get(), purge_capacity_.get()).bind(1, now).run();
      {
        Execution existing(db_.get(), select_reservation_.get());
        existing.bind(1, sandbox_id);
        if (existing.step()) {
          // Ours now, whatever it was: a reservation of an existing sandbox is never refused.
          write_reservation(sandbox_id, existing.text(0), now);
          return Refusal::none;
        }
      }
      if (total_ceiling > 0 && count_reservations("") >= total_ceiling) return Refusal::total;
      if (per_user_ceiling > 0 && count_reservations(user) >= per_user_ceiling) {
        return Refusal::per_user;
      }
      write_reservation(sandbox_id, user, now);
      return Refusal::none;
    });
  }

  void renew_reservations(
      const std::vector<std::pair<std::string, std::string>>& sandboxes) override {
    if (sandboxes.empty()) return;
    // One transaction for all: a renewal pass over thousands of sandboxes is one commit.
    in_write_transaction("renew capacity", sandboxes.front().first,
                         [&](double now) REQUIRES(mutex_) {
                           for (const auto& [sandbox_id, user] : sandboxes)
                             write_reservation(sandbox_id, user, now);
                           Execution(db_.get(), purge_capacity_.get()).bind(1, now).run();
                           return true;
                         });
  }

  void unreserve(const std::string& sandbox_id, const std::string& /*user*/) override {
    in_write_transaction("release capacity", sandbox_id, [&](double) REQUIRES(mutex_) {
      Execution(db_.get(), delete_reservation_.get()).bind(1, sandbox_id).run();
      return true;
    });
  }

  std::size_t reserved(const std::string& user) override {
    return in_read("count capacity", user, [&](double now) REQUIRES(mutex_) {
      Execution query(db_.get(), user.empty() ? count_live_all_.get() : count_live_user_.get());
      query.bind(1, now);
      if (!user.empty()) query.bind(2, user);
      return query.step() ? static_cast<std::size_t>(query.integer(0)) : std::size_t{0};
    });
  }

  void close() override {
    MutexLock lock(mutex_);
    // Statements first: a connection cannot close while its statements live.
    purge_capacity_.reset();
    select_reservation_.reset();
    write_reservation_.reset();
    delete_reservation_.reset();
    count_live_all_.reset();
    count_live_user_.reset();
    begin_immediate_.reset();
    commit_.reset();
    rollback_.reset();
    select_lease_.reset();
    write_lease_.reset();
    delete_lease_.reset();
    db_.reset();
  }

 private:
  // Opens the connection, switches to WAL, creates or checks the schema and prepares the
  // statements every call uses. Throws SqliteFailure for SQLite's refusals and
  // PluginConfigError for files that are SQLite databases but not ours.
  void open_database(int busy_timeout_ms, const std::string& path_key,
                     const std::string& described_path, bool created_file) REQUIRES(mutex_) {
    sqlite3* raw = nullptr;
    // NOMUTEX: mutex_ already serialises every use of this connection.
    const int rc = sqlite3_open_v2(
        path_.c_str(), &raw,
        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_NOFOLLOW,
        nullptr);
    db_.reset(raw);  // a failed open still hands back a handle that must be closed
    if (rc != SQLITE_OK) throw failure_of(db_.get());
    sqlite3* db = db_.get();
    // SQLite silently falls back to read-only when it cannot write the file.
    if (sqlite3_db_readonly(db, "main") == 1) {
      throw PluginConfigError(path_key, "the ownership database " + described_path +
                                            " is read-only for this process; leases need write "
                                            "access to the file and its directory");
    }
    if (sqlite3_busy_timeout(db, busy_timeout_ms) != SQLITE_OK) {
      throw failure_of(db);
    }

    // WAL lets readers proceed while another process writes, and is what makes one file
    // practical for several gateway processes.
    const std::string journal_mode = query_text(db, "PRAGMA journal_mode = WAL");
    if (journal_mode != "wal") {
      throw SqliteFailure("SQLite refused WAL journal mode (it kept '" + journal_mode + "')");
    }
    // In WAL mode NORMAL only risks the last commits on power loss, which also kills every
    // process whose leases those were.
    execute(db, "PRAGMA synchronous = NORMAL");

    execute(db, "BEGIN IMMEDIATE");
    try {
      prepare_schema(db, path_key, described_path);
      // The capacity ledger is a table of its own beside the leases: a file made by
      // an earlier build gains it here, and such a build still reads the file (it looks only
      // at `leases`), so the schema version stays.
      execute(db,
              "CREATE TABLE IF NOT EXISTS capacity ("
              " sandbox_id TEXT PRIMARY KEY,"
              " user_id TEXT NOT NULL,"
              " owner_id TEXT NOT NULL,"
              " expires_at REAL NOT NULL)");
      execute(db, "COMMIT");
    } catch (...) {
      if (sqlite3_get_autocommit(db) == 0) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }

    // SQLite gives -wal and -shm the main file's mode already; tighten them explicitly anyway
    // when the main file is ours, so a lease file never leaks through its side files.
    if (created_file) {
      for (const char* suffix : {"-wal", "-shm"}) {
        const std::string side_file = path_ + suffix;
        // On the file itself, never through a link someone put in its place.
        const host_fs::UniqueFd side(::open(side_file.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
        if (!side) {
          if (errno == ENOENT) continue;
          throw PluginConfigError(path_key, "cannot make " + side_file +
                                                " private (chmod 0600): " + std::strerror(errno));
        }
        struct stat side_stat {};
        if (::fstat(side.get(), &side_stat) != 0 || !S_ISREG(side_stat.st_mode)) {
          throw PluginConfigError(path_key, side_file + " is not a regular file");
        }
        try {
          host_fs::set_mode(side.get(), 0600, side_file);
        } catch (const std::exception& e) {
          throw PluginConfigError(path_key, "cannot make " + side_file + " private: " + e.what());
        }
      }
    }

    constexpr unsigned int kPersistent = SQLITE_PREPARE_PERSISTENT;
    begin_immediate_ = prepare(db, "BEGIN IMMEDIATE", kPersistent);
    commit_ = prepare(db, "COMMIT", kPersistent);
    rollback_ = prepare(db, "ROLLBACK", kPersistent);
    select_lease_ = prepare(
        db, "SELECT owner_id, state, expires_at FROM leases WHERE sandbox_id = ?1", kPersistent);
    write_lease_ = prepare(db,
                           "INSERT OR REPLACE INTO leases (sandbox_id, owner_id, state, expires_at)"
                           " VALUES (?1, ?2, ?3, ?4)",
                           kPersistent);
    delete_lease_ = prepare(db, "DELETE FROM leases WHERE sandbox_id = ?1", kPersistent);
    purge_capacity_ = prepare(db, "DELETE FROM capacity WHERE expires_at <= ?1", kPersistent);
    select_reservation_ =
        prepare(db, "SELECT user_id FROM capacity WHERE sandbox_id = ?1", kPersistent);
    write_reservation_ = prepare(db,
                                 "INSERT OR REPLACE INTO capacity (sandbox_id, user_id, owner_id,"
                                 " expires_at) VALUES (?1, ?2, ?3, ?4)",
                                 kPersistent);
    delete_reservation_ = prepare(db, "DELETE FROM capacity WHERE sandbox_id = ?1", kPersistent);
    count_live_all_ =
        prepare(db, "SELECT count(*) FROM capacity WHERE expires_at > ?1", kPersistent);
    count_live_user_ = prepare(
        db, "SELECT count(*) FROM capacity WHERE expires_at > ?1 AND user_id = ?2", kPersistent);

    struct stat opened {};
    if (::stat(path_.c_str(), &opened) != 0) {
      throw SqliteFailure("the database file vanished while it was being opened");
    }
    opened_device_ = opened.st_dev;
    opened_inode_ = opened.st_ino;
  }

  // Runs inside the start-up write transaction, so concurrent first opens cannot both create.
  void prepare_schema(sqlite3* db, const std::string& path_key, const std::string& described_path) {
    const long long application_id = query_integer(db, "PRAGMA application_id");
    const long long schema_version = query_integer(db, "PRAGMA user_version");
    const long long table_count =
        query_integer(db, "SELECT count(*) FROM sqlite_master WHERE type = 'table'");

    if (application_id == 0 && schema_version == 0 && table_count == 0) {  // a fresh file
      execute(db,
              "CREATE TABLE leases ("
              " sandbox_id TEXT PRIMARY KEY,"
              " owner_id TEXT NOT NULL,"
              " state TEXT NOT NULL CHECK (state IN ('own', 'del')),"
              " expires_at REAL NOT NULL)");
      execute(db, "PRAGMA application_id = " + std::to_string(kApplicationId));
      execute(db, "PRAGMA user_version = " + std::to_string(kSchemaVersion));
      return;
    }
    if (application_id != kApplicationId) {
      throw PluginConfigError(path_key, described_path +
                                            " is an SQLite database of another program "
                                            "(application_id " +
                                            std::to_string(application_id) +
                                            "), not a sandboxd ownership database");
    }
    if (schema_version > kSchemaVersion) {
      throw PluginConfigError(
          path_key, "the ownership database " + described_path + " has schema version " +
                        std::to_string(schema_version) + ", newer than this build understands (" +
                        std::to_string(kSchemaVersion) +
                        "); upgrade sandboxd on this host or point it at another file");
    }
    if (schema_version < kSchemaVersion) {
      throw PluginConfigError(path_key, "the ownership database " + described_path +
                                            " has unknown schema version " +
                                            std::to_string(schema_version));
    }
    // Leases of crashed instances for ids nobody touches again would otherwise stay forever;
    // expired rows mean nothing, so any process may drop them.
    Statement purge = prepare(db, "DELETE FROM leases WHERE expires_at <= ?1");
    Execution(db, purge.get()).bind(1, clock_->wall_now()).run();
  }

  // Wraps one read-modify-write in BEGIN IMMEDIATE … COMMIT. The write lock is taken before the
  // read, so no other connection or process can slip in between our read and our write.
  template <typename Body>
  auto in_write_transaction(const char* action, const std::string& sandbox_id, Body&& body)
      -> std::invoke_result_t<Body&, double> {
    MutexLock lock(mutex_);
    require_open(action, sandbox_id);
    sqlite3* db = db_.get();
    try {
      Execution(db, begin_immediate_.get()).run();
      try {
        // Read the time only once the lock is ours: waiting for it may take a while.
        auto result = body(clock_->wall_now());
        Execution(db, commit_.get()).run();
        return result;
      } catch (...) {
        roll_back();
        throw;
      }
    } catch (const SqliteFailure& failure) {
      throw OwnershipBackendError(call_failure(action, sandbox_id, failure.what()));
    }
  }

  // Every warm acquire takes its lease and every release renews it. While our own lease has
  // more than three quarters of its TTL left, the write would only move its expiry: the renewal
  // interval is at most half the TTL (ttl_multiplier >= 2), so even a renewal that runs a little
  // early or late finds it alive with half an interval to spare. A SELECT then answers instead
  // of a WAL commit; anything else writes as before. With the default multiplier (4)
  // the renewal loop itself always writes: its leases have 3/4 of the TTL left when it runs.
  bool our_lease_is_fresh(const char* action, const std::string& sandbox_id) {
    return in_read(action, sandbox_id, [&](double now) REQUIRES(mutex_) {
      std::optional<LeaseRecord> row = select_lease(sandbox_id);
      return row.has_value() && row->owner_id == owner_id_ && !row->destroying &&
             row->expires_at - now > ttl_seconds_ * 0.75;
    });
  }

  template <typename Body>
  auto in_read(const char* action, const std::string& sandbox_id, Body&& body)
      -> std::invoke_result_t<Body&, double> {
    MutexLock lock(mutex_);
    require_open(action, sandbox_id);
    try {
      return body(clock_->wall_now());
    } catch (const SqliteFailure& failure) {
      throw OwnershipBackendError(call_failure(action, sandbox_id, failure.what()));
    }
  }

  // Caller holds mutex_. Best effort: the error that got us here is the one to report, and
  // some errors (disk full, I/O) have already rolled the transaction back.
  void roll_back() REQUIRES(mutex_) {
    if (sqlite3_get_autocommit(db_.get()) != 0) return;
    try {
      Execution(db_.get(), rollback_.get()).run();
    } catch (const SqliteFailure&) {
    }
  }

  // Caller holds mutex_. Also fails closed when the file at the path is no longer the one this
  // connection opened: SQLite would go on using the unlinked inode, and leases written there are
  // invisible to every other process. One stat per call (about a microsecond).
  void require_open(const char* action, const std::string& sandbox_id) const REQUIRES(mutex_) {
    if (!db_) {
      throw OwnershipBackendError(call_failure(action, sandbox_id, "the store is closed"));
    }
    struct stat now {};
    if (::stat(path_.c_str(), &now) != 0) {
      throw OwnershipBackendError(call_failure(
          action, sandbox_id,
          "the database file was deleted while in use (" + std::string(std::strerror(errno)) +
              "); leases written now would be seen by no other process, so none are; restore "
              "the file or restart this host to start a new one"));
    }
    if (now.st_dev != opened_device_ || now.st_ino != opened_inode_) {
      throw OwnershipBackendError(call_failure(
          action, sandbox_id,
          "the database file was replaced while in use (device/inode " +
              std::to_string(opened_device_) + "/" + std::to_string(opened_inode_) + " became " +
              std::to_string(now.st_dev) + "/" + std::to_string(now.st_ino) +
              "); restart this host to use the new file"));
    }
  }

  std::string call_failure(const char* action, const std::string& sandbox_id,
                           const std::string& cause) const {
    return std::string("failed to ") + action + " sandbox ownership for " + sandbox_id + ": " +
           cause + " (database " + path_ + ")";
  }

  // Caller holds mutex_.
  std::optional<LeaseRecord> select_lease(const std::string& sandbox_id) REQUIRES(mutex_) {
    Execution query(db_.get(), select_lease_.get());
    query.bind(1, sandbox_id);
    if (!query.step()) return std::nullopt;
    return LeaseRecord{query.text(0), query.text(1) == "del", query.real(2)};
  }

  // The live lease; an expired row is deleted on the way, as the memory store does. Caller
  // holds mutex_ and is inside a write transaction.
  std::optional<lease_rules::LiveLease> live_lease_for_write(const std::string& sandbox_id,
                                                             double now) REQUIRES(mutex_) {
    std::optional<LeaseRecord> row = select_lease(sandbox_id);
    if (!row.has_value()) return std::nullopt;
    if (!lease_rules::is_live(row->expires_at, now)) {
      delete_lease(sandbox_id);
      return std::nullopt;
    }
    return lease_rules::LiveLease{row->owner_id, row->destroying};
  }

  // Caller holds mutex_ and is inside a write transaction.
  void write_lease(const std::string& sandbox_id, bool destroying, double expires_at)
      REQUIRES(mutex_) {
    Execution(db_.get(), write_lease_.get())
        .bind(1, sandbox_id)
        .bind(2, owner_id_)
        .bind(3, std::string(destroying ? "del" : "own"))
        .bind(4, expires_at)
        .run();
  }

  // Caller holds mutex_ and is inside a write transaction.
  void write_reservation(const std::string& sandbox_id, const std::string& user, double now)
      REQUIRES(mutex_) {
    Execution(db_.get(), write_reservation_.get())
        .bind(1, sandbox_id)
        .bind(2, user)
        .bind(3, owner_id_)
        .bind(4, now + ttl_seconds_)
        .run();
  }

  // Caller holds mutex_ and is inside a write transaction (after the purge, so every row is
  // live).
  std::size_t count_reservations(const std::string& user) REQUIRES(mutex_) {
    Execution query(db_.get(), user.empty() ? count_live_all_.get() : count_live_user_.get());
    query.bind(1, -1.0);
    if (!user.empty()) query.bind(2, user);
    return query.step() ? static_cast<std::size_t>(query.integer(0)) : std::size_t{0};
  }

  // Caller holds mutex_ and is inside a write transaction.
  void delete_lease(const std::string& sandbox_id) REQUIRES(mutex_) {
    Execution(db_.get(), delete_lease_.get()).bind(1, sandbox_id).run();
  }

  const std::string owner_id_;
  const std::shared_ptr<Clock> clock_;
  std::string path_;  // set once in the constructor, read-only afterwards
  // The file this connection opened (set once by open_database).
  dev_t opened_device_ = 0;
  ino_t opened_inode_ = 0;
  double ttl_seconds_ = 0.0;  // set once in the constructor, read-only afterwards

  // Lock story: mutex_ guards db_ and every statement below (checked by clang). One SQLite
  // connection must not be used by two threads at once, and its transaction is per connection, so
  // two threads interleaving BEGIN/COMMIT on it would break atomicity. Exclusion against other
  // connections and processes comes from BEGIN IMMEDIATE, not from this mutex. close() nulls db_
  // under it, which is how later calls learn the store is closed.
  mutable Mutex mutex_;
  Connection db_
      GUARDED_BY(mutex_);  // declared before the statements, so it is destroyed after them
  Statement begin_immediate_ GUARDED_BY(mutex_);
  Statement commit_ GUARDED_BY(mutex_);
  Statement rollback_ GUARDED_BY(mutex_);
  Statement select_lease_ GUARDED_BY(mutex_);
  Statement write_lease_ GUARDED_BY(mutex_);
  Statement delete_lease_ GUARDED_BY(mutex_);
  Statement purge_capacity_ GUARDED_BY(mutex_);
  Statement select_reservation_ GUARDED_BY(mutex_);
  Statement write_reservation_ GUARDED_BY(mutex_);
  Statement delete_reservation_ GUARDED_BY(mutex_);
  Statement count_live_all_ GUARDED_BY(mutex_);
  Statement count_live_user_ GUARDED_BY(mutex_);
};

SANDBOXD_EXPORT_OWNERSHIP_STORE(SqliteOwnershipStore,
                                "ownership leases in an SQLite file shared by every process on "
                                "the host")

}  // namespace sandboxd::plugins::ownership_sqlite

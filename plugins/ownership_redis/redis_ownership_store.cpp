// ownership_redis:RedisOwnershipStore — leases in Redis, shared by gateways on many hosts, on
// the wire exactly as DeerFlow's Redis store writes them (design §7.5): key
// "{key_prefix}:{sandbox_id}", value "own:{owner}" or "del:{owner}", TTL in milliseconds
// max(1, int(ttl × 1000)). Every read-modify-write is one server-side Lua script (loaded once,
// called by SHA, reloaded on NOSCRIPT), so a C++ gateway and a Python DeerFlow gateway can share
// one Redis without either destroying the other's sandboxes.
//
// One deviation from DeerFlow's script, where design §7.2 and the other stores agree: a
// non-destroy claim never turns our own "del" lease back into "own".
//
// Lock story: one hiredis connection per store, guarded by `mutex_`; a call holds it for its
// round trips (each bounded by the socket timeout, 5 s by default) and for a reconnect (bounded
// by the connect timeout). Connecting is lazy: construction never touches the network, the
// first call that cannot reach Redis throws OwnershipBackendError, and the call after an error
// reconnects. No log line or message ever contains the URL's password.
#include <hiredis/hiredis.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "sandboxd/capabilities.hpp"
#include "sandboxd/lease_rules.hpp"
#include "sandboxd/sdk.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::plugins::ownership_redis {
namespace {

constexpr const char* kUse = "ownership_redis:RedisOwnershipStore";
constexpr const char* kDefaultKeyPrefix = "deerflow:sandbox:owner";
constexpr const char* kDefaultUrl = "redis://localhost:6379/0";

// 1 = written, 0 = refused.
constexpr const char* kTakeScript = R"(
local current = redis.call('GET', KEYS[1])
if current and string.sub(current, 1, 4) == 'del:' then return 0 end
redis.call('SET', KEYS[1], 'own:' .. ARGV[1], 'PX', ARGV[2])
return 1
)";

// ARGV[3] == '1': a teardown claim (writes del:).
constexpr const char* kClaimScript = R"(
local current = redis.call('GET', KEYS[1])
if current then
  if string.sub(current, 5) ~= ARGV[1] then return 0 end
  if ARGV[3] ~= '1' and string.sub(current, 1, 4) == 'del:' then return 0 end
end
local state = 'own:'
if ARGV[3] == '1' then state = 'del:' end
redis.call('SET', KEYS[1], state .. ARGV[1], 'PX', ARGV[2])
return 1
)";

// 1 = renewed, -1 = lapsed (no lease), 0 = lost (a peer's, or any del).
constexpr const char* kRenewScript = R"(
local current = redis.call('GET', KEYS[1])
if not current then return -1 end
if current == 'own:' .. ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
)";

constexpr const char* kReleaseScript = R"(
local current = redis.call('GET', KEYS[1])
if current == 'own:' .. ARGV[1] or current == 'del:' .. ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
)";

// The capacity ledger: KEYS[1] is the sorted set of every reservation
// ({prefix}:capacity, member sandbox id, score expiry in ms on the server's clock), KEYS[2] the
// user's ({prefix}:capacity:user:{user}). Expired members are dropped first; an id already
// reserved is renewed and never refused. 0 = granted, 1 = the total ceiling, 2 = the user's.
// ARGV: id, total ceiling, per-user ceiling (0: none), ttl ms.
constexpr const char* kReserveScript = R"(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
local expires = now + tonumber(ARGV[4])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
  redis.call('ZADD', KEYS[2], expires, ARGV[1])
  return 0
end
if tonumber(ARGV[2]) > 0 and redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 1 end
if tonumber(ARGV[3]) > 0 and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[3]) then return 2 end
redis.call('ZADD', KEYS[1], expires, ARGV[1])
redis.call('ZADD', KEYS[2], expires, ARGV[1])
return 0
)";

// Renews (or records) reservations with no ceiling. KEYS[1] the set of all, then each
// sandbox's user set (every key a script touches is named in KEYS, as Redis asks); ARGV[1] ttl
// ms, then the sandboxes' ids in the order of their user keys. Returns how many.
constexpr const char* kRenewReservationsScript = R"(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[1])
local n = 0
for i = 2, #ARGV do
  redis.call('ZADD', KEYS[1], expires, ARGV[i])
  redis.call('ZADD', KEYS[i], expires, ARGV[i])
  n = n + 1
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return n
)";

// KEYS[1] the set of all, KEYS[2] the user's; ARGV[1] the id.
constexpr const char* kUnreserveScript = R"(
redis.call('ZREM', KEYS[2], ARGV[1])
return redis.call('ZREM', KEYS[1], ARGV[1])
)";

// Live members of KEYS[1] on the server's clock.
constexpr const char* kCountReservationsScript = R"(
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
)";

// Where the store connects, parsed from redis://[user[:password]@]host[:port][/db] or
// unix:///path[?db=N].
struct RedisTarget {
  std::string host;
  int port = 6379;
  std::string unix_path;
  std::string user;
  std::string password;
  int db = 0;
  std::string display;  // the URL with any credentials shown as <redacted>
};

std::optional<int> parse_number(const std::string& text, int low, int high) {
  if (text.empty() || text.size() > 9) return std::nullopt;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  const int value = std::atoi(text.c_str());
  if (value < low || value > high) return std::nullopt;
  return value;
}

// Throws std::invalid_argument with a message that never contains the password.
RedisTarget parse_target(const std::string& url) {
  RedisTarget target;
  const auto scheme_end = url.find("://");
  if (scheme_end == std::string::npos) {
    throw std::invalid_argument("expected redis://[user:password@]host:port/db or unix:///path");
  }
  const std::string scheme = url.substr(0, scheme_end);
  std::string rest = url.substr(scheme_end + 3);
  if (scheme == "unix") {
    std::string query;
    if (const auto q = rest.find('?'); q != std::string::npos) {
      query = rest.substr(q + 1);
      rest.resize(q);
    }
    if (rest.empty() || rest.front() != '/') {
      throw std::invalid_argument("a unix:// URL needs an absolute socket path (unix:///path)");
    }
    target.unix_path = rest;
    if (query.rfind("db=", 0) == 0) {
      const auto db = parse_number(query.substr(3), 0, 1 << 20);
      if (!db) throw std::invalid_argument("the db= of a unix:// URL must be a number");
      target.db = *db;
    }
    target.display = "unix://" + rest + (target.db ? "?db=" + std::to_string(target.db) : "");
    return target;
  }
  if (scheme != "redis") {
    throw std::invalid_argument("scheme '" + scheme +
                                "' is not supported (redis:// or unix://; no TLS)");
  }
  std::string credentials;
  if (const auto at = rest.rfind('@'); at != std::string::npos) {
    credentials = rest.substr(0, at);
    rest = rest.substr(at + 1);
  }
  if (!credentials.empty()) {
    if (const auto colon = credentials.find(':'); colon != std::string::npos) {
      target.user = credentials.substr(0, colon);
      target.password = credentials.substr(colon + 1);
    } else {
      target.password = credentials;  // redis://password@host, as redis-py reads it
    }
  }
  std::string path;
  if (const auto slash = rest.find('/'); slash != std::string::npos) {
    path = rest.substr(slash + 1);
    rest.resize(slash);
  }
  if (const auto colon = rest.rfind(':'); colon != std::string::npos) {
    const auto port = parse_number(rest.substr(colon + 1), 1, 65535);
    if (!port) throw std::invalid_argument("the port must be a number from 1 to 65535");
    target.port = *port;
    rest.resize(colon);
  }
  if (rest.empty()) throw std::invalid_argument("the URL names no host");
  target.host = rest;
  if (!path.empty()) {
    const auto db = parse_number(path, 0, 1 << 20);
    if (!db) throw std::invalid_argument("the database number (after the host) must be a number");
    target.db = *db;
  }
  target.display = "redis://" + std::string(credentials.empty() ? "" : "<redacted>@") +
                   target.host + ":" + std::to_string(target.port) + "/" +
                   std::to_string(target.db);
  return target;
}

timeval to_timeval(double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - std::floor(seconds)) * 1e6);
  return tv;
}

struct ReplyDeleter {
  void operator()(redisReply* reply) const { freeReplyObject(reply); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

struct ContextDeleter {
  void operator()(redisContext* context) const { redisFree(context); }
};

// A call that could not reach Redis or got an error reply; becomes OwnershipBackendError.
class RedisFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A Lua script, named by its source; its SHA on the current server is the store's to keep.
using Script = const char*;

}  // namespace

class RedisOwnershipStore final : public OwnershipStore, public CapacityLedger {
 public:
  explicit RedisOwnershipStore(const PluginContext& context)
      : owner_id_(lease_rules::resolve_owner_id(context)), logger_(context.logger) {
    const PluginConfig options = context.options();
    ttl_seconds_ = lease_rules::read_lease_timing(options).ttl_seconds();
    ttl_ms_ = std::to_string(std::max<long long>(1, static_cast<long long>(ttl_seconds_ * 1000)));

    std::string url;
    std::string source;
    std::string given_key = "url";  // DeerFlow's sections spell it redis_url
    for (const char* key : {"url", "redis_url"}) {
      if (auto value = options.optional_string(key); value && !value->empty()) {
        if (!url.empty()) options.reject(key, "give url or redis_url, not both");
        url = *value;
        source = options.path_of(key);
        given_key = key;
      }
    }
    // design §7.6's fallback chain when the section names no URL.
    for (const char* variable : {"DEER_FLOW_SANDBOX_OWNERSHIP_REDIS_URL",
                                 "DEER_FLOW_STREAM_BRIDGE_REDIS_URL", "REDIS_URL"}) {
      if (!url.empty()) break;
      if (const char* value = std::getenv(variable); value && *value) {
        url = value;
        source = std::string("environment variable ") + variable;
      }
    }
    if (url.empty()) {
      url = kDefaultUrl;
      source = "the default";
    }
    try {
      target_ = parse_target(url);
    } catch (const std::invalid_argument& e) {
      if (source.rfind("environment variable ", 0) == 0) {
        throw PluginConfigError(source.substr(21), e.what());
      }
      options.reject(given_key, e.what());
    }
    key_prefix_ = options.get_string("key_prefix", kDefaultKeyPrefix);
    while (!key_prefix_.empty() && key_prefix_.back() == ':') key_prefix_.pop_back();
    if (key_prefix_.empty()) options.reject("key_prefix", "must not be empty");
    const double connect = options.get_number("connect_timeout_seconds", 5.0);
    const double socket = options.get_number("socket_timeout_seconds", 5.0);
    if (!(connect > 0 && connect <= 300)) {
      options.reject("connect_timeout_seconds", "must be in (0, 300] seconds");
    }
    if (!(socket > 0 && socket <= 300)) {
      options.reject("socket_timeout_seconds", "must be in (0, 300] seconds");
    }
    connect_timeout_ = to_timeval(connect);
    socket_timeout_ = to_timeval(socket);
    lease_rules::check_type(options, "redis", kUse);
    lease_rules::warn_unread_keys(options, *logger_);
    logger_->info("Sandbox ownership store: redis " + target_.display + " (from " + source +
                  ", key prefix " + key_prefix_ +
                  ", ttl=" + lease_rules::format_one_decimal(ttl_seconds_) + "s)");
  }

  const std::string& owner_id() const override { return owner_id_; }
  bool supports_cross_process() const override { return true; }
  double ttl_seconds() const override { return ttl_seconds_; }

  bool take(const std::string& sandbox_id) override {
    return run(kTakeScript, sandbox_id, {owner_id_, ttl_ms_}, "publish") == 1;
  }

  bool claim(const std::string& sandbox_id, bool for_destroy) override {
    return run(kClaimScript, sandbox_id, {owner_id_, ttl_ms_, for_destroy ? "1" : "0"}, "claim") ==
           1;
  }

  RenewOutcome renew(const std::string& sandbox_id) override {
    const long long result = run(kRenewScript, sandbox_id, {owner_id_, ttl_ms_}, "renew");
    if (result == 1) return RenewOutcome::renewed;
    if (result == -1) return RenewOutcome::lapsed;
    return RenewOutcome::lost;
  }

  void release(const std::string& sandbox_id) override {
    run(kReleaseScript, sandbox_id, {owner_id_}, "release");
  }

  std::optional<std::string> owner(const std::string& sandbox_id) override {
    auto lease = inspect(sandbox_id);
    if (!lease) return std::nullopt;
    return lease->owner_id;
  }

  std::optional<LeaseRecord> inspect(const std::string& sandbox_id) override {
    MutexLock lock(mutex_);
    try {
      const std::string key = key_of(sandbox_id);
      // One round trip for both: a MULTI/EXEC would do, but a pipeline of two reads is enough
      // for a read-only view.
      Reply value = command({"GET", key});
      Reply ttl = command({"PTTL", key});
      if (value->type == REDIS_REPLY_NIL) return std::nullopt;
      if (value->type != REDIS_REPLY_STRING) throw RedisFailure("GET answered a non-string");
      const std::string text(value->str, value->len);
      LeaseRecord record;
      record.destroying = text.rfind("del:", 0) == 0;
      record.owner_id = text.rfind("own:", 0) == 0 || record.destroying ? text.substr(4) : text;
      const double now =
          std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
              .count();
      record.expires_at = now + (ttl->type == REDIS_REPLY_INTEGER && ttl->integer > 0
                                     ? static_cast<double>(ttl->integer) / 1000.0
                                     : 0.0);
      return record;
    } catch (const RedisFailure& e) {
      drop_connection_locked();
      throw OwnershipBackendError("failed to read sandbox ownership for " + sandbox_id + ": " +
                                  e.what() + " (redis at " + target_.display + ")");
    }
  }

  // ── CapacityLedger: sorted sets beside the leases, one Lua script per call ──
  Refusal reserve(const std::string& sandbox_id, const std::string& user, std::size_t total_ceiling,
                  std::size_t per_user_ceiling) override {
    const long long result = run_keys(
        kReserveScript, {capacity_key(), capacity_user_key(user)},
        {sandbox_id, std::to_string(total_ceiling), std::to_string(per_user_ceiling), ttl_ms_},
        "reserve capacity", sandbox_id);
    if (result == 1) return Refusal::total;
    if (result == 2) return Refusal::per_user;
    return Refusal::none;
  }

  void renew_reservations(
      const std::vector<std::pair<std::string, std::string>>& sandboxes) override {
    // In batches: one script call per 500 sandboxes keeps each under the socket timeout.
    constexpr std::size_t kBatch = 500;
    for (std::size_t at = 0; at < sandboxes.size(); at += kBatch) {
      std::vector<std::string> keys = {capacity_key()};
      std::vector<std::string> args = {ttl_ms_};
      for (std::size_t i = at; i < std::min(sandboxes.size(), at + kBatch); ++i) {
        keys.push_back(capacity_user_key(sandboxes[i].second));
        args.push_back(sandboxes[i].first);
      }
      run_keys(kRenewReservationsScript, keys, args, "renew capacity", sandboxes[at].first);
    }
  }

  void unreserve(const std::string& sandbox_id, const std::string& user) override {
    run_keys(kUnreserveScript, {capacity_key(), capacity_user_key(user)}, {sandbox_id},
             "release capacity", sandbox_id);
  }

  std::size_t reserved(const std::string& user) override {
    const long long n = run_keys(kCountReservationsScript,
                                 {user.empty() ? capacity_key() : capacity_user_key(user)}, {},
                                 "count capacity", user);
    return n > 0 ? static_cast<std::size_t>(n) : 0;
  }

  void close() override {
    MutexLock lock(mutex_);
    closed_ = true;
    drop_connection_locked();
  }

 private:
  std::string key_of(const std::string& sandbox_id) const { return key_prefix_ + ":" + sandbox_id; }
  // Sandbox ids are 16 hex digits, so no lease key ({prefix}:{id}) can be one of these.
  std::string capacity_key() const { return key_prefix_ + ":capacity"; }
  std::string capacity_user_key(const std::string& user) const {
    return key_prefix_ + ":capacity:user:" + user;
  }

  long long run_keys(Script script, const std::vector<std::string>& keys,
                     const std::vector<std::string>& args, const char* what,
                     const std::string& subject) {
    MutexLock lock(mutex_);
    try {
      Reply reply = evaluate_locked(script, keys, args);
      if (reply->type != REDIS_REPLY_INTEGER) {
        throw RedisFailure("the script answered a non-integer");
      }
      return reply->integer;
    } catch (const RedisFailure& e) {
      drop_connection_locked();
      throw OwnershipBackendError(std::string("failed to ") + what + " for " + subject + ": " +
                                  e.what() + " (redis at " + target_.display + ")");
    }
  }

  long long run(Script script, const std::string& sandbox_id, const std::vector<std::string>& args,
                const char* what) {
    MutexLock lock(mutex_);
    try {
      Reply reply = evaluate_locked(script, {key_of(sandbox_id)}, args);
      if (reply->type != REDIS_REPLY_INTEGER) {
        throw RedisFailure("the script answered a non-integer");
      }
      return reply->integer;
    } catch (const RedisFailure& e) {
      drop_connection_locked();
      throw OwnershipBackendError(std::string("failed to ") + what + " sandbox ownership for " +
                                  sandbox_id + ": " + e.what() + " (redis at " + target_.display +
                                  ")");
    }
  }

  Reply evaluate_locked(Script script, const std::vector<std::string>& keys,
                        const std::vector<std::string>& args) REQUIRES(mutex_) {
    // Connected first: a new connection forgets every SHA (connect_locked clears the map), so
    // no SHA is read across it; and a copy, never a reference into the map, is kept.
    connect_locked();
    for (int attempt = 0; attempt < 2; ++attempt) {
      std::string sha;
      if (const auto known = loaded_shas_.find(script); known != loaded_shas_.end()) {
        sha = known->second;
      }
      if (sha.empty()) {
        Reply loaded = command({"SCRIPT", "LOAD", script});
        if (loaded->type != REDIS_REPLY_STRING) throw RedisFailure("SCRIPT LOAD failed");
        sha.assign(loaded->str, loaded->len);
        loaded_shas_[script] = sha;
      }
      std::vector<std::string> argv = {"EVALSHA", sha, std::to_string(keys.size())};
      argv.insert(argv.end(), keys.begin(), keys.end());
      argv.insert(argv.end(), args.begin(), args.end());
      Reply reply = command(argv, /*error_is_failure=*/false);
      if (reply->type == REDIS_REPLY_ERROR) {
        const std::string error(reply->str, reply->len);
        if (error.rfind("NOSCRIPT", 0) == 0) {  // a restarted or flushed server
          loaded_shas_.erase(script);
          continue;
        }
        throw RedisFailure(error);
      }
      return reply;
    }
    throw RedisFailure("the server kept forgetting the script (NOSCRIPT twice)");
  }

  // One command on the (re)connected context. Throws RedisFailure on I/O errors and, unless
  // told otherwise, on error replies.
  Reply command(const std::vector<std::string>& argv, bool error_is_failure = true)
      REQUIRES(mutex_) {
    connect_locked();
    std::vector<const char*> pointers;
    std::vector<size_t> lengths;
    for (const auto& arg : argv) {
      pointers.push_back(arg.data());
      lengths.push_back(arg.size());
    }
    auto* raw = static_cast<redisReply*>(redisCommandArgv(
        context_.get(), static_cast<int>(argv.size()), pointers.data(), lengths.data()));
    if (raw == nullptr) {
      const std::string error = context_->errstr[0] ? context_->errstr : "no answer";
      throw RedisFailure(context_->err == REDIS_ERR_IO &&
                                 error.find("Resource temporarily") != std::string::npos
                             ? "no answer within the socket timeout"
                             : error);
    }
    Reply reply(raw);
    if (error_is_failure && reply->type == REDIS_REPLY_ERROR) {
      throw RedisFailure(std::string(reply->str, reply->len));
    }
    return reply;
  }

  void connect_locked() REQUIRES(mutex_) {
    if (closed_) throw RedisFailure("the store is closed");
    if (context_) return;
    redisContext* raw =
        target_.unix_path.empty()
            ? redisConnectWithTimeout(target_.host.c_str(), target_.port, connect_timeout_)
            : redisConnectUnixWithTimeout(target_.unix_path.c_str(), connect_timeout_);
    if (raw == nullptr) throw RedisFailure("cannot allocate a connection");
    std::unique_ptr<redisContext, ContextDeleter> context(raw);
    if (context->err) {
      throw RedisFailure(std::string("cannot connect: ") + context->errstr);
    }
    redisSetTimeout(context.get(), socket_timeout_);
    context_ = std::move(context);
    // The scripts must be loaded again on a new connection's server (it may have restarted).
    loaded_shas_.clear();
    try {
      if (!target_.password.empty()) {
        std::vector<std::string> auth = {"AUTH"};
        if (!target_.user.empty()) auth.push_back(target_.user);
        auth.push_back(target_.password);
        command(auth);
      }
      if (target_.db != 0) command({"SELECT", std::to_string(target_.db)});
    } catch (...) {
      context_.reset();
      throw;
    }
  }

  void drop_connection_locked() REQUIRES(mutex_) { context_.reset(); }

  const std::string owner_id_;
  std::shared_ptr<Logger> logger_;
  // Set once in the constructor, read-only afterwards.
  double ttl_seconds_ = 0.0;
  std::string ttl_ms_;
  RedisTarget target_;
  std::string key_prefix_;
  timeval connect_timeout_{};
  timeval socket_timeout_{};

  // Lock story: mutex_ guards the connection, the closed flag and the scripts' SHAs on the
  // current server (checked by clang); a call holds it for its whole round trip.
  Mutex mutex_;
  std::unique_ptr<redisContext, ContextDeleter> context_ GUARDED_BY(mutex_);
  bool closed_ GUARDED_BY(mutex_) = false;
  std::map<Script, std::string> loaded_shas_ GUARDED_BY(mutex_);  // "" or absent: not loaded
};

SANDBOXD_EXPORT_OWNERSHIP_STORE(RedisOwnershipStore,
                                "leases in Redis shared across hosts (DeerFlow's encoding)")

}  // namespace sandboxd::plugins::ownership_redis

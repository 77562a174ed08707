// `sandboxctl serve`: one Provider for every gateway worker on the host, behind an HTTP/JSON
// control API (docs/serve-api.yaml) on a unix socket or 127.0.0.1.
#include <fcntl.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <rapidjson/document.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <optional>
#include <sstream>
#include <thread>

#include "cli_error.hpp"
#include "commands.hpp"
#include "egress_routes.hpp"
#include "error_status.hpp"
#include "http_door.hpp"
#include "lifecycle_stream.hpp"
#include "listen_address.hpp"
#include "metrics.hpp"
#include "route_table.hpp"
#include "sandboxd/capabilities.hpp"
#include "sandboxd/core/egress_host.hpp"
#include "sandboxd/core/logging.hpp"
#include "sandboxd/core/paths.hpp"
#include "sandboxd/core/relay.hpp"
#include "sandboxd/core/service_json.hpp"
#include "sandboxd/core/usage_sampler.hpp"
#include "sandboxd/host_fs.hpp"
#include "sandboxd/json.hpp"
#include "sandboxd/readiness.hpp"
#include "session.hpp"
#include "ui_page.hpp"
#include "ui_sessions.hpp"

namespace po = boost::program_options;

namespace sandboxctl {

using namespace sandboxd;

namespace {

// Exclusive ownership of one state directory by one serve: an flock on {state}/serve.lock,
// held for the process's life (released by the kernel if it dies), with the holder's pid in it.
class ServeLock {
 public:
  explicit ServeLock(const std::filesystem::path& state_dir) {
    const auto path = state_dir / "serve.lock";
    // O_NOFOLLOW: a link planted here must not make serve truncate another file.
    fd_ = ::open(path.c_str(), O_CREAT | O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd_ < 0) {
      throw CliError(ErrorKind::config,
                     "cannot open " + path.string() + ": " + std::strerror(errno));
    }
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      char pid[32] = {0};
      const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
      ::close(fd_);
      throw CliError(ErrorKind::conflict, "another sandboxctl serve (pid " +
                                              std::string(n > 0 ? pid : "?") +
                                              ") is serving state directory " + state_dir.string());
    }
    const std::string me = std::to_string(::getpid());
    if (::ftruncate(fd_, 0) == 0) {
      [[maybe_unused]] const ssize_t written = ::pwrite(fd_, me.data(), me.size(), 0);
    }
  }
  ~ServeLock() { ::close(fd_); }
  ServeLock(const ServeLock&) = delete;
  ServeLock& operator=(const ServeLock&) = delete;

 private:
  int fd_ = -1;
};

std::string read_token(const po::variables_map& vm) {
  if (vm.count("token-file")) {
    const std::string path = vm["token-file"].as<std::string>();
    std::ifstream in(path);
    if (!in) throw CliError(ErrorKind::config, "--token-file " + path + ": cannot be read");
    std::string token;
    std::getline(in, token);
    while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
    if (token.empty())
      throw CliError(ErrorKind::config, "--token-file " + path + ": the file is empty");
    return token;
  }
  if (vm.count("token-env")) {
    const std::string name = vm["token-env"].as<std::string>();
    const char* value = std::getenv(name.c_str());
    if (!value || !*value) {
      throw CliError(ErrorKind::config,
                     "--token-env " + name + ": the environment variable is not set");
    }
    return value;
  }
  return "";
}

bool token_matches(const std::string& authorization, const std::string& token) {
  static const std::string kBearer = "Bearer ";
  if (authorization.size() != kBearer.size() + token.size()) return false;
  if (authorization.compare(0, kBearer.size(), kBearer) != 0) return false;
  return CRYPTO_memcmp(authorization.data() + kBearer.size(), token.data(), token.size()) == 0;
}

using door::Request;
using door::RequestHead;
using door::Response;

// A rendered document (service_json.hpp) as an answer.
Response document(int status, const std::string& json) {
  return {status, "application/json", json + "\n", {}, ""};
}

Response error_response(core::ErrorKind kind, const std::string& message) {
  Response response = document(door::http_status(kind), core::error_json(kind, message));
  if (kind == core::ErrorKind::capacity) response.headers.emplace_back("Retry-After", "1");
  return response;
}

// The body of an acquire: {"user_id"?: string, "thread_id"?: string}.
void parse_acquire_body(const std::string& body, core::AcquireRequest& request) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return;
  rapidjson::Document doc;
  if (!sandboxd::parse_json(doc, body) || !doc.IsObject()) {
    throw CliError(ErrorKind::invalid_argument, "the request body is not a JSON object");
  }
  for (auto& [key, target] :
       {std::pair{"user_id", &request.user_id}, std::pair{"thread_id", &request.thread_id}}) {
    auto it = doc.FindMember(key);
    if (it == doc.MemberEnd() || it->value.IsNull()) continue;
    if (!it->value.IsString()) {
      throw CliError(ErrorKind::invalid_argument, std::string(key) + ": must be a string");
    }
    *target = std::string(it->value.GetString(), it->value.GetStringLength());
  }
  // from_snapshot: a name, or {name, user_id, allow_other_user} (docs/snapshots.md).
  const auto from = doc.FindMember("from_snapshot");
  if (from == doc.MemberEnd() || from->value.IsNull()) return;
  core::Provider::RestoreFrom restore;
  if (from->value.IsString()) {
    restore.name = from->value.GetString();
  } else if (from->value.IsObject()) {
    const auto name = from->value.FindMember("name");
    if (name == from->value.MemberEnd() || !name->value.IsString()) {
      throw CliError(ErrorKind::invalid_argument, "from_snapshot.name: must be a string");
    }
    restore.name = name->value.GetString();
    const auto owner = from->value.FindMember("user_id");
    if (owner != from->value.MemberEnd() && !owner->value.IsNull()) {
      if (!owner->value.IsString()) {
        throw CliError(ErrorKind::invalid_argument, "from_snapshot.user_id: must be a string");
      }
      restore.user_id = owner->value.GetString();
    }
    const auto allow = from->value.FindMember("allow_other_user");
    if (allow != from->value.MemberEnd()) {
      if (!allow->value.IsBool()) {
        throw CliError(ErrorKind::invalid_argument,
                       "from_snapshot.allow_other_user: must be true or false");
      }
      restore.allow_other_user = allow->value.GetBool();
    }
  } else {
    throw CliError(ErrorKind::invalid_argument,
                   "from_snapshot: a snapshot's name, or {\"name\", \"user_id\", "
                   "\"allow_other_user\"}");
  }
  request.from_snapshot = restore;
}

// The body of a fork: {"thread_ids": [string, …]} or {"count": n}.
void parse_fork_body(const std::string& body, std::vector<std::string>& thread_ids,
                     std::optional<std::size_t>& count) {
  rapidjson::Document doc;
  if (!sandboxd::parse_json(doc, body) || !doc.IsObject()) {
    throw CliError(ErrorKind::invalid_argument,
                   "a fork's body is a JSON object: {\"thread_ids\": [...]} or {\"count\": n}");
  }
  const auto ids = doc.FindMember("thread_ids");
  if (ids != doc.MemberEnd() && !ids->value.IsNull()) {
    if (!ids->value.IsArray()) {
      throw CliError(ErrorKind::invalid_argument, "thread_ids: must be an array of strings");
    }
    for (const auto& id : ids->value.GetArray()) {
      if (!id.IsString()) {
        throw CliError(ErrorKind::invalid_argument, "thread_ids: must be an array of strings");
      }
      thread_ids.emplace_back(id.GetString(), id.GetStringLength());
    }
  }
  const auto n = doc.FindMember("count");
  if (n != doc.MemberEnd() && !n->value.IsNull()) {
    if (!n->value.IsUint()) {
      throw CliError(ErrorKind::invalid_argument, "count: must be a whole number");
    }
    count = n->value.GetUint();
  }
}

// The one string member `key` of a JSON body ("" for an empty body or a null member).
std::optional<std::string> body_string(const std::string& body, const char* key) {
  if (body.find_first_not_of(" \t\r\n") == std::string::npos) return std::nullopt;
  rapidjson::Document doc;
  if (!sandboxd::parse_json(doc, body) || !doc.IsObject()) {
    throw CliError(ErrorKind::invalid_argument, "the request body is not a JSON object");
  }
  const auto it = doc.FindMember(key);
  if (it == doc.MemberEnd() || it->value.IsNull()) return std::nullopt;
  if (!it->value.IsString()) {
    throw CliError(ErrorKind::invalid_argument, std::string(key) + ": must be a string");
  }
  return std::string(it->value.GetString(), it->value.GetStringLength());
}

// The query's `user_id`, when given.
std::optional<std::string> query_user(const std::string& target) {
  for (const auto& [name, value] : door::query_parameters(target)) {
    if (name == "user_id" && !value.empty()) return value;
  }
  return std::nullopt;
}

// Request bodies of the control API are small JSON objects.
constexpr std::size_t kMaxBodyBytes = 64 * 1024;

// Each open connection is a descriptor: the soft limit is raised towards the hard one so
// --max-connections can be reached, and a warning says when it cannot.
void raise_descriptor_limit(std::size_t connections, const std::shared_ptr<Logger>& logger) {
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  const rlim_t wanted = static_cast<rlim_t>(connections) + 256;  // the provider's own files
  if (limit.rlim_cur < wanted && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = std::min(wanted, limit.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &limit);
  }
  if (limit.rlim_cur < wanted) {
    logger->warning("serve: the open-file limit is " + std::to_string(limit.rlim_cur) +
                    ", below --max-connections " + std::to_string(connections) +
                    " plus serve's own files; connections past it wait in the backlog");
  }
}

// The relay on `listen` ("HOST:PORT"), or on 127.0.0.1 and the port the last serve on
// `state_dir` used, else a port the kernel picks (core::start_relay_in). A sandbox URL handed
// out before a restart stays valid as long as the port is free to take again.
std::unique_ptr<core::Relay> start_relay(Session& session, const std::filesystem::path& state_dir,
                                         const std::string& listen,
                                         const std::shared_ptr<Logger>& logger) {
  core::RelayOptions options;
  if (!listen.empty()) {
    try {
      core::parse_relay_listen(listen, "--relay-listen", options);
    } catch (const std::invalid_argument& e) {
      throw CliError(ErrorKind::invalid_argument, e.what());
    }
  }
  core::Provider& provider = session.provider();
  try {
    return core::start_relay_in(
        state_dir, [&provider](const std::string& id) { return provider.endpoint(id); }, options,
        logger, /*reuse_port=*/listen.empty());
  } catch (const std::exception& e) {
    throw CliError(ErrorKind::config, e.what());
  }
}

// A document in the control API's error shape, {"error": {"kind", "message"}}: the server's own
// answers (400, 413, 431, 503) and the route table's 405.
Response error_document(int status, const std::string& kind, const std::string& message) {
  rapidjson::StringBuffer buffer;
  JsonWriter w(buffer);
  w.StartObject();
  w.Key("error");
  w.StartObject();
  write_json_member(w, "kind", kind);
  write_json_member(w, "message", message);
  w.EndObject();
  w.EndObject();
  Response response = document(status, buffer.GetString());
  if (status == 503) response.headers.emplace_back("Retry-After", "1");
  return response;
}

// The control API's routes over the session's SandboxService, declared in one table
// (door/route_table.hpp); every answer is the renderer's document, every error the one error
// shape with its kind's status.
class ControlApi {
 public:
  using RouteParams = door::RouteParams;
  ControlApi(Session& session, ServeMetrics& metrics, std::shared_ptr<Logger> logger,
             std::string token, bool token_required_on_socket)
      : session_(session),
        metrics_(metrics),
        logger_(std::move(logger)),
        token_(std::move(token)),
        token_on_socket_(token_required_on_socket),
        routes_([](int status, const std::string& message) {
          return status == 404 ? error_response(core::ErrorKind::not_found, message)
                               : error_document(status, "method_not_allowed", message);
        }) {
    route("GET", "/v1/health", &ControlApi::health, door::RouteTable::Access::open);
    route("GET", "/metrics", &ControlApi::metrics);
    route("POST", "/v1/sandboxes/acquire", &ControlApi::acquire);
    route("GET", "/v1/sandboxes", &ControlApi::list);
    route("GET", "/v1/sandboxes/{id}", &ControlApi::get);
    route("DELETE", "/v1/sandboxes/{id}", &ControlApi::destroy);
    route("POST", "/v1/sandboxes/{id}/release", &ControlApi::release);
    // What happened to sandboxes, newest last (lifecycle_events.hpp).
    route("GET", "/v1/events", &ControlApi::events);
    // The operator's live view (ui_page.hpp). The page's files need no credential;
    // its data does, as a cookie from POST /ui/login or the bearer token.
    for (const door::UiAsset& asset : door::ui_assets()) {
      route("GET", std::string(asset.path), &ControlApi::ui_file, door::RouteTable::Access::open);
    }
    route("POST", "/ui/login", &ControlApi::ui_login);
    route("POST", "/ui/logout", &ControlApi::ui_logout, door::RouteTable::Access::open);
    route("GET", "/ui/api/health", &ControlApi::health);
    route("GET", "/ui/api/sandboxes", &ControlApi::list);
    route("GET", "/ui/api/events", &ControlApi::events);
    route("GET", "/ui/api/flow", &ControlApi::ui_flow);
    route("GET", "/ui/api/usage", &ControlApi::ui_usage);
    route("GET", "/ui/events", &ControlApi::ui_events);
    // An allowlist sandbox's way out (serve_egress.hpp).
    route("GET", "/v1/sandboxes/{id}/egress", &ControlApi::egress_view);
    route("POST", "/v1/sandboxes/{id}/egress/events", &ControlApi::egress_events);
    route("POST", "/v1/sandboxes/{id}/egress/deny-pending", &ControlApi::egress_deny_pending);
    route("POST", "/v1/sandboxes/{id}/egress/decide", &ControlApi::egress_decide);
    // Snapshots (docs/snapshots.md).
    route("POST", "/v1/sandboxes/{id}/snapshots", &ControlApi::snapshot);
    route("GET", "/v1/snapshots", &ControlApi::snapshots);
    route("DELETE", "/v1/snapshots/{name}", &ControlApi::delete_snapshot);
    route("POST", "/v1/sandboxes/{id}/fork", &ControlApi::fork);
  }

  // On the I/O thread, with the head only: the token is checked before any body byte is read.
  door::Admission admit(const RequestHead& head) const {
    if (routes_.is_open(head)) return door::Admission::public_route();
    if (!(head.over_tcp || token_on_socket_)) return door::Admission::credentialed();
    const bool log_in = head.path == "/ui/login";
    if (log_in && ui_sessions_.login_refused()) {
      return door::Admission::refused(door::UiSessions::too_many_logins());
    }
    // The page's session cookie opens its data routes only (ui_sessions.hpp).
    if (token_matches(head.header("authorization"), token_) || ui_sessions_.admits(head)) {
      return door::Admission::credentialed();
    }
    if (log_in) ui_sessions_.note_failed_login();
    Response refused = error_document(401, "unauthorized", "missing or wrong bearer token");
    refused.headers.emplace_back("WWW-Authenticate", "Bearer");
    return door::Admission::refused(std::move(refused));
  }

  // On a worker thread.
  Response handle(const Request& request) { return routes_.dispatch(request); }

 private:
  using Handler = Response (ControlApi::*)(const Request&, const RouteParams&);

  // A route whose handler's errors are answered in the error shape (an internal one logged
  // with the route's pattern; std::bad_alloc left to the server, which answers 503).
  void route(const std::string& method, const std::string& pattern, Handler handler,
             door::RouteTable::Access access = door::RouteTable::Access::credentialed) {
    routes_.add(
        method, pattern,
        [this, handler, label = method + " " + pattern](const Request& request,
                                                        const RouteParams& params) {
          try {
            return (this->*handler)(request, params);
          } catch (const std::bad_alloc&) {
            throw;
          } catch (const std::exception& e) {
            const core::ServiceError error = core::as_service_error(e);
            if (error.kind() == core::ErrorKind::unavailable) metrics_.record_backend_error();
            if (error.kind() == core::ErrorKind::internal) {
              logger_->error("serve: " + label + ": " + error.what());
            }
            return error_response(error.kind(), error.what());
          }
        },
        access);
  }

  // GET /v1/events?after=N&limit=M (door/lifecycle_stream.hpp).
  Response events(const Request& request, const RouteParams&) {
    return document(200, door::lifecycle_events_json(request.head, session_.events().get()));
  }

  Response ui_file(const Request& request, const RouteParams&) {
    return door::ui_asset_response(request.head.path).value();  // routed for each asset only
  }

  // Admitted with the token in the Authorization header: hands the browser the cookie.
  Response ui_login(const Request&, const RouteParams&) { return ui_sessions_.login(); }

  Response ui_logout(const Request& request, const RouteParams&) {
    return ui_sessions_.logout(request.head);
  }

  // The relay's and the egress proxy's counters now, where this serve runs them: /metrics and
  // the Flow panel read the same.
  struct SideStats {
    std::optional<core::RelayStats> relay;
    std::optional<core::EgressStats> egress;
    const core::RelayStats* relay_or_null() const { return relay ? &*relay : nullptr; }
    const core::EgressStats* egress_or_null() const { return egress ? &*egress : nullptr; }
  };
  SideStats side_stats() const {
    SideStats stats;
    if (relay_) stats.relay = relay_->stats();
    if (egress_) stats.egress = egress_->proxy().stats();
    return stats;
  }

  // GET /ui/api/flow: the Flow panel's counters (metrics.hpp).
  Response ui_flow(const Request&, const RouteParams&) {
    const SideStats side = side_stats();
    return {200,
            "application/json",
            metrics_.flow_json(session_.provider(), side.relay_or_null(), side.egress_or_null()),
            {},
            ""};
  }

  // GET /ui/api/usage: each sandbox's CPU, memory and processes as last sampled (never a call
  // to the engine on this request: usage_sampler.hpp).
  Response ui_usage(const Request&, const RouteParams&) {
    return {200,
            "application/json",
            usage_ ? core::to_json(usage_->view()) : core::to_json(core::UsageView{}),
            {},
            ""};
  }

  // GET /ui/events: the lifecycle events as Server-Sent Events, from after Last-Event-ID (a
  // reconnect) or ?after=N; the server keeps it open (door::EventStream).
  Response ui_events(const Request& request, const RouteParams&) {
    return door::lifecycle_stream_response(request.head, session_.events());
  }

  Response health(const Request&, const RouteParams&) {
    return document(200, core::to_json(session_.service().health()));
  }

  Response metrics(const Request&, const RouteParams&) {
    const SideStats side = side_stats();
    return {200,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics_.render(session_.provider(), side.relay_or_null(), side.egress_or_null()),
            {},
            ""};
  }

  Response acquire(const Request& request, const RouteParams&) {
    core::AcquireRequest acquire;
    parse_acquire_body(request.body, acquire);
    acquire.cancellation = request.hung_up;  // a client that hangs up leaves the queue
    const auto start = std::chrono::steady_clock::now();
    core::Acquired acquired;
    try {
      acquired = session_.service().acquire(acquire);
    } catch (const std::exception& e) {
      metrics_.record_acquire_failure(core::kind_name(core::as_service_error(e).kind()));
      throw;
    }
    metrics_.record_acquire(
        acquired.path,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return document(200, core::to_json(acquired));
  }

  Response list(const Request&, const RouteParams&) {
    return document(200, core::to_json(session_.service().list()));
  }

  Response get(const Request&, const RouteParams& params) {
    return document(200, core::to_json(session_.service().get(params["id"])));
  }

  Response destroy(const Request&, const RouteParams& params) {
    const core::Destroyed destroyed = session_.service().destroy(params["id"]);
    metrics_.record_destroy();
    return document(200, core::to_json(destroyed));
  }

  // A fork (docs/snapshots.md): new conversations made from sandbox {id}'s state, each counted
  // as an acquisition (path restored).
  Response fork(const Request& request, const RouteParams& params) {
    std::vector<std::string> thread_ids;
    std::optional<std::size_t> count;
    parse_fork_body(request.body, thread_ids, count);
    const auto start = std::chrono::steady_clock::now();
    core::Forked forked;
    try {
      forked = session_.service().fork(params["id"], thread_ids, count);
    } catch (const std::exception& e) {
      metrics_.record_acquire_failure(core::kind_name(core::as_service_error(e).kind()));
      throw;
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (const core::Acquired& made : forked.sandboxes) metrics_.record_acquire(made.path, seconds);
    return document(201, core::to_json(forked));
  }

  // Snapshots (docs/snapshots.md).
  Response snapshot(const Request& request, const RouteParams& params) {
    return document(201, core::to_json(session_.service().snapshot(
                             params["id"], body_string(request.body, "name"))));
  }
  Response snapshots(const Request& request, const RouteParams&) {
    return document(200,
                    core::to_json(session_.service().snapshots(query_user(request.head.target))));
  }
  Response delete_snapshot(const Request& request, const RouteParams& params) {
    const std::optional<std::string> user = query_user(request.head.target);
    if (!user) {
      throw CliError(ErrorKind::invalid_argument,
                     "DELETE /v1/snapshots/{name} needs ?user_id=U (snapshot names are per user)");
    }
    return document(200, core::to_json(session_.service().delete_snapshot(*user, params["name"])));
  }

  Response release(const Request&, const RouteParams& params) {
    const core::Released released = session_.service().release(params["id"]);
    metrics_.record_release();
    return document(200, core::to_json(released));
  }

  // The egress routes answer from this serve's own egress proxy, or forward to the host that
  // runs its sandboxes' proxy (a provisioner, through the backend), for a sandbox this serve
  // tracks (else not_found). `here` is the route over this serve's proxy.
  Response egress_route(const std::string& sandbox_id, const std::string& action,
                        const std::string& body,
                        const std::function<std::string(core::EgressHost&)>& here) {
    if (egress_ == nullptr && egress_remote_ == nullptr) {
      throw core::ServiceError(core::ErrorKind::not_found,
                               "this serve runs no egress proxy: the backend's network mode "
                               "is not allowlist");
    }
    session_.service().get(sandbox_id);  // tracked here, or 404
    if (egress_ != nullptr) return document(200, here(*egress_));
    RemoteSandboxEgress::Answer answer;
    try {
      answer = egress_remote_->egress_call(sandbox_id, action, body);
    } catch (const std::exception& e) {
      throw core::ServiceError(core::ErrorKind::unavailable, e.what());
    }
    if (answer.status == 200) return document(200, answer.body);
    // The remote host's refusal, in this serve's words: its status's kind, its detail.
    const std::string detail = remote_detail(answer.body);
    const std::string said = "the provisioner answered " + std::to_string(answer.status) +
                             (detail.empty() ? std::string() : ": " + detail);
    switch (answer.status) {
      case 400:
        throw core::ServiceError(core::ErrorKind::invalid_argument, detail.empty() ? said : detail);
      case 404:
        throw core::ServiceError(core::ErrorKind::not_found, said);
      default:
        throw core::ServiceError(core::ErrorKind::unavailable, said);
    }
  }

  // The "detail" (or "error"/"message") of a JSON error document, shortened; "" when none.
  static std::string remote_detail(const std::string& body) {
    rapidjson::Document doc;
    if (!parse_json(doc, body) || !doc.IsObject()) return "";
    for (const char* key : {"detail", "message", "error"}) {
      const auto it = doc.FindMember(key);
      if (it != doc.MemberEnd() && it->value.IsString()) {
        return std::string(it->value.GetString()).substr(0, 500);
      }
    }
    return "";
  }

  Response egress_view(const Request&, const RouteParams& params) {
    const std::string id = params["id"];
    return egress_route(id, "", "", [&](core::EgressHost& e) { return door::egress_view(e, id); });
  }

  Response egress_events(const Request&, const RouteParams& params) {
    const std::string id = params["id"];
    return egress_route(id, "events", "",
                        [&](core::EgressHost& e) { return door::egress_events(e, id); });
  }

  Response egress_deny_pending(const Request&, const RouteParams& params) {
    const std::string id = params["id"];
    return egress_route(id, "deny-pending", "",
                        [&](core::EgressHost& e) { return door::egress_deny_pending(e, id); });
  }

  Response egress_decide(const Request& request, const RouteParams& params) {
    const std::string id = params["id"];
    return egress_route(id, "decide", request.body, [&](core::EgressHost& e) {
      return door::egress_decide(e, id, request.body);
    });
  }

  Session& session_;
  ServeMetrics& metrics_;
  std::shared_ptr<Logger> logger_;
  const std::string token_;
  const bool token_on_socket_;
  // The operator page's sessions: their own values, never the token (ui_sessions.hpp).
  mutable door::UiSessions ui_sessions_{door::UiSessions::Options{"sandboxd_serve_ui"}};
  door::RouteTable routes_;  // built here, then only read

 public:
  const core::Relay* relay_ = nullptr;  // set before the server runs
  core::EgressHost* egress_ = nullptr;  // likewise; nullptr unless network mode is allowlist
  // Likewise: set when the backend's sandboxes get their egress proxy elsewhere (a provisioner).
  RemoteSandboxEgress* egress_remote_ = nullptr;
  core::UsageSampler* usage_ = nullptr;  // likewise; nullptr once serve stops sampling
};

}  // namespace

int cmd_serve(GlobalContext& context, const std::vector<std::string>& args) {
  const CommandHelp help{
      "sandboxctl [--config FILE] serve [--listen ADDR] [--token-file FILE | --token-env NAME]\n"
      "                                 [--on-exit leave|destroy] [--max-connections N]\n"
      "                                 [--workers N] [--shutdown-grace SECONDS] [--json]",
      "Hosts one provider in the foreground and answers the HTTP/JSON control API of\n"
      "docs/serve-api.yaml: POST /v1/sandboxes/acquire {user_id, thread_id}, GET /v1/sandboxes,\n"
      "GET|DELETE /v1/sandboxes/ID, POST /v1/sandboxes/ID/release, GET /v1/events?after=N,\n"
      "GET /v1/health, GET /metrics;\n"
      "on TCP, the operator's live view at /ui (a browser logs in with the token; docs/ui.md);\n"
      "with network mode allowlist also /v1/sandboxes/ID/egress[/events|/deny-pending|/decide]\n"
      "(over a remote_provisioner backend, forwarded to the provisioner that runs the proxy).\n"
      "Sandboxes without a host address (modes isolated, allowlist) are reached through its\n"
      "relay (--relay-listen) with their token; allowlist sandboxes get its egress proxy as their\n"
      "only way out (docs/egress.md).\n"
      "It listens on {state dir}/serve.sock (mode 0600) unless --listen says otherwise; a bearer\n"
      "token is required on TCP (and on the socket when one is given), checked as soon as the\n"
      "headers are in. One serve per state directory: a second one exits 6, and so does one\n"
      "whose --listen socket another process answers on. When it is listening it prints one\n"
      "line (--json: one document) naming the address.\n\n"
      "Every client has deadlines: 10 s for a request's line and headers, 30 s for its body\n"
      "and for taking the answer, 30 s between kept-alive requests. Connections cost no thread;\n"
      "past --max-connections the oldest unauthenticated or idle one is closed for a new one.\n"
      "Requests run on --workers threads (a slow create holds one); when none is free and the\n"
      "queue is full, or no thread can be started, the answer is 503 and serve keeps going.\n"
      "An acquire queued for a slot (overflow_policy wait) holds one too: at most half of the\n"
      "workers may wait, one more is answered 429 at once (queue_full), so a release that\n"
      "frees a slot always finds a worker. A client that hangs up while its acquire waits\n"
      "leaves the queue at once.\n\n"
      "SIGTERM or SIGINT stop it: it stops accepting, closes idle connections, lets requests in\n"
      "flight finish within --shutdown-grace seconds, then closes what is left, writes its\n"
      "registry and (--on-exit leave, the default) leaves every sandbox running for the next\n"
      "serve on this state directory, which takes them over at once, or (--on-exit destroy)\n"
      "destroys what it tracks.\n\n"
      "Example:\n  sandboxctl serve --listen 127.0.0.1:8765 --token-file /etc/sandboxd/token\n"};
  po::options_description options("Options");
  options.add_options()("listen", po::value<std::string>(),
                        "unix:PATH or 127.0.0.1:PORT (default unix:{state dir}/serve.sock)")(
      "token-file", po::value<std::string>(), "file whose first line is the bearer token")(
      "token-env", po::value<std::string>(), "environment variable holding the bearer token")(
      "on-exit", po::value<std::string>()->default_value("leave"),
      "leave (sandboxes keep running for the next serve) or destroy")(
      "max-connections", po::value<int>()->default_value(1024),
      "connections open at once (no thread each)")("workers", po::value<int>()->default_value(64),
                                                   "requests handled at once")(
      "shutdown-grace", po::value<double>()->default_value(10.0),
      "seconds requests in flight get to finish after SIGTERM")(
      "relay-listen", po::value<std::string>(),
      "HOST:PORT of the relay to sandboxes without a host address (default 127.0.0.1 and the "
      "port the last serve on this state directory had, else one the kernel picks)");
  const auto vm = parse_args(help, options, args);
  const std::string on_exit = vm["on-exit"].as<std::string>();
  if (on_exit != "leave" && on_exit != "destroy") {
    throw CliError(ErrorKind::invalid_argument,
                   "--on-exit: expected leave or destroy, got '" + on_exit + "'");
  }
  const auto positive = [&](const char* name, int low, int high) {
    const int value = vm[name].as<int>();
    if (value < low || value > high) {
      throw CliError(ErrorKind::invalid_argument,
                     std::string("--") + name + ": expected " + std::to_string(low) + " to " +
                         std::to_string(high) + ", got " + std::to_string(value));
    }
    return static_cast<std::size_t>(value);
  };
  door::Limits limits;
  limits.max_connections = positive("max-connections", 1, 1'000'000);
  limits.worker_threads = positive("workers", 1, 4096);
  const double grace = vm["shutdown-grace"].as<double>();
  if (!(grace >= 0.0 && grace <= 3600.0)) {
    throw CliError(ErrorKind::invalid_argument,
                   "--shutdown-grace: expected 0 to 3600 seconds, got " + std::to_string(grace));
  }
  limits.shutdown_grace = std::chrono::milliseconds(static_cast<long long>(grace * 1000));
  limits.max_body_bytes = kMaxBodyBytes;
  if (vm.count("token-file") && vm.count("token-env")) {
    throw CliError(ErrorKind::invalid_argument, "--token-file and --token-env: give one of them");
  }

  // Every thread started from here on (provider, server, workers) inherits this mask, so the
  // stop signals reach only the waiter below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  if (!context.log_level_given) {  // a daemon logs one line per request unless told otherwise
    context.logger = std::make_shared<ProgressAwareLogger>(
        std::make_shared<core::StderrLogger>(LogLevel::info), context.progress, LogLevel::info);
  }
  core::SandboxConfig config = load_command_config(context.config_file);
  const auto state_dir = core::resolve_base_dir(config.base_dir);
  core::ensure_private_dir(state_dir);
  const ServeLock lock(state_dir);
  const door::ListenAddress address =
      parse_listen_address(vm.count("listen") ? vm["listen"].as<std::string>()
                                              : "unix:" + (state_dir / "serve.sock").string());
  const std::string token = read_token(vm);
  if (address.tcp && token.empty()) {
    throw CliError(ErrorKind::invalid_argument,
                   "--listen " + address.display() +
                       ": a bearer token is required on TCP (--token-file or --token-env)");
  }
  raise_descriptor_limit(limits.max_connections, context.logger);

  // The address is claimed before the provider starts: a serve that cannot listen must not
  // reconcile, renew or reap anything.
  ServeMetrics metrics;
  ControlApi* api = nullptr;  // set once the session is up; nothing is served before run()
  door::ServerOptions server_options;
  server_options.name = "serve";
  server_options.address = address;
  server_options.limits = limits;
  server_options.admit = [&api](const RequestHead& head) { return api->admit(head); };
  server_options.handle = [&api](const Request& request) { return api->handle(request); };
  server_options.error_body = error_document;
  server_options.on_answered = [&metrics](const door::Answered& answered) {
    metrics.record_request(answered.status);
  };
  server_options.logger = context.logger;
  door::Server server(std::move(server_options));
  try {
    server.bind();
  } catch (const door::ListenError& error) {
    throw CliError(error.in_use() ? ErrorKind::conflict : ErrorKind::config, error.what());
  }

  core::ProviderHooks hooks;
  hooks.wait_until_ready = [&metrics](const std::string& url, double timeout) {
    const auto start = std::chrono::steady_clock::now();
    const bool ready = wait_for_sandbox_ready(url, timeout);
    metrics.record_readiness_wait(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return ready;
  };
  // The egress proxy's settings (network mode allowlist) are read before the backend
  // is made: each secret's placeholder goes into the sandboxes' environment.
  std::optional<core::EgressSettings> egress_settings;
  try {
    egress_settings =
        core::egress_settings_from(config.backend.options_json, config.backend.key_path);
    if (egress_settings) {
      core::assign_secret_placeholders(*egress_settings, state_dir);
      config.backend.options_json = core::with_secret_placeholders(
          config.backend.options_json, *egress_settings, config.backend.key_path);
    }
  } catch (const core::ConfigError& e) {
    throw CliError(ErrorKind::config, e.what());
  }
  // Creations queued for a slot (overflow_policy wait) hold a worker each: at most half of the
  // workers may, so a release that frees a slot always finds one.
  Session session(config, context.logger, std::move(hooks), SessionKind::daemon,
                  std::max<std::size_t>(1, limits.worker_threads / 2));
  ControlApi control(session, metrics, context.logger, token, !token.empty());
  api = &control;
  // The relay: the way into sandboxes without a host address, on a port that stays
  // the same across restarts, with tokens that do too (the secret is the state directory's).
  std::unique_ptr<core::Relay> relay = start_relay(
      session, state_dir, vm.count("relay-listen") ? vm["relay-listen"].as<std::string>() : "",
      context.logger);
  session.service().set_relay(relay.get());
  control.relay_ = relay.get();
  // The egress proxy, for network mode allowlist: each sandbox's only way out.
  std::unique_ptr<core::EgressHost> egress;
  if (egress_settings) {
    egress = std::make_unique<core::EgressHost>(session.provider(), std::move(*egress_settings),
                                                state_dir, context.logger,
                                                std::make_shared<SystemClock>());
    egress->start();
    session.service().set_egress(egress.get());
    control.egress_ = egress.get();
  } else if (SandboxBackend* backend = session.provider().backend()) {
    control.egress_remote_ = backend_capability<RemoteSandboxEgress>(*backend);
  }

  // What each sandbox uses, for the operator page: sampled on a thread of its own
  // while a page polls it, never on a request.
  auto usage =
      std::make_unique<core::UsageSampler>(session.provider(), std::make_shared<SystemClock>());
  usage->start();
  control.usage_ = usage.get();

  std::thread waiter([&server, &stop_signals, logger = context.logger] {
    int signal_number = 0;
    sigwait(&stop_signals, &signal_number);
    logger->info(std::string("serve: ") + strsignal(signal_number) +
                 ": no longer accepting; finishing the requests in flight");
    server.stop();
  });
  const auto counts = session.provider().counts();
  if (json_output(context, vm)) {
    rapidjson::StringBuffer buffer;
    JsonWriter w(buffer);
    w.StartObject();
    write_json_member(w, "listen", server.bound().display());
    w.Key("pid");
    w.Int(::getpid());
    write_json_member(w, "owner_id", session.provider().owner_id());
    w.Key("inherited_active");
    w.Uint64(counts.active);
    w.Key("inherited_warm");
    w.Uint64(counts.warm);
    write_json_member(w, "relay", relay->base_url());
    // A browser reaches only TCP: the operator page's address there, else null.
    write_json_member_or_null(w, "ui", address.tcp ? server.bound().display() + "/ui" : "");
    w.EndObject();
    emit(buffer);
  } else {
    std::cout << "sandboxctl serve: listening on " << server.bound().display() << " (pid "
              << ::getpid() << ", " << counts.active << " active and " << counts.warm
              << " warm sandboxes inherited); relay at " << relay->base_url() << std::endl;
    if (address.tcp) {
      std::cout << "sandboxctl serve: operator page at " << server.bound().display()
                << "/ui (log in with the token)" << std::endl;
    }
  }
  std::cout.flush();

  std::size_t still_running = 0;
  try {
    still_running = server.run();
  } catch (...) {
    pthread_kill(waiter.native_handle(), SIGTERM);
    waiter.join();
    throw;
  }
  waiter.join();
  control.usage_ = nullptr;  // the server has stopped: no request reads it any more
  usage.reset();             // no sweep runs beside the shutdown below
  relay->stop();
  if (egress) egress->stop();
  const auto left = session.provider().counts();
  if (on_exit == "destroy") {
    context.logger->info("serve: destroying " + std::to_string(left.active) + " active and " +
                         std::to_string(left.warm) + " warm sandboxes (--on-exit destroy)");
    session.provider().shutdown();
    if (egress) egress->prune();  // the destroyed sandboxes' grants go with them
  } else {
    context.logger->info("serve: leaving " + std::to_string(left.active) + " active and " +
                         std::to_string(left.warm) +
                         " warm sandboxes running for the next serve on this state directory");
  }
  session.commit();
  if (!address.tcp) ::unlink(address.unix_path.c_str());
  if (still_running > 0) {
    // A handler still inside a backend call uses the provider, which must not be destroyed
    // under it: the registry is written, so leave now. What such a call creates is adopted by
    // the next serve's reconciliation once its lease lapses.
    context.logger->warning("serve: leaving with " + std::to_string(still_running) +
                            " requests still inside backend calls; the registry is written");
    std::cout.flush();
    std::cerr.flush();
    std::_Exit(kOk);
  }
  return kOk;
}

}  // namespace sandboxctl

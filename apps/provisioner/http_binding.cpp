#include "http_binding.hpp"

#include <tuple>

#include "lifecycle_stream.hpp"
#include "provisioner_metrics.hpp"
#include "refusal_log.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "ui_page.hpp"

namespace sandboxd::provisioner {
namespace {

door::Response answer(const Reply& reply) {
  return {reply.status, reply.content_type, reply.body, reply.headers, ""};
}

// The key a request presents: X-API-Key (DeerFlow's clients); below /ui also a bearer token
// (the page's log-in sends one). The page's data routes also take its session's cookie
// (ui_sessions.hpp), which is not the key.
std::string presented_key(const door::RequestHead& head) {
  if (const std::string& key = head.header("x-api-key"); !key.empty()) return key;
  if (!door::is_ui_path(head.path)) return "";
  const std::string& authorization = head.header("authorization");
  if (authorization.rfind("Bearer ", 0) == 0) return authorization.substr(7);
  return "";
}

// A bad query of the page's routes is 400 in DeerFlow's error shape.
door::Response usage_error(const std::exception& error) {
  return answer(detail(400, error.what()));
}

}  // namespace

door::RouteTable provisioner_routes(ProvisionerService& service,
                                    std::shared_ptr<ProvisionerMetrics> metrics,
                                    std::shared_ptr<door::RefusalLog> refusals,
                                    std::shared_ptr<door::UiSessions> ui_sessions) {
  using door::Request;
  using door::RouteParams;
  // FastAPI's answers, which DeerFlow's provisioner client knows.
  door::RouteTable routes([](int status, const std::string&) {
    return answer(detail(status, status == 405 ? "Method Not Allowed" : "Not Found"));
  });
  routes.add(
      "GET", "/health",
      [&service](const Request&, const RouteParams&) { return answer(service.health()); },
      door::RouteTable::Access::open);
  routes.add("GET", "/metrics", [metrics, refusals](const Request&, const RouteParams&) {
    return door::Response{200,
                          "text/plain; version=0.0.4; charset=utf-8",
                          metrics->render(refusals->total()),
                          {},
                          ""};
  });
  routes.add("GET", "/api/capabilities", [&service](const Request&, const RouteParams&) {
    return answer(service.capabilities());
  });
  routes.add("POST", "/api/sandboxes", [&service](const Request& request, const RouteParams&) {
    return answer(service.create(request.body));
  });
  routes.add("GET", "/api/sandboxes",
             [&service](const Request&, const RouteParams&) { return answer(service.list()); });
  routes.add("GET", "/api/sandboxes/{id}", [&service](const Request&, const RouteParams& params) {
    return answer(service.get(params["id"]));
  });
  routes.add("DELETE", "/api/sandboxes/{id}",
             [&service](const Request&, const RouteParams& params) {
               return answer(service.remove(params["id"]));
             });
  routes.add("GET", "/api/sandboxes/{id}/usage",
             [&service](const Request&, const RouteParams& params) {
               return answer(service.usage(params["id"]));
             });
  routes.add("GET", "/api/sandboxes/{id}/instance",
             [&service](const Request&, const RouteParams& params) {
               return answer(service.instance(params["id"]));
             });
  // The operator page (apps/door/ui_page.hpp): its files open, its data behind the
  // API key, presented as the page's cookie.
  for (const door::UiAsset& asset : door::ui_assets()) {
    routes.add(
        "GET", std::string(asset.path),
        [](const Request& request, const RouteParams&) {
          return door::ui_asset_response(request.head.path).value();
        },
        door::RouteTable::Access::open);
  }
  routes.add("POST", "/ui/login", [ui_sessions](const Request&, const RouteParams&) {
    return ui_sessions->login();  // admitted: the key
  });
  routes.add(
      "POST", "/ui/logout",
      [ui_sessions](const Request& request, const RouteParams&) {
        return ui_sessions->logout(request.head);
      },
      door::RouteTable::Access::open);
  routes.add("GET", "/ui/api/health", [&service](const Request&, const RouteParams&) {
    return answer(service.ui_health());
  });
  routes.add("GET", "/ui/api/sandboxes", [&service](const Request&, const RouteParams&) {
    return answer(service.ui_sandboxes());
  });
  routes.add("GET", "/ui/api/usage",
             [&service](const Request&, const RouteParams&) { return answer(service.ui_usage()); });
  routes.add("GET", "/ui/api/events", [&service](const Request& request, const RouteParams&) {
    try {
      return door::Response(
          200, "application/json",
          door::lifecycle_events_json(request.head, service.events().get()) + "\n");
    } catch (const core::ServiceError& error) {
      return usage_error(error);
    }
  });
  routes.add("GET", "/ui/events", [&service](const Request& request, const RouteParams&) {
    try {
      return door::lifecycle_stream_response(request.head, service.events());
    } catch (const core::ServiceError& error) {
      return usage_error(error);
    }
  });
  // An allowlist sandbox's way out (apps/door/egress_routes.hpp).
  using Call = ProvisionerService::EgressCall;
  for (const auto& [method, pattern, call] :
       {std::tuple{"GET", "/api/sandboxes/{id}/egress", Call::view},
        std::tuple{"POST", "/api/sandboxes/{id}/egress/events", Call::events},
        std::tuple{"POST", "/api/sandboxes/{id}/egress/deny-pending", Call::deny_pending},
        std::tuple{"POST", "/api/sandboxes/{id}/egress/decide", Call::decide}}) {
    routes.add(method, pattern,
               [&service, call = call](const Request& request, const RouteParams& params) {
                 return answer(service.egress(params["id"], call, request.body));
               });
  }
  return routes;
}

ProvisionerHttpServer::ProvisionerHttpServer(ProvisionerService& service,
                                             std::shared_ptr<Logger> logger,
                                             std::size_t max_request_bytes, int worker_threads)
    : ProvisionerHttpServer(
          service, std::move(logger),
          HttpSettings{max_request_bytes, static_cast<std::size_t>(worker_threads), 1024, 10.0}) {}

ProvisionerHttpServer::ProvisionerHttpServer(ProvisionerService& service,
                                             std::shared_ptr<Logger> logger,
                                             const HttpSettings& settings) {
  options_.name = "sandboxd-provisioner";
  options_.limits.max_body_bytes = settings.max_request_bytes;
  options_.limits.worker_threads = settings.worker_threads;
  options_.limits.max_connections = settings.max_connections;
  options_.limits.shutdown_grace =
      std::chrono::milliseconds(static_cast<long long>(settings.shutdown_grace_seconds * 1000));
  refusals_ = std::make_shared<door::RefusalLog>(logger, "provisioner auth rejected");
  metrics_ = std::make_shared<ProvisionerMetrics>();
  ui_sessions_ = std::make_shared<door::UiSessions>(
      door::UiSessions::Options{"sandboxd_provisioner_ui"});
  routes_ = std::make_shared<door::RouteTable>(
      provisioner_routes(service, metrics_, refusals_, ui_sessions_));
  metrics_->set_known_routes(routes_->patterns());
  options_.admit = [&service, refusals = refusals_, routes = routes_,
                    sessions = ui_sessions_](const door::RequestHead& head) {
    // Open: the open routes, and, as FastAPI's provisioner, any path outside /api/, /metrics
    // and the page's log-in and data (a 404 that reads no body).
    const bool log_in = head.path == "/ui/login";
    const bool guarded = head.path.rfind("/api/", 0) == 0 || head.path == "/metrics" || log_in ||
                         door::is_ui_data_path(head.path);
    if (routes->is_open(head) || !guarded) return door::Admission::public_route();
    if (log_in && sessions->login_refused()) {
      return door::Admission::refused(door::UiSessions::too_many_logins());
    }
    if (service.authorized(presented_key(head)) || sessions->admits(head)) {
      return door::Admission::credentialed();
    }
    if (log_in) sessions->note_failed_login();
    refusals->record(head.method, door::loggable_path(head.target));
    return door::Admission::refused(
        door::Response{401, "text/plain", "Unauthorized", {}, door::loggable_path(head.target)});
  };
  options_.handle = [routes = routes_](const door::Request& request) {
    return routes->dispatch(request);
  };
  options_.on_answered = [metrics = metrics_](const door::Answered& answered) {
    metrics->record_request(answered.route, answered.status);
  };
  options_.error_body = [](int status, const std::string&, const std::string& message) {
    door::Response response = answer(detail(status, message));
    if (status == 503) response.headers.emplace_back("Retry-After", "1");
    return response;
  };
  options_.logger = std::move(logger);
}

ProvisionerHttpServer::~ProvisionerHttpServer() = default;

int ProvisionerHttpServer::bind(const std::string& host, int port) {
  options_.address.tcp = true;
  options_.address.host = host;
  options_.address.port = port;
  server_ = std::make_unique<door::Server>(options_);
  server_->bind();
  return server_->bound().port;
}

std::size_t ProvisionerHttpServer::run() {
  return server_->run();
}

void ProvisionerHttpServer::stop() {
  if (server_) server_->stop();
}

}  // namespace sandboxd::provisioner

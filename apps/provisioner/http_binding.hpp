// ProvisionerService over HTTP/1.1, on the doors' server (apps/door/http_door.hpp): deadlines
// on every read and write, the X-API-Key checked as soon as a request's headers are in (before
// its body is read), connections that cost no thread, handlers on a bounded worker pool, 503
// when no worker or memory is to be had. A body beyond `max_request_bytes` is answered 413
// before any handler runs.
//
// Every /api/* request and GET /metrics must carry X-API-Key equal to the configured key; a
// refusal is 401 "Unauthorized", counted in /metrics, and logged with the method and path
// (never the key) at most one line a minute. /health and any other path are open and take no
// request body. The server's own errors use the service's {"detail": ...} shape.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "http_door.hpp"
#include "provisioner_service.hpp"
#include "refusal_log.hpp"
#include "route_table.hpp"
#include "ui_sessions.hpp"
#include "sandboxd/logger.hpp"

namespace sandboxd::provisioner {

struct HttpSettings {
  std::size_t max_request_bytes = 1024 * 1024;
  std::size_t worker_threads = 16;
  std::size_t max_connections = 1024;
  double shutdown_grace_seconds = 10.0;
};

class ProvisionerMetrics;

class ProvisionerHttpServer {
 public:
  ProvisionerHttpServer(ProvisionerService& service, std::shared_ptr<Logger> logger,
                        const HttpSettings& settings);
  // The older signature, for tests that only set the body cap and the workers.
  ProvisionerHttpServer(ProvisionerService& service, std::shared_ptr<Logger> logger,
                        std::size_t max_request_bytes, int worker_threads);
  ~ProvisionerHttpServer();
  ProvisionerHttpServer(const ProvisionerHttpServer&) = delete;
  ProvisionerHttpServer& operator=(const ProvisionerHttpServer&) = delete;

  // Binds host:port (0: a free port) and returns the port; throws door::ListenError naming
  // the address.
  int bind(const std::string& host, int port);
  // Serves until stop() and the graceful shutdown; returns how many requests were still
  // running in the backend when the grace period ended (0: none).
  std::size_t run();
  // From any thread, idempotent.
  void stop();

 private:
  std::unique_ptr<door::Server> server_;
  door::ServerOptions options_;
  std::shared_ptr<door::RefusalLog> refusals_;
  std::shared_ptr<ProvisionerMetrics> metrics_;
  std::shared_ptr<door::RouteTable> routes_;
  // The operator page's sessions: their own values, never the API key (ui_sessions.hpp).
  std::shared_ptr<door::UiSessions> ui_sessions_;
};

// The provisioner's routes (design §10.8: /health open; /metrics, /api/capabilities,
// /api/sandboxes, /api/sandboxes/{id}, /api/sandboxes/{id}/instance behind the key), each
// answered by the service; what matches none is FastAPI's 404 "Not Found" or 405 "Method Not
// Allowed" with Allow.
door::RouteTable provisioner_routes(ProvisionerService& service,
                                    std::shared_ptr<ProvisionerMetrics> metrics,
                                    std::shared_ptr<door::RefusalLog> refusals,
                                    std::shared_ptr<door::UiSessions> ui_sessions);

}  // namespace sandboxd::provisioner

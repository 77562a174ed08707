#include "http_binding.hpp"

#include "provisioner_metrics.hpp"
#include "refusal_log.hpp"

namespace sandboxd::provisioner {
namespace {

door::Response answer(const Reply& reply, std::string route) {
  return {reply.status, reply.content_type, reply.body, reply.headers, std::move(route)};
}

// "{id}" of /api/sandboxes/{id}[/instance], or "" when `path` is not one of them.
std::string sandbox_id_in(const std::string& path, bool instance) {
  static const std::string kPrefix = "/api/sandboxes/";
  static const std::string kInstance = "/instance";
  if (path.rfind(kPrefix, 0) != 0) return "";
  std::string rest = path.substr(kPrefix.size());
  if (instance) {
    if (rest.size() <= kInstance.size() ||
        rest.compare(rest.size() - kInstance.size(), kInstance.size(), kInstance) != 0) {
      return "";
    }
    rest.resize(rest.size() - kInstance.size());
  }
  return rest.find('/') == std::string::npos ? rest : "";
}

}  // namespace

door::Response route_request(ProvisionerService& service, const door::Request& request) {
  const std::string& method = request.head.method;
  const std::string& path = request.head.path;
  if (method == "GET" && path == "/health") return answer(service.health(), path);
  if (method == "GET" && path == "/api/capabilities") return answer(service.capabilities(), path);
  if (path == "/api/sandboxes") {
    if (method == "POST") return answer(service.create(request.body), path);
    if (method == "GET") return answer(service.list(), path);
  }
  if (const std::string id = sandbox_id_in(path, /*instance=*/true);
      !id.empty() && method == "GET") {
    return answer(service.instance(id), "/api/sandboxes/{id}/instance");
  }
  if (const std::string id = sandbox_id_in(path, /*instance=*/false); !id.empty()) {
    if (method == "GET") return answer(service.get(id), "/api/sandboxes/{id}");
    if (method == "DELETE") return answer(service.remove(id), "/api/sandboxes/{id}");
  }
  return answer(detail(404, "Not Found"), "");
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
  options_.admit = [&service, refusals = refusals_](const door::RequestHead& head) {
    if (head.path.rfind("/api/", 0) != 0 && head.path != "/metrics") {
      return door::Admission::public_route();
    }
    if (service.authorized(head.header("x-api-key"))) return door::Admission::credentialed();
    refusals->record(head.method, door::loggable_path(head.target));
    return door::Admission::refused(
        door::Response{401, "text/plain", "Unauthorized", {}, door::loggable_path(head.target)});
  };
  options_.handle = [&service, metrics = metrics_,
                     refusals = refusals_](const door::Request& request) {
    if (request.head.path == "/metrics" && request.head.method == "GET") {
      return door::Response{200,
                            "text/plain; version=0.0.4; charset=utf-8",
                            metrics->render(refusals->total()),
                            {},
                            "/metrics"};
    }
    return route_request(service, request);
  };
  options_.on_answered = [metrics = metrics_](const door::Answered& answered) {
    metrics->record_request(answered.route, answered.status);
  };
  options_.error_body = [](int status, const std::string&, const std::string& message) {
    door::Response response = answer(detail(status, message), "");
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

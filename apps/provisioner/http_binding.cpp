#include "http_binding.hpp"

#include <httplib.h>

namespace sandboxd::provisioner {
namespace {

void answer(httplib::Response& res, const Reply& reply) {
  res.status = reply.status;
  res.set_content(reply.body, reply.content_type.c_str());
}

}  // namespace

std::string loggable_path(const std::string& path) {
  std::string out = path.substr(0, 200);
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  if (path.size() > 200) out += "...";
  return out;
}

ProvisionerHttpServer::ProvisionerHttpServer(ProvisionerService& service,
                                             std::shared_ptr<Logger> logger,
                                             std::size_t max_request_bytes, int worker_threads)
    : server_(std::make_unique<httplib::Server>()) {
  httplib::Server& server = *server_;
  const auto workers = static_cast<std::size_t>(worker_threads);
  server.new_task_queue = [workers] { return new httplib::ThreadPool(workers); };
  server.set_payload_max_length(max_request_bytes);
  server.set_read_timeout(30, 0);
  server.set_write_timeout(30, 0);
  server.set_keep_alive_timeout(5);

  server.set_pre_routing_handler(
      [&service, logger](const httplib::Request& req, httplib::Response& res) {
        if (req.path.rfind("/api/", 0) != 0) return httplib::Server::HandlerResponse::Unhandled;
        if (service.authorized(req.get_header_value("X-API-Key"))) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        logger->warning("provisioner auth rejected: " + req.method + " " + loggable_path(req.path));
        res.status = 401;
        res.set_content("Unauthorized", "text/plain");
        return httplib::Server::HandlerResponse::Handled;
      });

  server.Get("/health", [&service](const httplib::Request&, httplib::Response& res) {
    answer(res, service.health());
  });
  server.Get("/api/capabilities", [&service](const httplib::Request&, httplib::Response& res) {
    answer(res, service.capabilities());
  });
  server.Post("/api/sandboxes", [&service](const httplib::Request& req, httplib::Response& res) {
    answer(res, service.create(req.body));
  });
  server.Get("/api/sandboxes", [&service](const httplib::Request&, httplib::Response& res) {
    answer(res, service.list());
  });
  server.Get(R"(/api/sandboxes/([^/]+)/instance)",
             [&service](const httplib::Request& req, httplib::Response& res) {
               answer(res, service.instance(req.matches[1]));
             });
  server.Get(R"(/api/sandboxes/([^/]+))",
             [&service](const httplib::Request& req, httplib::Response& res) {
               answer(res, service.get(req.matches[1]));
             });
  server.Delete(R"(/api/sandboxes/([^/]+))",
                [&service](const httplib::Request& req, httplib::Response& res) {
                  answer(res, service.remove(req.matches[1]));
                });

  server.set_error_handler([max_request_bytes](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      answer(res, detail(413, "Request body larger than " + std::to_string(max_request_bytes) +
                                  " bytes"));
    } else if (res.status == 404) {
      answer(res, detail(404, "Not Found"));
    }
  });
  server.set_exception_handler(
      [logger](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown error";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        logger->error("Internal error answering " + req.method + " " + loggable_path(req.path) +
                      ": " + what);
        answer(res, detail(500, "Internal error: " + what));
      });
}

ProvisionerHttpServer::~ProvisionerHttpServer() = default;

int ProvisionerHttpServer::bind(const std::string& host, int port) {
  if (port == 0) {
    const int bound = server_->bind_to_any_port(host);
    if (bound < 0) throw std::runtime_error("cannot listen on " + host + ": bind failed");
    return bound;
  }
  if (!server_->bind_to_port(host, port)) {
    throw std::runtime_error("cannot listen on " + host + ":" + std::to_string(port) +
                             ": the address is in use or not available here");
  }
  return port;
}

void ProvisionerHttpServer::run() {
  server_->listen_after_bind();
}

void ProvisionerHttpServer::stop() {
  server_->stop();
}

}  // namespace sandboxd::provisioner

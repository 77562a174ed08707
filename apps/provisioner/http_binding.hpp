// ProvisionerService over HTTP/1.1 (cpp-httplib). Thread model: httplib's acceptor runs in
// run(), requests on a pool of `worker_threads`; a request body beyond `max_request_bytes` is
// answered 413 before any handler runs; reads and writes time out after 30 s, so a client that
// stops sending holds a worker for at most that long.
//
// Every /api/* request must carry X-API-Key equal to the configured key; a refusal is 401
// "Unauthorized" and one warning line with the method and path (never the key). /health is
// open.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "provisioner_service.hpp"
#include "sandboxd/logger.hpp"

namespace httplib {
class Server;
}

namespace sandboxd::provisioner {

class ProvisionerHttpServer {
 public:
  ProvisionerHttpServer(ProvisionerService& service, std::shared_ptr<Logger> logger,
                        std::size_t max_request_bytes, int worker_threads);
  ~ProvisionerHttpServer();
  ProvisionerHttpServer(const ProvisionerHttpServer&) = delete;
  ProvisionerHttpServer& operator=(const ProvisionerHttpServer&) = delete;

  // Binds host:port (0: a free port) and returns the port; throws std::runtime_error naming
  // the address.
  int bind(const std::string& host, int port);
  // Serves until stop(); returns once the workers are done.
  void run();
  // From any thread, idempotent.
  void stop();

 private:
  std::unique_ptr<httplib::Server> server_;
};

// A request path as a log line may show it: at most 200 characters, control bytes as '?'.
std::string loggable_path(const std::string& path);

}  // namespace sandboxd::provisioner

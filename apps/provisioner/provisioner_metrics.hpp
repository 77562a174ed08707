// What sandboxd-provisioner exports at GET /metrics (behind the API key), in the Prometheus
// text exposition format (0.0.4): answered requests by route and status, and refusals for a
// missing or wrong X-API-Key (counted, while the log says at most one line a minute).
//
// Lock story: `mutex_` guards the request counts; held only to add or to copy.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace sandboxd::provisioner {

class ProvisionerMetrics {
 public:
  // The route labels there are (the route table's patterns), set before the server runs; any
  // other route a request is answered under (a refusal names its path) counts as "other", so a
  // client cannot grow the map with made-up paths.
  void set_known_routes(std::vector<std::string> routes) { known_routes_ = std::move(routes); }
  void record_request(const std::string& route, int status);
  // The exposition; `unauthorized` is the refusal count the caller keeps.
  std::string render(std::uint64_t unauthorized) const;

 private:
  std::vector<std::string> known_routes_;  // written before the server runs, then only read
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;  // guarded by mutex_
};

}  // namespace sandboxd::provisioner

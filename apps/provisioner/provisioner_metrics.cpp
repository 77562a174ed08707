#include "provisioner_metrics.hpp"

namespace sandboxd::provisioner {
namespace {

// A label value as the exposition format writes it: backslash, quote and newline escaped.
std::string label_value(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void ProvisionerMetrics::record_request(const std::string& route, int status) {
  std::string label = "other";
  for (const std::string& known : known_routes_) {
    if (route == known) label = known;
  }
  std::lock_guard lock(mutex_);
  ++requests_[{label, status}];
}

std::string ProvisionerMetrics::render(std::uint64_t unauthorized) const {
  std::map<std::pair<std::string, int>, std::uint64_t> requests;
  {
    std::lock_guard lock(mutex_);
    requests = requests_;
  }
  std::string out;
  out += "# HELP sandboxd_provisioner_requests_total Requests answered, by route and status.\n";
  out += "# TYPE sandboxd_provisioner_requests_total counter\n";
  for (const auto& [key, count] : requests) {
    out += "sandboxd_provisioner_requests_total{route=\"" + label_value(key.first) +
           "\",status=\"" + std::to_string(key.second) + "\"} " + std::to_string(count) + "\n";
  }
  out +=
      "# HELP sandboxd_provisioner_unauthorized_total Requests refused for a missing or wrong "
      "X-API-Key.\n";
  out += "# TYPE sandboxd_provisioner_unauthorized_total counter\n";
  out += "sandboxd_provisioner_unauthorized_total " + std::to_string(unauthorized) + "\n";
  return out;
}

}  // namespace sandboxd::provisioner

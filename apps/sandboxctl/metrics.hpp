// What `sandboxctl serve` exports at GET /metrics, in the Prometheus text exposition format
// (version 0.0.4): counters and a latency histogram it records itself, plus the provider's own
// event counts and gauges read at scrape time.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "sandboxd/core/egress_proxy.hpp"
#include "sandboxd/core/provider.hpp"
#include "sandboxd/core/relay.hpp"

namespace sandboxctl {

class ServeMetrics {
 public:
  // Upper bounds (seconds) of the acquire latency histogram's buckets; +Inf is implicit.
  static constexpr std::array<double, 12> kLatencyBuckets = {0.001, 0.005, 0.01, 0.05, 0.1,  0.25,
                                                             0.5,   1.0,   2.5,  5.0,  10.0, 30.0};

  void record_acquire(sandboxd::core::AcquirePath path, double seconds);
  void record_acquire_failure(const std::string& kind);  // "backend", "ownership", ...
  void record_release();
  void record_destroy();
  void record_readiness_wait(double seconds);
  void record_request(int status);
  void record_backend_error();  // any request the backend failed

  // The whole exposition, provider figures included.
  // `relay`: the relay's counts, when one runs; `egress`: the egress proxy's (issue
  // 34), when one runs.
  std::string render(const sandboxd::core::Provider& provider,
                     const sandboxd::core::RelayStats* relay = nullptr,
                     const sandboxd::core::EgressStats* egress = nullptr) const;

  // The same figures for the operator page's Flow panel (docs/ui.md), one JSON
  // object: {acquires: {path: n}, acquire_failures: {kind: n}, latency: {bounds, counts (per
  // bucket, the last beyond every bound), count, sum}, capacity_rejections: {reason: n},
  // capacity_queue: {waits, bursts}, capacity: {…Provider::Capacity}, slots: {target, ready,
  // claims, misses: {reason: n}, off_reason}, releases, destroys, evictions, idle_reaps,
  // pauses, resumes, adoptions, relay_refusals: {reason: n} | null (no relay), egress_refusals:
  // {reason: n} | null (no egress proxy here)}.
  std::string flow_json(const sandboxd::core::Provider& provider,
                        const sandboxd::core::RelayStats* relay = nullptr,
                        const sandboxd::core::EgressStats* egress = nullptr) const;

 private:
  mutable std::mutex mutex_;  // guards every member below; held only to add or to copy
  std::map<std::string, std::uint64_t> acquires_by_path_;
  std::map<std::string, std::uint64_t> acquire_failures_by_kind_;
  std::array<std::uint64_t, kLatencyBuckets.size()> latency_buckets_{};  // not cumulative
  std::uint64_t latency_count_ = 0;
  double latency_sum_ = 0.0;
  std::uint64_t releases_ = 0;
  std::uint64_t destroys_ = 0;
  std::uint64_t readiness_waits_ = 0;
  double readiness_seconds_ = 0.0;
  std::map<int, std::uint64_t> requests_by_status_;
  std::uint64_t backend_errors_ = 0;
};

}  // namespace sandboxctl

#include "metrics.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <algorithm>
#include <cstdio>
#include <span>
#include <sstream>

#include "sandboxd/json.hpp"

namespace sandboxctl {

namespace {

// A Prometheus label value: backslash, quote and newline escaped.
std::string label_value(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

std::string number(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  return buffer;
}

void header(std::ostringstream& out, const char* name, const char* type, const char* help) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n";
}

// A Prometheus histogram from per-bucket counts (not cumulative): within_bounds[i] counts the
// observations in (bounds[i-1], bounds[i]]; `total` all of them, +Inf included.
// One unlabelled sample with its HELP and TYPE lines.
template <class Value>
void sample(std::ostringstream& out, const char* name, const char* type, const char* help,
            Value value) {
  header(out, name, type, help);
  out << name << " " << value << "\n";
}

void histogram(std::ostringstream& out, const std::string& name, const char* help,
               std::span<const double> bounds, std::span<const std::uint64_t> within_bounds,
               std::uint64_t total, double sum) {
  header(out, name.c_str(), "histogram", help);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    cumulative += within_bounds[i];
    out << name << "_bucket{le=\"" << number(bounds[i]) << "\"} " << cumulative << "\n";
  }
  out << name << "_bucket{le=\"+Inf\"} " << total << "\n"
      << name << "_sum " << number(sum) << "\n"
      << name << "_count " << total << "\n";
}

// Each tracked conversation's storage against its bound (docs/storage.md), read from the
// filesystem at scrape time: at most kMaxConversationsShown conversations (a gauge says how many
// more there were), nothing when conversations are not bounded here. One label set per
// conversation with a sandbox tracked here, so the series come and go with the sandboxes.
constexpr std::size_t kMaxConversationsShown = 1000;

std::string conversation_disk_lines(const sandboxd::core::Provider& provider) {
  if (!provider.storage().bounded()) return "";
  const auto tracked = provider.tracked_infos(kMaxConversationsShown);
  std::ostringstream used;
  std::ostringstream limits;
  for (const auto& info : tracked.infos) {
    if (!info->user_id || !info->thread_id) continue;  // anonymous: no conversation directory
    const auto usage = provider.conversation_storage(*info->user_id, *info->thread_id);
    if (!usage) continue;  // a directory made before the bound, or not readable now
    const std::string labels = "{user_id=\"" + label_value(*info->user_id) + "\",thread_id=\"" +
                               label_value(*info->thread_id) + "\",sandbox_id=\"" +
                               label_value(info->sandbox_id) + "\"}";
    used << "sandboxd_conversation_disk_bytes" << labels << " " << usage->bytes << "\n";
    limits << "sandboxd_conversation_disk_limit_bytes" << labels << " " << usage->limit << "\n";
  }
  std::ostringstream out;
  header(out, "sandboxd_conversation_disk_bytes", "gauge",
         "Bytes a tracked conversation's directory uses (as of the filesystem's last commit).");
  out << used.str();
  header(out, "sandboxd_conversation_disk_limit_bytes", "gauge",
         "The bound on that conversation's directory (disk_limit).");
  out << limits.str();
  const std::string unlisted_help = "Tracked sandboxes beyond the first " +
                                    std::to_string(kMaxConversationsShown) +
                                    ", whose conversations' disk is not listed.";
  sample(out, "sandboxd_conversation_disk_unlisted", "gauge", unlisted_help.c_str(),
         tracked.left_out);
  return out.str();
}

// The archived tier (docs/snapshots.md): conversations kept as an archive, their sandbox's
// container removed, and the bytes those archives hold. Read from the snapshot store at scrape
// time (every snapshot record is read: a scrape costs one small file per snapshot kept here).
std::string archive_lines(const sandboxd::core::Provider& provider) {
  std::vector<sandboxd::core::SnapshotRecord> records;
  try {
    records = provider.snapshots(std::nullopt);
  } catch (const std::exception&) {
    return "";  // the snapshot directory cannot be read now: no figure rather than a wrong one
  }
  std::uint64_t archived = 0;
  std::uint64_t bytes = 0;
  for (const auto& record : records) {
    if (!sandboxd::core::is_archive(record)) continue;
    ++archived;
    bytes += record.bytes();
  }
  std::ostringstream out;
  sample(out, "sandboxd_archived_conversations", "gauge",
         "Conversations archived (archive_after_seconds): kept as a snapshot, no container.",
         archived);
  sample(out, "sandboxd_archived_bytes", "gauge",
         "Bytes the archives hold on disk (directories and image layers).", bytes);
  return out.str();
}

}  // namespace

void ServeMetrics::record_acquire(sandboxd::core::AcquirePath path, double seconds) {
  std::lock_guard lock(mutex_);
  ++acquires_by_path_[sandboxd::core::to_string(path)];
  for (std::size_t i = 0; i < kLatencyBuckets.size(); ++i) {
    if (seconds <= kLatencyBuckets[i]) {
      ++latency_buckets_[i];
      break;
    }
  }
  ++latency_count_;
  latency_sum_ += seconds;
}

void ServeMetrics::record_acquire_failure(const std::string& kind) {
  std::lock_guard lock(mutex_);
  ++acquire_failures_by_kind_[kind];
}

void ServeMetrics::record_release() {
  std::lock_guard lock(mutex_);
  ++releases_;
}

void ServeMetrics::record_destroy() {
  std::lock_guard lock(mutex_);
  ++destroys_;
}

void ServeMetrics::record_readiness_wait(double seconds) {
  std::lock_guard lock(mutex_);
  ++readiness_waits_;
  readiness_seconds_ += seconds;
}

void ServeMetrics::record_backend_error() {
  std::lock_guard lock(mutex_);
  ++backend_errors_;
}

void ServeMetrics::record_request(int status) {
  std::lock_guard lock(mutex_);
  ++requests_by_status_[status];
}

std::string ServeMetrics::render(const sandboxd::core::Provider& provider,
                                 const sandboxd::core::RelayStats* relay,
                                 const sandboxd::core::EgressStats* egress) const {
  const auto counts = provider.counts();
  const auto events = provider.event_counts();
  // Reads the filesystem: before the lock, which request threads take to count.
  const std::string conversation_disk = conversation_disk_lines(provider);
  const std::string archives = archive_lines(provider);
  std::ostringstream out;
  std::lock_guard lock(mutex_);

  header(out, "sandboxd_acquires_total", "counter",
         "Acquisitions that returned a sandbox, by how it was obtained.");
  for (const char* path :
       {"reused", "reclaimed", "resumed", "discovered", "created", "claimed", "restored"}) {
    const auto it = acquires_by_path_.find(path);
    out << "sandboxd_acquires_total{path=\"" << path << "\"} "
        << (it == acquires_by_path_.end() ? 0 : it->second) << "\n";
  }
  header(out, "sandboxd_acquire_failures_total", "counter", "Acquisitions that failed, by kind.");
  for (const auto& [kind, count] : acquire_failures_by_kind_) {
    out << "sandboxd_acquire_failures_total{kind=\"" << kind << "\"} " << count << "\n";
  }
  histogram(out, "sandboxd_acquire_duration_seconds", "Time from an acquire request to its answer.",
            kLatencyBuckets, latency_buckets_, latency_count_, latency_sum_);
  header(out, "sandboxd_releases_total", "counter", "Sandboxes released to the warm pool.");
  out << "sandboxd_releases_total " << releases_ << "\n";
  header(out, "sandboxd_destroys_total", "counter", "Sandboxes destroyed on request.");
  out << "sandboxd_destroys_total " << destroys_ << "\n";
  header(out, "sandboxd_readiness_waits_total", "counter", "Readiness waits of new sandboxes.");
  out << "sandboxd_readiness_waits_total " << readiness_waits_ << "\n";
  header(out, "sandboxd_readiness_wait_seconds_total", "counter",
         "Total time spent waiting for new sandboxes to answer.");
  out << "sandboxd_readiness_wait_seconds_total " << number(readiness_seconds_) << "\n";
  const std::pair<const char*, std::uint64_t> provider_counters[] = {
      {"sandboxd_evictions_total", events.evictions},
      {"sandboxd_idle_reaps_total", events.idle_reaps},
      {"sandboxd_reconcile_adoptions_total", events.adoptions},
      {"sandboxd_lease_renewals_total", events.lease_renewals},
      {"sandboxd_lease_lapses_total", events.lease_lapses},
      {"sandboxd_lease_losses_total", events.lease_losses},
      {"sandboxd_pauses_total", events.pauses},
      {"sandboxd_pause_failures_total", events.pause_failures},
      {"sandboxd_resumes_total", events.resumes},
      {"sandboxd_capacity_waits_total", events.capacity_waits},
      {"sandboxd_capacity_bursts_total", events.bursts},
      {"sandboxd_disk_limit_stops_total", events.disk_limit_stops},
  };
  const char* provider_help[] = {
      "Warm sandboxes stopped to stay within replicas.",
      "Sandboxes stopped for idleness.",
      "Orphan containers adopted by reconciliation.",
      "Lease renewals that found the lease ours.",
      "Lease renewals that found the lease lapsed.",
      "Sandboxes dropped because another instance holds their lease.",
      "Warm sandboxes paused after pause_after_seconds.",
      "Pauses the backend refused (the sandbox stayed warm).",
      "Paused sandboxes thawed and handed out (acquire path resumed).",
      "Creations that queued for a slot (overflow_policy wait).",
      "Creations beyond replicas within burst_limit (overflow_policy burst).",
      "Sandboxes stopped because their writable layer passed disk_limit.",
  };
  for (std::size_t i = 0; i < std::size(provider_counters); ++i) {
    header(out, provider_counters[i].first, "counter", provider_help[i]);
    out << provider_counters[i].first << " " << provider_counters[i].second << "\n";
  }
  header(out, "sandboxd_backend_errors_total", "counter",
         "Requests that failed in the backend (engine or provisioner).");
  out << "sandboxd_backend_errors_total " << backend_errors_ << "\n";
  header(out, "sandboxd_requests_total", "counter", "HTTP requests answered, by status.");
  for (const auto& [status, count] : requests_by_status_) {
    out << "sandboxd_requests_total{status=\"" << status << "\"} " << count << "\n";
  }
  sample(out, "sandboxd_active_sandboxes", "gauge", "Sandboxes in use now.", counts.active);
  sample(out, "sandboxd_warm_sandboxes", "gauge", "Sandboxes parked in the warm pool now.",
         counts.warm);
  sample(out, "sandboxd_paused_sandboxes", "gauge",
         "Released sandboxes paused (frozen, no CPU) now.", counts.paused);
  header(out, "sandboxd_capacity_rejections_total", "counter",
         "Creations refused by a ceiling, by reason (capacity, per_user, wait_timeout, queue_full, "
         "min_free_disk).");
  out << "sandboxd_capacity_rejections_total{reason=\"capacity\"} " << events.rejections_capacity
      << "\n"
      << "sandboxd_capacity_rejections_total{reason=\"per_user\"} " << events.rejections_per_user
      << "\n"
      << "sandboxd_capacity_rejections_total{reason=\"wait_timeout\"} "
      << events.rejections_wait_timeout << "\n"
      << "sandboxd_capacity_rejections_total{reason=\"queue_full\"} "
      << events.rejections_queue_full << "\n"
      << "sandboxd_capacity_rejections_total{reason=\"min_free_disk\"} "
      << events.rejections_min_free_disk << "\n";
  std::uint64_t waits_ended = 0;
  for (const std::uint64_t count : events.capacity_wait_buckets) waits_ended += count;
  histogram(out, "sandboxd_capacity_wait_seconds",
            "How long creations queued for a slot, counted as each wait ended.",
            sandboxd::core::ProviderEventCounts::kCapacityWaitBounds, events.capacity_wait_buckets,
            waits_ended, events.capacity_wait_seconds);
  // Pre-started slots: a pool that never hits is visible with its reason.
  const sandboxd::PreStartedSlots::Status slots = provider.slot_status();
  sample(out, "sandboxd_slot_claims_total", "counter",
         "New conversations given a pre-started slot (acquire path claimed).", events.slot_claims);
  sample(out, "sandboxd_slot_claim_seconds_total", "counter",
         "Total time of those claims (binds, record, rename); divide by "
         "sandboxd_slot_claims_total.",
         number(events.slot_claim_seconds));
  header(out, "sandboxd_slot_misses_total", "counter",
         "New conversations that found no slot to claim and were created cold, by reason.");
  for (const auto miss : sandboxd::kSlotMissReasons) {
    out << "sandboxd_slot_misses_total{reason=\"" << sandboxd::to_string(miss) << "\"} "
        << events.slot_misses[static_cast<std::size_t>(miss)] << "\n";
  }
  sample(out, "sandboxd_slots_target", "gauge",
         "Pre-started slots this gateway keeps (warm_slots).", slots.target);
  sample(out, "sandboxd_slots_ready", "gauge", "Pre-started slots ready to claim now.",
         slots.ready);
  header(out, "sandboxd_slots_off", "gauge",
         "1 when slots were asked for but cannot work here; the reason is the label.");
  out << "sandboxd_slots_off{reason=\"" << label_value(slots.off_reason) << "\"} "
      << (slots.off_reason.empty() ? 0 : 1) << "\n";
  header(out, "sandboxd_capacity_queue_length", "gauge", "Creations queued for a slot now.");
  out << "sandboxd_capacity_queue_length " << counts.waiting << "\n";
  header(out, "sandboxd_resume_seconds_total", "counter",
         "Total time of resumes (thaw + liveness check); divide by sandboxd_resumes_total.");
  out << "sandboxd_resume_seconds_total " << number(events.resume_seconds) << "\n";
  if (relay != nullptr) {
    header(out, "sandboxd_relay_requests_total", "counter",
           "Requests to the relay, by what became of them: forwarded to their sandbox, or "
           "refused (missing or wrong token, a sandbox not tracked here, the sandbox not "
           "reachable, every connection slot busy).");
    for (const auto& [result, count] : {std::pair{"forwarded", relay->forwarded},
                                        std::pair{"missing_token", relay->missing_token},
                                        std::pair{"wrong_token", relay->wrong_token},
                                        std::pair{"unknown_sandbox", relay->unknown_sandbox},
                                        std::pair{"upstream_failed", relay->upstream_failed},
                                        std::pair{"busy", relay->refused_busy}}) {
      out << "sandboxd_relay_requests_total{result=\"" << result << "\"} " << count << "\n";
    }
    sample(out, "sandboxd_relay_upgrades_total", "counter",
           "Relayed requests switched to a two-way pipe (WebSocket).", relay->upgraded);
    sample(out, "sandboxd_relay_connections", "gauge", "Client connections open on the relay.",
           relay->open_connections);
  }
  if (egress != nullptr) {
    header(out, "sandboxd_egress_total", "counter",
           "Connections out of allowlist sandboxes through the egress proxy: tunnels opened "
           "(CONNECT), plain requests forwarded.");
    out << "sandboxd_egress_total{kind=\"tunnel\"} " << egress->tunnels << "\n";
    out << "sandboxd_egress_total{kind=\"plain\"} " << egress->requests << "\n";
    header(out, "sandboxd_egress_refused_total", "counter",
           "Requests the egress proxy refused, by reason (domain_not_allowed, ip_literal, "
           "port_not_allowed, host_mismatch, non_public_address, resolve_failed, sni_mismatch, "
           "no_sni, ech, not_tls, connect_failed, client_tls_failed, upstream_tls_failed, "
           "bad_request, busy).");
    for (const auto& [reason, count] : egress->refused) {
      out << "sandboxd_egress_refused_total{reason=\"" << label_value(reason) << "\"} " << count
          << "\n";
    }
    sample(out, "sandboxd_egress_secrets_injected_total", "counter",
           "Requests the egress proxy put a secret into (network.secrets).",
           egress->secrets_injected);
    sample(out, "sandboxd_egress_intercepted_total", "counter",
           "Tunnels the egress proxy ended itself to put a secret into an https request "
           "(inject_tls_ca); counted among the tunnels too.",
           egress->intercepted);
    sample(out, "sandboxd_egress_connections", "gauge", "Connections open on the egress proxy.",
           egress->open_connections);
    sample(out, "sandboxd_egress_sandboxes", "gauge",
           "Allowlist sandboxes the egress proxy listens for.", egress->attached_sandboxes);
  }
  out << conversation_disk << archives;
  return out.str();
}

std::string ServeMetrics::flow_json(const sandboxd::core::Provider& provider,
                                    const sandboxd::core::RelayStats* relay,
                                    const sandboxd::core::EgressStats* egress) const {
  const auto events = provider.event_counts();
  const sandboxd::PreStartedSlots::Status slots = provider.slot_status();
  const sandboxd::core::Provider::Capacity capacity = provider.capacity();  // may read the store
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  using Items = std::initializer_list<std::pair<const char*, std::uint64_t>>;
  const auto members = [&w](Items items) {
    for (const auto& [name, value] : items) {
      w.Key(name);
      w.Uint64(value);
    }
  };
  const auto counts = [&w, &members](const char* key, Items items) {
    w.Key(key);
    w.StartObject();
    members(items);
    w.EndObject();
  };
  w.StartObject();
  {
    std::lock_guard lock(mutex_);
    w.Key("acquires");
    w.StartObject();
    for (const char* path :
         {"reused", "reclaimed", "resumed", "discovered", "created", "claimed", "restored"}) {
      const auto it = acquires_by_path_.find(path);
      w.Key(path);
      w.Uint64(it == acquires_by_path_.end() ? 0 : it->second);
    }
    w.EndObject();
    w.Key("acquire_failures");
    w.StartObject();
    for (const auto& [kind, count] : acquire_failures_by_kind_) {
      sandboxd::write_json_string(w, kind);
      w.Uint64(count);
    }
    w.EndObject();
    w.Key("latency");
    w.StartObject();
    w.Key("bounds");
    w.StartArray();
    for (const double bound : kLatencyBuckets) w.Double(bound);
    w.EndArray();
    w.Key("counts");
    w.StartArray();
    std::uint64_t bounded = 0;
    for (const std::uint64_t count : latency_buckets_) {
      w.Uint64(count);
      bounded += count;
    }
    w.Uint64(latency_count_ - bounded);  // beyond the last bound
    w.EndArray();
    w.Key("count");
    w.Uint64(latency_count_);
    w.Key("sum");
    w.Double(latency_sum_);
    w.EndObject();
    members({{"releases", releases_}, {"destroys", destroys_}});
  }
  counts("capacity_rejections", {{"capacity", events.rejections_capacity},
                                 {"per_user", events.rejections_per_user},
                                 {"wait_timeout", events.rejections_wait_timeout},
                                 {"queue_full", events.rejections_queue_full},
                                 {"min_free_disk", events.rejections_min_free_disk}});
  counts("capacity_queue", {{"waits", events.capacity_waits}, {"bursts", events.bursts}});
  w.Key("capacity");
  w.StartObject();
  members({{"replicas", static_cast<std::uint64_t>(std::max(capacity.replicas, 0))},
           {"burst_limit", static_cast<std::uint64_t>(std::max(capacity.burst_limit, 0))},
           {"max_per_user", static_cast<std::uint64_t>(std::max(capacity.max_per_user, 0))},
           {"max_waiting", capacity.max_waiting},
           {"waiting", capacity.waiting},
           {"in_use_here", capacity.in_use_here}});
  sandboxd::write_json_member(w, "overflow_policy", capacity.overflow_policy);
  w.Key("fleet_wide");
  w.Bool(capacity.fleet_wide);
  w.Key("fleet_reserved");
  if (capacity.fleet_reserved) {
    w.Uint64(*capacity.fleet_reserved);
  } else {
    w.Null();
  }
  sandboxd::write_json_member(w, "fleet_error", capacity.fleet_error);
  w.EndObject();
  w.Key("slots");
  w.StartObject();
  members({{"target", slots.target}, {"ready", slots.ready}, {"claims", events.slot_claims}});
  w.Key("misses");
  w.StartObject();
  for (const auto miss : sandboxd::kSlotMissReasons) {
    w.Key(sandboxd::to_string(miss));
    w.Uint64(events.slot_misses[static_cast<std::size_t>(miss)]);
  }
  w.EndObject();
  sandboxd::write_json_member(w, "off_reason", slots.off_reason);
  w.EndObject();
  members({{"evictions", events.evictions},
           {"idle_reaps", events.idle_reaps},
           {"pauses", events.pauses},
           {"resumes", events.resumes},
           {"adoptions", events.adoptions}});
  // What the relay and the egress proxy turned away, where serve runs them (null otherwise).
  w.Key("relay_refusals");
  if (relay != nullptr) {
    w.StartObject();
    members({{"missing_token", relay->missing_token},
             {"wrong_token", relay->wrong_token},
             {"unknown_sandbox", relay->unknown_sandbox},
             {"upstream_failed", relay->upstream_failed},
             {"busy", relay->refused_busy}});
    w.EndObject();
  } else {
    w.Null();
  }
  w.Key("egress_refusals");
  if (egress != nullptr) {
    w.StartObject();
    for (const auto& [reason, count] : egress->refused) {
      sandboxd::write_json_string(w, reason);
      w.Uint64(count);
    }
    w.EndObject();
  } else {
    w.Null();
  }
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize()) + "\n";
}

}  // namespace sandboxctl

#include "sandboxd/core/service_json.hpp"

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <type_traits>

#include "sandboxd/json.hpp"

namespace sandboxd::core {
namespace {

using Writer = rapidjson::PrettyWriter<rapidjson::StringBuffer>;

template <class Fill>
std::string document(Fill fill) {
  rapidjson::StringBuffer buffer;
  Writer w(buffer);
  w.StartObject();
  fill(w);
  w.EndObject();
  return std::string(buffer.GetString(), buffer.GetSize());
}

void members(Writer& w, const SandboxView& s) {
  write_json_member(w, "sandbox_id", s.sandbox_id);
  write_json_member(w, "sandbox_url", s.sandbox_url);
  write_json_member(w, "state", std::string(to_string(s.state)));
  write_json_optional(w, "user_id", s.user_id);
  write_json_optional(w, "thread_id", s.thread_id);
  w.Key(is_released(s.state) ? "released_at" : "last_activity");
  w.Double(s.since);
  write_json_optional(w, "container_name", s.container_name);
  write_json_optional(
      w, "last_acquire",
      s.last_acquire ? std::optional<std::string>(to_string(*s.last_acquire)) : std::nullopt);
}

void members(Writer& w, const SnapshotRecord& s) {
  write_json_member(w, "name", s.name);
  write_json_member(w, "user_id", s.user_id);
  write_json_member(w, "thread_id", s.thread_id);
  write_json_member(w, "sandbox_id", s.sandbox_id);
  write_json_member(w, "network_policy", s.network_policy);
  w.Key("created_at");
  w.Double(s.created_at);
  w.Key("expires_at");
  if (s.expires_at > 0) {
    w.Double(s.expires_at);
  } else {
    w.Null();
  }
  w.Key("directory_bytes");
  w.Uint64(s.directory_bytes);
  w.Key("image_bytes");
  w.Uint64(s.image_bytes);
  w.Key("bytes");
  w.Uint64(s.bytes());
}

void members(Writer& w, const Acquired& a) {
  write_json_member(w, "sandbox_id", a.sandbox_id);
  write_json_member(w, "sandbox_url", a.sandbox_url);
  write_json_member(w, "path", to_string(a.path));
  write_json_optional(w, "user_id", a.user_id);
  write_json_optional(w, "thread_id", a.thread_id);
  if (!a.request_headers.empty()) {
    w.Key("request_headers");
    w.StartObject();
    for (const auto& [name, value] : a.request_headers) write_json_member(w, name.c_str(), value);
    w.EndObject();
  }
}

}  // namespace

std::string to_json(const SnapshotRecord& snapshot) {
  return document([&](Writer& w) { members(w, snapshot); });
}

std::string to_json(const std::vector<SnapshotRecord>& snapshots) {
  return document([&](Writer& w) {
    w.Key("snapshots");
    w.StartArray();
    std::uint64_t bytes = 0;
    for (const SnapshotRecord& snapshot : snapshots) {
      w.StartObject();
      members(w, snapshot);
      w.EndObject();
      bytes += snapshot.bytes();
    }
    w.EndArray();
    w.Key("bytes");
    w.Uint64(bytes);
  });
}

std::string to_json(const Acquired& a) {
  return document([&](Writer& w) { members(w, a); });
}

std::string to_json(const Forked& forked) {
  return document([&](Writer& w) {
    write_json_member(w, "from_sandbox_id", forked.from_sandbox_id);
    w.Key("sandboxes");
    w.StartArray();
    for (const Acquired& a : forked.sandboxes) {
      w.StartObject();
      members(w, a);
      w.EndObject();
    }
    w.EndArray();
  });
}

std::string to_json(const SandboxView& sandbox) {
  return document([&](Writer& w) { members(w, sandbox); });
}

std::string to_json(const Released& released) {
  return document([&](Writer& w) {
    members(w, released.sandbox);
    write_json_member(w, "result", released.result);
  });
}

std::string to_json(const Destroyed& destroyed) {
  return document([&](Writer& w) {
    members(w, destroyed.sandbox);
    write_json_member(w, "result", "destroyed");
  });
}

std::string to_json(const Listing& listing) {
  return document([&](Writer& w) {
    write_json_member(w, "state_dir", listing.state_dir);
    write_json_member(w, "owner_id", listing.owner_id);
    write_json_member_or_null(w, "backend_error", listing.backend_error);
    write_json_member_or_null(w, "snapshot_error", listing.snapshot_error);
    w.Key("sandboxes");
    w.StartArray();
    for (const auto& row : listing.sandboxes) {
      w.StartObject();
      write_json_member(w, "sandbox_id", row.id);
      write_json_member(w, "state", std::string(row.state_word()));
      w.Key("tracked");
      w.Bool(row.state.has_value());
      w.Key("running");
      if (row.running) {
        w.Bool(*row.running);
      } else {
        w.Null();
      }
      write_json_member(w, "sandbox_url", row.url);
      write_json_member_or_null(w, "user_id", row.user);
      write_json_member_or_null(w, "thread_id", row.thread);
      w.Key("since");
      if (row.since) {
        w.Double(*row.since);
      } else {
        w.Null();
      }
      w.Key("last_acquire");
      if (row.last_acquire) {
        w.String(to_string(*row.last_acquire));
      } else {
        w.Null();
      }
      // The conversation's storage against its bound; null when it is not bounded.
      w.Key("disk");
      if (row.disk) {
        w.StartObject();
        w.Key("bytes");
        w.Uint64(row.disk->bytes);
        w.Key("limit");
        w.Uint64(row.disk->limit);
        w.EndObject();
      } else {
        w.Null();
      }
      // An archived conversation: its archive's bytes (no container runs).
      w.Key("archived_bytes");
      if (row.archived_bytes) {
        w.Uint64(*row.archived_bytes);
      } else {
        w.Null();
      }
      w.Key("lease");
      if (row.lease) {
        w.StartObject();
        write_json_member(w, "owner_id", row.lease->owner_id);
        write_json_member(w, "state", row.lease->destroying ? "del" : "own");
        w.Key("ours");
        w.Bool(row.lease->owner_id == listing.owner_id);
        w.Key("expires_at");
        if (listing.wall_clock_leases) {
          w.Double(row.lease->expires_at);
        } else {
          w.Null();
        }
        w.EndObject();
      } else {
        w.Null();
      }
      if (!row.lease_error.empty()) write_json_member(w, "lease_error", row.lease_error);
      w.EndObject();
    }
    w.EndArray();
  });
}

std::string to_json(const ReconcileReport& report) {
  return document([&](Writer& w) {
    w.Key("adopted");
    w.Int(report.adopted);
    w.Key("skipped");
    w.Int(report.skipped);
    w.Key("deferred");
    w.Int(report.deferred);
    w.Key("found");
    w.Int(report.found);
  });
}

std::string to_json(const Reaped& reaped) {
  return document([&](Writer& w) {
    w.Key("idle_timeout");
    w.Int(reaped.idle_timeout);
    w.Key("reaped");
    w.StartArray();
    for (const auto& id : reaped.reaped) write_json_string(w, id);
    w.EndArray();
    w.Key("newly_paused");
    w.StartArray();
    for (const auto& id : reaped.newly_paused) write_json_string(w, id);
    w.EndArray();
    w.Key("archived");
    w.StartArray();
    for (const auto& id : reaped.archived) write_json_string(w, id);
    w.EndArray();
    w.Key("active");
    w.Uint64(reaped.active);
    w.Key("warm");
    w.Uint64(reaped.warm);
    w.Key("paused");
    w.Uint64(reaped.paused);
  });
}

namespace {

template <class AnyWriter>
void write_event(AnyWriter& w, const LifecycleEvent& event) {
  w.StartObject();
  w.Key("sequence");
  w.Uint64(event.sequence);
  w.Key("time");
  w.Double(event.time);
  write_json_member(w, "kind", to_string(event.kind));
  write_json_member(w, "sandbox_id", event.sandbox_id);
  for (const auto& [key, value] :
       {std::pair{"user_id", &event.user_id}, std::pair{"thread_id", &event.thread_id}}) {
    w.Key(key);
    if (*value) {
      write_json_string(w, **value);
    } else {
      w.Null();
    }
  }
  write_json_member(w, "reason", event.reason);
  w.EndObject();
}

}  // namespace

std::string to_json(const LifecycleEventPage& page) {
  return document([&](Writer& w) {
    w.Key("events");
    w.StartArray();
    for (const LifecycleEvent& event : page.events) write_event(w, event);
    w.EndArray();
    w.Key("last");
    w.Uint64(page.last);
    w.Key("dropped");
    w.Uint64(page.dropped);
  });
}

std::string to_json(const LifecycleEvent& event) {
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);  // one line: an event stream's data
  write_event(w, event);
  return buffer.GetString();
}

std::string to_json(const Health& health) {
  return document([&](Writer& w) {
    write_json_member(w, "status", "ok");
    write_json_member(w, "owner_id", health.owner_id);
    w.Key("active");
    w.Uint64(health.active);
    w.Key("warm");
    w.Uint64(health.warm);
    w.Key("paused");
    w.Uint64(health.paused);
    w.Key("creating");
    w.Uint64(health.creating);
    w.Key("tearing_down");
    w.Uint64(health.tearing_down);
    w.Key("uses_thread_data_mounts");
    w.Bool(health.uses_thread_data_mounts);
    if (!health.network_mode.empty()) write_json_member(w, "network_mode", health.network_mode);
  });
}

std::string error_json(ErrorKind kind, const std::string& message, std::optional<int> exit_code) {
  return document([&](Writer& w) {
    w.Key("error");
    w.StartObject();
    if (exit_code) {
      w.Key("code");
      w.Int(*exit_code);
    }
    write_json_member(w, "kind", kind_name(kind));
    write_json_member(w, "message", message);
    w.EndObject();
  });
}

std::string to_json(const UsageView& view) {
  return document([&](Writer& w) {
    const auto number = [&w](const char* key, const auto& value) {
      w.Key(key);
      if (!value) {
        w.Null();
      } else if constexpr (std::is_same_v<std::decay_t<decltype(*value)>, double>) {
        w.Double(*value);
      } else {
        w.Uint64(*value);
      }
    };
    w.Key("available");
    w.Bool(view.available);
    w.Key("interval_seconds");
    w.Double(view.interval_seconds);
    w.Key("swept_at");
    if (view.swept_at > 0) {
      w.Double(view.swept_at);
    } else {
      w.Null();
    }
    w.Key("not_sampled");
    w.Uint64(view.not_sampled);
    w.Key("sandboxes");
    w.StartObject();
    for (const auto& [id, figures] : view.sandboxes) {
      write_json_string(w, id);
      w.StartObject();
      number("cpu_percent", figures.cpu_percent);
      number("memory_bytes", figures.memory_bytes);
      number("memory_limit_bytes", figures.memory_limit_bytes);
      number("pids", figures.pids);
      w.Key("read_at");
      w.Double(figures.read_at);
      write_json_member_or_null(w, "error", figures.error);
      w.EndObject();
    }
    w.EndObject();
  });
}

}  // namespace sandboxd::core

#include "lifecycle_stream.hpp"

#include <algorithm>
#include <charconv>
#include <set>
#include <utility>
#include <vector>

#include "route_table.hpp"
#include "sandboxd/core/service_errors.hpp"
#include "sandboxd/core/service_json.hpp"
#include "ui_page.hpp"

namespace sandboxd::door {

namespace {

// How long a browser waits before it reconnects a dropped stream, in milliseconds.
constexpr const char* kRetry = "retry: 2000\n\n";

std::uint64_t event_number(const std::string& value, const std::string& source) {
  std::uint64_t number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  if (value.empty() || error != std::errc() || end != value.data() + value.size()) {
    throw core::ServiceError(
        core::ErrorKind::invalid_argument,
        source + ": expected an event number >= 0, got \"" + value.substr(0, 32) + "\"");
  }
  return number;
}

}  // namespace

LifecycleEventStream::LifecycleEventStream(std::shared_ptr<const core::LifecycleEventLog> log,
                                           std::uint64_t after, std::size_t per_chunk)
    : log_(std::move(log)), after_(after), per_chunk_(per_chunk) {}

std::string LifecycleEventStream::next() {
  std::string chunk;
  if (!started_) {
    started_ = true;
    chunk = kRetry;
  }
  if (!log_) return chunk;
  const core::LifecycleEventPage page = log_->after(after_, per_chunk_);
  if (page.dropped > 0) {
    chunk += "event: dropped\ndata: " + std::to_string(page.dropped) + "\n\n";
  }
  for (const core::LifecycleEvent& event : page.events) {
    chunk += "id: " + std::to_string(event.sequence) +
             "\nevent: lifecycle\ndata: " + core::to_json(event) + "\n\n";
    after_ = event.sequence;
  }
  if (page.events.empty() && page.last < after_) {
    // The log started again (a new run numbers from 1): follow it from its start.
    after_ = 0;
  }
  return chunk;
}

std::string lifecycle_events_json(const RequestHead& head, const core::LifecycleEventLog* log) {
  std::uint64_t after = 0;
  std::uint64_t limit = 100;
  std::set<std::string> seen;
  for (const auto& [name, value] : query_parameters(head.target)) {
    if (name != "after" && name != "limit") continue;  // unknown parameters are ignored
    if (!seen.insert(name).second) {
      throw core::ServiceError(core::ErrorKind::invalid_argument, name + ": given more than once");
    }
    if (name == "after") {
      after = event_number(value, "after");
      continue;
    }
    std::uint64_t number = 0;
    const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (value.empty() || error != std::errc() || end != value.data() + value.size() || number < 1 ||
        number > 1000) {
      throw core::ServiceError(
          core::ErrorKind::invalid_argument,
          "limit: expected an integer from 1 to 1000, got \"" + value.substr(0, 32) + "\"");
    }
    limit = number;
  }
  core::LifecycleEventPage page;
  if (log) page = log->after(after, static_cast<std::size_t>(limit));
  return core::to_json(page);
}

Response lifecycle_stream_response(const RequestHead& head,
                                   std::shared_ptr<const core::LifecycleEventLog> log) {
  Response response(200, "text/event-stream");
  response.stream = std::make_shared<LifecycleEventStream>(std::move(log), stream_start(head));
  add_ui_headers(response);
  return response;
}

std::uint64_t stream_start(const RequestHead& head) {
  const std::string& last_seen = head.header("last-event-id");
  if (!last_seen.empty()) return event_number(last_seen, "Last-Event-ID");
  for (const auto& [name, value] : query_parameters(head.target)) {
    if (name == "after") return event_number(value, "after");
  }
  return 0;
}

}  // namespace sandboxd::door

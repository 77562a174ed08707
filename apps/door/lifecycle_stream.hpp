// The lifecycle event log (core/lifecycle_events.hpp) as a Server-Sent Events stream: the
// operator page's live tail. Each event goes out as
//   id: 42
//   event: lifecycle
//   data: {"sequence":42,"time":…,"kind":"released",…}
// so a browser's EventSource that reconnects sends `Last-Event-ID: 42` and misses nothing the
// ring still holds; for what it no longer holds, an `event: dropped` whose data is how many.
//
// Thread model: one stream per subscriber, called only by the server's I/O thread; the log it
// reads has its own lock (held for one page copy, never across a write).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "http_door.hpp"
#include "sandboxd/core/lifecycle_events.hpp"

namespace sandboxd::door {

class LifecycleEventStream : public EventStream {
 public:
  // Events after `after`; at most `per_chunk` in one chunk, so a chunk stays small.
  LifecycleEventStream(std::shared_ptr<const core::LifecycleEventLog> log, std::uint64_t after,
                       std::size_t per_chunk = 100);
  std::string next() override;

 private:
  std::shared_ptr<const core::LifecycleEventLog> log_;
  std::uint64_t after_;
  const std::size_t per_chunk_;
  bool started_ = false;
};

// GET …/events?after=N&limit=M as a document (service_json.hpp's page): the events numbered
// above N (default 0), at most M (1 to 1000, default 100); unknown parameters are ignored. An
// empty page without a log. Throws core::ServiceError (invalid_argument) naming a parameter
// given twice or a value out of range.
std::string lifecycle_events_json(const RequestHead& head, const core::LifecycleEventLog* log);

// GET …/events (the page's stream) as an answer: 200 text/event-stream with the page's headers
// (ui_page.hpp), the stream starting where stream_start says. Throws as stream_start does.
Response lifecycle_stream_response(const RequestHead& head,
                                   std::shared_ptr<const core::LifecycleEventLog> log);

// Where a subscriber starts: after its `Last-Event-ID` header (a reconnect), else after the
// query's `after=N`, else from the oldest event kept. Throws core::ServiceError
// (invalid_argument) naming the header or parameter and the value when it is not a number.
std::uint64_t stream_start(const RequestHead& head);

}  // namespace sandboxd::door

// The operator page's sessions (docs/ui.md, "What protects it"). Logging in to the page with
// the daemon's credential (serve's token, the provisioner's API key) opens a session: a random
// value the daemon issued and keeps, set as the page's cookie. The cookie never holds the
// credential nor anything derived from it, so a cookie that leaks (browsers send a host's
// cookies to every port of it, a sandbox's published port included) opens only the page's
// read-only data routes, and only until it expires, its user logs out or the daemon restarts
// (sessions live in memory). The control API (/v1, /api) never takes it.
//
// Each daemon names its cookie for itself (sandboxd_serve_ui, sandboxd_provisioner_ui), so
// two daemons on one host never read each other's. Log-in attempts are bounded: past
// `max_failed_logins` refusals within `failure_window`, /ui/login answers 429 until the window
// has passed (the daemon's credential is far too long to guess; this keeps a page from being
// used to try).
//
// Lock story: `mutex_` guards the sessions and the failure record; admits() runs on the doors'
// I/O thread, login and logout on workers; nothing blocks under it.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "http_door.hpp"
#include "sandboxd/thread_annotations.hpp"

namespace sandboxd::door {

class UiSessions {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  struct Options {
    std::string cookie_name;  // the daemon's own
    std::chrono::seconds lifetime{std::chrono::hours(8)};
    std::size_t max_sessions = 32;  // the oldest is closed for a new one past this
    std::size_t max_failed_logins = 10;
    std::chrono::seconds failure_window{60};
  };

  explicit UiSessions(Options options,
                      std::function<TimePoint()> now = [] {
                        return std::chrono::steady_clock::now();
                      });

  const std::string& cookie_name() const { return options_.cookie_name; }

  // Whether `head` is a request to one of the page's data routes (is_ui_data_path) carrying a
  // live session's cookie. Compares in time independent of the value.
  bool admits(const RequestHead& head) const EXCLUDES(mutex_);

  // POST /ui/login, once the credential was checked: 204 setting a new session's cookie.
  Response login() EXCLUDES(mutex_);
  // POST /ui/logout: the presented session (if any) is closed; 204 expiring the cookie.
  Response logout(const RequestHead& head) EXCLUDES(mutex_);

  // Whether log-in attempts are refused now (too many failed within the window): 429.
  bool login_refused() const EXCLUDES(mutex_);
  // A log-in whose credential was wrong.
  void note_failed_login() EXCLUDES(mutex_);
  // The answer to a log-in refused for that.
  static Response too_many_logins();

  std::size_t open_sessions() const EXCLUDES(mutex_);

 private:
  struct Session {
    std::string value;  // 64 hex characters
    TimePoint expires;
  };
  // The cookie value `head` carries under our name; "" when none.
  std::string presented(const RequestHead& head) const;
  void drop_expired_locked(TimePoint now) const REQUIRES(mutex_);

  const Options options_;
  const std::function<TimePoint()> now_;
  mutable Mutex mutex_;
  mutable std::vector<Session> sessions_ GUARDED_BY(mutex_);  // oldest first
  mutable std::deque<TimePoint> failures_ GUARDED_BY(mutex_);  // within the window
};

}  // namespace sandboxd::door

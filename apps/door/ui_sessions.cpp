#include "ui_sessions.hpp"

#include <openssl/crypto.h>

#include <algorithm>

#include "sandboxd/core/random_hex.hpp"
#include "ui_page.hpp"

namespace sandboxd::door {
namespace {

constexpr std::size_t kSessionBytes = 32;

Response no_content() {
  Response response;
  response.status = 204;
  response.content_type.clear();
  add_ui_headers(response);
  return response;
}

}  // namespace

UiSessions::UiSessions(Options options, std::function<TimePoint()> now)
    : options_(std::move(options)), now_(std::move(now)) {}

std::string UiSessions::presented(const RequestHead& head) const {
  std::string_view cookies = head.header("cookie");
  while (!cookies.empty()) {
    const std::size_t end = std::min(cookies.find(';'), cookies.size());
    std::string_view pair = cookies.substr(0, end);
    cookies.remove_prefix(std::min(end + 1, cookies.size()));
    while (!pair.empty() && pair.front() == ' ') pair.remove_prefix(1);
    const std::size_t equals = pair.find('=');
    if (equals == std::string_view::npos || pair.substr(0, equals) != options_.cookie_name) {
      continue;
    }
    const std::string_view value = pair.substr(equals + 1);
    if (value.size() != kSessionBytes * 2) return "";
    return std::string(value);
  }
  return "";
}

void UiSessions::drop_expired_locked(TimePoint now) const {
  sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                 [now](const Session& session) { return session.expires <= now; }),
                  sessions_.end());
}

bool UiSessions::admits(const RequestHead& head) const {
  if (!is_ui_data_path(head.path)) return false;
  const std::string value = presented(head);
  if (value.empty()) return false;
  const TimePoint now = now_();
  MutexLock lock(mutex_);
  drop_expired_locked(now);
  bool found = false;
  for (const Session& session : sessions_) {  // every one compared: no early exit
    found |= CRYPTO_memcmp(session.value.data(), value.data(), value.size()) == 0;
  }
  return found;
}

Response UiSessions::login() {
  Session session{core::random_hex(kSessionBytes, "a session for the operator page"),
                  now_() + options_.lifetime};
  const std::string cookie = options_.cookie_name + "=" + session.value +
                             "; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=" +
                             std::to_string(options_.lifetime.count());
  {
    MutexLock lock(mutex_);
    drop_expired_locked(now_());
    if (sessions_.size() >= options_.max_sessions) sessions_.erase(sessions_.begin());
    sessions_.push_back(std::move(session));
  }
  Response response = no_content();
  response.headers.emplace_back("Set-Cookie", cookie);
  return response;
}

Response UiSessions::logout(const RequestHead& head) {
  const std::string value = presented(head);
  if (!value.empty()) {
    MutexLock lock(mutex_);
    sessions_.erase(std::remove_if(sessions_.begin(), sessions_.end(),
                                   [&value](const Session& session) {
                                     return CRYPTO_memcmp(session.value.data(), value.data(),
                                                          value.size()) == 0;
                                   }),
                    sessions_.end());
  }
  Response response = no_content();
  response.headers.emplace_back(
      "Set-Cookie", options_.cookie_name + "=; Path=/ui; HttpOnly; SameSite=Strict; Max-Age=0");
  return response;
}

bool UiSessions::login_refused() const {
  const TimePoint now = now_();
  MutexLock lock(mutex_);
  while (!failures_.empty() && failures_.front() + options_.failure_window <= now) {
    failures_.pop_front();
  }
  return failures_.size() >= options_.max_failed_logins;
}

void UiSessions::note_failed_login() {
  const TimePoint now = now_();
  MutexLock lock(mutex_);
  failures_.push_back(now);
  while (failures_.size() > options_.max_failed_logins) failures_.pop_front();
}

Response UiSessions::too_many_logins() {
  Response response;
  response.status = 429;
  response.content_type = "text/plain";
  response.body = "too many failed log-ins; try again in a minute\n";
  response.headers.emplace_back("Retry-After", "60");
  add_ui_headers(response);
  return response;
}

std::size_t UiSessions::open_sessions() const {
  const TimePoint now = now_();
  MutexLock lock(mutex_);
  drop_expired_locked(now);
  return sessions_.size();
}

}  // namespace sandboxd::door

#include "egress/egress_decisions.hpp"

#include <rapidjson/stringbuffer.h>
#include <rapidjson/writer.h>

#include <iterator>
#include <optional>
#include <stdexcept>
#include <utility>

#include "sandboxd/core/random_hex.hpp"
#include "sandboxd/core/egress_rules.hpp"
#include "sandboxd/json.hpp"

namespace sandboxd::core {

std::optional<EgressDecision> egress_decision_from(const std::string& text) {
  if (text == "deny") return EgressDecision::deny;
  if (text == "allow_temporary") return EgressDecision::allow_temporary;
  if (text == "allow_sandbox") return EgressDecision::allow_sandbox;
  return std::nullopt;
}

const char* to_string(EgressDecision decision) {
  switch (decision) {
    case EgressDecision::deny:
      return "deny";
    case EgressDecision::allow_temporary:
      return "allow_temporary";
    case EgressDecision::allow_sandbox:
      return "allow_sandbox";
  }
  return "deny";
}

EgressDecisions::EgressDecisions(std::shared_ptr<Clock> clock, Limits limits)
    : clock_(std::move(clock)), limits_(limits) {}

bool EgressDecisions::granted(const std::string& sandbox_id, const std::string& domain, int port,
                              const std::string& method) {
  const double now = clock_->wall_now();
  MutexLock lock(mutex_);
  auto& state = sandboxes_[sandbox_id];
  for (const int granted_port : {port, 0}) {
    const auto it = state.grants.find({domain, granted_port});
    if (it == state.grants.end()) continue;
    if (it->second == 0 || it->second > now) return true;
    state.grants.erase(it);
  }
  if (limits_.prompt) {
    const std::string key = domain + ":" + std::to_string(port);
    auto it = state.pending.find(key);
    if (it == state.pending.end()) {
      if (state.pending.size() >= limits_.max_pending_per_sandbox &&
          !make_pending_room_locked(state, now)) {
        return false;
      }
      EgressRequest request;
      request.request_id = random_hex(8, "an egress request id");  // 16 characters
      request.domain = domain;
      request.port = port;
      request.method = method;
      request.first_seen = now;
      it = state.pending.emplace(key, std::move(request)).first;
    }
    it->second.last_seen = now;
    ++it->second.count;
  }
  return false;
}

bool EgressDecisions::make_pending_room_locked(SandboxDecisions& state, double now) {
  auto oldest = state.pending.end();
  for (auto it = state.pending.begin(); it != state.pending.end();) {
    if (!it->second.surfaced) {
      ++it;
      continue;
    }
    if (it->second.last_seen + limits_.fetched_request_ttl <= now) {
      it = state.pending.erase(it);
      continue;
    }
    if (oldest == state.pending.end() || it->second.last_seen < oldest->second.last_seen) {
      oldest = it;
    }
    ++it;
  }
  if (state.pending.size() < limits_.max_pending_per_sandbox) return true;
  if (oldest == state.pending.end()) return false;
  state.pending.erase(oldest);
  return true;
}

void EgressDecisions::bind_incarnation(const std::string& sandbox_id,
                                       const std::string& incarnation) {
  MutexLock lock(mutex_);
  auto& state = sandboxes_[sandbox_id];
  if (!state.incarnation.empty() && !incarnation.empty() && state.incarnation != incarnation) {
    state = SandboxDecisions{};  // another instance's decisions are not this one's
  }
  if (!incarnation.empty()) state.incarnation = incarnation;
}

void EgressDecisions::retain(
    const std::function<bool(const std::string&, const std::string&)>& keep) {
  MutexLock lock(mutex_);
  for (auto it = sandboxes_.begin(); it != sandboxes_.end();) {
    it = keep(it->first, it->second.incarnation) ? std::next(it) : sandboxes_.erase(it);
  }
}

std::vector<EgressRequest> EgressDecisions::pending(const std::string& sandbox_id) const {
  MutexLock lock(mutex_);
  std::vector<EgressRequest> out;
  const auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end()) return out;
  for (const auto& [key, request] : it->second.pending) out.push_back(request);
  return out;
}

std::vector<EgressGrant> EgressDecisions::grants(const std::string& sandbox_id) const {
  const double now = clock_->wall_now();
  MutexLock lock(mutex_);
  std::vector<EgressGrant> out;
  const auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end()) return out;
  for (const auto& [grant, expires] : it->second.grants) {
    if (expires == 0 || expires > now) out.push_back({grant.first, expires, grant.second});
  }
  return out;
}

std::vector<EgressRequest> EgressDecisions::consume_events(const std::string& sandbox_id) {
  MutexLock lock(mutex_);
  std::vector<EgressRequest> out;
  const auto found = sandboxes_.find(sandbox_id);
  if (found == sandboxes_.end()) return out;
  for (auto& [key, request] : found->second.pending) {
    if (request.surfaced) continue;
    request.surfaced = true;
    out.push_back(request);
  }
  return out;
}

void EgressDecisions::deny_pending(const std::string& sandbox_id) {
  MutexLock lock(mutex_);
  const auto found = sandboxes_.find(sandbox_id);
  if (found == sandboxes_.end()) return;
  auto& pending = found->second.pending;
  for (auto it = pending.begin(); it != pending.end();) {
    it = it->second.surfaced ? std::next(it) : pending.erase(it);
  }
}

void EgressDecisions::decide(const std::string& sandbox_id, const std::string& domain,
                             EgressDecision decision) {
  const auto normalized = egress::normalize_domain(domain);
  if (!normalized) throw std::invalid_argument("'" + domain + "' is not a domain name");
  MutexLock lock(mutex_);
  decide_locked(sandboxes_[sandbox_id], *normalized, 0, decision);
}

bool EgressDecisions::decide_request(const std::string& sandbox_id, const std::string& request_id,
                                     EgressDecision decision) {
  MutexLock lock(mutex_);
  const auto found = sandboxes_.find(sandbox_id);
  if (found == sandboxes_.end()) return false;
  // Found and decided under one lock: a request decided twice at once is decided once.
  for (const auto& [key, request] : found->second.pending) {
    if (request.request_id != request_id) continue;
    // Copied: decide_locked erases the request.
    const std::string domain = request.domain;
    const int port = request.port;
    decide_locked(found->second, domain, port, decision);
    return true;
  }
  return false;
}

void EgressDecisions::decide_locked(SandboxDecisions& state, const std::string& domain, int port,
                                    EgressDecision decision) {
  for (auto it = state.pending.begin(); it != state.pending.end();) {
    const bool decided = it->second.domain == domain && (port == 0 || it->second.port == port);
    it = decided ? state.pending.erase(it) : std::next(it);
  }
  switch (decision) {
    case EgressDecision::deny:
      state.grants.erase({domain, port});
      if (port == 0) {
        for (auto it = state.grants.begin(); it != state.grants.end();) {
          it = it->first.first == domain ? state.grants.erase(it) : std::next(it);
        }
      }
      break;
    case EgressDecision::allow_temporary:
      state.grants[{domain, port}] = clock_->wall_now() + limits_.temporary_grant_ttl;
      break;
    case EgressDecision::allow_sandbox:
      state.grants[{domain, port}] = 0;
      break;
  }
}

void EgressDecisions::forget(const std::string& sandbox_id) {
  MutexLock lock(mutex_);
  sandboxes_.erase(sandbox_id);
}

std::string EgressDecisions::grants_json() const {
  MutexLock lock(mutex_);
  rapidjson::StringBuffer buffer;
  rapidjson::Writer<rapidjson::StringBuffer> w(buffer);
  w.StartObject();
  for (const auto& [sandbox_id, state] : sandboxes_) {
    if (state.grants.empty()) continue;
    w.Key(sandbox_id.c_str());
    w.StartObject();
    w.Key("incarnation");
    w.String(state.incarnation.c_str());
    w.Key("grants");
    w.StartObject();
    for (const auto& [grant, expires] : state.grants) {
      const std::string key = grant.first + ":" + std::to_string(grant.second);
      w.Key(key.c_str());
      w.Double(expires);
    }
    w.EndObject();
    w.EndObject();
  }
  w.EndObject();
  return buffer.GetString();
}

void EgressDecisions::restore_grants(const std::string& json) {
  rapidjson::Document doc;
  if (!parse_json(doc, json) || !doc.IsObject()) return;
  MutexLock lock(mutex_);
  for (const auto& sandbox : doc.GetObject()) {
    if (!sandbox.value.IsObject()) continue;
    SandboxDecisions restored;
    const rapidjson::Value* grants = &sandbox.value;  // the older form: the grants themselves
    if (const auto it = sandbox.value.FindMember("grants");
        it != sandbox.value.MemberEnd() && it->value.IsObject()) {
      grants = &it->value;
      if (const auto name = sandbox.value.FindMember("incarnation");
          name != sandbox.value.MemberEnd() && name->value.IsString()) {
        restored.incarnation = name->value.GetString();
      }
    }
    for (const auto& grant : grants->GetObject()) {
      if (!grant.value.IsNumber()) continue;
      std::string name = grant.name.GetString();
      int port = 0;
      if (const std::size_t colon = name.rfind(':'); colon != std::string::npos) {
        const std::string digits = name.substr(colon + 1);
        if (digits.empty() || digits.size() > 5 ||
            digits.find_first_not_of("0123456789") != std::string::npos) {
          continue;
        }
        port = std::stoi(digits);
        name.resize(colon);
      }
      const auto domain = egress::normalize_domain(name);
      if (domain && port <= 65535) restored.grants[{*domain, port}] = grant.value.GetDouble();
    }
    sandboxes_[sandbox.name.GetString()] = std::move(restored);
  }
}

}  // namespace sandboxd::core

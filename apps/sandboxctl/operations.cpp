#include "operations.hpp"

#include <chrono>
#include <map>
#include <set>

#include "sandboxd/core/paths.hpp"

namespace sandboxctl {

using namespace sandboxd;

namespace {

std::optional<std::string> conversation_user(const core::TrackedSandbox& t) {
  if (!t.conversation) return std::nullopt;
  return t.conversation->user_id;
}

std::optional<std::string> conversation_thread(const core::TrackedSandbox& t) {
  if (!t.conversation) return std::nullopt;
  return t.conversation->thread_id;
}

std::optional<std::string> non_empty(const std::string& text) {
  if (text.empty()) return std::nullopt;
  return text;
}

// Runs a call into the provider; anything it throws that is not already classified is a
// failure of the backend (engine, provisioner) it drives.
template <typename Call>
auto backend_call(Call&& call) -> decltype(call()) {
  try {
    return call();
  } catch (const CliError&) {
    throw;
  } catch (const SandboxBeingDestroyedError& e) {
    throw CliError(kOwnershipRefused, e.what());
  } catch (const SandboxIdentityCollisionError& e) {
    throw CliError(kOwnershipRefused, e.what());
  } catch (const OwnershipBackendError& e) {
    throw CliError(kOwnershipRefused, std::string("the lease store cannot answer: ") + e.what());
  } catch (const std::invalid_argument& e) {
    throw CliError(kUsage, e.what());
  } catch (const std::exception& e) {
    throw CliError(kBackendFailure, e.what());
  }
}

std::string lease_owner_text(OwnershipStore& store, const std::string& sandbox_id) {
  try {
    if (auto lease = store.inspect(sandbox_id)) {
      return lease->owner_id + (lease->destroying ? " (tearing it down)" : "");
    }
    return "nobody";
  } catch (const std::exception& e) {
    return std::string("unknown (") + e.what() + ")";
  }
}

core::TrackedSandbox require_tracked(core::Provider& provider, const std::string& id,
                                     const std::string& where) {
  auto tracked = provider.find(id);
  if (!tracked) {
    throw CliError(kNotFound, "sandbox '" + id + "' is not tracked by " + where +
                                  " (sandboxctl list shows what is)");
  }
  return *tracked;
}

}  // namespace

void write_string(JsonWriter& w, const char* key, const std::string& value) {
  w.Key(key);
  w.String(value.c_str(), static_cast<rapidjson::SizeType>(value.size()));
}

void write_optional(JsonWriter& w, const char* key, const std::optional<std::string>& value) {
  w.Key(key);
  if (value) {
    w.String(value->c_str(), static_cast<rapidjson::SizeType>(value->size()));
  } else {
    w.Null();
  }
}

void write_tracked(JsonWriter& w, const core::TrackedSandbox& t) {
  write_string(w, "sandbox_id", t.info.sandbox_id);
  write_string(w, "sandbox_url", t.info.sandbox_url);
  write_string(w, "state", t.warm ? "warm" : "active");
  write_optional(w, "user_id", conversation_user(t));
  write_optional(w, "thread_id", conversation_thread(t));
  w.Key(t.warm ? "released_at" : "last_activity");
  w.Double(t.since);
  write_optional(w, "container_name", t.info.container_name);
}

double wall_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

Acquired acquire_conversation(core::Provider& provider, const std::optional<std::string>& user,
                              const std::optional<std::string>& thread, const char* user_label,
                              const char* thread_label) {
  try {
    if (user) core::validate_user_id(*user);
  } catch (const std::invalid_argument& e) {
    throw CliError(kUsage, std::string(user_label) + ": " + e.what());
  }
  try {
    if (thread) core::validate_thread_id(*thread);
  } catch (const std::invalid_argument& e) {
    throw CliError(kUsage, std::string(thread_label) + ": " + e.what());
  }
  Acquired acquired;
  acquired.result = backend_call([&] { return provider.acquire_traced(thread, user); });
  acquired.tracked = provider.find(acquired.result.sandbox_id);
  return acquired;
}

Released release_sandbox(core::Provider& provider, const std::string& id,
                         const std::string& where) {
  const core::TrackedSandbox before = require_tracked(provider, id, where);
  const char* result = "released";
  if (before.warm) {
    result = "already warm";
  } else {
    backend_call([&] { provider.release(id); });
  }
  auto after = provider.find(id);
  if (!after) {
    throw CliError(kOwnershipRefused, "sandbox " + id + " was released, but its lease belongs to " +
                                          lease_owner_text(*provider.ownership(), id) +
                                          " now; it keeps running and is no longer tracked here");
  }
  return {*after, result};
}

core::TrackedSandbox destroy_sandbox(core::Provider& provider, const std::string& id,
                                     const std::string& where) {
  const core::TrackedSandbox before = require_tracked(provider, id, where);
  backend_call([&] { provider.destroy(id); });
  if (provider.find(id)) {
    throw CliError(kOwnershipRefused, "refusing to destroy sandbox " + id +
                                          ": its lease is held by " +
                                          lease_owner_text(*provider.ownership(), id));
  }
  return before;
}

core::TrackedSandbox get_sandbox(core::Provider& provider, const std::string& id,
                                 const std::string& where) {
  provider.get(id);  // an active sandbox's last activity is refreshed
  return require_tracked(provider, id, where);
}

Listing list_sandboxes(core::Provider& provider) {
  Listing listing;
  const core::RegistrySnapshot registry = provider.export_registry();
  std::optional<std::vector<SandboxInfo>> running;
  try {
    running = provider.backend()->list_running();
  } catch (const std::exception& e) {
    listing.backend_error = e.what();
  }
  std::set<std::string> running_ids, tracked_ids;
  if (running) {
    for (const auto& info : *running) running_ids.insert(info.sandbox_id);
  }
  for (const auto& t : registry.sandboxes) {
    tracked_ids.insert(t.info.sandbox_id);
    ListedSandbox row{t.info.sandbox_id,
                      t.warm ? "warm" : "active",
                      t.info.sandbox_url,
                      conversation_user(t).value_or(""),
                      conversation_thread(t).value_or(""),
                      std::nullopt,
                      t.since,
                      std::nullopt,
                      ""};
    if (running) row.running = running_ids.count(t.info.sandbox_id) > 0;
    listing.sandboxes.push_back(std::move(row));
  }
  if (running) {
    for (const auto& info : *running) {
      if (tracked_ids.count(info.sandbox_id)) continue;
      listing.sandboxes.push_back(
          ListedSandbox{info.sandbox_id, "orphan", info.sandbox_url, info.user_id.value_or(""),
                        info.thread_id.value_or(""), true, std::nullopt, std::nullopt, ""});
    }
  }
  OwnershipStore& store = *provider.ownership();
  for (auto& row : listing.sandboxes) {
    try {
      row.lease = store.inspect(row.id);
    } catch (const std::exception& e) {
      row.lease_error = e.what();
    }
  }
  listing.owner_id = provider.owner_id();
  listing.wall_clock_leases = store.supports_cross_process();
  return listing;
}

void write_listing(JsonWriter& w, const Listing& listing, const std::string& state_dir) {
  write_string(w, "state_dir", state_dir);
  write_string(w, "owner_id", listing.owner_id);
  write_optional(w, "backend_error", non_empty(listing.backend_error));
  w.Key("sandboxes");
  w.StartArray();
  for (const auto& row : listing.sandboxes) {
    w.StartObject();
    write_string(w, "sandbox_id", row.id);
    write_string(w, "state", row.state);
    w.Key("tracked");
    w.Bool(row.state != "orphan");
    w.Key("running");
    if (row.running) {
      w.Bool(*row.running);
    } else {
      w.Null();
    }
    write_string(w, "sandbox_url", row.url);
    write_optional(w, "user_id", non_empty(row.user));
    write_optional(w, "thread_id", non_empty(row.thread));
    w.Key("since");
    if (row.since) {
      w.Double(*row.since);
    } else {
      w.Null();
    }
    w.Key("lease");
    if (row.lease) {
      w.StartObject();
      write_string(w, "owner_id", row.lease->owner_id);
      write_string(w, "state", row.lease->destroying ? "del" : "own");
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
    if (!row.lease_error.empty()) write_string(w, "lease_error", row.lease_error);
    w.EndObject();
  }
  w.EndArray();
}

const char* exit_code_name(int code) {
  switch (code) {
    case kOk:
      return "ok";
    case kUsage:
      return "usage";
    case kBadConfig:
      return "config";
    case kBackendFailure:
      return "backend";
    case kNotFound:
      return "not_found";
    case kOwnershipRefused:
      return "ownership";
    default:
      return "internal";
  }
}

}  // namespace sandboxctl

// What sandboxctl's commands and `sandboxctl serve`'s routes do, once: each call drives the
// Provider and turns its outcome into a result or a CliError with the exit code (and, for
// serve, the HTTP status) a caller reports. Rendering of the results as JSON lives here too, so
// the CLI's --json output and the HTTP API's bodies are the same documents.
#pragma once

#include <rapidjson/prettywriter.h>
#include <rapidjson/stringbuffer.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli_error.hpp"
#include "sandboxd/core/provider.hpp"

namespace sandboxctl {

using JsonWriter = rapidjson::PrettyWriter<rapidjson::StringBuffer>;

void write_string(JsonWriter& w, const char* key, const std::string& value);
void write_optional(JsonWriter& w, const char* key, const std::optional<std::string>& value);
// {sandbox_id, sandbox_url, state, user_id, thread_id, last_activity|released_at,
//  container_name} (the members only: the caller opens and closes the object).
void write_tracked(JsonWriter& w, const sandboxd::core::TrackedSandbox& t);

double wall_now();

// Validates the ids (CliError kUsage naming `user_label` or `thread_label` and the value) and
// acquires; backend failures become kBackendFailure.
struct Acquired {
  sandboxd::core::AcquireResult result;
  std::optional<sandboxd::core::TrackedSandbox> tracked;
};
Acquired acquire_conversation(sandboxd::core::Provider& provider,
                              const std::optional<std::string>& user,
                              const std::optional<std::string>& thread, const char* user_label,
                              const char* thread_label);

// Each throws CliError: kNotFound when `id` is not tracked (naming `where`), kOwnershipRefused
// when a peer's lease refuses it (naming the holder), kBackendFailure when the engine fails.
struct Released {
  sandboxd::core::TrackedSandbox tracked;  // now warm
  const char* result;                      // "released" or "already warm"
};
Released release_sandbox(sandboxd::core::Provider& provider, const std::string& id,
                         const std::string& where);
sandboxd::core::TrackedSandbox destroy_sandbox(sandboxd::core::Provider& provider,
                                               const std::string& id, const std::string& where);
// An active sandbox's last activity is refreshed (a get is a use).
sandboxd::core::TrackedSandbox get_sandbox(sandboxd::core::Provider& provider,
                                           const std::string& id, const std::string& where);

// Tracked sandboxes, the backend's own containers (untracked ones are orphans) and leases.
struct ListedSandbox {
  std::string id, state, url, user, thread;  // state: active, warm or orphan
  std::optional<bool> running;               // unknown when the backend could not list
  std::optional<double> since;
  std::optional<sandboxd::LeaseRecord> lease;
  std::string lease_error;
};
struct Listing {
  std::vector<ListedSandbox> sandboxes;
  std::string owner_id;
  bool wall_clock_leases = false;  // lease expiry is comparable with wall_now()
  std::string backend_error;       // "" when the backend listed its containers
};
Listing list_sandboxes(sandboxd::core::Provider& provider);
// {state_dir, owner_id, backend_error, sandboxes: [...]} (members only).
void write_listing(JsonWriter& w, const Listing& listing, const std::string& state_dir);

}  // namespace sandboxctl

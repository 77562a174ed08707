// Snapshots of a conversation's sandbox (docs/snapshots.md): its container's filesystem changes
// (an image of the backend's own, SandboxSnapshots) and a copy of the conversation's writable
// directories (user-data and acp-workspace), taken while the sandbox is frozen for the instant,
// with the network policy it ran under. A snapshot belongs to the user of the conversation; a
// new sandbox is made from it into a conversation (restore), by default only one of the same
// user. Process memory is not kept: processes start afresh from the restored files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace sandboxd::core {

struct SnapshotRecord {
  std::string name;       // [A-Za-z0-9_-], 1 to 64: unique per user
  std::string user_id;    // whose it is: the user of the conversation it was taken of
  std::string thread_id;  // that conversation
  std::string sandbox_id;
  std::string image;                  // the backend's image of the filesystem changes
  std::string network_policy;         // the policy the sandbox ran under ("open", "isolated", …)
  double created_at = 0;              // wall clock
  double expires_at = 0;              // wall clock; 0: never
  std::uint64_t directory_bytes = 0;  // the copied directories
  std::uint64_t image_bytes = 0;      // the image beyond its base, as the backend says
  std::uint64_t bytes() const { return directory_bytes + image_bytes; }
};

// The ceilings on one user's snapshots (config keys max_snapshots_per_user,
// max_snapshot_bytes_per_user, snapshot_ttl_seconds): the N+1th, or one that would take a user
// past the bytes, is a capacity refusal; an expired one is deleted by the next idle pass.
struct SnapshotLimits {
  std::size_t max_per_user = 10;
  std::uint64_t max_bytes_per_user = 20ull << 30;
  double ttl_seconds = 30 * 24 * 3600.0;  // 0: never expire
};

// "snap-{16 hex}" for a snapshot asked for without a name.
std::string generated_snapshot_name();
// Whether `name` is one a snapshot may have.
bool valid_snapshot_name(const std::string& name);
// The archived tier keeps one snapshot per conversation, named for its sandbox:
// "archive-{sandbox id}".
std::string archive_snapshot_name(const std::string& sandbox_id);
// Whether `record` is the archive of the sandbox it was taken of.
bool is_archive(const SnapshotRecord& record);

}  // namespace sandboxd::core

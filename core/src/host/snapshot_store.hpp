// Where snapshots live on the host (docs/snapshots.md): {base_dir}/snapshots/{user}/{name}/,
// 0700, holding meta.json (the record, 0600) and data/ (the copied directories). A snapshot is
// made in a staging directory beside its final place and renamed into it whole, so a half-made
// one is never listed, and a failed one is removed. Every walk is tree_copy.hpp's (no link
// followed, bounded). One process at a time writes a user's snapshots: the provider serialises
// its own calls per user; across processes, a rename that meets an existing name is refused.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "host/tree_copy.hpp"
#include "sandboxd/core/snapshots.hpp"
#include "sandboxd/host_fs.hpp"

namespace sandboxd::core {

class SnapshotStore {
 public:
  explicit SnapshotStore(std::filesystem::path base_dir);

  // A staging directory for `user`'s snapshot `name`: its data/ descriptor to copy into.
  struct Staged {
    std::string user;
    std::string name;
    std::string staging;  // its directory's name beside the final one
    host_fs::UniqueFd data;
  };
  // Throws ServiceError(invalid_argument) for a bad name, (conflict) when the name is taken.
  Staged stage(const std::string& user, const std::string& name) const;
  // The record written and the staging directory renamed into place; throws (conflict) when
  // another snapshot took the name meanwhile (the staging directory is then removed).
  void publish(Staged& staged, const SnapshotRecord& record) const;
  // A staging directory given up: removed (what it held goes).
  void abandon(Staged& staged) const noexcept;

  std::optional<SnapshotRecord> find(const std::string& user, const std::string& name) const;
  // Every snapshot (of `user` only when given), oldest first. Unreadable ones are skipped.
  std::vector<SnapshotRecord> list(const std::optional<std::string>& user) const;
  // The snapshot's data/ directory, opened; throws (not_found).
  host_fs::UniqueFd data_of(const std::string& user, const std::string& name) const;
  // Removes a snapshot's directory; false when there was none.
  bool remove(const std::string& user, const std::string& name) const;

  // Images of deleted snapshots the backend could not remove yet (a sandbox restored from one
  // still runs from it), kept in {base_dir}/snapshots/images-to-remove.json until they go.
  void remember_image(const std::string& image) const;
  std::vector<std::string> remembered_images() const;
  void forget_images(const std::vector<std::string>& removed) const;

  static const TreeBounds& bounds();

 private:
  host_fs::UniqueFd user_dir(const std::string& user, bool create) const;
  std::filesystem::path base_dir_;
};

}  // namespace sandboxd::core

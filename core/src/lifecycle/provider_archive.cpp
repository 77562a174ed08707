// Provider: the archived tier (docs/snapshots.md, "The archived tier"). A conversation's
// sandbox released longer than archive_after_seconds ago is snapshotted (its layer and its
// conversation's directories, as `snapshot` does) under the conversation's lock, and its
// container removed: an idle conversation then costs disk, not a running or paused container.
// The conversation's next acquire, where it would discover or create, finds the archive and
// makes the sandbox from it (path restored), then deletes the archive. A failed snapshot
// leaves the sandbox as it was; a sandbox reclaimed meanwhile keeps running and its archive
// goes. Off unless archive_after_seconds is set and the backend offers SandboxSnapshots.
#include <mutex>

#include "fixed_decimals.hpp"
#include "provider_impl.hpp"

namespace sandboxd::core {
std::optional<SnapshotRecord> Provider::Impl::archive_of(const std::string& user_id,
                                                         const std::string& thread_id,
                                                         const std::string& sandbox_id) const {
  if (snapshots_ == nullptr || snapshot_store_ == nullptr) return std::nullopt;
  std::optional<SnapshotRecord> record =
      snapshot_store_->find(user_id, archive_snapshot_name(sandbox_id));
  if (record && record->thread_id != thread_id) return std::nullopt;
  return record;
}

int Provider::Impl::archive_idle_released() {
  if (!archiving_enabled()) return 0;
  std::vector<std::pair<std::string, WarmEntry>> due;  // led by the id, for sort_by_id
  double current = 0;
  {
    MutexLock lock(mutex_);
    current = now();
    for (auto& [id, entry] : registry_.released_entries()) {
      // An adopted orphan serves no conversation yet: nothing would ever restore it.
      if (entry.identity && current - entry.released_at >= options_.archive_after_seconds) {
        due.emplace_back(id, std::move(entry));
      }
    }
  }
  sort_by_id(due);
  int archived = 0;
  for (const auto& [id, entry] : due) {
    const ThreadKey& conversation = *entry.identity;
    // No acquisition of the conversation between the snapshot and the removal.
    auto conversation_lock = thread_lock(conversation);
    std::lock_guard<ThreadLock> held(*conversation_lock);
    const Predicate same = still_this_warm_entry(id, entry);
    {
      MutexLock lock(mutex_);
      if (!same(registry_)) continue;  // reclaimed or gone meanwhile
    }
    const std::string name = archive_snapshot_name(id);
    try {
      // An archive left from before (the conversation came back through a process that does
      // not archive) is older than the sandbox now parked: it is replaced.
      if (archive_of(conversation.user_id, conversation.thread_id, id)) {
        delete_snapshot(conversation.user_id, name);
      }
      snapshot_locked(id, ServedConversation{entry.info, conversation}, name);
    } catch (const std::exception& e) {
      log(LogLevel::warning, "Could not archive idle sandbox " + id + " of " +
                                 conversation.user_id + "/" + conversation.thread_id +
                                 " (it stays as it was): " + e.what());
      continue;
    }
    if (!destroy_warm_entry(id, entry, "archived", same)) {
      // Still running (a peer holds it, or the stop failed): the archive would only go stale.
      try {
        delete_snapshot(conversation.user_id, name);
      } catch (const std::exception& e) {
        log(LogLevel::warning, "Could not delete the unused archive " + name + ": " + e.what());
      }
      continue;
    }
    ++archived;
    log(LogLevel::info, "Archived sandbox " + id + " of " + conversation.user_id + "/" +
                            conversation.thread_id + " after " +
                            fixed(current - entry.released_at, 1) + "s released (snapshot " + name +
                            "); the conversation's next acquire restores it");
  }
  return archived;
}

}  // namespace sandboxd::core

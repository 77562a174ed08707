// Provider: snapshots of a conversation's sandbox, and sandboxes made from them
// (docs/snapshots.md). A snapshot is the sandbox's filesystem changes (the backend's
// SandboxSnapshots: an image of its own) and a copy of the conversation's writable directories
// (user-data, acp-workspace), taken under the conversation's lock while the sandbox is frozen
// for the instant; it is published whole or not at all (SnapshotStore). A restore is an
// acquisition of the conversation that first replaces its sandbox and its directories.
#include <fcntl.h>

#include <mutex>

#include "host/tree_copy.hpp"
#include "provider_impl.hpp"
#include "scope_exit.hpp"

namespace sandboxd::core {
namespace {

// The snapshot the current thread's acquisition is restoring from (a restore runs on its
// caller's thread, like the acquisition it is).
thread_local const SnapshotRecord* t_restoring = nullptr;

// The directories of a conversation a snapshot keeps: what its sandbox can write.
constexpr const char* kKeptDirectories[] = {"user-data", "acp-workspace"};

ServiceError unsupported(const std::string& backend_use) {
  return ServiceError(ErrorKind::unsupported,
                      "backend " + backend_use +
                          " cannot take snapshots (it offers no SandboxSnapshots): use "
                          "local_docker, or a backend that offers them");
}

}  // namespace

const std::string* Provider::Impl::restoring_image() {
  return t_restoring != nullptr ? &t_restoring->image : nullptr;
}

SnapshotRecord Provider::snapshot(const std::string& sandbox_id,
                                  const std::optional<std::string>& name) {
  Impl& impl = *impl_;
  if (impl.snapshots_ == nullptr) throw unsupported(impl.backend_use_);
  const Impl::ServedConversation served =
      impl.served_conversation(sandbox_id, "a snapshot belongs to a conversation's user");
  // No acquisition of the conversation meanwhile.
  auto conversation_lock = impl.thread_lock(served.conversation);
  std::lock_guard<ThreadLock> held(*conversation_lock);
  return impl.snapshot_locked(sandbox_id, served, name.value_or(generated_snapshot_name()));
}

SnapshotRecord Provider::Impl::snapshot_locked(const std::string& sandbox_id,
                                               const ServedConversation& served,
                                               const std::string& snapshot_name) {
  Impl& impl = *this;
  const InfoPtr& info = served.info;
  const ThreadKey& conversation = served.conversation;
  const SnapshotLimits& limits = impl.options_.snapshot_limits;
  // Nor another snapshot here.
  MutexLock one_at_a_time(impl.snapshot_mutex_);
  std::uint64_t used = 0;
  const std::vector<SnapshotRecord> existing = impl.snapshot_store_->list(conversation.user_id);
  for (const SnapshotRecord& record : existing) used += record.bytes();
  if (limits.max_per_user > 0 && existing.size() >= limits.max_per_user) {
    throw ServiceError(ErrorKind::capacity,
                       "user " + conversation.user_id + " has " + std::to_string(existing.size()) +
                           " snapshots, the ceiling "
                           "max_snapshots_per_user; delete one first",
                       60.0);
  }
  // 0: no ceiling on the bytes (the count and the TTL still hold).
  const bool bytes_bounded = limits.max_bytes_per_user > 0;
  if (bytes_bounded && used >= limits.max_bytes_per_user) {
    throw ServiceError(ErrorKind::capacity,
                       "user " + conversation.user_id + "'s snapshots hold " + show_size(used) +
                           ", the ceiling max_snapshot_bytes_per_user " +
                           show_size(limits.max_bytes_per_user) + "; delete one first",
                       60.0);
  }
  SnapshotStore::Staged staged = impl.snapshot_store_->stage(conversation.user_id, snapshot_name);
  std::optional<SandboxSnapshots::Image> image;
  bool frozen = false;
  ScopeExit undo([&] {
    if (frozen) {
      try {
        impl.pausing_->unpause(*info);
      } catch (const std::exception& e) {
        impl.log(LogLevel::warning, "Sandbox " + sandbox_id + " could not be thawed after a " +
                                        "snapshot: " + e.what());
      }
    }
    if (!staged.staging.empty()) impl.snapshot_store_->abandon(staged);
    if (image) {
      try {
        impl.snapshots_->remove_snapshot_image(image->image);
      } catch (const std::exception&) {
      }
    }
  });
  // Frozen for the instant, so its directories and its layer are one moment of it.
  if (impl.pausing_ != nullptr) {
    impl.pausing_->pause(*info);
    frozen = true;
  }
  image = impl.snapshots_->commit_snapshot(*info, snapshot_name);
  // The layer counts against the user's bytes too: past them, the image goes again (undo).
  used += image->bytes;
  if (bytes_bounded && used >= limits.max_bytes_per_user) {
    throw ServiceError(ErrorKind::capacity,
                       "the snapshot of sandbox " + sandbox_id + " would take user " +
                           conversation.user_id + " past max_snapshot_bytes_per_user " +
                           show_size(limits.max_bytes_per_user) + " (its layer alone is " +
                           show_size(image->bytes) + ")",
                       60.0);
  }
  TreeBounds bounds = SnapshotStore::bounds();
  if (bytes_bounded) bounds.max_bytes = limits.max_bytes_per_user - used;
  bounds.keep_owner = true;
  TreeCount copied;
  try {
    const host_fs::UniqueFd thread_dir =
        impl.paths_->open_thread_dir(conversation.thread_id, conversation.user_id);
    for (const char* kept : kKeptDirectories) {
      const host_fs::UniqueFd from(
          ::openat(thread_dir.get(), kept, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!from) continue;  // nothing written there yet
      if (::mkdirat(staged.data.get(), kept, 0700) != 0) {
        host_fs::throw_errno("cannot make", kept, errno);
      }
      const host_fs::UniqueFd into(
          ::openat(staged.data.get(), kept, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!into) host_fs::throw_errno("cannot open", kept, errno);
      const TreeCount part =
          copy_tree(from.get(), into.get(), bounds,
                    impl.paths_->thread_dir(conversation.thread_id, conversation.user_id) / kept);
      copied.bytes += part.bytes;
      copied.entries += part.entries;
      copied.skipped += part.skipped;
      bounds.max_bytes -= std::min(bounds.max_bytes, part.bytes);
    }
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    if (what.find("stopped at") != std::string::npos && what.find("bytes") != std::string::npos) {
      throw ServiceError(ErrorKind::capacity,
                         "the snapshot of sandbox " + sandbox_id + " would take user " +
                             conversation.user_id + " past max_snapshot_bytes_per_user " +
                             show_size(limits.max_bytes_per_user) + " (" + what + ")",
                         60.0);
    }
    throw;
  }
  if (frozen) {
    frozen = false;
    impl.pausing_->unpause(*info);  // a throw here leaves the snapshot unmade (undo)
  }
  SnapshotRecord record;
  record.name = snapshot_name;
  record.user_id = conversation.user_id;
  record.thread_id = conversation.thread_id;
  record.sandbox_id = sandbox_id;
  record.image = image->image;
  record.network_policy = info->network_policy.empty() ? "open" : info->network_policy;
  record.created_at = impl.clock_->wall_now();
  record.expires_at = limits.ttl_seconds > 0 ? record.created_at + limits.ttl_seconds : 0;
  record.directory_bytes = copied.bytes;
  record.image_bytes = image->bytes;
  impl.snapshot_store_->publish(staged, record);
  image.reset();  // published: the image is the snapshot's now
  impl.log(LogLevel::info, "Snapshot " + snapshot_name + " of sandbox " + sandbox_id + " (" +
                               conversation.user_id + "/" + conversation.thread_id +
                               "): " + show_size(record.directory_bytes) + " of directories" +
                               (copied.skipped > 0 ? " (" + std::to_string(copied.skipped) +
                                                         " special files or mount points left)"
                                                   : std::string()) +
                               ", image " + record.image.substr(0, 19));
  impl.note(LifecycleEventKind::snapshotted, sandbox_id, conversation, snapshot_name);
  return record;
}

Provider::Impl::ServedConversation Provider::Impl::served_conversation(
    const std::string& sandbox_id, std::string_view purpose) const {
  ServedConversation served;
  std::optional<ThreadKey> conversation;
  {
    MutexLock lock(mutex_);
    const SandboxEntry* entry = registry_.find(sandbox_id);
    if (entry == nullptr || !entry->info) {
      throw ServiceError(ErrorKind::not_found, "sandbox " + sandbox_id + " is not tracked here");
    }
    served.info = entry->info;
    conversation = entry->identity;
  }
  if (!conversation) {
    throw ServiceError(ErrorKind::invalid_argument,
                       "sandbox " + sandbox_id +
                           " serves no conversation (anonymous, or adopted and not acquired "
                           "since): " +
                           std::string(purpose));
  }
  served.conversation = std::move(*conversation);
  return served;
}

std::vector<SnapshotRecord> Provider::snapshots(const std::optional<std::string>& user_id) const {
  if (user_id) validate_user_id(*user_id);
  return impl_->snapshot_store_->list(user_id);
}

SnapshotRecord Provider::delete_snapshot(const std::string& user_id, const std::string& name) {
  return impl_->delete_snapshot(user_id, name);
}

std::size_t Provider::delete_expired_snapshots() {
  return impl_->delete_expired_snapshots();
}

SnapshotRecord Provider::Impl::delete_snapshot(const std::string& user_id,
                                               const std::string& name) {
  Impl& impl = *this;
  validate_user_id(user_id);
  MutexLock one_at_a_time(impl.snapshot_mutex_);
  const std::optional<SnapshotRecord> record = impl.snapshot_store_->find(user_id, name);
  if (!record || !impl.snapshot_store_->remove(user_id, name)) {
    throw ServiceError(ErrorKind::not_found, "user " + user_id + " has no snapshot named " + name);
  }
  // The image goes with its snapshot (no other snapshot shares one: each commit is its own);
  // one a restored sandbox still runs from goes when it can (remove_pending_images).
  if (impl.snapshots_ != nullptr) {
    try {
      impl.snapshots_->remove_snapshot_image(record->image);
    } catch (const std::exception& e) {
      impl.log(LogLevel::info, "The image of deleted snapshot " + name + " stays until the " +
                                   "sandboxes made from it are gone (" + e.what() + ")");
      impl.snapshot_store_->remember_image(record->image);
    }
  }
  return *record;
}

void Provider::Impl::remove_remembered_images() {
  if (snapshots_ == nullptr) return;
  std::vector<std::string> removed;
  try {
    for (const std::string& image : snapshot_store_->remembered_images()) {
      try {
        snapshots_->remove_snapshot_image(image);
        removed.push_back(image);
      } catch (const std::exception&) {
        // Still in use (or the engine is away): the next pass tries again.
      }
    }
    if (!removed.empty()) snapshot_store_->forget_images(removed);
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        std::string("The images of deleted snapshots could not be ") + "looked at: " + e.what());
  }
}

std::size_t Provider::Impl::delete_expired_snapshots() {
  // Images of deleted snapshots that were still in use: removed once nothing runs from them.
  remove_remembered_images();
  const double now = clock_->wall_now();
  std::size_t deleted = 0;
  for (const SnapshotRecord& record : snapshot_store_->list(std::nullopt)) {
    if (record.expires_at <= 0 || record.expires_at > now) continue;
    try {
      delete_snapshot(record.user_id, record.name);
      ++deleted;
      log(LogLevel::info, "Deleted snapshot " + record.name + " of user " + record.user_id +
                              ": past snapshot_ttl_seconds");
    } catch (const std::exception&) {
    }
  }
  return deleted;
}

AcquireResult Provider::restore(const std::optional<std::string>& thread_id,
                                const std::optional<std::string>& user_id,
                                const RestoreFrom& from) {
  Impl& impl = *impl_;
  if (!thread_id) {
    throw ServiceError(ErrorKind::invalid_argument,
                       "a restore is into a conversation: give its thread id");
  }
  const std::string user = impl.effective_user(user_id);
  validate_user_id(user);
  validate_thread_id(*thread_id);
  const std::string owner = from.user_id.value_or(user);
  if (owner != user && !from.allow_other_user) {
    throw ServiceError(ErrorKind::invalid_argument,
                       "snapshot " + from.name + " is user " + owner +
                           "'s; restoring it into a conversation of user " + user +
                           " must be allowed explicitly (allow_other_user)");
  }
  if (impl.snapshots_ == nullptr) throw unsupported(impl.backend_use_);
  const std::optional<SnapshotRecord> record = impl.snapshot_store_->find(owner, from.name);
  if (!record) {
    throw ServiceError(ErrorKind::not_found,
                       "user " + owner + " has no snapshot named " + from.name);
  }
  // The acquisition below runs the usual path on this thread; its create makes the sandbox
  // from the snapshot's image, and prepare_restore replaces what the conversation had.
  const SnapshotRecord* outer = std::exchange(t_restoring, &*record);
  ScopeExit restore_outer([outer] { t_restoring = outer; });
  AcquireResult result = impl.acquire_traced(thread_id, user);
  if (impl.event_log_) {
    impl.event_log_->record(LifecycleEventKind::restored, result.sandbox_id, user, thread_id,
                            owner + "/" + from.name);
  }
  return result;
}

std::string Provider::Impl::restore_archived(const std::string& thread_id,
                                             const std::string& sandbox_id,
                                             const std::string& user_id, Snapshot snapshot,
                                             const SnapshotRecord& archive) {
  const SnapshotRecord* outer = std::exchange(t_restoring, &archive);
  ScopeExit restore_outer([outer] { t_restoring = outer; });
  prepare_restore(thread_id, user_id, sandbox_id);
  std::string restored = discover_or_create_with_lock(thread_id, sandbox_id, user_id, snapshot);
  // Restored once: the archive's directories are the conversation's again, and its image goes
  // once the sandbox made from it is gone (remembered until then).
  try {
    delete_snapshot(archive.user_id, archive.name);
  } catch (const std::exception& e) {
    log(LogLevel::warning,
        "Could not delete archive " + archive.name + " after restoring it: " + e.what());
  }
  return restored;
}

void Provider::Impl::prepare_restore(const std::optional<std::string>& thread_id,
                                     const std::string& user_id, const std::string& sandbox_id) {
  if (!thread_id) throw std::logic_error("a restore without a conversation");
  // The conversation's current sandbox goes: tracked here, or running unknown to us.
  bool tracked = false;
  {
    MutexLock lock(mutex_);
    tracked = registry_.held(sandbox_id);
  }
  if (tracked) {
    if (destroy(sandbox_id) == DestroyOutcome::refused) {
      throw ServiceError(ErrorKind::conflict, "sandbox " + sandbox_id +
                                                  " is held by another instance; it cannot be "
                                                  "replaced by a restore now");
    }
  } else if (auto running = backend_->discover(sandbox_id)) {
    if (!destroy_untracked_creation(sandbox_id, *running,
                                    "sandbox " + sandbox_id + ", replaced by a restore")) {
      throw ServiceError(ErrorKind::conflict, "sandbox " + sandbox_id +
                                                  " is held by another instance; it cannot be "
                                                  "replaced by a restore now");
    }
  }
  // Its directories become the snapshot's: emptied, then the copy put in (owners kept).
  paths_->ensure_thread_dirs(*thread_id, user_id);
  const host_fs::UniqueFd thread_dir = paths_->open_thread_dir(*thread_id, user_id);
  const host_fs::UniqueFd data = snapshot_store_->data_of(t_restoring->user_id, t_restoring->name);
  TreeBounds bounds = SnapshotStore::bounds();
  bounds.keep_owner = true;
  for (const char* kept : kKeptDirectories) {
    const std::filesystem::path shown = paths_->thread_dir(*thread_id, user_id) / kept;
    const host_fs::UniqueFd target(
        ::openat(thread_dir.get(), kept, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!target) host_fs::throw_errno("cannot open", shown, errno);
    clear_tree(target.get(), bounds, shown);
    const host_fs::UniqueFd source(
        ::openat(data.get(), kept, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (source) copy_tree(source.get(), target.get(), bounds, shown);
  }
}

}  // namespace sandboxd::core
